"""Why a node failed or stopped answering, as the judge is told it: the root cause from torchrun's
error files when its report is missing or points elsewhere, the worker's own last lines, several
stopped ranks, and OOM kills counted on every node and said once."""
from __future__ import annotations

import json
import os
from pathlib import Path

import docker.errors
import pytest

from orchestrate.hangs.snapshots import debug_dir
from orchestrate.node.crash_stacks import crash_file
from orchestrate.supervise.diagnosis import Diagnosis
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_crash_dump import SCRIPT_THREAD, dump
from tests.unit.test_supervisor_collaborators import Recorder, node_container, tracker_for


@pytest.fixture
def node1(make_job, tmp_path):
    """node1 of a 2x2 run (global ranks 2 and 3), its container not yet started, and a
    diagnosis of the run whose directory is tmp_path."""
    client = FakeDockerClient()
    plan = make_job(nodes=2, nproc_per_node=2)
    tracker = tracker_for(plan, 1, node_container(client, "r", "node1", Script(hang=True)), tmp_path)
    recorder = Recorder()
    return tracker, Diagnosis(client, tmp_path, recorder.say, recorder.record), recorder, client


def error_file(run_dir, attempt: str, local_rank: int, message: str | bytes) -> None:
    path = run_dir / "node1" / "torchrun" / "run-x" / attempt / str(local_rank) / "error.json"
    path.parent.mkdir(parents=True)
    body = message if isinstance(message, bytes) else json.dumps(
        {"message": {"message": message, "extraInfo": {"py_callstack": f"Traceback: {message}", "timestamp": "5"}}})
    path.write_bytes(body if isinstance(body, bytes) else body.encode())


def test_without_torchrun_s_report_the_lowest_local_ranks_error_file_of_the_last_attempt_is_the_cause(node1, tmp_path):
    tracker, diagnosis, _, _ = node1
    error_file(tmp_path, "attempt_0", 0, "ValueError: from the attempt before")
    error_file(tmp_path, "attempt_1", 1, "KeyError: 'b'")
    error_file(tmp_path, "attempt_1", 0, b'{"message": {"message": "RuntimeError: bad \xff byte"}}')  # not UTF-8
    tracker.result.exit_code = 1
    diagnosis.explain_failure(tracker)
    cause = tracker.result.root_cause
    assert (cause.rank, cause.local_rank, cause.exit_code, cause.exception) == (2, 0, 1, "RuntimeError: bad \ufffd byte")


def test_an_error_file_of_a_local_rank_the_plan_does_not_have_names_it_by_its_local_rank(node1, tmp_path):
    tracker, diagnosis, _, _ = node1
    error_file(tmp_path, "attempt_0", 2, "OSError: a third worker")  # an attempt with more workers than planned
    tracker.result.exit_code = 1
    diagnosis.explain_failure(tracker)
    cause = tracker.result.root_cause
    assert (cause.rank, cause.local_rank, cause.exception, cause.traceback) == (
        2, 2, "OSError: a third worker", "Traceback: OSError: a third worker")


def test_a_report_whose_error_file_is_not_on_the_run_mount_takes_its_local_ranks_file(node1, tmp_path):
    tracker, diagnosis, _, _ = node1
    error_file(tmp_path, "attempt_0", 0, "ValueError: not this one")
    error_file(tmp_path, "attempt_0", 1, "ZeroDivisionError: division by zero")
    for line in ["Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)",
                 "  exitcode  : 1 (pid: 42)", "  error_file: /tmp/torchelastic_abc/attempt_0/1/error.json", "====="]:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    cause = tracker.result.root_cause
    assert (cause.rank, cause.exception, cause.timestamp) == (3, "ZeroDivisionError: division by zero", 5.0)


def test_without_error_files_the_exception_is_read_from_the_workers_last_twenty_lines(node1):
    tracker, diagnosis, _, _ = node1
    lines = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "AssertionError: loss is nan", *[f"[W rank3] a warning {i}" for i in range(12)]]
    for line in ["[3|1]:" + text for text in lines]:
        tracker.output.add(line, 0.0)
    for line in ["Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)",
                 "  exitcode  : 1 (pid: 42)", "  error_file: <N/A>", "====="]:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    assert tracker.result.root_cause.exception == "AssertionError: loss is nan"


def test_a_rank_torchrun_names_that_lost_its_peer_yields_to_a_rank_of_the_node_that_failed_by_itself(node1):
    """Seen with a script without @record on 2 ranks a node: rank 3 raised FloatingPointError,
    rank 2's collective then lost its peer, and torchrun named local rank 0, the first it polled."""
    tracker, diagnosis, _, _ = node1
    own = ["Traceback (most recent call last):", '  File "train.py", line 11, in <module>',
           "FloatingPointError: loss is NaN at step 137"]
    lost = ["Traceback (most recent call last):", '  File "train.py", line 13, in <module>',
            "RuntimeError: [../gloo/transport/tcp/pair.cc:547] Connection closed by peer [192.168.48.3]:24194"]
    report = ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)",
              "  exitcode  : 1 (pid: 10)", "  error_file: <N/A>", "====="]
    for line in ["[3|1]:" + text for text in own] + ["[2|0]:" + text for text in lost] + report:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    cause = tracker.result.root_cause
    assert (cause.rank, cause.local_rank, cause.exception) == (3, 1, "FloatingPointError: loss is NaN at step 137")
    assert tracker.result.last_lines[-1] == "FloatingPointError: loss is NaN at step 137"


