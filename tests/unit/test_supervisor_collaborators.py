"""Each of the Supervisor's collaborators alone, against the fake engine of tests/fakes.py, and the
helpers the other collaborators' tests share (the fault scheduler, engine events, inspections, log
pump and timings have files of their own)."""
from __future__ import annotations

import json
import queue
import time

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.engine.client import engine_time
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.states import NodePhase
from orchestrate.supervise.api import NodeTracker
from orchestrate.supervise.diagnosis import Diagnosis
from orchestrate.supervise.progress import ProgressWatch
from orchestrate.supervise.restart_policy import RestartPolicy, full_disk_outlasts
from orchestrate.supervise.worker_lines import NodeOutput
from tests.fakes import FakeContainer, FakeDockerClient, Script


class Recorder:
    """Stands in for what a collaborator says and records."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.events: list[tuple[str, dict]] = []

    def say(self, text: str) -> None:
        self.said.append(text)

    def record(self, kind: str, **fields) -> None:
        self.events.append((kind, fields))


def node_container(client: FakeDockerClient, run_id: str, node: str, *scripts: Script) -> FakeContainer:
    labels = {"io.ddp-compose.run-id": run_id, "com.docker.compose.project": f"ddp-{run_id}",
              "com.docker.compose.service": node}
    container = FakeContainer(client, f"ddp-{run_id}-{node}-1", {"labels": labels})
    client.containers_by_name[container.name] = container
    client.script(node, *scripts)
    return container


def tracker_for(plan, index: int, container, tmp_path) -> NodeTracker:
    node = plan.nodes[index]
    return NodeTracker(node, container, NodeResult(node), NodeOutput(node, open(tmp_path / f"{node.name}.log", "w")))


def drain(inbox: "queue.Queue", until, timeout_s: float = 10.0) -> list:
    """Messages from the inbox until one satisfies ``until``."""
    taken, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            message = inbox.get(timeout=0.1)
        except queue.Empty:
            continue
        taken.append(message)
        if until(message):
            return taken
    raise AssertionError(f"no such message within {timeout_s} s; got {taken}")


def test_the_watch_keeps_the_ranks_that_finished_until_a_new_process_of_one_reports(tmp_path):
    watch = ProgressWatch(tmp_path, Recorder().record)

    def write(rank: int, **record) -> None:
        with open(tmp_path / f"rank{rank}.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": rank, "time": 1.0, **record}) + "\n")

    write(0, step=1, attempt="a")
    write(1, step=1, attempt="b")
    write(1, finished=True, after_step=1, attempt="b", collectives={"counts": {"default": 4}})
    watch.poll(0.0, None)
    assert watch.finished_before(2.0) == {1: 1} and watch.max_step == 1
    assert watch.ended_collectives == {1: {"counts": {"default": 4}}}  # compared at the end
    assert watch.finished_before(1.0) == {}  # returned as the first node ended, or after: not counted
    write(0, finished=True, after_step=None, attempt="a")
    write(1, step=2, attempt="b2")  # rank 1 restarted (elastic): it runs again
    watch.poll(0.0, None)
    assert watch.finished_before(2.0) == {0: None}
    assert watch.ended_collectives == {}  # its new process counts anew
    # each rank's latest step, of its latest process too (rank 1's new one stepped at 2), by node
    assert watch.steps_reached_on("node0", (0,)) == {0: 1} and watch.steps_reached_on("node1", (1, 2)) == {1: 2}
    write(3, step=8, attempt="c", node="node1")  # an elastic job's rank: its node is the one it said
    watch.poll(0.0, None)
    assert watch.steps_reached_on("node1", ()) == {3: 8} and watch.steps_reached_on("node0", ()) == {}
    fresh = ProgressWatch(tmp_path / "none", Recorder().record)
    (tmp_path / "none").mkdir()
    with open(tmp_path / "none" / "rank0.jsonl", "w") as handle:
        handle.write(json.dumps({"rank": 0, "time": 1.0, "finished": True, "attempt": "a"}) + "\n")
    fresh.poll(0.0, None)
    assert not fresh.seen and fresh.records == 1  # a finish is activity, not a step


def test_a_fault_from_another_terminal_before_the_first_step_is_marked_and_one_not_confirmed_is_not(tmp_path):
    from orchestrate.faults.live_notes import LiveFaultNote
    from orchestrate.outcome.model import FaultRecord
    from orchestrate.supervise.api import RunSpec
    from orchestrate.supervise.live_faults import LiveFaultWatch

    recorder = Recorder()
    watch = LiveFaultWatch(RunSpec("r", "p", tmp_path, ()), {}, 100.0, lambda: None, recorder.say, recorder.record)
    watch.done["a"] = FaultRecord("pause:node1", "node1", True, 3.0, None)  # no step yet as it was done
    watch.done["b"] = FaultRecord("kill:node0", "node0", True, 9.0, 4)
    watch.doing["c"] = LiveFaultNote("c", 112.0, parse_fault("slow:node1"), "node1", "begun")
    early, later, unconfirmed = watch.records(12)
    assert (early.before_first_step, later.before_first_step) == (True, False)
    assert not unconfirmed.before_first_step and unconfirmed.step is None  # when it came, in steps, is not known
    assert not any(r.before_first_step for r in watch.records(None))


@pytest.mark.parametrize("enabled, exit_code, fault, ending, restarts, expected", [
    (True, 137, "", False, 0, True),  # killed
    (True, 143, "", False, 0, True),  # stopped
    (True, None, "", False, 0, True),  # gone
    (True, 1, "kill:node1", False, 0, True),  # a fault was injected into it
    (True, 1, "", False, 0, False),  # its job failed by itself: nothing to recover
    (True, 0, "", False, 0, False),
    (True, 137, "", True, 0, False),  # the job is ending anyway
    (True, 137, "", False, 2, False),  # no restarts left
    (False, 137, "", False, 0, False),  # static run, or a passive supervisor
])
def test_the_restart_policy_recovers_from_deaths_only(make_job, tmp_path, enabled, exit_code, fault, ending, restarts,
                                                      expected):
    plan = make_job(nodes=2)
    tracker = tracker_for(plan, 1, None, tmp_path)
    tracker.exit_code, tracker.result.fault = exit_code, fault
    policy = RestartPolicy(enabled=enabled, max_restarts=2, say=print, record=print, clock=time.monotonic,
                           scope="all", store_host="node0")
    policy.restarts = restarts
    assert policy.should_restart(tracker, ending) is expected


def test_the_restart_policy_never_brings_a_lost_node_back(make_job, tmp_path):
    plan = make_job(nodes=2)
    tracker = tracker_for(plan, 1, None, tmp_path)
    tracker.exit_code, tracker.result.fault, tracker.result.lost = 137, "lose:node1", "lose:node1"
    policy = RestartPolicy(enabled=True, max_restarts=2, say=print, record=print, clock=time.monotonic,
                           scope="all", store_host="node0")
    assert policy.should_restart(tracker, False) is False
    tracker.result.lost = ""
    assert policy.should_restart(tracker, False) is True


def test_a_restart_restarts_every_node_and_opens_a_recovery(make_job, tmp_path):
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[1]
    dead.result.fault, dead.exit_code = "kill:node1@step=4", 137
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record,
                           clock=lambda: 42.0, scope="all", store_host="node0")
    policy.restart(dead, trackers, step=5)
    assert sorted(c[1] for c in client.calls if c[0] == "restart") == ["ddp-r-node0-1", "ddp-r-node1-1"]
    assert all(t.phase is NodePhase.RESTARTING and t.exit_code is None for t in trackers)
    [recovery] = policy.recoveries
    assert (recovery.node, recovery.cause, recovery.failed_at, recovery.step_before) == (
        "node1", "injected fault kill:node1@step=4", 42.0, 5)
    assert policy.open_recovery is recovery and policy.restarts == 1
    assert recorder.said == ["node1 died (injected fault kill:node1@step=4); restarting every node so that it"
                             " rejoins (1/3)"]


def test_a_full_disk_that_ended_a_node_says_a_worker_raised_and_is_restarted_for_once(make_job, tmp_path):
    """The trial: a full disk whose window the resumed steps never passed. Its node's container was
    not killed (a rank's write failed, its worker raised, torchrun gave up), yet the restart said
    it "died"; and a second restart would meet the same full disk again."""
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[0]
    full = "disk-full:node0,path=ckpt.*@step=5..8"
    dead.result.fault, dead.exit_code = full, 1
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record, clock=lambda: 42.0,
                           scope="all", store_host="rdzv-store", firing=lambda t: f"{t.result.fault} armed as s1")
    assert policy.should_restart(dead, False)
    policy.restart(dead, trackers, step=6)
    gave_up = "node0's torchrun gave up (exit code 1): a rank's write failed and its worker raised under injected fault"
    assert recorder.said == [
        f"{gave_up} {full}; restarting every node so that it rejoins (1/3); {full} outlives a restart: where its end"
        " does not come first, the restarted workers meet it again, and the job ends"]
    dead.result.fault, dead.exit_code = full, 1  # its next write failed too: blamed again
    assert not policy.should_restart(dead, False)
    assert policy.met_again(dead, False) == policy.unrecovered == (
        f"{gave_up} {full} again, after a restart: the fault outlives a restart and still holds, so another restart"
        " would meet it again; the job ends")
    assert recorder.events[-1] == ("met-again", {"node": "node0", "cause": f"injected fault {full}"})
    dead.result.fault = "kill-rank:0@step=9"  # another fault: restarted for as ever, its workers said to have failed
    assert policy.should_restart(dead, False) and policy.met_again(dead, False) == ""
    policy.restart(dead, trackers, step=9)
    assert recorder.said[-1] == ("node0's torchrun gave up (exit code 1): its workers failed under injected fault"
                                 " kill-rank:0@step=9; restarting every node so that it rejoins (2/3)")


def test_a_fault_that_outlives_a_restart_is_refused_again_only_for_the_same_firing_still_in_effect(make_job, tmp_path):
    """A review (session 116): the second restart was refused by the fault's text, for good. The
    probe: `fault RUN disconnect:node1@t=0..10`, node1 died and was restarted; long after that
    window the same spec injected again killed node1, and the job ended, "still holds"."""
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[1]
    cut = "disconnect:node1@t=0..10"
    in_effect = {"firing": f"{cut} done by `fault` as f1"}
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record, clock=lambda: 42.0,
                           scope="all", store_host="rdzv-store", firing=lambda t: in_effect["firing"])
    dead.result.fault, dead.exit_code = cut, 137
    policy.restart(dead, trackers, step=3)
    dead.result.fault, dead.exit_code = cut, 137  # its window ended: the same fault is no longer in effect
    in_effect["firing"] = ""
    assert policy.should_restart(dead, False) and policy.met_again(dead, False) == ""
    in_effect["firing"] = f"{cut} done by `fault` as f2"  # the same spec injected again: another firing
    assert policy.should_restart(dead, False) and policy.met_again(dead, False) == ""
    policy.restart(dead, trackers, step=7)
    dead.result.fault, dead.exit_code = cut, 137  # that second firing met again while it lasts: refused
    assert not policy.should_restart(dead, False) and policy.met_again(dead, False)


def test_the_firing_in_effect_of_a_nodes_fault_is_none_once_it_ended_and_another_when_done_again(make_job, tmp_path):
    """What the restart policy keys a refused restart by (Supervisor.firing_in_effect): a storage
    fault by where it is armed, the run's own fault by when it fired while it lasts, a `fault RUN`
    one by its id until its end."""
    from types import SimpleNamespace

    from orchestrate.faults.scheduler import FaultScheduler
    from orchestrate.faults.storage import ArmedStorageFaults
    from orchestrate.outcome.model import FaultRecord
    from orchestrate.supervise.supervisor import Supervisor

    plan = make_job(nodes=2)
    node1 = tracker_for(plan, 1, None, tmp_path)
    full, cut = parse_fault("disk-full:node1@step=2..5"), "disconnect:node1@t=0..10"
    scheduler = FaultScheduler((), lambda fault: "node1", tmp_path, print, lambda *a, **k: None)
    seen = SimpleNamespace(faults=scheduler, storage=ArmedStorageFaults(tmp_path), live_faults=SimpleNamespace(done={}))
    firing = lambda: Supervisor.firing_in_effect(seen, node1)  # noqa: E731
    node1.result.fault = str(full)
    assert firing() == ""  # not armed
    key = seen.storage.arm(full).key
    assert firing() == f"{full} armed as {key}"
    seen.storage.end(full)
    assert firing() == ""
    node1.result.fault = cut  # `fault RUN`: in effect until its note's end
    seen.live_faults.done["f1"] = FaultRecord(cut, "node1", elapsed_s=1.0)
    assert firing() == f"{cut} done by `fault` as f1"
    seen.live_faults.done["f1"] = FaultRecord(cut, "node1", elapsed_s=1.0, ended_s=11.0)
    assert firing() == ""
    seen.live_faults.done["f2"] = FaultRecord(cut, "node1", elapsed_s=40.0)  # the same spec done again
    assert firing() == f"{cut} done by `fault` as f2"
    seen.live_faults.done.clear()
    scheduler.fired.append(FaultRecord(cut, "node1", elapsed_s=3.0))  # the run's own: while it lasts
    assert firing() == ""
    scheduler.lasting.append((parse_fault(cut), "node1"))
    assert firing() == f"{cut} fired 3.0 s into the job"


def test_a_restart_of_every_node_ends_the_faults_of_every_node_it_restarts(make_job, tmp_path):
    """A review (session 112): a hung rank on node0 (no end), then kill:node1, restarted every
    node: only node1's fault was let go, and a stop later said node0's hung rank "still held" though
    the restart had ended its worker."""
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    trackers[0].result.fault, trackers[0].result.culprit_rank = "hang-rank:0", 0
    # the faults without an end a stop would say held: a restart ends a pause and a hung rank, not
    # a slow's CPU quota, a disconnect from the run's network or a full disk armed in the run's directory
    trackers[0].holding = ["pause:node0", "slow:node0,cpus=0.25", "hang-rank:0", "disconnect:node0",
                           "disk-full:node0", "lossy:node0,p=10%"]
    dead = trackers[1]
    dead.result.fault, dead.exit_code = "kill:node1@step=4", 137
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record, clock=lambda: 42.0,
                           scope="all", store_host="node0")
    policy.restart(dead, trackers, step=5)
    assert [(t.result.fault, t.result.culprit_rank) for t in trackers] == [("", None), ("", None)]
    assert [t.holding for t in trackers] == [["slow:node0,cpus=0.25", "disconnect:node0", "disk-full:node0"], []]


def test_a_restart_of_every_node_leaves_a_lost_one_lost(make_job, tmp_path):
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    trackers[0].result.lost = "lose:node0@step=2"  # its end not handled yet: still running to the launcher
    dead = trackers[1]
    dead.result.fault, dead.exit_code = "kill:node1@step=4", 137
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record, clock=lambda: 42.0,
                           scope="all", store_host="rdzv-store")
    policy.restart(dead, trackers, step=5)
    assert [c[1] for c in client.calls if c[0] == "restart"] == ["ddp-r-node1-1"]
    assert [t.phase for t in trackers] == [NodePhase.RUNNING, NodePhase.RESTARTING]


def test_progress_watch_follows_the_steps_and_times_the_resume(tmp_path):
    from orchestrate.outcome.model import Recovery

    recorder = Recorder()
    watch = ProgressWatch(tmp_path, recorder.record)
    (tmp_path / "rank0.jsonl").write_text(json.dumps({"rank": 0, "step": 0, "time": 1.0}) + "\n")
    watch.poll(5.0, None)
    assert (watch.max_step, watch.seen) == (0, True)  # a script that counts from 0
    with open(tmp_path / "rank0.jsonl", "a") as handle:
        handle.writelines(json.dumps({"rank": 0, "step": s, "time": 1.0}) + "\n" for s in (1, 2, 3, 4, 5))
    watch.poll(10.0, None)
    assert watch.max_step == 5
    recovery = Recovery("node1", "its death", failed_at=11.0, step_before=5)
    with open(tmp_path / "rank0.jsonl", "a") as handle:
        handle.write(json.dumps({"rank": 0, "resumed": 2, "time": 2.0}) + "\n")
        handle.write(json.dumps({"rank": 0, "step": 3, "time": 3.0}) + "\n")
    watch.poll(14.5, recovery)
    assert (recovery.resumed_from, recovery.resumed_at, recovery.recovery_s, recovery.steps_lost) == (2, 14.5, 3.5, 3)
    assert recorder.events == [("resumed", {"node": "node1", "step": 3, "recovery_s": 3.5, "steps_lost": 3})]
    assert watch.max_step == 3  # counted again from the resume, below the step before it
    with open(tmp_path / "rank0.jsonl", "a") as handle:
        handle.write(json.dumps({"rank": 0, "step": 4, "time": 3.5}) + "\n")
    watch.poll(15.0, None)
    assert watch.max_step == 4  # and on past it
    # a resume said with no recovery waiting (its rank's first process, resumed from an old run's save)
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "rank0.jsonl").write_text(json.dumps({"rank": 0, "resumed": 7, "time": 1.0}) + "\n")
    alone = ProgressWatch(tmp_path / "alone", recorder.record)
    alone.poll(2.0, None)
    assert (alone.max_step, alone.unsaid, len(recorder.events)) == (None, None, 1)
    # in one read: a record of a kind not known, a resume, and the steps after it, every one taken
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"rank": 0, "time": 1.0, "something": "new"}, {"rank": 0, "resumed": 2, "time": 2.0},
        {"rank": 0, "step": 3, "time": 3.0}, {"rank": 0, "step": 4, "time": 3.5})))
    one = ProgressWatch(tmp_path / "one", recorder.record)
    later = Recovery("node1", "its death", failed_at=1.5, step_before=5)
    one.poll(4.0, later)
    assert (later.resumed_from, later.resumed_at, one.max_step) == (2, 4.0, 4)


def test_progress_watch_times_a_resume_nobody_said_by_a_new_workers_first_step(tmp_path):
    """No worker says where it resumed (SGD keeps no step count): the old worker's steps read after
    the failure are not the resume, a new worker's first step read with the failure's time is (the
    supervisor always gives it while a recovery waits; without it no step is taken for the resume);
    a rank that says it later fills in the steps lost, once (a second saying does not move it), and
    the steps go on counting."""
    from orchestrate.outcome.model import Recovery

    def write(*records: dict) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)

    recorder = Recorder()
    watch = ProgressWatch(tmp_path, recorder.record)
    write(*({"rank": 0, "attempt": "old", "began": 1.0, "step": s, "time": 1.0 + s} for s in (1, 2, 3)))
    watch.poll(5.0, None)
    recovery = Recovery("node1", "its death", failed_at=11.0, step_before=3)
    write({"rank": 0, "attempt": "old", "began": 1.0, "step": 4, "time": 6.0})  # read late, begun before
    watch.poll(12.0, recovery, failed_since=10.0)
    assert recovery.resumed_at is None and watch.max_step == 4
    write({"rank": 0, "attempt": "new", "began": 10.5, "step": 1, "time": 11.0})
    watch.poll(12.6, recovery)  # a failure whose time is not known: no step of anyone's is the resume
    assert recovery.resumed_at is None
    write({"rank": 0, "attempt": "new", "began": 10.5, "step": 2, "time": 12.0})
    watch.poll(14.0, recovery, failed_since=10.0)
    assert (recovery.resumed_at, recovery.resumed_from, recovery.steps_lost) == (14.0, None, None)
    assert recorder.events == [("resumed", {"node": "node1", "step": 2, "recovery_s": 3.0, "steps_lost": None})]
    assert watch.max_step == 4  # not counted again from a resume nobody said
    write({"rank": 0, "attempt": "new", "resumed": 1, "time": 12.5},
          {"rank": 0, "attempt": "new", "resumed": 0, "time": 12.6},
          {"rank": 0, "attempt": "new", "step": 5, "time": 13.0})
    watch.poll(15.0, None)
    assert (recovery.resumed_from, recovery.steps_lost, watch.max_step) == (1, 2, 5)

def test_diagnosis_reads_the_error_file_names_a_paused_node_and_counts_oom_kills(make_job, tmp_path):
    plan = make_job(nodes=2, nproc_per_node=2)
    client = FakeDockerClient()
    failed = tracker_for(plan, 1, node_container(client, "r", "node1", Script()), tmp_path)
    for line in ["[3|1]:boom", "Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)",
                 "  exitcode  : 1 (pid: 42)", "  error_file: /ddp-run/node1/torchrun/x/attempt_0/1/error.json",
                 "====="]:
        failed.output.add(line, 0.0)
    error_file = tmp_path / "node1/torchrun/x/attempt_0/1/error.json"
    error_file.parent.mkdir(parents=True)
    error_file.write_text(json.dumps({"message": {"message": "ValueError: bad batch",
                                                  "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "7"}}}))
    recorder = Recorder()
    diagnosis = Diagnosis(client, tmp_path, recorder.say, recorder.record)
    failed.result.exit_code = 1
    diagnosis.explain_failure(failed)
    cause = failed.result.root_cause
    assert (cause.rank, cause.exception, cause.traceback, cause.timestamp) == (3, "ValueError: bad batch",
                                                                               "Traceback ...", 7.0)
    assert failed.result.last_lines == ["boom"]

    hung = tracker_for(plan, 0, node_container(client, "r", "node0", Script(hang=True)), tmp_path)
    hung.container.start()
    hung.container.pause()
    assert diagnosis.unresponsive(hung) == "its container is paused (hung)"
    assert recorder.events[-1] == ("node-unresponsive", {"node": "node0", "reason": "its container is paused (hung)"})

    hung.container.unpause()
    client.command_outputs["sh"] = (0, b"oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    diagnosis.find_oom_kills([hung])
    assert hung.result.oom_kills == 2
    assert recorder.said[-1] == "node0 was OOM-killed: the kernel killed 2 process(es) at its memory limit"


def running_trackers(make_job, tmp_path, client):
    plan = make_job(nodes=2)
    trackers = [tracker_for(plan, i, node_container(client, "r", f"node{i}", Script(hang=True)), tmp_path)
                for i in range(2)]
    for tracker in trackers:
        tracker.container.start()
        tracker.move(NodePhase.STARTING)
        tracker.move(NodePhase.RUNNING)
    return trackers


def test_restart_node_restarts_the_dead_node_alone(make_job, tmp_path):
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[1]
    dead.result.fault, dead.exit_code = "kill:node1", 137
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record,
                           clock=lambda: 42.0, scope="node", store_host="node0")
    policy.restart(dead, trackers, step=5)
    assert [c[1] for c in client.calls if c[0] == "restart"] == ["ddp-r-node1-1"]
    assert trackers[0].phase is NodePhase.RUNNING and dead.phase is NodePhase.RESTARTING
    assert "node1 died (injected fault kill:node1); restarting it alone" in recorder.said[0]
    assert len(policy.recoveries) == 1 and dead.result.consequence == ""


def test_restart_node_of_the_store_host_ends_the_job_and_the_failure_says_why(make_job, tmp_path):
    from orchestrate.outcome.judge import find_failure
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[0]
    dead.result.fault, dead.exit_code = "kill:node0@step=5", 137
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record,
                           clock=lambda: 42.0, scope="node", store_host="node0")
    policy.restart(dead, trackers, step=5)
    assert policy.recoveries == []  # a death that ends the job is no recovery
    assert any("node0 held the c10d rendezvous store" in line for line in recorder.said)
    trackers[1].result.state, trackers[1].result.exit_code = NodePhase.FAILED, 1
    failure = find_failure([t.result for t in trackers])
    assert failure.node == "node0"
    assert failure.describe().startswith("node0 died (injected fault kill:node0@step=5); node0 held the c10d"
                                         " rendezvous store")
    # with the store in a container of its own, node0 is a node like any other
    other = RestartPolicy(enabled=True, max_restarts=3, say=print, record=print, clock=time.monotonic, scope="node",
                          store_host="rdzv-store")
    assert other.lost_store(dead) is None
    assert RestartPolicy(enabled=True, max_restarts=3, say=print, record=print, clock=time.monotonic,
                         scope="all", store_host="node0").lost_store(dead) is None


def test_each_restart_is_counted_said_and_recorded_with_its_cause_and_kills_at_once(make_job, tmp_path):
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    dead = trackers[1]
    dead.exit_code = 137  # killed from outside: no fault of ours
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record,
                           clock=lambda: 42.0, scope="all", store_host="node0")
    policy.restart(dead, trackers, step=None)
    dead.result.fault, dead.exit_code = "kill:node1@t=9", 137
    policy.restart(dead, trackers, step=7)
    assert policy.restarts == 2
    assert recorder.said == [
        "node1 died (its death); restarting every node so that it rejoins (1/3)",
        "node1 died (injected fault kill:node1@t=9); restarting every node so that it rejoins (2/3)"]
    assert recorder.events == [("restart", {"node": "node1", "cause": "its death", "step": None, "scope": "all"}),
                               ("restart", {"node": "node1", "cause": "injected fault kill:node1@t=9", "step": 7,
                                            "scope": "all"})]
    assert dead.result.fault == ""  # the fault is over: a later death is the node's own
    # the engine kills the old processes at once (a grace would only delay the rejoin)
    assert [t.container.restart_timeouts for t in trackers] == [[0, 0], [0, 0]]


def test_a_restarted_node_the_engine_cannot_inspect_does_not_keep_the_others_from_restarting(make_job, tmp_path):
    client = FakeDockerClient()
    trackers = running_trackers(make_job, tmp_path, client)
    for tracker in trackers:
        tracker.latest_start = None
    del client.containers_by_name[trackers[0].container.name]  # its inspection answers NotFound
    recorder = Recorder()
    policy = RestartPolicy(enabled=True, max_restarts=3, say=recorder.say, record=recorder.record,
                           clock=lambda: 42.0, scope="all", store_host="node0")
    trackers[1].exit_code = 137
    policy.restart(trackers[1], trackers, step=None)
    assert [c[1] for c in client.calls if c[0] == "restart"] == ["ddp-r-node0-1", "ddp-r-node1-1"]
    assert trackers[0].latest_start is None  # its start event will say
    started = trackers[1].container.attrs["State"]["StartedAt"]
    assert trackers[1].latest_start == engine_time(started) and trackers[1].latest_start is not None


def test_the_lost_store_says_why_word_for_word():
    class Dead:
        name = "node0"

    policy = RestartPolicy(enabled=True, max_restarts=3, say=print, record=print, clock=time.monotonic,
                           scope="node", store_host="node0")
    assert policy.lost_store(Dead()) == (
        "node0 held the c10d rendezvous store (its torchrun agent served it): every other node's agent lost the"
        " rendezvous with it, as on a real cluster (--restart all restarts every node; --rdzv-store container keeps"
        " the store apart from the nodes)")


CRASH_DUMP = ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
              '  File "/workspace/train.py", line 13 in __getitem__\n'
              '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 349 in _worker_loop\n'
              '  File "/workspace/train.py", line 40 in <module>\n')


@pytest.mark.parametrize("exit_code, last_line, dumped", [
    (-11, "step 5", True),
    (1, "RuntimeError: DataLoader worker (pid 16) is killed by signal: Segmentation fault.", True),
    # torch may meet the dead worker's closed connection first: the dump still says where
    (1, "ConnectionResetError: [Errno 104] Connection reset by peer", True),
    (1, "ValueError: bad batch", False),  # nothing crashed: no file
    # a child it forked (a multiprocessing pool, not a DataLoader) crashed, and the rank then
    # raised an error of its own: the dump is not said to be the rank's crash
    (1, "ValueError: loss is NaN", "pool"),
])
def test_diagnosis_reads_where_a_rank_crashed_from_its_dump(make_job, tmp_path, exit_code, last_line, dumped):
    plan = make_job(nodes=2)
    failed = tracker_for(plan, 1, node_container(FakeDockerClient(), "r", "node1", Script()), tmp_path)
    for line in ["[1|0]:step 4", f"[1|0]:{last_line}", "Root Cause (first observed failure):", "[0]:",
                 "  rank      : 1 (local_rank: 0)", f"  exitcode  : {exit_code} (pid: 42)", "  error_file: <N/A>",
                 "====="]:
        failed.output.add(line, 0.0)
    (tmp_path / "debug").mkdir()
    if dumped:
        dump = CRASH_DUMP if dumped is True else CRASH_DUMP.replace("torch/utils/data/_utils/worker.py", "pool.py")
        (tmp_path / "debug" / "rank1.crash").write_text(dump)
    (tmp_path / "debug" / "rank1.crash.1").write_text(CRASH_DUMP.replace("line 13", "line 99"))  # an earlier attempt's
    Diagnosis(FakeDockerClient(), tmp_path, Recorder().say, Recorder().record).explain_failure(failed)
    where = failed.result.root_cause.crashed
    assert where == ("Segmentation fault in __getitem__ at train.py:13 (in a DataLoader worker process); every"
                     f" thread's stack: {tmp_path / 'debug' / 'rank1.crash'}" if dumped is True else "")


def test_progress_watch_keys_a_group_by_the_records_rank_where_torchrun_gave_none(tmp_path):
    """A call made where torchrun named no rank (its environment changed, an older hook) is the
    rank's that reported it; one with torchrun's rank is that rank's, whatever RANK the script set."""
    (tmp_path / "rank3.jsonl").write_text(
        json.dumps({"rank": 3, "time": 1.0, "init_call": {"rank": 0, "world_size": 1}}) + "\n"
        + json.dumps({"rank": 0, "time": 1.0, "init_call": {"rank": 0, "world_size": 2,
                                                             "torchrun": {"rank": 1, "world_size": 2}}}) + "\n")
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(2.0, None)
    assert {rank: call.world_size for rank, call in watch.groups_made().items()} == {1: 2, 3: 1}


def test_progress_watch_keeps_a_rank_finished_until_a_new_process_of_it_steps(tmp_path):
    """A step its own finished process wrote late does not undo its end; an elastic restart's does."""
    def write(*records: dict) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)

    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    write({"rank": 0, "attempt": "a", "step": 4, "time": 1.0},
          {"rank": 0, "attempt": "a", "finished": True, "after_step": 4, "time": 2.0},
          {"rank": 0, "attempt": "a", "step": 4, "time": 2.5})
    watch.poll(3.0, None)
    assert watch.finished_before(10.0) == {0: 4}
    write({"rank": 0, "attempt": "b", "step": 1, "time": 4.0})
    watch.poll(5.0, None)
    assert watch.finished_before(10.0) == {}


