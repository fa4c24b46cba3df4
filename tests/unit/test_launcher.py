"""The launcher and the supervisor against the simulated engine of tests/fakes.py."""
from __future__ import annotations

import _thread
import html

import io
import json
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.engine.labels import COMPOSE_SERVICE_LABEL, find_node_container
from orchestrate.engine.runs import list_runs, stop_run
from orchestrate.errors import NodeLookupError
from orchestrate.interrupts import SignalInterrupt
from orchestrate.launch.heartbeat import Heartbeat
from orchestrate.launch.run import Run
from orchestrate.outcome.events import read_events
from orchestrate.outcome.record import outcome_record
from orchestrate.outcome.states import NodePhase
from orchestrate.outcome.summary import format_summary
from orchestrate.plan.layout import HEARTBEAT_FILE, NODE_MAIN
from tests.fakes import FakeCompose, FakeDockerClient, Script, fake_engine, in_a_thread, wait_until


def report(rank: int, local: int, exit_code: int = 1, error_file: str = "<N/A>", exc: str = "RuntimeError: boom"):
    return ["Root Cause (first observed failure):", "[0]:", f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {exit_code} (pid: 42)", f"  error_file: {error_file}",
            f"  traceback : {exc}", "====="]


engine = fake_engine


def run(job: Run, client: FakeDockerClient, **scripts: list[Script]):
    """The whole run of ``job`` on the fake engine: its result, its output, its Compose project."""
    job.client = engine(client, **scripts)
    result = job.run()
    return result, job.out.getvalue(), FakeCompose.instances[-1]


def once_followed(job: Run, node: str):
    """Another terminal's action (the decorated function), taken once the launcher follows the run
    (it has printed a line of ``node``'s): a fake script's ``then`` may come before, which no
    user's command can."""
    def decorate(action):
        def act() -> None:
            deadline = time.monotonic() + 10
            while f"[{node}/rank" not in job.out.getvalue():
                assert time.monotonic() < deadline, f"the launcher never printed a line of {node}"
                time.sleep(0.01)
            action()
        return act
    return decorate


def progress_writer(job, rank: int, steps: range, resumed: int | None = None, attempt: str = ""):
    """A Script.then that reports steps on the run's progress channel, as a worker would (with
    ``attempt``, a worker process of that token begun now; else one begun long ago)."""
    def write() -> None:
        path = job.run_dir / "progress" / f"rank{rank}.jsonl"
        began = {"attempt": attempt, "time": time.time()} if attempt else {"time": 1.0}
        with open(path, "a") as handle:
            if resumed is not None:
                handle.write(json.dumps({"rank": rank, "resumed": resumed, **began}) + "\n")
            for step in steps:
                handle.write(json.dumps({"rank": rank, "step": step, "loss": 0.5, **began}) + "\n")
    return write


def test_success_streams_rank_prefixed_lines_saves_logs_and_removes_everything(make_run):
    job = make_run(nodes=2, nproc_per_node=2)
    client = FakeDockerClient()
    outcome, text, compose = run(job, client, node0=[Script(["[0|0]:hello 0", "[1|1]:hello 1"])],
                                 node1=[Script(["[2|0]:hello 2", "[3|1]:hello 3"])])
    assert outcome.succeeded and outcome.exit_code == 0
    assert compose.calls == ["up", "down"]
    for rank in range(4):
        node = "node0" if rank < 2 else "node1"
        assert f"[{node}/rank{rank}] hello {rank}" in " ".join(text.split())
    assert (job.run_dir / "node1.log").read_text().splitlines() == ["[node1/rank2] hello 2", "[node1/rank3] hello 3"]
    assert [r.state for r in outcome.results] == [NodePhase.SUCCEEDED, NodePhase.SUCCEEDED]
    assert client.containers_by_name == {} and client.networks_by_name == {} and client.volumes_by_name == {}
    assert outcome.timings.bring_up_s is not None and outcome.timings.rendezvous_s is not None


class SlowConsole(io.StringIO):
    """A console that takes a while for each line: the launcher falls behind what the node printed."""

    def write(self, text: str) -> int:
        time.sleep(0.002)
        return super().write(text)


def test_every_line_of_a_node_that_printed_faster_than_the_launcher_shows_is_kept(make_run, monkeypatch):
    """Seen with a job that printed 200,000 lines in 17 s: the launcher, 45 s behind, took each
    node's end as final 3 s after its exit, and dropped nine lines in ten unseen."""
    monkeypatch.setattr("orchestrate.supervise.supervisor.LOG_DRAIN_S", 0.2)
    monkeypatch.setattr("orchestrate.supervise.inspection.INSPECT_EVERY_S", 0.05)  # its exit is seen at once
    job = make_run(nodes=1, out=SlowConsole())
    lines = [f"[0|0]:line {i}" for i in range(400)]  # about 0.8 s to show, four times the drain
    outcome, text, _ = run(job, FakeDockerClient(), node0=[Script(lines, delay_s=0.0)])
    assert outcome.succeeded
    assert (job.run_dir / "node0.log").read_text().splitlines() == [f"[node0/rank0] line {i}" for i in range(400)]
    assert text.rstrip().endswith("[node0/rank0]  line 399") and "log had not ended" not in text


def test_each_node_runs_torchrun_under_the_node_supervisor_with_the_runs_labels(make_run):
    job = make_run(nodes=2)
    client = engine(FakeDockerClient(), node0=[Script(hang=True)], node1=[Script(hang=True)])
    job.client = client
    try:
        plan = job.start()
        seen = {c.labels["com.docker.compose.service"]: c for c in client.containers_by_name.values()}
    finally:
        job.close()
    assert client.containers_by_name == {}  # close removed them
    for node in plan.nodes:
        command = seen[node.name].service["command"]
        assert command[:2] == ["python3", NODE_MAIN]
        assert command[command.index("--") + 1:] == list(node.torchrun_argv)
        assert "--lease" in command  # a foreground run: the nodes hold the launcher's lease
        labels = seen[node.name].labels
        assert labels["io.ddp-compose.run-id"] == job.run_id
        assert labels["io.ddp-compose.run-dir"] == str(job.run_dir)
        assert labels["io.ddp-compose.detached"] == "0"


def test_a_detached_run_holds_no_lease_on_its_launcher(make_job):
    from orchestrate.plan.make import make_plan

    attached, detached = make_job(nodes=1).config, None
    detached = make_plan(attached, "d1", detached=True)
    assert "--lease" not in detached.nodes[0].command
    assert "--lease" in make_plan(attached, "f1").nodes[0].command


@pytest.mark.parametrize("options, said", [
    ({}, ""),
    ({"hang_timeout_s": 60.0}, "--hang-timeout 60 acts only while `attach` follows the run"),
    ({"rdzv": "c10d", "max_restarts": 2}, "the restarts of its elastic nodes act only while `attach` follows"),
    ({"rdzv": "c10d", "max_restarts": 0}, ""),  # no restart to miss
    ({"rdzv": "c10d", "max_restarts": 2, "hang_timeout_s": 5.0},
     "--hang-timeout 5 and the restarts of its elastic nodes act only while `attach` follows the run"),
])
def test_a_detached_run_says_what_only_a_follower_does_for_it(make_job, options, said):
    from orchestrate.launch.run import unwatched_while_detached

    caveat = unwatched_while_detached(make_job(nodes=2, **options).config)
    assert caveat.startswith(said) and bool(caveat) == bool(said), caveat


def test_the_first_failure_stops_the_others_after_a_grace_and_names_node_and_rank(make_run):
    job = make_run(nodes=3, nproc_per_node=2)
    client = FakeDockerClient()
    outcome, text, compose = run(job, client, node0=[Script(["[0|0]:waiting"], hang=True)],
                                 node1=[Script(["[3|1]:RuntimeError: injected failure on rank 3",
                                                *report(3, 1, exc="RuntimeError: injected failure on rank 3")],
                                               exit_code=1)],
                                 node2=[Script(["[4|0]:waiting"], hang=True)])
    assert not outcome.succeeded and outcome.exit_code == 1
    states = {r.node.name: r.state for r in outcome.results}
    assert states == {"node0": NodePhase.STOPPED, "node1": NodePhase.FAILED, "node2": NodePhase.STOPPED}
    assert sorted(c[1] for c in client.calls if c[0] == "kill") == ["ddp-test-run-node0-1", "ddp-test-run-node2-1"]
    assert "node1 failed; stopping the other nodes in 3 s" in text
    assert outcome.error == "" and "timed out" not in text  # stopped after the grace, not at the run's limit
    failure = outcome.failure
    assert (failure.node, failure.rank, failure.exit_code) == ("node1", 3, 1)
    assert compose.calls[-1] == "down"


def test_the_root_cause_traceback_comes_from_the_error_file_on_the_host_mount(make_run):
    job = make_run(nodes=1, nproc_per_node=2)
    container_path = "/ddp-run/node0/torchrun/r_x/attempt_0/1/error.json"

    def write_error_file() -> None:
        host = job.run_dir / "node0/torchrun/r_x/attempt_0/1/error.json"
        host.parent.mkdir(parents=True)
        host.write_text(json.dumps({"message": {"message": "ValueError: bad batch", "extraInfo": {
            "py_callstack": "Traceback (most recent call last):\n  File \"/workspace/data.py\", line 3, in read\n"
                            "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
                            "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 9, in main\n"
                            "    loss = step(batch)\nValueError: bad batch",
            "timestamp": "1700000000"}}}))

    client = FakeDockerClient()
    outcome, text, _ = run(job, client, node0=[Script(report(1, 1, error_file=container_path), exit_code=1,
                                                       then=write_error_file)])
    failure = outcome.failure
    assert failure.exception == "ValueError: bad batch"
    assert 'File "/workspace/train.py", line 9' in failure.traceback
    assert failure.users_frame == "train.py:9 in main: loss = step(batch)"
    assert "  in your code: train.py:9 in main: loss = step(batch)" in format_summary(outcome)
    assert failure.chain == ("raised while handling: KeyError: 'x'",)


def test_the_scripts_line_under_an_error_raised_deep_in_torch_is_said_and_recorded(make_run):
    job = make_run(nodes=1, nproc_per_node=1)
    frames = [line for i in range(15) for line in (
        f'[0|0]:[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c{i}.py", line {i}, in f{i}',
        f"[0|0]:[rank0]:     g{i}()")]
    printed = ["[0|0]:[rank0]: Traceback (most recent call last):",
               '[0|0]:[rank0]:   File "/workspace/prep.py", line 6, in <module>',
               "[0|0]:[rank0]:     sampler = DistributedSampler(data)", *frames,
               "[0|0]:[rank0]: ValueError: Default process group has not been initialized"]
    client = FakeDockerClient()
    outcome, _, _ = run(job, client, node0=[Script(
        printed + report(0, 0, exc="ValueError: Default process group has not been initialized"), exit_code=1)])
    lines = format_summary(outcome).splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAILED: node0 rank 0"))
    assert lines[failed + 1] == "  in your code: prep.py:6 in <module>: sampler = DistributedSampler(data)"
    assert "prep.py" not in "".join(outcome.failure.last_lines)  # the tail alone holds only torch's frames
    recorded = json.loads((job.run_dir / "outcome.json").read_text())["failure"]
    assert recorded["users_frame"] == "prep.py:6 in <module>: sampler = DistributedSampler(data)"
    # a plugin test's failed assert says it too
    assert ("Default process group has not been initialized, in your code at prep.py:6 in <module>:"
            " sampler = DistributedSampler(data)") in repr(outcome)


