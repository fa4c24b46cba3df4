from __future__ import annotations

import io

import pytest

from orchestrate.errors import NodeLookupError
from orchestrate.launcher import find_node_container, launch
from orchestrate.outcome import NodeState
from tests.fakes import FakeCompose, FakeDockerClient, ScriptedExec

FAILURE_REPORT = [
    "[default1]:RuntimeError: injected failure on rank 3",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 3 (local_rank: 1)",
    "  exitcode  : 1 (pid: 42)",
    "  traceback : Traceback (most recent call last):",
    "  RuntimeError: injected failure on rank 3",
    "=====",
]


def fake_engine(plan, scripts):
    client = FakeDockerClient()
    for node, script in zip(plan.nodes, scripts):
        client.add_node(plan.project_name, node.name, node.node_rank, script)
    return client


def run(plan, client):
    FakeCompose.instances.clear()
    out = io.StringIO()
    outcome = launch(plan, client, out=out, compose_factory=FakeCompose)
    return outcome, out.getvalue(), FakeCompose.instances[-1]


def test_success_streams_prefixed_lines_saves_logs_and_tears_down(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    client = fake_engine(plan, [
        ScriptedExec(["[default0]:hello 0", "[default1]:hello 1"]),
        ScriptedExec(["[default0]:hello 2", "[default1]:hello 3"]),
    ])
    outcome, text, compose = run(plan, client)
    assert outcome.succeeded
    assert compose.calls == ["up", "down"]
    for rank in range(4):
        node = "node0" if rank < 2 else "node1"
        assert f"[{node}/rank{rank}] hello {rank}" in " ".join(text.split())
    log1 = (outcome.run_dir / "node1.log").read_text().splitlines()
    assert log1 == ["[node1/rank2] hello 2", "[node1/rank3] hello 3"]
    assert (outcome.run_dir / "compose.json").exists()
    assert outcome.timings.rendezvous_s is not None


def test_torchrun_runs_in_every_node_with_its_planned_argv_and_env(make_job):
    plan = make_job(nodes=2)
    client = fake_engine(plan, [ScriptedExec(), ScriptedExec()])
    run(plan, client)
    execs = {c.name: (cmd, kw) for c, cmd, kw, *_ in client.api.execs.values() if cmd[0] == "torchrun"}
    for node in plan.nodes:
        cmd, kwargs = execs[node.name]
        assert tuple(cmd) == node.torchrun_argv
        assert kwargs["environment"] == node.env
        assert kwargs["workdir"] == "/workspace"


def test_first_failure_stops_the_other_nodes_and_names_node_and_rank(make_job):
    plan = make_job(nodes=3, nproc_per_node=2)
    client = fake_engine(plan, [
        ScriptedExec(["[default0]:waiting"], hang=True),
        ScriptedExec(FAILURE_REPORT, exit_code=1),
        ScriptedExec(["[default0]:waiting"], hang=True),
    ])
    outcome, text, compose = run(plan, client)
    assert not outcome.succeeded
    states = {r.node.name: r.state for r in outcome.results}
    assert states == {"node0": NodeState.STOPPED, "node1": NodeState.FAILED, "node2": NodeState.STOPPED}
    assert sorted(c[1] for c in client.calls if c[0] == "kill") == ["node0", "node2"]
    failure = outcome.failure
    assert (failure.node, failure.rank, failure.exit_code) == ("node1", 3, 1)
    assert failure.exception == "RuntimeError: injected failure on rank 3"
    assert compose.calls[-1] == "down"


def test_nodes_are_polled_until_they_resolve_each_other(make_job):
    plan = make_job(nodes=2)
    client = fake_engine(plan, [ScriptedExec(), ScriptedExec()])
    client.resolve_after = {"node1": 2}
    outcome, _, _ = run(plan, client)
    assert outcome.succeeded
    getents = [c for c in client.calls if c[0] == "exec_create" and c[2][0] == "getent"]
    assert [c[1] for c in getents].count("node1") == 3
    assert getents[0][2] == ("getent", "hosts", "node0", "node1")


def test_nodes_that_never_resolve_fail_the_run_and_are_torn_down(make_job):
    plan = make_job(nodes=2, ready_timeout_s=1.0)
    client = fake_engine(plan, [ScriptedExec(), ScriptedExec()])
    client.resolve_after = {"node1": 10**6}
    outcome, _, compose = run(plan, client)
    assert not outcome.succeeded
    assert "node1 cannot resolve node0, node1" in outcome.error
    assert compose.calls == ["up", "down"]
    assert not any(c for c in client.calls if c[0] == "exec_create" and c[2][0] == "torchrun")


def test_keep_leaves_the_project_up(make_job):
    plan = make_job(nodes=1, keep=True)
    _, text, compose = run(plan, fake_engine(plan, [ScriptedExec()]))
    assert compose.calls == ["up"]
    assert f"docker compose -p {plan.project_name} down -v" in text


def test_ctrl_c_stops_every_node_and_tears_down(make_job, monkeypatch):
    plan = make_job(nodes=2)
    client = fake_engine(plan, [ScriptedExec(hang=True), ScriptedExec(hang=True)])
    import orchestrate.launcher as launcher

    original = launcher.JobRunner.run_nodes

    def interrupted(self, run_dir, timings):
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher.JobRunner, "run_nodes", interrupted)
    outcome, _, compose = run(plan, client)
    monkeypatch.setattr(launcher.JobRunner, "run_nodes", original)
    assert outcome.interrupted and not outcome.succeeded
    assert sorted(c[1] for c in client.calls if c[0] == "kill") == ["node0", "node1"]
    assert compose.calls == ["up", "down"]