def test_a_rank_that_lost_its_peer_stays_the_cause_where_no_rank_of_the_node_failed_by_itself(node1):
    tracker, diagnosis, _, _ = node1
    lost = ["Traceback (most recent call last):", '  File "train.py", line 13, in <module>',
            "RuntimeError: [../gloo/transport/tcp/pair.cc:547] Connection closed by peer [192.168.48.3]:24194"]
    report = ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)",
              "  exitcode  : 1 (pid: 10)", "  error_file: <N/A>", "====="]
    for line in ["[3|1]:" + text for text in lost] + ["[2|0]:" + text for text in lost] + ["[3|1]:step 5"] + report:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    assert tracker.result.root_cause.rank == 2



def worker_log(run_dir: Path, torchrun: str, attempt: int, local_rank: int, lines: list[str], at: float) -> None:
    """A worker's stderr as torchrun's --log-dir keeps it, its attempt's folder dated ``at``."""
    path = run_dir / "node1" / "torchrun" / torchrun / f"attempt_{attempt}" / str(local_rank) / "stderr.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    os.utime(path.parent.parent, (at, at))


def test_a_lost_peer_is_told_the_newest_earlier_attempt_whose_worker_failed_by_itself(node1, tmp_path):
    """Seen with a torn checkpoint under --rdzv c10d: every restart of the workers failed in
    torch.load of the file the torn write cut, and the last attempt failed connecting to a peer
    that was restarting. The last failure is a lost peer; the earlier error is what broke it."""
    tracker, diagnosis, _, _ = node1
    unreadable = ["[rank2]: Traceback (most recent call last):", '[rank2]:   File "/workspace/resume.py", line 13,'
                  " in main", "[rank2]:     state = torch.load(CKPT)", "[rank2]: OSError: [Errno 22] Invalid argument"]
    refused = ["Traceback (most recent call last):", "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152]"
               " timed out connecting: SO_ERROR: Connection refused, remote=[172.26.0.2]:59829"]
    worker_log(tmp_path, "run-a", 0, 0, ["step 1", "step 2"], at=100.0)  # the first container's, cut by the fault
    worker_log(tmp_path, "run-b", 0, 0, ["[rank2]: ValueError: older"], at=200.0)
    worker_log(tmp_path, "run-b", 1, 0, refused, at=300.0)  # its own error is local rank 1's
    worker_log(tmp_path, "run-b", 1, 1, unreadable, at=300.0)
    worker_log(tmp_path, "run-b", 2, 0, refused, at=400.0)
    report = ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)",
              "  exitcode  : 1 (pid: 10)", "  error_file: <N/A>", "====="]
    for line in ["[2|0]:" + text for text in refused] + report:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    cause, earlier = tracker.result.root_cause, tracker.result.earlier
    assert cause.rank == 2 and "connectFullMesh failed" in cause.exception
    assert earlier.describe("node1") == ("attempt 3 of node1's workers failed by an error of its own: local rank 1:"
                                         " OSError: [Errno 22] Invalid argument")
    assert earlier.last_lines == tuple(unreadable)
    assert earlier.users_frame == "resume.py:13 in main: state = torch.load(CKPT)"
    # every attempt's error, the oldest first: the first container's attempt ended in none
    assert [(e.attempt, e.local_rank, e.exception.split(":")[0], e.own) for e in tracker.result.attempts] == [
        (2, 0, "ValueError", True), (3, 1, "OSError", True), (4, 0, "RuntimeError", False)]


def test_a_failure_of_its_own_is_not_told_of_earlier_attempts(node1, tmp_path):
    tracker, diagnosis, _, _ = node1
    worker_log(tmp_path, "run-b", 0, 0, ["[rank2]: OSError: [Errno 22] Invalid argument"], at=100.0)
    report = ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)",
              "  exitcode  : 1 (pid: 10)", "  error_file: <N/A>", "====="]
    for line in ["[2|0]:Traceback (most recent call last):", "[2|0]:ValueError: bad batch", *report]:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    assert tracker.result.root_cause.exception == "ValueError: bad batch"
    assert tracker.result.earlier is None


def test_a_node_whose_torchrun_failed_with_no_worker_to_blame_is_told_the_earlier_error(node1, tmp_path):
    """torchrun's agent lost its rendezvous store (node0, which held it, restarted): no worker's
    report, and what made the workers restart is in an earlier attempt's log."""
    tracker, diagnosis, _, _ = node1
    worker_log(tmp_path, "run-b", 0, 1, ["[rank3]: OSError: [Errno 22] Invalid argument"], at=100.0)
    tracker.output.add("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the"
                       " C10d store has failed. See inner exception for details.", 0.0)
    diagnosis.explain_failure(tracker)
    assert tracker.result.root_cause is None
    assert tracker.result.earlier.describe("node1").endswith("local rank 1: OSError: [Errno 22] Invalid argument")