def test_a_script_python_could_not_compile_is_placed_at_its_line_though_no_traceback_came(make_run):
    job = make_run(nodes=1, nproc_per_node=1)
    printed = ['[0|0]:  File "/workspace/train.py", line 7', "[0|0]:    if rank == 0", "[0|0]:               ^",
               "[0|0]:SyntaxError: expected ':'"]
    client = FakeDockerClient()
    outcome, _, _ = run(job, client, node0=[Script(printed + report(0, 0, exc="SyntaxError: expected ':'"), exit_code=1)])
    lines = format_summary(outcome).splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAILED: node0 rank 0"))
    assert lines[failed + 1] == "  in your code: train.py:7: if rank == 0"


def test_an_error_that_is_not_a_compile_error_is_not_placed_at_a_lone_frame_above_it(make_run):
    job = make_run(nodes=1, nproc_per_node=1)
    printed = ['[0|0]:  File "/workspace/train.py", line 7', "[0|0]:    if rank == 0", "[0|0]:RuntimeError: later"]
    outcome, _, _ = run(job, FakeDockerClient(), node0=[Script(printed + report(0, 0, exc="RuntimeError: later"),
                                                               exit_code=1)])
    assert outcome.failure.exception == "RuntimeError: later"
    assert outcome.failure.users_frame == "" and "in your code" not in format_summary(outcome)


def test_what_a_failures_error_was_raised_from_is_said_under_it_and_recorded(make_run):
    job = make_run(nodes=1, nproc_per_node=1)
    printed = ["Traceback (most recent call last):", '  File "/workspace/resume.py", line 7, in load',
               "    return torch.load(path)", "FileNotFoundError: [Errno 2] No such file or directory: 'c.pt'", "",
               "The above exception was the direct cause of the following exception:", "",
               "Traceback (most recent call last):", '  File "/workspace/resume.py", line 9, in load',
               '    raise RuntimeError("could not resume") from e', "RuntimeError: could not resume"]
    client = FakeDockerClient()
    outcome, _, _ = run(job, client, node0=[Script(
        [f"[0|0]:[rank0]: {line}" for line in printed] + report(0, 0, exc="RuntimeError: could not resume"),
        exit_code=1)])
    lines = format_summary(outcome).splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAILED: node0 rank 0"))
    assert lines[failed + 1:failed + 3] == [
        "  in your code: resume.py:9 in load: raise RuntimeError(\"could not resume\") from e",
        "  caused by: FileNotFoundError: [Errno 2] No such file or directory: 'c.pt'"]
    recorded = json.loads((job.run_dir / "outcome.json").read_text())["failure"]
    assert recorded["chain"] == ["caused by: FileNotFoundError: [Errno 2] No such file or directory: 'c.pt'"]
    # a plugin test's failed assert says it too
    assert ("RuntimeError: could not resume, in your code at resume.py:9 in load: raise RuntimeError(\"could not"
            " resume\") from e, caused by: FileNotFoundError: [Errno 2]") in repr(outcome)


def test_a_failed_runs_line_names_what_its_error_wraps_past_a_link_to_the_same_error(make_run):
    job = make_run(nodes=1, nproc_per_node=1)
    printed = ["Traceback (most recent call last):", "  w", "KeyError: 'a'", "",
               "During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", "  x", "OSError: full", "",
               "During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", "  y", "OSError: full"]
    outcome, _, _ = run(job, FakeDockerClient(), node0=[Script(
        [f"[0|0]:[rank0]: {line}" for line in printed] + report(0, 0, exc="OSError: full"), exit_code=1)])
    assert outcome.failure.chain == ("raised while handling the same error", "raised while handling: KeyError: 'a'")
    assert "OSError: full, raised while handling: KeyError: 'a'" in repr(outcome), repr(outcome)


def test_a_fault_fires_at_its_step_from_the_progress_channel_and_a_hung_node_is_named(make_run):
    job = make_run(nodes=2, faults=(parse_fault("pause:node1@step=3"),))
    triggers = json.loads((Path(job.run_dir) / "progress" / "triggers.json").read_text()) \
        if (Path(job.run_dir) / "progress").exists() else None
    client = FakeDockerClient()
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=progress_writer(job, 0, range(1, 6)), exit_code=1,
                      after=report(0, 0, exc="RuntimeError: Timed out waiting for node1"),
                      after_when=lambda: ("pause", "ddp-test-run-node1-1") in client.calls)],
        node1=[Script(["[1|0]:training"], hang=True)],
    )
    assert triggers is None  # the run directory is made by the launcher, not before
    assert json.loads((job.run_dir / "progress" / "triggers.json").read_text()) == {"steps": [3], "in_attempt": []}
    assert (job.run_dir / "progress" / "fired-3").exists()  # the waiting ranks were let go
    assert ("pause", "ddp-test-run-node1-1") in client.calls
    assert "fault injected: pause:node1@step=3" in text
    assert outcome.failure.describe() == ("node1 stopped answering: its container is paused (hung)"
                                          " (injected fault pause:node1@step=3)")
    # the hung node is killed at once, by the launcher: stopped, not failed by itself
    assert [c[0] if c[0] == "unpause" else c[2] if len(c) > 2 else "SIGKILL" for c in client.calls
            if c[0] in ("kill", "unpause") and c[1] == "ddp-test-run-node1-1"] == ["unpause", "SIGKILL"]
    assert {r.node.name: r.state for r in outcome.results}["node1"] is NodePhase.STOPPED
    # each node's ranks' steps, as they reported them: rank 0 took 5, node1's reported none
    assert [r.steps_reached for r in outcome.results] == [{0: 5}, {}]


def test_a_fault_timed_into_the_start_up_is_said_to_have_fallen_before_the_first_step(make_run):
    job = make_run(nodes=2, faults=(parse_fault("pause:node1@t=0..0.1"),))
    client = FakeDockerClient()
    paused = ("pause", "ddp-test-run-node1-1")

    def steps_after_the_pause() -> None:
        deadline = time.monotonic() + 10
        while paused not in client.calls:
            assert time.monotonic() < deadline, "the fault never fired"
            time.sleep(0.01)
        progress_writer(job, 0, range(1, 4), attempt="first")()  # steps taken now, after the pause

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:starting"], then=steps_after_the_pause)],
                           node1=[Script(["[1|0]:starting"], then=lambda: None, after=["[1|0]:trained"],
                                         after_when=lambda: (job.run_dir / "progress" / "rank0.jsonl").exists())])
    assert outcome.succeeded, text
    assert outcome.faults[0].before_first_step and outcome.faults[0].fired_at_step is None
    assert re.search(r"\nfault injected: pause:node1@t=0\.\.0\.1 \(\d+\.\d s into the job, before its first step",
                     format_summary(outcome))  # due at once: injected at a tick, later on a loaded machine
    assert json.loads((job.run_dir / "outcome.json").read_text())["faults"][0]["before_first_step"] is True


def test_a_rank_gloo_aborted_is_placed_beside_the_peers_that_failed_in_this_attempt_only(make_run):
    job = make_run(nodes=3)
    client = FakeDockerClient()
    gloo = ("gloo::EnforceNotMet: [enforce fail at pair.cc:456] 8 vs 4. Received data size doesn't match expected"
            " size. Is there a distributed collective mismatch in your code?")

    def failed_in(rank: int, written: float):
        def write() -> None:
            (job.run_dir / "debug").mkdir(exist_ok=True)
            (job.run_dir / "debug" / f"rank{rank}.json").write_text(json.dumps({
                "request": "failed", "reason": "collective failed", "rank": rank, "time": written, "stacks": [],
                "collectives": [{"seq": 3, "op": "all_reduce", "group": "default", "shapes": "float32[8]",
                                 "at": "a.py:5", "state": "failed"}]}))
        return write

    lost = "RuntimeError: [pair.cc:538] Read error: Connection reset by peer"
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:terminate called after throwing an instance of 'gloo::EnforceNotMet'", f"[0|0]:  what():  {gloo[22:]}",
                       *report(0, 0, exit_code=-6, exc="Signal 6 (SIGABRT) received by PID 42")], exit_code=1)],
        # rank 1 failed in this attempt; rank 2's record is an earlier container's (written before this one started)
        node1=[Script([f"[1|0]:{lost}", *report(1, 0, exc=lost)], exit_code=1, then=failed_in(1, time.time() + 1))],
        node2=[Script([f"[2|0]:{lost}", *report(2, 0, exc=lost)], exit_code=1, then=failed_in(2, time.time() - 3600))])
    assert outcome.failure.exception.startswith("gloo::EnforceNotMet"), text
    assert outcome.divergence == "rank 0 aborted; rank 1 was in all_reduce(float32[8]) #3 at a.py:5"
    assert "\n  hint: gloo received more data than expected" in format_summary(outcome)


def test_a_node_that_stopped_answering_is_the_cause_and_is_killed_at_once(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()

    def pause_node1() -> None:
        client.containers_by_name["ddp-test-run-node1-1"].pause()

    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:waiting", *report(0, 0, exc="RuntimeError: Timed out")],
                                         exit_code=1, then=pause_node1)],
                           node1=[Script(["[1|0]:waiting"], hang=True)])
    assert outcome.failure.describe() == "node1 stopped answering: its container is paused (hung)"
    assert "stopping the other nodes" not in text  # a hung node has no report to finish


def test_elastic_mode_restarts_every_node_when_one_dies_and_measures_the_recovery(make_run):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=(parse_fault("kill:node1@step=2"),))
    client = FakeDockerClient()
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)), hang=True),
               Script(["[0|0]:resumed"], then=progress_writer(job, 0, range(3, 5), resumed=2))],
        node1=[Script(["[1|0]:up"], hang=True), Script(["[1|0]:up again"])],
    )
    assert outcome.succeeded, text
    assert sorted(c[1] for c in client.calls if c[0] == "restart") == ["ddp-test-run-node0-1", "ddp-test-run-node1-1"]
    assert "node1 died (injected fault kill:node1@step=2); restarting every node" in text
    [recovery] = outcome.timings.recoveries
    assert (recovery.node, recovery.resumed_from) == ("node1", 2)
    assert recovery.step_before >= 2 and recovery.steps_lost == recovery.step_before - 2
    assert recovery.recovery_s is not None and recovery.recovery_s >= 0