@pytest.mark.parametrize("copies", [0, 2])
def test_node_lookup_needs_exactly_one_labelled_container(make_job, copies):
    plan = make_job(nodes=1)
    client = FakeDockerClient()
    for i in range(copies):
        client.add_node(plan.project_name, f"node0-{i}", 0, ScriptedExec())
        client.containers_by_name[f"node0-{i}"].labels["com.docker.compose.service"] = "node0"
    with pytest.raises(NodeLookupError, match=f"found {copies}"):
        find_node_container(client, plan.project_name, plan.nodes[0])


def test_gpu_runs_show_the_topology_node0_sees(make_job):
    plan = make_job(nodes=2, gpus_per_node=1, backend="nccl")
    client = fake_engine(plan, [ScriptedExec(), ScriptedExec()])
    client.command_outputs["nvidia-smi"] = (0, b"        GPU0\nGPU0     X \n")
    outcome, text, _ = run(plan, client)
    assert outcome.succeeded
    assert "GPU topology seen from node0 (nvidia-smi topo -m):\n        GPU0\nGPU0     X" in text
    topo = [c for c in client.calls if c[0] == "exec_create" and c[2][0] == "nvidia-smi"]
    assert topo == [("exec_create", "node0", ("nvidia-smi", "topo", "-m"))]


def test_cpu_runs_do_not_ask_for_a_gpu_topology(make_job):
    plan = make_job(nodes=2)
    client = fake_engine(plan, [ScriptedExec(), ScriptedExec()])
    run(plan, client)
    assert not [c for c in client.calls if c[0] == "exec_create" and c[2][0] == "nvidia-smi"]


def test_a_fault_fires_at_its_step_and_explains_the_failure(make_job):
    from orchestrate.faults import parse_fault

    plan = make_job(nodes=2, faults=(parse_fault("pause:node1@step=3"),))
    steps = [f"[default0]:step {i}" for i in range(1, 6)]
    client = fake_engine(plan, [
        ScriptedExec(steps + FAILURE_REPORT[1:4] + ["  rank      : 0 (local_rank: 0)", "====="], exit_code=1),
        ScriptedExec(["[default0]:waiting"], hang=True),
    ])
    outcome, text, compose = run(plan, client)
    assert ("pause", "node1") in client.calls
    assert "fault injected: pause:node1@step=3" in text
    assert outcome.failure.describe() == (
        "node1 stopped answering: its container is paused (hung) (injected fault pause:node1@step=3)")
    # the hung node is stopped at once, not after the grace period
    assert ("kill", "node1") in client.calls and "stopping the other nodes" not in text