def test_progress_watch_says_whether_the_process_that_ran_at_a_time_stepped_after_it(tmp_path):
    """Whether an attempt went on after its failed write: only a step of a process of the rank
    begun by then, and reported after then, counts (a later attempt's steps do not)."""
    def write(*records: dict) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)

    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    write({"rank": 0, "attempt": "a", "began": 1.0, "step": 3, "time": 5.0},
          {"rank": 0, "attempt": "b", "began": 12.0, "step": 1, "time": 15.0})  # the next attempt's
    watch.poll(20.0, None)
    assert not watch.stepped_after(0, 10.0)
    write({"rank": 0, "attempt": "a", "began": 1.0, "step": 4, "time": 11.0})  # attempt a went on
    watch.poll(21.0, None)
    assert watch.stepped_after(0, 10.0) and not watch.stepped_after(1, 10.0)


@pytest.mark.parametrize("spec, elapsed_s, attempt_s, restarts_left, holds", [
    ("disk-full:node0@step=5", 20.0, 3.0, 1, "it has no end"),
    ("disk-full:node0@step=5..8", 20.0, 3.0, 1,
     "it ends at step 8, which no attempt reaches: each resumes before the write it failed"),
    ("disk-full:node0@t=5..60", 20.0, 3.0, 1,
     "it ends 60 s into the job, 40.0 s from now, after the next attempt would reach that write"
     " (about 3.0 s from now)"),
    ("disk-full:node0@t=5..60", 20.0, 3.0, 0,  # torchrun gives up: the launcher's restart is the next attempt
     "it ends 60 s into the job, 40.0 s from now, after the next attempt would reach that write"
     " (about 3.0 s from now)"),
    ("disk-full:node0@t=5..22", 20.0, 3.0, 1, ""),  # its end comes before the next attempt's write: restart
    ("disk-full:node0@t=5..23", 20.0, 3.0, 1, ""),  # (at it, as good as before)
    ("disk-full:node0@t=5..15", 20.0, 3.0, 1, ""),  # ended already (its disarm not yet seen)
    # the review's case: attempts 30 s apart, 2 restarts in place left; the third attempt writes after its end
    ("disk-full:node0,path=ckpt.*@t=20..90", 50.0, 30.0, 2, ""),
    ("disk-full:node0,path=ckpt.*@t=20..200", 50.0, 30.0, 2,
     "it ends 200 s into the job, 150.0 s from now, after the last of the 2 attempts torchrun has left would"
     " reach that write (about 60.0 s from now)"),
])
def test_a_full_disk_outlasts_the_attempts_left_unless_its_time_end_comes_before_the_last_ones_write(
        spec, elapsed_s, attempt_s, restarts_left, holds):
    assert full_disk_outlasts(parse_fault(spec), elapsed_s, attempt_s, restarts_left) == holds