def test_a_death_with_no_restart_left_is_said_and_the_summary_says_no_recovery_came_and_why(make_run):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=(parse_fault("kill:node1@step=2"),))
    client = FakeDockerClient()
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)), hang=True),
               Script(["[0|0]:resumed"], hang=True)],
        node1=[Script(["[1|0]:up"], hang=True), Script(["[1|0]:up again"], exit_code=137)],
    )
    assert not outcome.succeeded, text
    said = ("node1 died (its death) with no restart left: the 1 of --max-restarts 1 went to the deaths before it,"
            " so the job ends")
    assert f"[orchestrate] {said}" in text.splitlines()
    assert f"recovery: none: {said}" in format_summary(outcome).splitlines()
    assert [c[1] for c in client.calls if c[0] == "restart"].count("ddp-test-run-node1-1") == 1
    assert [e["node"] for e in read_events(job.run_dir) if e["event"] == "restarts-used-up"] == ["node1"]


def test_a_recovery_whose_workers_do_not_say_where_they_resumed_is_timed_by_their_first_step(make_run):
    """A plain script whose optimizer keeps no step count (SGD) says nowhere where it resumed: the
    first step of a worker process begun after the failure is when the job went on."""
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=(parse_fault("kill:node1@step=2"),))
    client = FakeDockerClient()
    late, again = progress_writer(job, 0, range(4, 5)), progress_writer(job, 0, range(1, 3), attempt="second")

    def late_then_again() -> None:  # the old worker's last step, read after the failure, is not the resume
        late()
        again()

    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)), hang=True),
               Script(["[0|0]:again"], then=late_then_again)],
        node1=[Script(["[1|0]:up"], hang=True), Script(["[1|0]:up again"])],
    )
    assert outcome.succeeded, text
    [recovery] = outcome.timings.recoveries
    assert (recovery.resumed_from, recovery.steps_lost) == (None, None)
    assert recovery.recovery_s is not None and recovery.recovery_s >= 0
    assert recovery.describe().startswith("node1 rejoined after injected fault kill:node1@step=2: recovery (failure"
                                          " detected to first step after resume) ")
    assert recovery.describe().endswith(f"; last step before it {recovery.step_before}")
    [resumed] = [e for e in read_events(job.run_dir) if e["event"] == "resumed"]
    assert (resumed["node"], resumed["step"], resumed["steps_lost"]) == ("node1", 1, None)


def test_a_step_fault_after_a_resume_whose_steps_count_from_1_again_says_which_count_its_step_is(make_run):
    """A trial (session 112): a plain script whose optimizer keeps no step count (SGD), killed at
    step 2 and resumed; its new workers' counted steps begin at 1 again, so kill:node0@step=4 fires
    at their 4th step, not the script's 4th. Until then the fault and its recovery said "at step 4"
    and "last step before it 4" as if the job's own; now they say whose count it is."""
    job = make_run(nodes=2, rdzv="c10d", max_restarts=2,
                   faults=(parse_fault("kill:node1@step=2"), parse_fault("kill:node0@step=4")))
    client = FakeDockerClient()

    def counted(steps: range, attempt: str):
        def write() -> None:
            began = {"attempt": attempt, "began": time.time(), "time": time.time()}
            with open(job.run_dir / "progress" / "rank0.jsonl", "a") as handle:
                for step in steps:
                    handle.write(json.dumps({"rank": 0, "step": step, "counted": "optimizer", **began}) + "\n")
        return write

    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:step"], then=counted(range(1, 3), "first"), hang=True),
               Script(["[0|0]:again"], then=counted(range(1, 5), "second"), hang=True),
               Script(["[0|0]:last"])],
        node1=[Script(["[1|0]:up"], hang=True), Script(["[1|0]:up again"], hang=True), Script(["[1|0]:last"])],
    )
    assert outcome.succeeded, text
    anew = (" of the attempt after injected fault kill:node1@step=2, counted from 1 again: no rank said where it"
            " resumed (an optimizer without a step count, or a script that started over)")
    assert f"at step 4{anew})" in " ".join(text.split())
    first, second = outcome.timings.recoveries
    assert first.describe().endswith("; last step before it 2") and not first.counted_anew
    assert second.describe().endswith(f": last step before it 4{anew}")
    killed = [f for f in outcome.faults if f.spec == "kill:node0@step=4"]
    assert [(f.step, f.counted_anew) for f in killed] == [(4, first)]
    assert [f.counted_anew is first for f in killed] == [True]
    # events.jsonl (the report page's record) says the same steps, and which count they are in
    after = {"node": "node1", "cause": "injected fault kill:node1@step=2"}
    recorded = [(e["event"], e["step"], e.get("step_counted_anew_after")) for e in read_events(job.run_dir)
                if e["event"] in ("fault", "restart", "resumed")]
    assert recorded == [("fault", 2, None), ("restart", 2, None), ("resumed", 1, after), ("fault", 4, after),
                        ("restart", 4, after)]


def test_a_rank_that_says_where_it_resumed_after_another_ranks_first_step_still_tells_the_steps_lost(make_run):
    """Rank 0 reports its own steps and says no resume; rank 1's optimizer count says it resumed
    from step 2, held until its second step: read after rank 0's first step, it still counts."""
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=(parse_fault("kill:node1@step=3"),))
    client = FakeDockerClient()
    rank0, rank1 = progress_writer(job, 0, range(1, 3), attempt="second"), progress_writer(job, 1, range(3, 5),
                                                                                          resumed=2, attempt="again")

    def rank1_after_rank0() -> None:
        wait_until(lambda: '"second"' in (job.run_dir / "progress" / "rank0.jsonl").read_text())
        rank1()

    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)), hang=True),
               Script(["[0|0]:again"], then=rank0)],
        node1=[Script(["[1|0]:up"], hang=True), Script(["[1|0]:up again"], then=rank1_after_rank0)],
    )
    assert outcome.succeeded, text
    [recovery] = outcome.timings.recoveries
    assert recovery.recovery_s is not None and (recovery.resumed_from, recovery.steps_lost) == (2, 1)


def test_stop_from_another_terminal_ends_an_elastic_job_as_stopped_not_a_death_to_recover_from(make_run):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3)
    client = FakeDockerClient()

    @once_followed(job, "node1")
    def stop_from_another_terminal() -> None:  # `python -m orchestrate stop RUN`, once both nodes run
        threading.Thread(target=lambda: stop_run(list_runs(client)[0], 1), daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True)],
                           node1=[Script(["[1|0]:step 1"], then=stop_from_another_terminal, hang=True)])
    assert not [c for c in client.calls if c[0] == "restart"], text
    assert [r.state for r in outcome.results] == [NodePhase.STOPPED, NodePhase.STOPPED], text
    assert (outcome.stopped_by, outcome.exit_code) == ("python -m orchestrate stop", 143)
    assert "STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped" in format_summary(outcome)


def test_a_node_stop_run_had_to_sigkill_is_named_in_its_launchers_summary_and_record(make_run):
    """`stop RUN --timeout 2` beside a foreground run: node0 ignores its SIGTERM, node1 takes it.
    The launcher's summary and events name node0 as killed when its grace ran out, with what
    `stop` listed in it just before; node1 is not named."""
    import io

    from orchestrate.cli.main import main

    job = make_run(nodes=2)
    client = FakeDockerClient()
    said = io.StringIO()

    @once_followed(job, "node1")
    def stop_from_another_terminal() -> None:
        threading.Thread(target=lambda: main(client=client, argv=["stop", "test-run", "--timeout", "2"], out=said),
                         daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True, ignore_sigterm=True)],
                           node1=[Script(["[1|0]:step 1"], then=stop_from_another_terminal, hang=True)])
    assert [(r.state, r.exit_code) for r in outcome.results] == [(NodePhase.STOPPED, 137), (NodePhase.STOPPED, 143)]
    still = ["torchrun ... train.py (sleeping)", "python train.py (sleeping)"]
    line = f"node0 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: {'; '.join(still)}"
    summary = format_summary(outcome).splitlines()
    assert summary[summary.index("STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped") + 1] == \
        f"  {line}", summary
    assert "node1 did not stop" not in "\n".join(summary)
    assert [(r.grace_ran_out, r.still_running) for r in outcome.results] == [(True, still), (False, [])]
    stopped = {e["node"]: {k: v for k, v in e.items() if k not in ("time", "event", "node")}
               for e in read_events(job.run_dir) if e["event"] == "node-stopped"}
    assert stopped == {"node0": {"exit_code": 137, "by": "python -m orchestrate stop", "grace_ran_out": True,
                                 "still_running": still},
                       "node1": {"exit_code": 143, "by": "python -m orchestrate stop"}}
    deadline = time.monotonic() + 10
    while "its launcher says how it ended" not in said.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said.getvalue().startswith(f"{line}\n"), said.getvalue()  # `stop` said it on its own terminal too


def test_stop_from_another_terminal_of_a_quiet_job_says_where_it_hung_there_and_in_the_launchers_summary(
        make_run, monkeypatch):
    """`stop RUN` beside a foreground run whose ranks wait in an all-reduce: it looks first (the job
    quiet for 60 s, on a clock moved on; the ranks answer in simulated time), says where they wait,
    and the launcher's summary and record keep it under STOPPED, as after a Ctrl-C."""
    from orchestrate.cli.main import main
    from orchestrate.supervise import look_before_stop as module
    from tests.unit.test_rank_probe import INTERVAL_S, AnsweringWorkers

    job = make_run(nodes=2)
    client = FakeDockerClient()
    said, codes = io.StringIO(), []
    workers: list[AnsweringWorkers] = []  # once the run's directory is made
    real_look = module.look_before_stop
    monkeypatch.setattr("orchestrate.launch.stop.look_before_stop", lambda client, run, say: real_look(
        client, run, say, INTERVAL_S, now=lambda: max(stamp for c in client.containers_by_name.values()
                                                      for stamp, _ in c.log) + 60,  # 60 s after the last line
        sleep=workers[0].sleep, clock=workers[0].clock))

    @once_followed(job, "node1")
    def stop_from_another_terminal() -> None:
        workers.append(AnsweringWorkers(job.run_dir, (0, 1), {0: 20, 1: 20}))
        (job.run_dir / "debug" / "rank0.crash").write_text("")  # the workers' hook began
        threading.Thread(target=lambda: codes.append(main(client=client, argv=["stop", "test-run", "--timeout", "2"],
                                                          out=said)), daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True)],
                           node1=[Script(["[1|0]:step 1"], then=stop_from_another_terminal, hang=True)])
    wait_until(lambda: codes == [0])
    looked = said.getvalue().splitlines()
    assert looked[:2] == [("no output for 60 s: looking where every rank waits before they stop (a few seconds; up to"
                           " 13 s where a rank does not answer)"),
                          "at the stop, hung: no progress for 60 s: ranks 0, 1: all_reduce at train.py:20 in <module>"]
    summary = format_summary(outcome).splitlines()
    at = summary.index("STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped")
    assert summary[at + 1] == "  while hung: no progress for 60 s: ranks 0, 1: all_reduce at train.py:20 in <module>"
    assert summary[at + 2:at + 4] == looked[2:4]  # where each group waits, as `stop` said it
    record = outcome_record(outcome)["stop_look"]
    assert record["hung"] is True and record["lines"][0] == looked[1].removeprefix("at the stop, hung: ")
    assert outcome.interrupted and outcome.stopped_by == "python -m orchestrate stop"