def test_elastic_mode_restarts_every_node_when_one_dies_and_ignores_stale_exits(make_job):
    from orchestrate.faults import parse_fault

    plan = make_job(nodes=2, rdzv="c10d", max_restarts=1, faults=(parse_fault("kill:node1@step=2"),))
    steps = [f"[default0]:step {i}" for i in range(1, 4)]
    client = fake_engine(plan, [ScriptedExec(steps, hang=True), ScriptedExec(["[default0]:up"], hang=True)])
    client.later_scripts = {
        "node0": [ScriptedExec(["[default0]:resumed from ck/step-2.pt (epoch 0, step 2)",
                                "[default0]:step 3", "[default0]:step 4"])],
        "node1": [ScriptedExec(["[default0]:up again"])],
    }
    outcome, text, _ = run(plan, client)
    assert outcome.succeeded, text
    assert [c[1] for c in client.calls if c[0] == "restart"] == ["node0", "node1"]
    assert "node1 died (injected fault kill:node1@step=2); restarting every node" in text
    [recovery] = outcome.timings.recoveries
    assert (recovery.node, recovery.step_before, recovery.resumed_from, recovery.steps_lost) == ("node1", 3, 2, 1)
    assert recovery.recovery_s is not None and recovery.recovery_s >= 0
    from orchestrate.outcome import format_summary

    assert "recovery: node1 rejoined after injected fault kill:node1@step=2" in format_summary(outcome)


def test_elastic_mode_without_restarts_left_fails(make_job):
    from orchestrate.faults import parse_fault

    plan = make_job(nodes=2, rdzv="c10d", max_restarts=0, faults=(parse_fault("kill:node1@step=1"),))
    client = fake_engine(plan, [ScriptedExec(["[default0]:step 1"], hang=True), ScriptedExec(hang=True)])
    outcome, text, _ = run(plan, client)
    assert not outcome.succeeded
    assert outcome.failure.describe() == "node1 failed (injected fault kill:node1@step=1)"
    assert not [c for c in client.calls if c[0] == "restart"]


def test_an_oom_killed_node_is_found_by_its_cgroup_counter_and_named(make_job):
    plan = make_job(nodes=2, memory_per_node=1024**3)
    report = ["Root Cause (first observed failure):", "[0]:", "  rank      : 1 (local_rank: 0)",
              "  exitcode  : -9 (pid: 7)", "====="]
    client = fake_engine(plan, [ScriptedExec(["[default0]:waiting"], hang=True), ScriptedExec(report, exit_code=1)])
    client.command_outputs[("node1", "sh")] = (0, b"oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    client.command_outputs[("node0", "sh")] = (0, b"oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    outcome, text, _ = run(plan, client)
    assert "node1 was OOM-killed" in text and "node0 was OOM-killed" not in text
    assert outcome.failure.describe().startswith("node1 OOM-killed")
    assert outcome.exit_code() == 1


def test_a_teardown_that_fails_is_never_success(make_job):
    plan = make_job(nodes=1)
    FakeCompose.fail_down = True
    try:
        outcome, text, compose = run(plan, fake_engine(plan, [ScriptedExec()]))
    finally:
        FakeCompose.fail_down = False
    assert compose.calls.count("down") == 3
    assert outcome.teardown_error.startswith(f"could not remove project {plan.project_name}")
    assert outcome.exit_code() == 2


def test_the_image_torch_version_is_reported(make_job):
    plan = make_job(nodes=1)
    client = fake_engine(plan, [ScriptedExec()])
    client.images.add(plan.image, **{"io.ddp-compose.torch": "2.9.1"})
    outcome, _, _ = run(plan, client)
    assert outcome.image_torch == "2.9.1"
