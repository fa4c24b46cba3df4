"""The faults real clusters suffer, against the fake engine: a straggler (slow), a degraded link,
one worker killed or hung while its node lives; faults that end. And the script that finds a
rank's worker process, run here on real processes."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.engine.compose_file import render_compose
from orchestrate.faults.ranks import RANK_SCRIPT
from orchestrate.node import rank_signal
from tests.fakes import FakeDockerClient, Script, fake_engine

engine = fake_engine


def lines(node: int, count: int, delay_s: float = 0.1, exit_code: int = 0) -> Script:
    return Script([f"[{node}|0]:step {i}" for i in range(count)], delay_s=delay_s, exit_code=exit_code)


def fails_once_the_rank_script_ran(client: FakeDockerClient, node: int) -> Script:
    """node``node``'s torchrun, which fails (exit 1) once the launcher's rank script has run in
    node1 (a rank fault injected there): never before, however late the first tick comes."""
    ran = lambda: any(name == "ddp-test-run-node1-1" and cmd[:2] == ("python3", "-c")  # noqa: E731
                      for name, cmd in calls(client, "exec_create"))
    return Script([f"[{node}|0]:step 0"], after_when=ran, after=[f"[{node}|0]:step 1"], exit_code=1)


def calls(client: FakeDockerClient, kind: str) -> list[tuple]:
    return [c[1:] for c in client.calls if c[0] == kind]


def events(job) -> list[dict]:
    return [json.loads(line) for line in (job.run_dir / "events.jsonl").read_text().splitlines()]


def test_slow_cuts_the_cpu_quota_and_its_end_gives_back_the_nodes_own(make_run):
    job = make_run(nodes=2, cpus_per_node=1.5, faults=["slow:node1,cpus=0.2@t=0..0.3"])
    job.client = client = engine(node0=[lines(0, 10)], node1=[lines(1, 10)])
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert calls(client, "update") == [
        ("ddp-test-run-node1-1", (("cpu_period", 100_000), ("cpu_quota", 20_000))),
        ("ddp-test-run-node1-1", (("cpu_period", 100_000), ("cpu_quota", 150_000)))]  # its --cpus-per-node
    assert "fault ended: slow:node1,cpus=0.2@t=0..0.3" in job.out.getvalue()
    [fault] = result.faults
    assert fault.fired and fault.ended_s is not None and 0.3 <= fault.ended_s < 2.0
    assert [e["event"] for e in events(job)].count("fault-ended") == 1


def test_a_slow_node_without_a_cpu_limit_gets_none_back():
    from orchestrate.faults.inject import undo
    from tests.fakes import FakeContainer

    client = FakeDockerClient()
    container = FakeContainer(client, "n1", {"labels": {}})
    client.containers_by_name[container.name] = container
    container.status = "running"
    undo(client, "p", container, parse_fault("slow:node1"), node="node1")
    assert container.resources["cpu_quota"] == -1  # the engine's "no quota"


def test_degrade_shapes_the_link_by_an_exec_as_root_and_its_end_restores_the_runs_link(make_run):
    job = make_run(nodes=2, link="rate=1gbit", faults=["degrade:node0,rate=10mbit@t=0..0.3"])
    job.client = client = engine(node0=[lines(0, 10)], node1=[lines(1, 10)])
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    shaped = [cmd for name, cmd in calls(client, "exec_create") if cmd[0] == "tc"]
    assert shaped[0] == ("tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "10mbit", "burst", "32768",
                         "latency", "100ms")
    assert shaped[1] == ("tc", "qdisc", "del", "dev", "eth0", "root")
    assert shaped[2][:8] == ("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate") and shaped[2][8] == "1gbit"


def test_only_runs_that_shape_links_get_net_admin_and_a_degrade_keeps_the_users_uid(make_job):
    degraded = render_compose(make_job(nodes=2, run_as="1000:1000", faults=(parse_fault("degrade:node1"),)))["services"]["node0"]
    assert degraded["cap_add"] == ["NET_ADMIN"] and degraded["user"] == "1000:1000"
    plain = render_compose(make_job(nodes=2, run_as="1000:1000", faults=(parse_fault("slow:node1"),)))["services"]["node0"]
    assert "cap_add" not in plain


def test_a_degrade_the_node_refuses_says_it_lacks_net_admin(make_run):
    job = make_run(nodes=2, faults=["degrade:node1@t=0"])
    job.client = client = engine(node0=[lines(0, 5)], node1=[lines(1, 5)])
    client.command_outputs[("ddp-test-run-node1-1", "tc")] = (2, b"RTNETLINK answers: Operation not permitted\n")
    result = job.run()
    assert not result.succeeded and result.exit_code == 1
    [fault] = result.unfired_faults
    assert "could not be injected: cannot shape" in fault.reason and "Operation not permitted" in fault.reason
    assert "lack NET_ADMIN" in fault.reason


def test_kill_rank_finds_the_ranks_node_and_the_failure_names_the_rank(make_run):
    job = make_run(nodes=2, nproc_per_node=2, faults=["kill-rank:3@t=0"])
    client = FakeDockerClient()
    job.client = engine(client, node0=[Script(["[0|0]:step"], hang=True)],
                        node1=[fails_once_the_rank_script_ran(client, 1)])
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (3, b"")  # the rank script: not here
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"")  # node1 runs rank 3 (its pid lost on the way)
    result = job.run()
    rank_execs = [(name, cmd[3:]) for name, cmd in calls(client, "exec_create") if cmd[:2] == ("python3", "-c")]
    assert ("ddp-test-run-node0-1", ("signal", "3", "SIGKILL")) in rank_execs  # looked for everywhere
    assert ("ddp-test-run-node1-1", ("signal", "3", "SIGKILL")) in rank_execs
    [fault] = result.faults
    assert fault.fired and fault.node == "node1"
    # due at once, injected at the supervisor's first tick: on a loaded machine some tenths of a second in
    assert re.search(r"fault injected: kill-rank:3 \(\d+\.\d s into the job, on node1\)", job.out.getvalue())
    assert result.failure.rank == 3
    assert result.failure.describe() == "node1 rank 3 failed (injected fault kill-rank:3)"


def test_a_hung_rank_is_named_when_its_peers_time_out(make_run):
    job = make_run(nodes=2, faults=["hang-rank:1@t=0"])
    client = FakeDockerClient()
    job.client = engine(client, node0=[fails_once_the_rank_script_ran(client, 0)],  # its collective times out
                        node1=[Script(["[1|0]:step"], hang=True)])
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (3, b"")  # not here; none stopped
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"1 4242 T\nend\n")  # stopped it; then: stopped
    result = job.run()
    assert "node1 rank 1 stopped answering: its worker process is stopped (hung)" in job.out.getvalue()
    assert result.failure.describe() == ("node1 rank 1 stopped answering: its worker process is stopped (hung)"
                                         " (injected fault hang-rank:1)")


def test_a_hang_with_an_end_is_resumed_and_the_job_goes_on(make_run):
    job = make_run(nodes=2, faults=["hang-rank:0@t=0..0.3"])
    job.client = client = engine(node0=[lines(0, 10)], node1=[lines(1, 10)])
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (0, b"77\n")
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    signals = [cmd[3:] for name, cmd in calls(client, "exec_create") if cmd[:2] == ("python3", "-c")
               and name.endswith("node0-1")]
    assert signals == [("signal", "0", "SIGSTOP"), ("signal", "0", "SIGCONT")]


def test_a_rank_that_runs_nowhere_is_a_fault_that_did_not_fire(make_run):
    job = make_run(nodes=2, faults=["kill-rank:1@t=0"])
    job.client = client = engine(node0=[lines(0, 5)], node1=[lines(1, 5)])
    client.command_outputs["python3"] = (3, b"")  # the rank script, on every node: not here
    result = job.run()
    assert result.exit_code == 1 and result.job_succeeded
    assert result.unfired_faults[0].reason == "could not be injected: rank 1 is not running on any node now"


def test_a_rank_script_that_fails_is_named_and_a_stopped_answer_without_its_end_is_asked_again():
    from orchestrate.faults.ranks import signal_rank, stopped_ranks
    from orchestrate.errors import EngineError
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    node = client.running("n0")
    client.command_outputs["python3"] = (1, b"Traceback (most recent call last):\n")
    with pytest.raises(EngineError, match=r"^rank 2 is not running on any node now \(the rank script on node0: exit"
                                          r" code 1: Traceback \(most recent call last\):\)$"):
        signal_rank(client, {"node0": node}, 2, "SIGKILL")
    client.command_outputs["python3"] = (0, b"2 77 T\n")  # its end line lost: asked again, then given up
    assert stopped_ranks(client, node) == []
    assert len([c for c in client.calls if c[0] == "exec_create" and c[2][-1] == "workers"]) == 3
    client.command_outputs["python3"] = (0, b"1 76 S\n2 77 T\nend\n")
    asked = len(client.calls)
    assert stopped_ranks(client, node) == [2]
    [(_, name, argv)] = client.calls[asked:]  # a whole answer is asked once
    assert argv == ("python3", "-c", RANK_SCRIPT, "workers")
    assert set(client.api.ran_as("n0", "python3")) == {"0:0"}  # as root: it reads every worker's /proc


def test_an_end_that_cannot_be_undone_is_said_and_the_run_goes_on(make_run):
    job = make_run(nodes=2, faults=["disconnect:node1@t=0..0.2"])
    job.client = client = engine(node0=[lines(0, 8)], node1=[lines(1, 8)])
    import docker.errors

    client.failures["connect"] = docker.errors.APIError("network is gone")
    result = job.run()
    assert "fault disconnect:node1@t=0..0.2 could not be ended: network is gone" in job.out.getvalue()
    assert result.faults[0].ended_s is None
    assert ("connect", "ddp-test-run-node1-1", "ddp-test-run_ddp", ("node1",)) in client.calls


# The script that finds a rank's worker process, on real processes ---------------------------

def in_own_pid_namespace(*command: str) -> subprocess.CompletedProcess:
    """Run ``command`` as PID 1 of a PID namespace of its own, with its own /proc: what it starts
    and signals is all it can see (the tests touch no process they did not make)."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no PID namespace can be made here (unshare --pid needs root or user namespaces): the rank"
                    " script would see every process on the machine")
    return subprocess.run([unshare, "--pid", "--fork", "--mount-proc", *command], capture_output=True, text=True,
                          timeout=60)