def test_a_node_stop_run_had_to_sigkill_with_nothing_listed_in_it_has_no_list_in_its_record(make_run):
    from orchestrate.cli.main import main

    job = make_run(nodes=1)
    client = FakeDockerClient()

    @once_followed(job, "node0")
    def stop_from_another_terminal() -> None:
        threading.Thread(target=lambda: main(client=client, argv=["stop", "test-run", "--timeout", "2"],
                                             out=io.StringIO()), daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True, ignore_sigterm=True, processes=(),
                                                      then=stop_from_another_terminal)])
    assert [(r.state, r.exit_code, r.grace_ran_out, r.still_running) for r in outcome.results] == [
        (NodePhase.STOPPED, 137, True, [])], text
    assert [{k: v for k, v in e.items() if k not in ("time", "event")} for e in read_events(job.run_dir)
            if e["event"] == "node-stopped"] == [
        {"node": "node0", "exit_code": 137, "by": "python -m orchestrate stop", "grace_ran_out": True}]


@pytest.mark.parametrize("again", [False, True], ids=["stop --timeout 0", "then stop --timeout 0 in its grace"])
def test_a_node_a_stop_without_a_grace_killed_is_named_as_given_none(make_run, again):
    """`stop RUN --timeout 0` beside a foreground run (alone, or after a `stop --timeout 30` whose
    grace runs): node0 ignores its SIGTERM, and the engine's SIGKILL comes with it; `stop` and the
    launcher's summary, record and page say it had no grace, with what ran in it as the stop
    began. node1 took its SIGTERM (143): not named."""
    from orchestrate.cli.main import main
    from orchestrate.report.page import write_report

    job = make_run(nodes=2)
    client = FakeDockerClient()
    said, codes = io.StringIO(), []

    @once_followed(job, "node1")
    def stop_from_another_terminal() -> None:
        def stop() -> None:
            if again:
                threading.Thread(target=lambda: stop_run(list_runs(client)[0], 30), daemon=True).start()
                wait_until(lambda: (job.run_dir / "stop-requested").exists())
            codes.append(main(client=client, argv=["stop", "test-run", "--timeout", "0"], out=said))
        threading.Thread(target=stop, daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True, ignore_sigterm=True)],
                           node1=[Script(["[1|0]:step 1"], then=stop_from_another_terminal, hang=True)])
    assert [(r.state, r.exit_code) for r in outcome.results] == [(NodePhase.STOPPED, 137), (NodePhase.STOPPED, 143)]
    still = ["torchrun ... train.py (sleeping)", "python train.py (sleeping)"]
    line = ("node0 had no grace (its stop gave 0 s), so it got SIGKILL at once; what still ran:"
            f" {'; '.join(still)}")
    summary = format_summary(outcome).splitlines()
    assert summary[summary.index("STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped") + 1] == \
        f"  {line}", summary
    assert "node1 had no grace" not in "\n".join(summary) and "did not stop within" not in "\n".join(summary)
    assert [(r.grace_ran_out, r.no_grace, r.still_running) for r in outcome.results] == [(True, True, still),
                                                                                         (False, False, [])]
    stopped = {e["node"]: {k: v for k, v in e.items() if k not in ("time", "event", "node")}
               for e in read_events(job.run_dir) if e["event"] == "node-stopped"}
    assert stopped["node0"] == {"exit_code": 137, "by": "python -m orchestrate stop", "grace_ran_out": True,
                                "no_grace": True, "still_running": still}
    assert [n["no_grace"] for n in outcome_record(outcome)["nodes"]] == [True, False]
    assert f"<li>{html.escape(line)}</li>" in write_report(job.run_dir).read_text(encoding="utf-8")
    wait_until(lambda: codes == [0])
    assert said.getvalue().startswith(f"{line}\n"), said.getvalue()  # `stop` said it on its own terminal too


def killed_during_the_grace(job: Run, client: FakeDockerClient) -> None:
    """`stop RUN --timeout 30`, then a kill from elsewhere 1 s in (a fault's, `docker kill`)."""
    threading.Thread(target=lambda: stop_run(list_runs(client)[0], 30), daemon=True).start()
    wait_until(lambda: (job.run_dir / "stop-requested").exists())
    time.sleep(1.0)  # into the grace, well before its end
    client.containers_by_name["ddp-test-run-node0-1"].kill()


def stopped_again_without_grace(job: Run, client: FakeDockerClient) -> None:
    """`stop RUN --timeout 30`, then an impatient `stop RUN --timeout 0`: the latest one counts."""
    threading.Thread(target=lambda: stop_run(list_runs(client)[0], 30), daemon=True).start()
    wait_until(lambda: (job.run_dir / "stop-requested").exists())
    stop_run(list_runs(client)[0], 0)


def ended_by_itself_late_in_the_grace(job: Run, client: FakeDockerClient) -> None:
    """A stop with 2 s of grace, whose SIGTERM handler takes 1.8 s and exits 143 before the
    SIGKILL was due (the request written as `stop` writes it; the handler's exit stands for the
    engine's part, so that no SIGKILL can beat it)."""
    from orchestrate.engine.runs import mark_stop_requested

    mark_stop_requested(list_runs(client)[0].run_dir, ["node0"], grace_s=2)
    time.sleep(1.8)
    node = client.containers_by_name["ddp-test-run-node0-1"]
    node.exit(143)
    node.killed.set()


@pytest.mark.parametrize("stop, exit_code", [(killed_during_the_grace, 137), (ended_by_itself_late_in_the_grace, 143)],
                         ids=lambda p: getattr(p, "__name__", str(p)))
def test_a_node_whose_stop_grace_did_not_run_out_is_not_named(make_run, stop, exit_code):
    """A node that ignores SIGTERM, stopped from another terminal: it ended, stopped, but not by
    a SIGKILL at the end of the latest stop's grace, so no line says its grace ran out."""
    job = make_run(nodes=1)
    client = FakeDockerClient()
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True, ignore_sigterm=True,
                                                      then=once_followed(job, "node0")(lambda: stop(job, client)))])
    assert [(r.state, r.exit_code, r.grace_ran_out) for r in outcome.results] == [
        (NodePhase.STOPPED, exit_code, False)], text
    assert "did not stop within its grace" not in format_summary(outcome)


def test_down_from_another_terminal_stops_a_live_run_first_and_its_launcher_says_down_stopped_it(make_run):
    import io

    from orchestrate.cli.main import main

    job = make_run(nodes=2)
    client = FakeDockerClient()
    said = io.StringIO()

    @once_followed(job, "node1")
    def down_from_another_terminal() -> None:  # `python -m orchestrate down RUN`, once both nodes run
        threading.Thread(target=lambda: main(client=client, argv=["down", "test-run", "--timeout", "1"], out=said),
                         daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True, on_sigterm=["[0|0]:saved"])],
                           node1=[Script(["[1|0]:step 1"], then=down_from_another_terminal, hang=True)])
    assert [r.state for r in outcome.results] == [NodePhase.STOPPED, NodePhase.STOPPED], text
    assert (outcome.stopped_by, outcome.exit_code) == ("python -m orchestrate down", 143), text
    assert "STOPPED by python -m orchestrate down (SIGTERM): every node was stopped" in format_summary(outcome)
    assert "[node0/rank0]  saved" in text  # SIGTERM first: the job could save
    deadline = time.monotonic() + 10
    while "logs stay in" not in said.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said.getvalue().startswith("stopped node0, node1 of run test-run first (SIGTERM, SIGKILL after 1 s)\n"
                                      "its launcher says how it ended and tears it down\n"
                                      "run test-run is gone: its launcher tore it down\n"), said.getvalue()
    assert "FAILED" not in format_summary(outcome)
    ended = [(c[0], c[1]) for c in client.calls if c[0] in ("stop", "remove")]
    assert ended.index(("remove", "ddp-test-run-node0-1")) > ended.index(("stop", "ddp-test-run-node0-1")), ended


class OutputThatCloses(io.StringIO):
    """A console whose reader goes away as the launcher says it keeps the run (ReaderAwareOutput
    then interrupts the main thread at that very line)."""

    def write(self, text: str) -> int:
        if text.startswith("[orchestrate] --keep:"):
            raise SignalInterrupt(signal.SIGPIPE)
        return super().write(text)


def test_an_interrupt_as_the_launcher_keeps_a_run_still_records_it(make_run):
    job = make_run(nodes=1, keep=True, out=OutputThatCloses())
    job.client = engine(FakeDockerClient(), node0=[Script(["[0|0]:step 1"])])
    with pytest.raises(SignalInterrupt):
        job.run()
    recorded = json.loads((job.run_dir / "outcome.json").read_text())
    assert recorded["exit_code"] == 0 and (job.run_dir / "report.html").is_file()
    assert "run-ended" in [event["event"] for event in read_events(job.run_dir)]


def test_down_of_a_run_whose_launcher_keeps_it_removes_it_without_waiting(make_run):
    import io

    from orchestrate.cli.main import main

    job = make_run(nodes=1, keep=True)
    client = FakeDockerClient()
    said = io.StringIO()
    downs: list[threading.Thread] = []

    @once_followed(job, "node0")
    def down_from_another_terminal() -> None:
        downs.append(threading.Thread(target=lambda: main(client=client, argv=["down", "test-run", "--timeout", "1"],
                                                          out=said), daemon=True))
        downs[0].start()

    outcome, text, compose = run(job, client, node0=[Script(["[0|0]:step 1"], then=down_from_another_terminal,
                                                            hang=True)])
    downs[0].join(timeout=20)
    assert not downs[0].is_alive() and "down" not in compose.calls  # no wait for a teardown that never comes
    assert outcome.stopped_by == "python -m orchestrate down", text
    assert "tears it down" not in said.getvalue() and "removed run test-run: container ddp-test-run-node0-1" in \
        said.getvalue(), said.getvalue()


def test_nodes_a_stop_request_names_that_an_inspection_finds_gone_are_stopped_not_failed(make_run):
    """`down RUN` of a detached run that `attach` follows removes the nodes right after their stop:
    an inspection can find them gone, exit codes and all, before their die events come."""
    from orchestrate.engine.runs import REMOVED_BY, mark_stop_requested

    job = make_run(nodes=2)
    client = FakeDockerClient()
    client.events_lag_s = 6.0  # the inspection (every 2 s) sees first, with room for a loaded machine

    @once_followed(job, "node1")
    def removed_from_another_terminal() -> None:
        mark_stop_requested(list_runs(client)[0].run_dir, ["node0", "node1"], REMOVED_BY)
        for name in ("ddp-test-run-node0-1", "ddp-test-run-node1-1"):
            client.containers_by_name[name].remove(force=True)

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True)],
                           node1=[Script(["[1|0]:step 1"], then=removed_from_another_terminal, hang=True)])
    assert [r.state for r in outcome.results] == [NodePhase.STOPPED, NodePhase.STOPPED], text
    summary = format_summary(outcome)
    assert outcome.stopped_by == REMOVED_BY and outcome.failure is None and "FAILED" not in summary, summary
    events = read_events(job.run_dir)
    assert {e.get("via") for e in events if e["event"] == "node-exited"} == {"inspection"}, events
    assert {e.get("by") for e in events if e["event"] == "node-stopped"} == {REMOVED_BY}, events