@pytest.mark.parametrize("stopped, reason", [
    (b"2 4242 T\nend\n", "its worker process is stopped (hung)"),
    (b"2 4242 T\n3 4243 T\nend\n", "its worker process is stopped (hung); ranks 3 too"),
    (b"3 4243 T\n2 4242 T\n4 4244 S\n5 9 T\nend\n", "its worker process is stopped (hung); ranks 2, 5 too"),
])
def test_a_node_with_stopped_workers_names_the_first_as_culprit_and_the_others_too(node1, stopped, reason):
    tracker, diagnosis, recorder, client = node1
    tracker.container.start()
    client.command_outputs["python3"] = (0, stopped)
    assert diagnosis.unresponsive(tracker) == reason
    culprit = int(stopped.split()[0])
    assert tracker.result.culprit_rank == culprit and tracker.result.unresponsive == reason
    assert recorder.said == [f"node1 rank {culprit} stopped answering: {reason}"]


def test_a_paused_node_is_said_without_a_rank(node1):
    tracker, diagnosis, recorder, _ = node1
    tracker.container.start()
    tracker.container.pause()
    assert diagnosis.unresponsive(tracker) == "its container is paused (hung)"
    assert recorder.said == ["node1 stopped answering: its container is paused (hung)"]


def test_oom_kills_are_found_on_every_node_an_engine_error_on_one_aside_and_each_node_said_once(node1, make_job,
                                                                                               tmp_path):
    tracker, diagnosis, recorder, client = node1
    plan = make_job(nodes=2, nproc_per_node=2)
    gone = tracker_for(plan, 0, node_container(client, "r", "node0", Script()), tmp_path)

    def not_found() -> None:
        raise docker.errors.NotFound("No such container: node0")
    gone.container.reload = not_found
    tracker.container.start()  # node1 runs: the cgroup's counter says how many
    client.command_outputs["sh"] = (0, b"oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    diagnosis.find_oom_kills([gone, tracker])
    diagnosis.find_oom_kills([gone, tracker])
    assert tracker.result.oom_kills == 2 and gone.result.oom_kills == 0
    assert recorder.said == ["node1 was OOM-killed: the kernel killed 2 process(es) at its memory limit"]


def test_an_ended_node_s_oom_kill_is_read_from_its_state_without_asking_inside_it(node1):
    tracker, diagnosis, recorder, client = node1
    tracker.container.start()
    tracker.container.oom_killed = True
    tracker.container.exit(137)
    diagnosis.find_oom_kills([tracker])
    assert tracker.result.oom_kills == 1
    assert [call for call in client.calls if call[0] == "exec_create"] == []  # an exited container takes no exec
    assert recorder.said == ["node1 was OOM-killed: the kernel killed 1 process(es) at its memory limit"]


@pytest.mark.parametrize("killed_rank, after", [(3, " after step 4"), (None, " after step 7")])
def test_an_oom_kill_is_said_after_the_step_the_verdict_names(node1, killed_rank, after):
    """The live line names the step as the verdict does (until 2026-12-07 it named none): the
    killed rank's latest step, else the latest of the node's ranks'."""
    from orchestrate.outcome.judge import find_failure
    from orchestrate.outcome.root_cause import RootCause

    tracker, diagnosis, recorder, _ = node1
    tracker.container.start()
    tracker.container.oom_killed = True
    tracker.container.exit(137)
    tracker.result.steps_reached = {2: 7, 3: 4}
    if killed_rank is not None:
        tracker.result.root_cause = RootCause(killed_rank, 1, -9, "Signal 9 (SIGKILL)")
    diagnosis.find_oom_kills([tracker])
    assert recorder.said == [f"node1 was OOM-killed: the kernel killed 1 process(es) at its memory limit{after}"]
    assert f"memory limit{after}" in find_failure([tracker.result]).reason


@pytest.mark.parametrize("exit_code, said", [(-11, True), (1, False)])
def test_a_rank_killed_by_a_fatal_signal_is_told_where_it_crashed(node1, tmp_path, exit_code, said):
    # faulthandler's dump of rank 3; it explains the failure only if the rank died by the signal

    tracker, diagnosis, _, _ = node1
    path = crash_file(str(debug_dir(tmp_path)), 3)
    current = SCRIPT_THREAD.replace("Thread 0x00007f11dc621040", "Current thread 0x00007f11dc621040")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(dump("Segmentation fault", current))
    for line in ["Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)",
                 f"  exitcode  : {exit_code} (pid: 42)", "  error_file: <N/A>", "====="]:
        tracker.output.add(line, 0.0)
    diagnosis.explain_failure(tracker)
    crashed = f"Segmentation fault in all_reduce at train.py:9; every thread's stack: {path}"
    assert tracker.result.root_cause.crashed == (crashed if said else "")