def test_the_rank_script_stops_the_ranks_own_process_not_its_children_and_lists_it_until_it_exits(tmp_path):
    """Also: a child the worker left behind when it died is not taken for the rank's process."""
    script = tmp_path / "rank_signal.py"
    script.write_text(RANK_SCRIPT)  # the text the launcher sends to python3 -c in a node
    harness = Path(__file__).parent / "rank_signal_in_a_namespace.py"
    done = in_own_pid_namespace(sys.executable, str(harness), str(script))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["pid_namespace_init"] is True
    assert seen["signalled"] == [str(seen["worker"])]  # the worker, not its child
    worker_state, child_state = seen["states_stopped"]
    assert worker_state == "T" and child_state != "T"
    plain = seen["listed_stopped"][4:6]
    assert seen["listed_stopped"] == ["5", str(seen["worker"]), "T", "7", *plain, "end"]  # the rank's process alone
    assert plain[0] != str(seen["child"]) and plain[1] in ("S", "R")  # a worker in its launcher's session
    assert seen["other_rank"] == 3  # no such rank here: said by the status (its output may be lost)
    rank, pid, state, *rank7, end = seen["listed_going_on"]
    assert (rank, pid, end) == ("5", str(seen["worker"]), "end") and state in ("S", "R") and rank7[:2] == ["7", plain[0]]
    assert seen["orphan_parent"] == 1  # the dead worker's child lives on, handed to init
    assert seen["listed_orphan_left"][:2] == ["7", plain[0]] and len(seen["listed_orphan_left"]) == 4
    assert seen["orphan_signalled"] == 3  # rank 5 runs nowhere here: its orphan is not signalled in its place
    assert seen["listed_after_exit"] == "end\n"  # an exited rank has no line