def test_faults_from_another_terminal_are_said_as_they_come_and_blamed_for_the_death_they_cause(make_run):
    """`fault RUN` beside a foreground elastic run: a fault the engine refused is said as not
    done (and not counted as one asked for); a kill is said, and the restart names it."""
    import io

    import docker.errors

    from orchestrate.cli.main import main

    job = make_run(nodes=2, rdzv="c10d", max_restarts=3)
    client = FakeDockerClient()

    @once_followed(job, "node1")
    def faults_from_another_terminal() -> None:
        def act() -> None:
            client.failures["pause"] = docker.errors.APIError("the engine refused")
            main(client=client, argv=["fault", job.run_id, "pause:node0"], out=io.StringIO())
            del client.failures["pause"]
            deadline = time.monotonic() + 10  # the launcher has said the refusal: the next is seen apart
            while time.monotonic() < deadline and not any(e["event"] == "fault-failed" for e in read_events(job.run_dir)):
                time.sleep(0.01)
            main(client=client, argv=["fault", job.run_id, "kill:node1"], out=io.StringIO())
        threading.Thread(target=act, daemon=True).start()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True), Script(["[0|0]:again"])],
                           node1=[Script(["[1|0]:step 1"], then=faults_from_another_terminal, hang=True),
                                  Script(["[1|0]:again"])])
    assert "fault from `python -m orchestrate fault` not done: pause:node0: the engine refused" in text
    assert "fault injected by `python -m orchestrate fault`: kill:node1 (" in text
    assert "node1 died (injected fault kill:node1); restarting every node" in text
    assert outcome.succeeded, text
    assert [(f.spec, f.node, f.fired) for f in outcome.faults] == [("kill:node1", "node1", True)]
    events = [(e["event"], e["spec"], e.get("by")) for e in read_events(job.run_dir) if e["event"].startswith("fault")]
    # the refused pause is never recorded as done (the report marks no fault for it)
    assert events == [("fault-failed", "pause:node0", "fault"), ("fault", "kill:node1", "fault")]


def test_a_live_fault_that_ends_on_a_restarted_node_gives_back_no_blame_of_its_earlier_container(make_run):
    """A live kill restarts an elastic job; a pause with an end is then done to the restarted
    node1, and ends; node1 then fails by itself: its failure is its own, not the kill's."""
    import io

    from orchestrate.cli.main import main

    job = make_run(nodes=2, rdzv="c10d", max_restarts=3)
    client = FakeDockerClient()

    @once_followed(job, "node1")
    def kill_node1() -> None:
        threading.Thread(target=lambda: main(client=client, argv=["fault", job.run_id, "kill:node1"],
                                             out=io.StringIO()), daemon=True).start()

    def pause_node1_briefly() -> None:  # from the restarted node1's own script: held, then ended
        main(client=client, argv=["fault", job.run_id, "pause:node1@t=0..0.2"], out=io.StringIO())

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:step 1"], hang=True), Script(["[0|0]:again"], hang=True)],
                           node1=[Script(["[1|0]:step 1"], then=kill_node1, hang=True),
                                  Script(["[1|0]:again", *report(1, 0, exc="ValueError: bad batch")],
                                         then=pause_node1_briefly, exit_code=1)])
    assert "node1 died (injected fault kill:node1); restarting every node" in text
    assert "fault ended by `python -m orchestrate fault`: pause:node1@t=0..0.2 on node1" in text
    assert not outcome.succeeded
    assert outcome.failure.describe().startswith("node1 rank 1 failed (exit code 1)"), outcome.failure.describe()


def test_a_worker_a_hang_rank_fault_stopped_is_continued_before_its_nodes_sigterm(make_run):
    """SIGTERM cannot reach a stopped worker: its node would wait out the whole stop grace for
    the SIGKILL. The launcher sends the worker SIGCONT first."""
    job = make_run(nodes=2, faults=(parse_fault("hang-rank:1"),))
    client = FakeDockerClient()
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (3, b"")  # the rank script: not here
    # rank 1's worker is there (signalled); asked for its workers, none stopped (the SIGTERM path, not a hung rank's)
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"signalled\n1 4241 S\nend\n")

    def fail_soon() -> None:
        time.sleep(0.3)  # once the fault is in

    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:up", *report(0, 0, exc="ValueError: bad batch")], then=fail_soon,
                                         exit_code=1)],
                           node1=[Script(["[1|0]:up"], hang=True)])
    signals = [c for c in client.calls if c[0] == "exec_create" and c[1] == "ddp-test-run-node1-1"
               and c[2][-1] in ("SIGSTOP", "SIGCONT")] + [c for c in client.calls if c[:2] == ("kill", "ddp-test-run-node1-1")]
    assert [c[2][-1] if c[0] == "exec_create" else c[-1] for c in signals][:3] == ["SIGSTOP", "SIGCONT", "SIGTERM"], (
        signals, text)
    assert client.calls.index(signals[1]) < client.calls.index(signals[2])


def test_a_worker_a_hang_rank_fault_stopped_gets_one_sigcont_by_its_rank_and_none_before_a_sigkill(make_run):
    job = make_run(nodes=2, faults=(parse_fault("hang-rank:1"),), stop_grace=0.5)
    client = FakeDockerClient()
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (3, b"")  # the rank script: not here
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"signalled\n1 4241 S\nend\n")

    def fault_in() -> bool:
        return any(c[0] == "exec_create" and "SIGSTOP" in c[2] for c in client.calls)

    run(job, client,
        node0=[Script(["[0|0]:up"], after=report(0, 0, exc="ValueError: bad batch"), after_when=fault_in,
                      exit_code=1)],
        node1=[Script(["[1|0]:up"], hang=True, ignore_sigterm=True)])  # SIGTERM is not enough: SIGKILL after it
    sent = [list(c[2][-2:]) if c[0] == "exec_create" else [c[-1] if len(c) > 2 else "SIGKILL"] for c in client.calls
            if c[1] == "ddp-test-run-node1-1" and (c[0] == "kill" or (c[0] == "exec_create" and "signal" in c[2]))]
    assert sent == [["1", "SIGSTOP"], ["1", "SIGCONT"], ["SIGTERM"], ["SIGKILL"]]

def test_a_failure_before_a_stop_from_another_terminal_is_still_the_runs(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()

    def stop_once_node0_failed() -> None:  # the user stops what is left, within the launcher's failure grace
        def stop() -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                [found] = list_runs(client)
                if [n.name for n in found.nodes if n.status == "running"] == ["node1"]:
                    stop_run(found, 1)
                    return
                time.sleep(0.01)
        threading.Thread(target=stop, daemon=True).start()

    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:up", *report(0, 0, exc="ValueError: bad batch")], exit_code=1)],
                           node1=[Script(["[1|0]:up"], then=stop_once_node0_failed, hang=True)])
    assert json.loads((job.run_dir / "stop-requested").read_text())["nodes"] == ["node1"], text
    assert [r.state for r in outcome.results] == [NodePhase.FAILED, NodePhase.STOPPED], text
    assert (outcome.exit_code, outcome.stopped_by) == (1, "")
    summary = format_summary(outcome)
    assert "FAILED: node0 rank 0 failed (exit code 1)" in summary
    assert "STOPPED by" not in summary


def test_elastic_mode_without_restarts_left_fails_naming_the_node(make_run):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=0, faults=(parse_fault("kill:node1@step=1"),))
    client = FakeDockerClient()
    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:step 1"], then=progress_writer(job, 0, range(1, 2)), hang=True)],
                           node1=[Script(hang=True)])
    assert not outcome.succeeded
    assert outcome.failure.describe() == "node1 failed (injected fault kill:node1@step=1)"
    assert not [c for c in client.calls if c[0] == "restart"]


def lost_node_run(make_run, lost: str, **options):
    """An elastic job of 2 nodes (MIN 1) whose ``lost`` node a ``lose`` fault takes at step 2."""
    return make_run(nodes=2, rdzv="c10d", nnodes=(1, 2), max_restarts=2,
                    faults=(parse_fault(f"lose:{lost}@step=2"),), **options)


def ended(client: FakeDockerClient, node: str):
    """An ``after_when``: ``node``'s container has ended."""
    return lambda: client.containers_by_name[f"ddp-test-run-{node}-1"].status == "exited"


def test_a_lost_node_is_never_restarted_and_the_job_goes_on_without_it(make_run):
    job = lost_node_run(make_run, "node1")
    client = FakeDockerClient()
    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)),
                                         after=["[0|0]:world 1, step 4"], after_when=ended(client, "node1"))],
                           node1=[Script(["[1|0]:up"], hang=True)])
    assert not [c for c in client.calls if c[0] == "restart"]
    assert [r.state for r in outcome.results] == [NodePhase.SUCCEEDED, NodePhase.LOST], text
    assert outcome.succeeded and outcome.exit_code == 0 and outcome.failure is None
    assert outcome.lost == {"node1": "lose:node1@step=2"}
    [recovery] = outcome.timings.recoveries  # timed as a restart's: the job went on without it
    assert (recovery.node, recovery.lost, recovery.cause) == ("node1", True, "injected fault lose:node1@step=2")
    # timed from the node's end, with the step the job had reached then (progress_writer wrote up to 3)
    assert (recovery.failed_at, recovery.step_before) == (outcome.results[1].ended_at, 3)
    assert "node1 is lost for good (lose:node1@step=2): the job goes on with the nodes left" in text
    assert format_summary(outcome).endswith("SUCCEEDED: 1 of 2 nodes exited 0; node1 was lost for good"
                                            " (lose:node1@step=2), and the job went on without it")
    outcome.results[0].restarts_in_place = 1  # (torchrun's restart of node0's workers, as its log would count it)
    assert "  after node1 was lost for good (lose:node1@step=2): the nodes left go on so" in format_summary(outcome)
    assert [{k: e[k] for k in ("node", "exit_code", "fault")} for e in read_events(job.run_dir)
            if e["event"] == "node-lost"] == [{"node": "node1", "exit_code": 137, "fault": "lose:node1@step=2"}]


def node0_fails_after_node1_is_lost(make_run, error: str):
    """A run whose node1 a ``lose`` fault takes at step 2, and whose node0 then fails with ``error``."""
    job = lost_node_run(make_run, "node1")
    client = FakeDockerClient()
    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)),
                                         after=[f"[0|0]:{error}", *report(0, 0)],
                                         after_when=ended(client, "node1"), exit_code=1)],
                           node1=[Script(["[1|0]:up"], hang=True)])
    return outcome


def test_the_nodes_left_after_a_lost_node_fail_by_their_own_error(make_run):
    outcome = node0_fails_after_node1_is_lost(make_run, "AssertionError: this script needs 2 ranks, got 1")
    assert not outcome.succeeded
    assert outcome.failure.describe() == ("node0 rank 0 failed (exit code 1): AssertionError: this script needs 2"
                                          " ranks, got 1")
    assert ("  after node1 was lost for good (lose:node1@step=2): the job went on with 1 of 2 nodes"
            in format_summary(outcome).splitlines())


def test_the_nodes_left_that_only_lost_their_peer_are_explained_by_the_lost_node(make_run):
    outcome = node0_fails_after_node1_is_lost(make_run, "RuntimeError: Connection closed by peer [10.0.0.3]:6576")
    assert outcome.failure.describe() == ("node1 was lost for good (injected fault lose:node1@step=2), and the nodes"
                                          " left could not go on without it: node0 failed")
    assert outcome.failure.lines_of == "node0"


def test_a_lost_node_that_held_the_rendezvous_store_ends_the_job_saying_so(make_run):
    job = lost_node_run(make_run, "node0")
    client = FakeDockerClient()
    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:step"], then=progress_writer(job, 0, range(1, 4)), hang=True)],
                           node1=[Script(["[1|0]:up"], after=["RendezvousConnectionError: The connection to the C10d"
                                                              " store has failed."],
                                         after_when=ended(client, "node0"), exit_code=1)])
    assert not [c for c in client.calls if c[0] == "restart"]
    assert outcome.failure.describe().startswith("node0 was lost for good (injected fault lose:node0@step=2); it held"
                                                 " the c10d rendezvous store")
    assert "node0 was lost for good (injected fault lose:node0@step=2); it held the c10d" in text


def test_an_oom_killed_node_is_named_from_the_engine(make_run):
    job = make_run(nodes=2, memory_per_node=1024**3)
    client = FakeDockerClient()

    def stepped() -> None:  # rank 1 reported steps 3 and 4 before the kill; rank 0, of the other node, 9
        for rank, step in ((1, 3), (1, 4), (0, 9)):
            with open(job.run_dir / "progress" / f"rank{rank}.jsonl", "a") as handle:
                handle.write(json.dumps({"rank": rank, "step": step, "time": time.time(), "attempt": "a"}) + "\n")

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], hang=True)],
                           node1=[Script(report(1, 0, exit_code=-9, exc="Signal 9 (SIGKILL)"), exit_code=1, oom=True,
                                         then=stepped)])
    assert outcome.failure.describe().startswith("node1 OOM-killed: the kernel killed 1 process(es) at the node's"
                                                 " memory limit after step 4 (rank 1 killed)")
    # said as it happens too, after the same step (until 2026-12-07 the live line gave none)
    assert "node1 was OOM-killed: the kernel killed 1 process(es) at its memory limit after step 4\n" in text


def test_each_oom_event_of_the_engine_is_a_kill_counted_and_recorded(make_run):
    # The container's OOMKilled flag says one kill at least; the engine's oom events count them.
    job = make_run(nodes=2, memory_per_node=1024**3)
    client = FakeDockerClient()

    def another_oom_kill() -> None:  # a DataLoader worker, say, before the rank itself
        client.emit(client.containers_by_name["ddp-test-run-node1-1"], "oom")

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], hang=True)],
                           node1=[Script(report(1, 0, exit_code=-9, exc="Signal 9 (SIGKILL)"), exit_code=1, oom=True,
                                         then=another_oom_kill)])
    assert outcome.failure.describe().startswith("node1 OOM-killed: the kernel killed 2 process(es)"), text
    assert [e["node"] for e in read_events(job.run_dir) if e["event"] == "oom"] == ["node1", "node1"]


def test_a_teardown_that_fails_is_never_success(make_run, monkeypatch):
    from tenacity import wait_none

    monkeypatch.setattr("orchestrate.launch.teardown.TEARDOWN_BACKOFF", wait_none())
    job = make_run(nodes=1)
    FakeCompose.fail_down = True
    try:
        outcome, text, compose = run(job, FakeDockerClient())
    finally:
        FakeCompose.fail_down = False
    assert compose.calls.count("down") == 5 and "teardown attempt 5 failed" in text
    assert outcome.teardown_error.startswith(f"could not remove project {job.project_name}")
    assert outcome.exit_code == 2
    # The record, written while the teardown went on, is corrected after it.
    assert json.loads((job.run_dir / "outcome.json").read_text())["exit_code"] == 2
    events = [json.loads(line) for line in (job.run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events[-2:]] == ["run-ended", "teardown-failed"]
    assert (events[-2]["exit_code"], events[-1]["exit_code"]) == (0, 2)
    assert "TEARDOWN FAILED: could not remove project" in (job.run_dir / "report.html").read_text()


def test_the_report_is_written_by_the_end_of_a_run_with_the_teardown_timed(make_run):
    job = make_run(nodes=2)
    outcome, _, compose = run(job, FakeDockerClient())
    assert compose.calls[-1] == "down"
    assert outcome.succeeded and (job.run_dir / "report.html").is_file()
    record = json.loads((job.run_dir / "outcome.json").read_text())
    assert record["timings"]["teardown_s"] == outcome.timings.teardown_s > 0
    assert "SUCCEEDED" in (job.run_dir / "report.html").read_text()


def paused_then_ctrl_c(job: Run, client: FakeDockerClient, names: dict[str, str], node: str,
                       meanwhile=lambda container: None):
    """A Script.then: once every node has printed its "training" line (the supervisor follows
    them), fill ``names`` (node -> container), pause ``node``, do ``meanwhile`` to its container,
    and press Ctrl-C."""
    def act() -> None:
        deadline = time.monotonic() + 10
        while job.out.getvalue().count("training") < len(job.plan.nodes) and time.monotonic() < deadline:
            time.sleep(0.01)
        names.update({c.labels.get(COMPOSE_SERVICE_LABEL): c.name for c in client.containers_by_name.values()})
        container = client.containers_by_name[names[node]]
        container.pause()
        meanwhile(container)
        _thread.interrupt_main()
    return act


def ctrl_c_once(job: Run, faults_fired: int, exited: tuple[str, ...] = ()):
    """A Script.then: once ``faults_fired`` faults are said injected and the run has recorded the
    end of each node of ``exited``, press Ctrl-C (pressed all the same when that does not come in
    time: the test's assertions then say what was missed)."""
    def ended() -> set[str]:
        return {e["node"] for e in read_events(job.run_dir) if e["event"] == "node-exited"}

    def act() -> None:
        try:
            wait_until(lambda: job.out.getvalue().count("fault injected") >= faults_fired and ended() >= set(exited))
        finally:
            _thread.interrupt_main()
    return act


def test_a_ctrl_c_while_a_fault_with_an_end_holds_a_node_says_the_fault_still_held(make_run):
    """A trial (session 112): Ctrl-C during pause:node1@t=1..60 of an elastic job, before any
    worker began (node1 paused, so no rendezvous formed): a fault with an end holds the job as asked,
    so no watchdog looked, and the summary said only "INTERRUPTED by SIGINT: every node was
    stopped", nothing of the node the fault still held. It says the fault, held at the stop."""
    job = make_run(nodes=2, rdzv="c10d", stop_grace=1, faults=(parse_fault("pause:node1@t=0..60"),))
    client = FakeDockerClient()
    outcome, text, _ = run(job, client,
                           node0=[Script(["[0|0]:waiting"], then=ctrl_c_once(job, faults_fired=1), hang=True)],
                           node1=[Script(["[1|0]:waiting"], hang=True)])
    assert outcome.interrupted and outcome.exit_code == 130, text
    [held] = outcome.fired_faults
    assert held.held_at_stop and held.ended_s is None
    summary = format_summary(outcome).splitlines()
    said = [line for line in summary if line.startswith("fault injected: pause:node1@t=0..60 (")]
    assert len(said) == 1 and said[0].endswith(" into the job, still held when the run was stopped)"), summary
    assert summary[-1] == "INTERRUPTED by SIGINT: every node was stopped"
    recorded = json.loads((job.run_dir / "outcome.json").read_text())
    assert [f["held_at_stop"] for f in recorded["faults"]] == [True]


def test_a_ctrl_c_while_a_pause_without_an_end_holds_a_node_says_the_fault_still_held(make_run):
    """The same trial without an end (pause:node1@t=1): the look at the interrupt found no worker to
    look at, and the summary said nothing of the node the fault still held. A fault that lasts,
    fired on a node still running at the stop, is said held; one on a node that ended is not."""
    job = make_run(nodes=3, rdzv="c10d", stop_grace=1,
                   faults=(parse_fault("pause:node1@t=0"), parse_fault("disconnect:node2@t=0")))
    client = FakeDockerClient()
    ctrl_c = ctrl_c_once(job, faults_fired=2, exited=("node2",))  # node2's fault then holds nothing
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], then=ctrl_c, hang=True)],
                           node1=[Script(["[1|0]:waiting"], hang=True)], node2=[Script(["[2|0]:done"])])
    assert outcome.interrupted, text
    assert {f.spec: f.held_at_stop for f in outcome.fired_faults} == {"pause:node1": True, "disconnect:node2": False}
    said = [line for line in format_summary(outcome).splitlines() if line.startswith("fault injected: ")]
    assert len(said) == 2 and said[0].startswith("fault injected: pause:node1 (") and said[0].endswith(
        " s into the job, still held when the run was stopped)"), said
    assert said[1].startswith("fault injected: disconnect:node2 (") and "held" not in said[1], said


def test_a_ctrl_c_says_a_fault_with_an_end_held_only_on_a_node_still_running(make_run):
    """A review (session 112): a fault with an end on a node that had exited before the Ctrl-C
    was said "still held when the run was stopped" though it held nothing for the stop to let go."""
    job = make_run(nodes=3, rdzv="c10d", stop_grace=1,
                   faults=(parse_fault("pause:node1@t=0..60"), parse_fault("disconnect:node2@t=0..60")))
    client = FakeDockerClient()
    ctrl_c = ctrl_c_once(job, faults_fired=2, exited=("node2",))  # node2's fault then holds nothing
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], then=ctrl_c, hang=True)],
                           node1=[Script(["[1|0]:waiting"], hang=True)], node2=[Script(["[2|0]:done"])])
    assert outcome.interrupted, text
    assert {f.spec: f.held_at_stop for f in outcome.fired_faults} == {
        "pause:node1@t=0..60": True, "disconnect:node2@t=0..60": False}