def test_the_rank_script_is_the_node_modules_text_and_refuses_bad_arguments():
    assert RANK_SCRIPT == Path(rank_signal.__file__).read_text(encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", RANK_SCRIPT, "signal", "5"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: rank_signal.py" in done.stderr


def test_a_lossy_node_drops_packets_by_an_iptables_rule_as_root_and_its_end_deletes_it(make_run):
    job = make_run(nodes=2, faults=["lossy:node1,p=2%@t=0..0.3"])
    job.client = client = engine(node0=[lines(0, 10)], node1=[lines(1, 10)])
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    rules = [(name, cmd) for name, cmd in calls(client, "exec_create") if cmd[0] == "iptables"]
    rule = ("INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random", "--probability", "0.02", "-j", "DROP")
    assert rules == [("ddp-test-run-node1-1", ("iptables", "-w", "-A", *rule)),
                     ("ddp-test-run-node1-1", ("iptables", "-w", "-D", *rule))]
    assert "fault ended: lossy:node1,p=2%@t=0..0.3" in job.out.getvalue()


def test_a_degrade_keeps_the_links_delay_and_loss_as_netems_child_and_its_end_restores_the_link(make_run,
                                                                                               monkeypatch):
    """A degrade replaced the root qdisc with a tbf: on a kernel with netem, a --link delay and loss
    were gone while it lasted (a faster link, not a slower one)."""
    from orchestrate.config.link import degrade_commands, parse_link
    from orchestrate.errors import EngineError
    from orchestrate.faults.inject import inject

    link = parse_link("rate=1gbit,delay=5ms,loss=1%")
    tbf = ["tbf", "rate", "10mbit", "burst", "32768", "latency", "100ms"]
    assert degrade_commands(10**7, link, "eth0") == [
        ["tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "netem", "delay", "5ms", "loss", "1%"],
        ["tc", "qdisc", "replace", "dev", "eth0", "parent", "1:", "handle", "2:", *tbf]]
    root_tbf = [["tc", "qdisc", "replace", "dev", "eth0", "root", *tbf]]
    assert degrade_commands(10**7, link, "eth0", netem=False) == root_tbf
    assert degrade_commands(10**7, None, "eth0") == root_tbf == degrade_commands(10**7, parse_link("1gbe"), "eth0")

    monkeypatch.setattr("orchestrate.launch.preflight.probe_netem", lambda client, image: None)  # a kernel with it
    job = make_run(nodes=2, link="rate=1gbit,delay=5ms", faults=["degrade:node0,rate=10mbit@t=0..0.3"])
    job.client = client = engine(node0=[lines(0, 10)], node1=[lines(1, 10)])
    assert job.run().succeeded, job.out.getvalue()
    shaped = [cmd for name, cmd in calls(client, "exec_create") if cmd[0] == "tc"]
    assert shaped[:2] == [("tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "netem", "delay", "5ms"),
                          ("tc", "qdisc", "replace", "dev", "eth0", "parent", "1:", "handle", "2:", *tbf)]
    assert shaped[2] == ("tc", "qdisc", "del", "dev", "eth0", "root")  # its end: the link as the run made it
    assert shaped[3][:9] == ("tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem")

    # a kernel without netem (a loss-only link's loss is iptables'): the rate alone, in the root
    done = []

    def shape(client, container, commands):
        if any("netem" in command for command in commands):
            raise EngineError("cannot shape the link at n (tc ...): Error: Specified qdisc kind is unknown.")
        done.extend(commands)

    monkeypatch.setattr("orchestrate.faults.inject.shape", shape)
    inject(None, "p", None, parse_fault("degrade:node0,rate=10mbit"), parse_link("loss=1%"))
    assert done == root_tbf

    def refused(client, container, commands):
        raise EngineError("cannot shape the link at n (tc ...): Error: Specified qdisc kind is unknown.")

    monkeypatch.setattr("orchestrate.faults.inject.shape", refused)
    with pytest.raises(EngineError):  # with no netem in the link, tc's refusal is the fault's own
        inject(None, "p", None, parse_fault("degrade:node0,rate=10mbit"), parse_link("rate=1gbit"))


def test_a_links_loss_is_netem_where_the_kernel_has_it_and_an_iptables_rule_where_not(make_job):
    from orchestrate.config.link import link_commands, parse_link
    link = parse_link("rate=1gbit,loss=1%")
    with_netem = link_commands(link, "eth0", netem=True)
    assert [c[:2] for c in with_netem] == [["tc", "qdisc"], ["tc", "qdisc"]] and "netem" in with_netem[0]
    without = link_commands(link, "eth0", netem=False)
    assert "netem" not in without[0] and without[0][6] == "tbf"
    assert without[1] == ["iptables", "-w", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
                          "--probability", "0.01", "-j", "DROP"]
    command = make_job(nodes=2, link=link).nodes[0].command  # planned without knowing: netem
    assert not any("iptables" in part for part in command)
    from orchestrate.plan.make import make_plan
    planned = make_plan(make_job(nodes=2, link=link).config, "r", netem=False)
    assert any(part.startswith("iptables -w -A INPUT") for part in planned.nodes[1].command)
    assert render_compose(planned)["services"]["node1"]["cap_add"] == ["NET_ADMIN"]