def test_a_ctrl_c_says_every_fault_still_held_on_a_node_not_only_its_latest(make_run):
    """A note (session 112) left alone: a node held one fault, the latest; pause:node1@t=0 (no
    end), then slow:node1@t=0..60 on the same node, and only the slow was said held at a Ctrl-C,
    though the pause still froze the node. Every fault still held is said, on node1 as on node2;
    a fault that had ended is not (node2's slow, ended before the stop, its pause still held)."""
    job = make_run(nodes=3, rdzv="c10d", stop_grace=1,
                   faults=(parse_fault("pause:node1@t=0"), parse_fault("slow:node1@t=0..60"),
                           parse_fault("pause:node2@t=0"), parse_fault("slow:node2@t=0..0.1")))
    client = FakeDockerClient()

    def ctrl_c() -> None:
        try:
            wait_until(lambda: job.out.getvalue().count("fault injected") >= 4 and "fault ended" in job.out.getvalue())
        finally:
            _thread.interrupt_main()
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], then=ctrl_c, hang=True)],
                           node1=[Script(["[1|0]:waiting"], hang=True)], node2=[Script(["[2|0]:waiting"], hang=True)])
    assert outcome.interrupted, text
    assert {f.spec: f.held_at_stop for f in outcome.fired_faults} == {
        "pause:node1": True, "slow:node1,cpus=0.25@t=0..60": True,
        "pause:node2": True, "slow:node2,cpus=0.25@t=0..0.1": False}, text
    recorded = json.loads((job.run_dir / "outcome.json").read_text())
    assert [f["held_at_stop"] for f in recorded["faults"]] == [True, True, True, False]

def with_its_own_stop_signal(container) -> None:
    """The node's image says STOPSIGNAL SIGINT (a user's --dockerfile may): the engine then leaves
    it paused when it is sent SIGTERM, and only an unpause first lets the SIGTERM through."""
    container.stop_signal = "SIGINT"


def test_a_node_whose_rank_returned_after_another_failed_is_said_to_wait_at_its_exit_barrier(make_run):
    # node1 fails; node0's rank finishes its script a moment later (no collective after its last
    # save), and its torchrun waits for node1's at its exit barrier, where no SIGTERM reaches it
    from orchestrate.outcome.summary import EXIT_BARRIER_NOTE

    job = make_run(nodes=2, stop_grace=1)

    def finished_late() -> None:
        with open(job.run_dir / "progress" / "rank0.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": 0, "finished": True, "after_step": None, "time": time.time() + 60,
                                     "attempt": "a"}) + "\n")

    client = FakeDockerClient()
    outcome, _, _ = run(job, client,
                        node0=[Script(["[0|0]:warm-started"], then=finished_late, hang=True, ignore_sigterm=True,
                                      processes=Script().processes[:1])],  # its torchrun alone
                        node1=[Script(["[1|0]:RuntimeError: no checkpoint",
                                       *report(1, 0, exc="RuntimeError: no checkpoint")], exit_code=1)])
    assert [r.returned_ranks for r in outcome.results] == [(0,), ()]
    assert outcome.results[0].finished_ranks == {}  # after node1's end: it explains no lost peer
    assert [n["at_exit_barrier"] for n in outcome_record(outcome)["nodes"]] == [True, False]
    assert f"  node0 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: torchrun ..." \
           f" train.py (sleeping){EXIT_BARRIER_NOTE}" in format_summary(outcome).splitlines()


def test_ctrl_c_in_the_real_follow_sends_sigterm_then_sigkill_after_the_grace_unpausing_first(make_run):
    # Ctrl-C arrives while the supervisor follows the nodes: node0 ends on SIGTERM (saying so),
    # node1 ignores it and gets SIGKILL only after the stop grace, node2 was paused: unpaused first
    job = make_run(nodes=3, stop_grace=1)
    client = FakeDockerClient()
    names: dict[str, str] = {}
    outcome, text, compose = run(
        job, client, node0=[Script(["[0|0]:training"], hang=True, on_sigterm=["[0|0]:saved on SIGTERM"])],
        node1=[Script(["[1|0]:training"], hang=True, ignore_sigterm=True)],
        node2=[Script(["[2|0]:training"], hang=True, on_sigterm=["[2|0]:saved on SIGTERM"],
                      then=paused_then_ctrl_c(job, client, names, "node2", meanwhile=with_its_own_stop_signal))])
    assert outcome.interrupted and outcome.exit_code == 130
    assert {r.state for r in outcome.results} == {NodePhase.STOPPED}
    assert all(r.stopped_by_request for r in outcome.results)  # the Ctrl-C's stop, not the launcher's ending
    # an attach watching from another terminal reads who stopped the nodes (it said "FAILED: node1 failed (exit
    # code 143)"), as it reads `stop RUN`'s
    from orchestrate.engine.runs import read_stop_request
    stop = read_stop_request(job.run_dir)
    assert (stop.nodes, stop.by, stop.grace_s) == ({"node0", "node1", "node2"}, "its launcher's Ctrl-C", 1.0)
    assert compose.calls == ["up", "down"]
    sent = {node: [call[2] if len(call) > 2 else call[0] if call[0] != "kill" else "SIGKILL"
                   for call in client.calls if call[1] == name and call[0] in ("kill", "unpause")]
            for node, name in names.items()}
    assert sent == {"node0": ["SIGTERM"], "node1": ["SIGTERM", "SIGKILL"], "node2": ["unpause", "SIGTERM"]}
    assert text.count("saved on SIGTERM") == 2  # node0's and node2's last lines were followed to their end
    events = read_events(job.run_dir)
    stopping = next(e["time"] for e in events if e["event"] == "node-stopping" and e["node"] == "node1")
    killed = next(e for e in events if e["event"] == "node-killed" and e["node"] == "node1")
    assert killed["time"] - stopping >= 0.95  # never before the grace
    # what the grace left running is said, and recorded: the job's processes, not the node's own
    still = ["torchrun ... train.py (sleeping)", "python train.py (sleeping)"]
    assert f"node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: {'; '.join(still)}" \
        in text
    assert killed["still_running"] == still
    assert "node0 did not stop" not in text and "node2 did not stop" not in text
    # and the summary says it under its headline, for whoever reads it later (attach, the record)
    summary = format_summary(outcome).splitlines()
    headline = summary.index("INTERRUPTED by SIGINT: every node was stopped")
    assert summary[headline + 1] == f"  node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still" \
        f" ran: {'; '.join(still)}", summary
    assert [(n["name"], n["grace_ran_out"], n["still_running"]) for n in outcome_record(outcome)["nodes"]] == [
        ("node0", False, []), ("node1", True, still), ("node2", False, [])]


def test_a_ctrl_c_while_a_failure_stops_the_job_leaves_the_failure_the_runs_and_the_stop_the_launchers(make_run):
    # node1 fails; node0, stubborn, is stopped with a long grace; a Ctrl-C then kills it. node0 was
    # stopped by the failure's ending, not by the stop asked of the run: what the failure did stands.
    job = make_run(nodes=2, stop_grace=2)
    client = FakeDockerClient()

    def ctrl_c_once_node0_is_stopping() -> None:
        wait_until(lambda: any(e["event"] == "node-stopping" for e in read_events(job.run_dir)))
        _thread.interrupt_main()

    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)],
                           node1=[Script(["[1|0]:training", "[1|0]:RuntimeError: boom", *report(1, 0)], exit_code=1,
                                         then=in_a_thread(ctrl_c_once_node0_is_stopping))])
    assert outcome.interrupted and outcome.exit_code == 130, text
    assert [(r.state, r.stopped_by_request) for r in outcome.results] == [(NodePhase.STOPPED, False),
                                                                          (NodePhase.FAILED, False)]
    assert outcome.failure is not None and outcome.failure.node == "node1"


def test_the_runs_own_time_limit_is_no_stop_asked_of_it_and_a_fault_that_held_a_node_stays_its_failure(make_run):
    # (the time limit winds the run down as a Ctrl-C does: its nodes were taken as stopped by a request,
    # and the pause that held node1 went unnamed)
    job = make_run(nodes=2, stop_grace=1, timeout_s=2.0, faults=["pause:node1@t=0"])
    client = FakeDockerClient()
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:training"], hang=True)],
                           node1=[Script(["[1|0]:training"], hang=True)])
    assert outcome.error.startswith("timed out") and not outcome.interrupted, text
    assert [r.stopped_by_request for r in outcome.results] == [False, False]
    assert outcome.failure is not None and outcome.failure.node == "node1", text
    assert outcome.failure.describe() == "node1 failed (injected fault pause:node1)"


def test_a_fault_with_an_end_that_ended_leaves_the_blame_with_the_fault_that_still_holds_the_node(make_run):
    """A helper's note (session 113): the end of a fault with an end cleared the node's blame though
    an earlier fault without an end still held it (pause:node1@t=0, then slow:node1@t=0..0.1), so
    the paused node failed with no fault named."""
    job = make_run(nodes=2, stop_grace=1, timeout_s=2.0, faults=["pause:node1@t=0", "slow:node1@t=0..0.1"])
    client = FakeDockerClient()
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:training"], hang=True)],
                           node1=[Script(["[1|0]:training"], hang=True)])
    assert "fault ended: slow:node1" in text, text
    assert outcome.failure is not None and outcome.failure.describe() == "node1 failed (injected fault pause:node1)", text


def test_a_killed_rank_lets_go_of_its_nodes_hung_rank_and_is_not_said_held_at_a_stop(make_run):
    """A review (session 113): hang-rank:1 (no end), then kill-rank:1 on the same node: torchrun's
    agent ends the node's other workers with it (a restart, or the job's end), so the stopped
    worker is gone, yet the stop said hang-rank:1 still held."""
    job = make_run(nodes=2, stop_grace=1, faults=(parse_fault("hang-rank:1@t=0"), parse_fault("kill-rank:1@t=0")))
    client = FakeDockerClient()
    client.command_outputs[("ddp-test-run-node0-1", "python3")] = (3, b"")  # the rank script: not here
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"signalled\n1 4241 S\nend\n")
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:waiting"], then=ctrl_c_once(job, faults_fired=2), hang=True)],
                           node1=[Script(["[1|0]:waiting"], hang=True)])
    assert outcome.interrupted, text
    assert {f.spec: f.held_at_stop for f in outcome.fired_faults} == {"hang-rank:1": False, "kill-rank:1": False}, text


def test_the_end_of_one_fault_with_an_end_leaves_the_blame_with_another_that_still_holds_the_node(make_run):
    """A review (session 113): slow:node1 to 0.1 s and degrade:node1 to 60 s; when the slow ended,
    the node's blame went to none though the degrade still held it, and its failure named no fault."""
    job = make_run(nodes=2, stop_grace=1, timeout_s=2.0, link="rate=1gbit",
                   faults=["degrade:node1,rate=10mbit@t=0..60", "slow:node1@t=0..0.1"])
    client = FakeDockerClient()
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:training"], hang=True)],
                           node1=[Script(["[1|0]:training"], hang=True)])
    assert "fault ended: slow:node1" in text, text
    assert outcome.failure is not None and outcome.failure.describe() == (
        "node1 failed (injected fault degrade:node1,rate=10mbit@t=0..60)"), text


def test_a_node_seen_paused_but_unpaused_elsewhere_meanwhile_still_gets_its_sigterm(make_run):
    # The supervisor knows a node's status as of its last look. Another command (a `fault RUN`
    # undoing its pause) unpaused node1 after that, and before the Ctrl-C: the engine answers the
    # stop's unpause with 409 (not paused), and the SIGTERM must go all the same, not wait out
    # the grace for a SIGKILL.
    job = make_run(nodes=2, stop_grace=30)
    client = FakeDockerClient()
    names: dict[str, str] = {}

    def unpaused_elsewhere_before_ours(node) -> None:
        ours = node.unpause

        def unpaused_elsewhere_first() -> None:
            ours()  # the other command's, between our look and our unpause
            ours()  # ours: 409
        node.unpause = unpaused_elsewhere_first

    began = time.monotonic()
    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], hang=True)],
        node1=[Script(["[1|0]:training"], hang=True, on_sigterm=["[1|0]:saved on SIGTERM"],
                      then=paused_then_ctrl_c(job, client, names, "node1", meanwhile=unpaused_elsewhere_before_ours))])
    assert outcome.interrupted and outcome.exit_code == 130
    assert [call[2] if len(call) > 2 else "SIGKILL" for call in client.calls
            if call[0] == "kill" and call[1] == names["node1"]] == ["SIGTERM"]
    assert "saved on SIGTERM" in text
    assert time.monotonic() - began < 20  # not the 30 s grace


def test_keep_leaves_the_run_in_the_engine(make_run):
    job = make_run(nodes=1, keep=True)
    outcome, text, compose = run(job, FakeDockerClient())
    assert compose.calls == ["up"]
    assert f"python -m orchestrate down {job.run_id}" in text


@pytest.mark.parametrize("copies", [0, 2])
def test_node_lookup_needs_exactly_one_labelled_container(make_job, copies):
    plan = make_job(nodes=1)
    client = FakeDockerClient()
    for i in range(copies):
        from tests.fakes import FakeContainer

        client.containers_by_name[f"c{i}"] = FakeContainer(client, f"c{i}", {"labels": {
            "com.docker.compose.project": plan.project_name, "com.docker.compose.service": "node0",
            "io.ddp-compose.node-rank": "0"}})
    with pytest.raises(NodeLookupError, match=f"found {copies}"):
        find_node_container(client, plan.project_name, plan.nodes[0])


def test_gpu_runs_show_the_topology_node0_sees(make_run, monkeypatch):
    job = make_run(nodes=2, gpus_per_node=1, backend="nccl")
    client = FakeDockerClient()
    client.gpus = ("0", "1")
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    client.command_outputs["nvidia-smi"] = (0, b"        GPU0\nGPU0     X \n")
    # node0 runs until the topology was asked of it: the engine execs only in a running container
    asked = lambda: any(call[0] == "exec_create" and call[1].endswith("node0-1") for call in client.calls)  # noqa: E731
    outcome, text, _ = run(job, client, node0=[Script(after=["[0|0]:done"], after_when=asked)])
    assert outcome.succeeded
    assert "GPU topology seen from node0 (nvidia-smi topo -m):\n        GPU0\nGPU0     X" in text


@pytest.mark.parametrize("gpus_per_node", [None, 1])
def test_a_gpu_run_counts_the_engines_gpus_once(make_run, monkeypatch, gpus_per_node):
    """Its GPU options are checked against the count before the image step, and the lease takes
    the same count: the host's GPUs (nvidia-smi) were listed twice a run."""
    client = FakeDockerClient()
    client.gpus = ("0", "1")
    listed = []
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: listed.append(1) or client.gpus)
    job = make_run(nodes=2, cpu=False, gpus_per_node=gpus_per_node, backend="nccl")
    outcome, _, _ = run(job, client)
    assert outcome.succeeded
    assert [node.gpu_ids for node in job.plan.nodes] == [("0",), ("1",)]
    assert len(listed) == 1


def test_the_image_torch_version_is_reported(make_run):
    job = make_run(nodes=1)
    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.torch": "2.9.1"})
    outcome, _, _ = run(job, client)
    assert outcome.image_torch == "2.9.1"


def test_the_heartbeat_changes_while_the_launcher_lives(tmp_path):
    beat = Heartbeat(tmp_path / HEARTBEAT_FILE, interval_s=0.05).start()
    first = (tmp_path / HEARTBEAT_FILE).read_text()
    import time

    deadline = time.monotonic() + 5
    while (tmp_path / HEARTBEAT_FILE).read_text() == first and time.monotonic() < deadline:
        time.sleep(0.02)
    beat.stop()
    assert (tmp_path / HEARTBEAT_FILE).read_text() != first


def test_a_step_fault_that_no_worker_reports_is_announced_then_warned_about(make_run, monkeypatch):
    import orchestrate.faults.scheduler as scheduler

    monkeypatch.setattr(scheduler, "NO_PROGRESS_WARNING_S", 0.3)
    job = make_run(nodes=2, faults=(parse_fault("kill:node1@step=5"),))
    client = FakeDockerClient()
    warned = lambda: "no worker has reported a training step" in job.out.getvalue()  # noqa: E731
    outcome, text, _ = run(job, client, node0=[Script(["[0|0]:working"], after=["[0|0]:done"], after_when=warned)],
                           node1=[Script(["[1|0]:working"], after=["[1|0]:done"], after_when=warned)])
    assert "kill:node1@step=5: fires when a worker reaches that step" in text
    assert ("no worker has reported a training step in 0 s: kill:node1@step=5 cannot fire; no optimizer stepped"
            " (its steps are counted), and the script reports none with orchestrate.progress.report(step)") in text
    assert "fault injected" not in text
    # Every node exited 0, but the experiment asked for did not happen: not a success.
    assert outcome.job_succeeded and not outcome.succeeded and outcome.exit_code == 1
    [fault] = outcome.faults
    assert (fault.spec, fault.fired, fault.fired_at_step) == ("kill:node1@step=5", False, None)
    assert fault.reason == ("no worker reported a training step: no optimizer stepped (its steps are counted), and"
                            " the script reports none with orchestrate.progress.report(step); a fault at a time"
                            " (@t=S) needs neither")
    summary = format_summary(outcome)
    assert "fault not fired: kill:node1@step=5 did not fire: no worker reported a training step" in summary
    assert "FAILED: all 2 nodes exited 0, but 1 fault(s) asked for never fired: kill:node1@step=5" in summary
    record = json.loads((job.run_dir / "outcome.json").read_text())
    assert record["exit_code"] == 1 and record["faults"][0]["fired"] is False
    assert record["faults"][0]["not_fired_because"].startswith("no worker reported a training step")


def test_a_failed_bring_up_is_exit_2_recorded_and_leaves_nothing(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()
    FakeCompose.fail_up = True
    try:
        outcome, text, compose = run(job, client)
    finally:
        FakeCompose.fail_up = False
    assert outcome.exit_code == 2 and "port is already allocated" in outcome.error
    assert compose.calls == ["up", "down"]
    assert client.containers_by_name == {} and client.networks_by_name == {}
    assert json.loads((job.run_dir / "outcome.json").read_text())["exit_code"] == 2
    assert "FAILED: `docker compose up ...` exited 1" in format_summary(outcome)



def test_a_runs_configuration_is_built_once(make_run, monkeypatch):
    import orchestrate.launch.run as launch_run

    built = []
    real = launch_run.resolve_config
    monkeypatch.setattr(launch_run, "resolve_config", lambda *a, **k: built.append(a) or real(*a, **k))
    job = make_run(nodes=2)
    outcome, _, _ = run(job, FakeDockerClient())
    assert outcome.succeeded
    assert len(built) == 1  # a CPU run: checked, planned and run from the one configuration


def test_calls_that_can_only_wait_in_init_are_said_once_as_they_are_made(make_run):
    job = make_run(nodes=2)
    said = "warning: ranks 0, 1 called init_process_group for a store at localhost:12355"

    def asks_localhost(rank: int) -> bool:
        torchrun = {"rank": rank, "local_rank": 0, "world_size": 2, "store": "node0:29500"}
        asked = {"rank": rank, "world_size": 2, "store": "localhost:12355", "via": "env", "torchrun": torchrun}
        with open(job.run_dir / "progress" / f"rank{rank}.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": rank, "time": 1.0, "init_asked": asked}) + "\n")
        return True

    def said_then_asked_again() -> bool:  # rank 1's next call, read at the latest as the run ends: not said again
        return said in job.out.getvalue() and asks_localhost(1)

    # each node's worker goes on only once the launcher has said it: while the ranks wait, not after
    scripts = {f"node{rank}": [Script([f"[{rank}|0]:calling init"], then=lambda rank=rank: asks_localhost(rank),
                                      after=[f"[{rank}|0]:on"], after_when=when)]
               for rank, when in ((0, lambda: said in job.out.getvalue()), (1, said_then_asked_again))}
    outcome, text, _ = run(job, FakeDockerClient(), **scripts)
    assert outcome.succeeded and text.count(said) == 1 and f"[orchestrate] {said}" in text
    assert [e["text"][:len(said) - 9] for e in read_events(job.run_dir) if e["event"] == "init-will-wait"] == [
        said[9:]]
    assert text.index(said) < text.index("[node0/rank0]  on")


def test_a_run_with_debug_collectives_is_judged_as_one_that_had_torchs_check(make_run):
    """Session 115 (h2): the run's plan says its workers ran torch's check, whatever records they
    wrote: its result says so, and a hint then never suggests --debug-collectives again."""
    for asked in (True, False):
        outcome, _, _ = run(make_run(f"checked-{asked}", nodes=1, debug_collectives=asked), FakeDockerClient(),
                            node0=[Script(["[0|0]:training"], exit_code=1)])
        assert outcome.collectives_checked is asked


def test_a_run_that_succeeded_with_its_ranks_collectives_apart_warns_where_they_part(make_run):
    """Rank 0 alone evaluated its DDP model (one buffer broadcast more): with gloo every call
    returned and both nodes exited 0; the ranks' finished records say how many collectives each
    made, and the run's summary, outcome.json and result say where they part."""
    from orchestrate.text import ENDED_APART_HINT

    job = make_run(nodes=2)
    step = [["default", 1, "broadcast", "buffers of DDP(Net)", "e.py:10"]]

    def finished(rank: int, calls: list) -> None:
        with open(job.run_dir / "progress" / f"rank{rank}.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": rank, "finished": True, "after_step": None, "time": time.time(),
                                     "attempt": "a", "collectives": {"counts": {"default": len(calls)},
                                                                     "calls": calls, "world": "2"}}) + "\n")

    evaluated = step + [["default", 2, "broadcast", "buffers of DDP(Net)", "e.py:15"]]
    outcome, _, _ = run(job, FakeDockerClient(),
                        node0=[Script(["[0|0]:done"], then=lambda: finished(0, evaluated))],
                        node1=[Script(["[1|0]:done"], then=lambda: finished(1, step))])
    assert outcome.job_succeeded
    assert outcome.ended_apart == ("in the default group, the ranks made different numbers of collectives: rank 0"
                                   " made 2, rank 1 made 1; the others never made collective #2: rank 0 entered"
                                   " broadcast(buffers of DDP(Net)) at e.py:15")
    lines = format_summary(outcome).splitlines()
    assert f"warning: the ranks' collectives ended apart: {outcome.ended_apart}" in lines
    assert f"  hint: {ENDED_APART_HINT}" in lines
    assert outcome_record(outcome)["ended_apart"] == outcome.ended_apart
