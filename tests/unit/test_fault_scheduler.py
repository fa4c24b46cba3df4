"""The fault scheduler alone (orchestrate/faults/scheduler.py): when each fault fires, and what
it says and records of each fault it fires, ends, notes or never fires. A run's events file,
its summary and a chaos verdict are read from these records."""
from __future__ import annotations

import json

import docker.errors
import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.errors import OrchestrateError
from orchestrate.faults.scheduler import FaultScheduler, write_triggers
from orchestrate.outcome.model import FaultRecord, RunResult, Timings, marked_before_first_step
from orchestrate.outcome.summary import format_summary
from orchestrate.supervise.progress import ProgressWatch
from tests.unit.test_supervisor_collaborators import Recorder


def scheduler_of(tmp_path, *specs: str, inject=lambda fault: None, undo=None, clock=(50.0,)):
    recorder = Recorder()
    faults = tuple(parse_fault(spec) for spec in specs)
    return FaultScheduler(faults, inject, tmp_path, recorder.say, recorder.record, undo=undo,
                          wall=lambda: clock[0]), recorder


def test_a_fired_fault_is_recorded_whole_on_the_node_it_landed_on_with_its_step_and_rank(tmp_path):
    landed = {"kill-rank:3@step=2": "node1", "kill:node0@step=2": None}  # a rank fault finds its node
    scheduler, recorder = scheduler_of(tmp_path, "kill-rank:3@step=2", "kill:node0@step=2",
                                       inject=lambda fault: landed[str(fault)])
    assert len(scheduler.fire_due(4.0, 2)) == 2
    assert recorder.events == [
        ("fault", {"node": "node1", "spec": "kill-rank:3@step=2", "action": "kill-rank", "step": 2, "rank": 3}),
        ("fault", {"node": "node0", "spec": "kill:node0@step=2", "action": "kill", "step": 2})]
    assert scheduler.fired == [FaultRecord("kill-rank:3@step=2", "node1", True, 4.0, 2, fired_time=50.0),
                               FaultRecord("kill:node0@step=2", "node0", True, 4.0, 2, fired_time=50.0)]
    assert recorder.said == ["fault injected: kill-rank:3@step=2 (4.0 s into the job, at step 2, on node1)",
                             "fault injected: kill:node0@step=2 (4.0 s into the job, at step 2)"]


def test_a_fault_that_could_not_be_injected_is_recorded_whole_and_listed_as_not_fired(tmp_path):
    def refuse(fault):
        raise OrchestrateError("node1 is gone " + "x" * 600)

    scheduler, recorder = scheduler_of(tmp_path, "kill:node1@t=1", inject=refuse)
    assert scheduler.fire_due(1.0, None) == [] and scheduler.fired == []
    assert recorder.events == [("fault-failed", {"node": "node1", "spec": "kill:node1@t=1",
                                                 "error": ("node1 is gone " + "x" * 600)[:500]})]
    reason = "could not be injected: " + ("node1 is gone " + "x" * 600)[:300]  # one line of it
    assert recorder.said == [f"fault kill:node1@t=1 {reason}"]
    assert scheduler.records(9.0, None, False) == [FaultRecord("kill:node1@t=1", "node1", False, reason=reason)]


def test_a_lasting_fault_ends_at_its_step_on_the_node_it_landed_on_and_its_record_says_when(tmp_path):
    undone = []
    scheduler, recorder = scheduler_of(tmp_path, "slow:node1@step=2..4", "kill:node0@t=100",
                                       inject=lambda fault: "node1", undo=lambda fault, node: undone.append((str(fault), node)))
    spec = "slow:node1,cpus=0.25@step=2..4"
    assert len(scheduler.fire_due(1.0, 2)) == 1
    scheduler.fire_due(30.0, 3)  # long after, but not at its step
    assert undone == [] and scheduler.lasting
    scheduler.fire_due(31.0, 4)
    assert undone == [(spec, "node1")] and not scheduler.lasting
    assert scheduler.fired == [FaultRecord(spec, "node1", True, 1.0, 2, ended_s=31.0, fired_time=50.0)]
    assert recorder.said[-1] == f"fault ended: {spec} (31.0 s into the job)"
    assert recorder.events[-1] == ("fault-ended", {"node": "node1", "spec": spec, "action": "slow"})


def test_an_end_that_cannot_be_undone_is_recorded_whole_and_the_fault_is_not_called_ended(tmp_path):
    def refuse(fault, node):
        raise OrchestrateError("the network is gone " + "y" * 600)

    scheduler, recorder = scheduler_of(tmp_path, "slow:node1@t=0..1", undo=refuse)
    spec = "slow:node1,cpus=0.25@t=0..1"
    scheduler.fire_due(0.5, None)
    scheduler.fire_due(1.5, None)
    assert recorder.said[-1] == f"fault {spec} could not be ended: " + ("the network is gone " + "y" * 600)[:300]
    assert recorder.events[-1] == ("fault-end-failed", {"node": "node1", "spec": spec,
                                                        "error": ("the network is gone " + "y" * 600)[:500]})
    assert scheduler.fired[0].ended_s is None and not scheduler.waiting  # not tried again


def test_a_note_adds_to_its_faults_record_and_the_first_file_struck_and_its_time_stay(tmp_path):
    clock = [50.0]
    scheduler, _ = scheduler_of(tmp_path, "torn-write:node0,path=ckpt/*@t=1", "pause:node1@t=1", clock=clock)
    torn, pause = scheduler.faults
    scheduler.fire_due(1.0, None)
    scheduler.note(torn, "armed over ckpt/a.pt")  # armed: it struck nothing yet
    assert (scheduler.fired[0].detail, scheduler.fired[0].struck_time, scheduler.fired[0].struck_file) == (
        "armed over ckpt/a.pt", None, "")
    clock[0] = 60.0
    scheduler.note(torn, "cut ckpt/a.pt at byte 100", struck="ckpt/a.pt")
    clock[0] = 70.0
    scheduler.note(torn, "", struck="ckpt/b.pt")
    assert (scheduler.fired[0].detail, scheduler.fired[0].struck_time, scheduler.fired[0].struck_file) == (
        "armed over ckpt/a.pt; cut ckpt/a.pt at byte 100", 60.0, "ckpt/a.pt")
    assert scheduler.fired[1] == FaultRecord(str(pause), "node1", True, 1.0, None, fired_time=50.0)  # untouched


def test_a_note_met_again_is_said_once_with_how_many_times(tmp_path):
    """An elastic job whose every attempt meets the same full disk: the trial's summary said its one
    failed write 8 times over."""
    scheduler, _ = scheduler_of(tmp_path, "disk-full:node0,path=ckpt.*@step=5..8")
    full, = scheduler.faults
    scheduler.fire_due(9.1, 5)
    failed = "rank 0's write to ckpt.pt.tmp failed: no space left on device (ENOSPC)"
    for detail in [failed] * 3 + ["rank 1's write to ckpt.pt.tmp failed: no space left on device (ENOSPC)"] + [failed]:
        scheduler.note(full, detail)
    assert scheduler.fired[0].detail == (f"{failed}, 4 times; rank 1's write to ckpt.pt.tmp failed: no space left"
                                         " on device (ENOSPC)")


def test_every_fault_that_never_fired_says_why_in_its_own_words(tmp_path):
    scheduler, _ = scheduler_of(tmp_path, "kill:node0@step=9", "kill:node1@step=+2", "pause:node1@t=50", "kill:node2")
    assert scheduler.records(12.0, 5, True) == [
        FaultRecord("kill:node0@step=9", "node0", False, reason="the workers reached step 5 only, not step 9"),
        FaultRecord("kill:node1@step=+2", "node1", False, reason="the fault before it never fired"),
        FaultRecord("pause:node1@t=50", "node1", False, reason="the job ended 12.0 s in, before t=50 s"),
        FaultRecord("kill:node2", "node2", False, reason="the job ended 12.0 s in, before t=0 s")]
    no_steps = ("no worker reported a training step: no optimizer stepped (its steps are counted), and the script"
                " reports none with orchestrate.progress.report(step); a fault at a time (@t=S) needs neither")
    assert [r.reason for r in scheduler.records(12.0, None, False)] == [
        no_steps, "the fault before it never fired", "the job ended 12.0 s in, before t=50 s",
        "the job ended 12.0 s in, before t=0 s"]
    scheduler.cancel()
    assert scheduler.records(12.0, 5, True) == [
        FaultRecord(spec, node, False, reason="the run was stopped before it fired")
        for spec, node in [("kill:node0@step=9", "node0"), ("kill:node1@step=+2", "node1"),
                           ("pause:node1@t=50", "node1"), ("kill:node2", "node2")]]


REACH = ("(storage faults reach the writes of Python's open() and torch.save, not os.open() and os.write(), memory"
         " maps, or a native library's own files)")


@pytest.mark.parametrize("kind", ["torn-write", "disk-full"])
@pytest.mark.parametrize("armed_s", [0.0, 2.5])
def test_a_storage_fault_armed_that_met_no_write_did_not_fire_and_says_what_it_reaches(tmp_path, armed_s, kind):
    """A job that saves with os.write() (or a native library) passes by both: a run or a chaos
    check over such a fault tested nothing, and must not pass for one that did."""
    scheduler, _ = scheduler_of(tmp_path, f"{kind}:node0,path=ckpt/*")
    scheduler.fire_due(armed_s, None)
    assert scheduler.records(9.0, 3, True) == [FaultRecord(
        f"{kind}:node0,path=ckpt/*", "node0", False, armed_s, None, fired_time=50.0,
        reason=f"it was armed {armed_s:.1f} s into the job, but no worker of node0 wrote a file it reaches after that"
               f" {REACH}")]


def test_a_full_disk_with_an_end_that_failed_no_write_did_not_fire_and_one_that_failed_a_write_did(tmp_path):
    scheduler, _ = scheduler_of(tmp_path, "disk-full:node0@step=2..4", "disk-full:node1@step=2..4",
                                inject=lambda fault: fault.node, undo=lambda fault, node: None)
    scheduler.fire_due(3.0, 2)
    scheduler.note(parse_fault("disk-full:node1@step=2..4"), "rank 1's write to a.pt failed: no space left")
    scheduler.fire_due(7.5, 4)
    met, unmet = scheduler.records(9.0, 5, True)  # the fired first
    assert (met.spec, met.fired, met.ended_s) == ("disk-full:node1@step=2..4", True, 7.5)
    assert (unmet.spec, unmet.fired, unmet.ended_s) == ("disk-full:node0@step=2..4", False, 7.5)
    assert unmet.reason == ("it was armed 3.0 s into the job until 7.5 s, but no worker of node0 wrote a file it"
                            f" reaches meanwhile {REACH}")


def test_step_faults_are_announced_together_and_the_no_progress_warning_waits_its_full_time(tmp_path):
    scheduler, recorder = scheduler_of(tmp_path, "kill:node1@step=2", "pause:node0@t=3", "kill:node0@step=+4")
    scheduler.announce()
    assert recorder.said == ["kill:node1@step=2 kill:node0@step=+4: fires when a worker reaches that step (its"
                             " optimizer's steps, counted, or its own orchestrate.progress.report(step)); ranks wait"
                             " at that step until the fault is injected"]
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=30.0)  # not longer than 30 s yet
    assert len(recorder.said) == 1
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=30.5)
    assert recorder.said[1:] == ["no worker has reported a training step in 30 s: kill:node1@step=2"
                                 " kill:node0@step=+4 cannot fire; no optimizer stepped (its steps are counted),"
                                 " and the script reports none with orchestrate.progress.report(step)"]


def test_time_faults_alone_never_warn_of_missing_steps(tmp_path):
    scheduler, recorder = scheduler_of(tmp_path, "pause:node0@t=3")
    scheduler.announce()
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=500.0)
    assert recorder.said == []


@pytest.mark.parametrize("where", ["progress", "runs/r1/progress"])
def test_the_triggers_are_written_whole_into_a_directory_made_for_them(tmp_path, where):
    write_triggers(tmp_path / where, [4, 2, 4], [(3, "a1")])
    assert json.loads((tmp_path / where / "triggers.json").read_text()) == {"steps": [2, 4], "in_attempt": [[3, "a1"]]}
    assert [p.name for p in (tmp_path / where).iterdir()] == ["triggers.json"]  # the temporary one renamed


def test_the_fault_scheduler_fires_by_time_and_by_step_once_each(tmp_path):
    recorder, injected = Recorder(), []
    scheduler = FaultScheduler((parse_fault("pause:node1@t=5"), parse_fault("kill:node0@step=3")),
                               injected.append, tmp_path, recorder.say, recorder.record)
    scheduler.announce()
    assert recorder.said == ["kill:node0@step=3: fires when a worker reaches that step (its optimizer's steps,"
                             " counted, or its own orchestrate.progress.report(step)); ranks wait at that step until"
                             " the fault is injected"]
    assert scheduler.fire_due(4.9, 2) == [] and injected == []
    assert [str(f) for f in scheduler.fire_due(5.0, 2)] == ["pause:node1@t=5"]
    assert [str(f) for f in scheduler.fire_due(6.0, 3)] == ["kill:node0@step=3"]
    assert scheduler.fire_due(100.0, 50) == [] and len(injected) == 2
    assert (tmp_path / "fired-3").exists()  # the ranks waiting at step 3 may go on
    assert [(f.spec, f.elapsed_s, f.step) for f in scheduler.fired] == [("pause:node1@t=5", 5.0, 2),
                                                                      ("kill:node0@step=3", 6.0, 3)]
    assert [kind for kind, _ in recorder.events] == ["fault", "fault"]


def test_ranks_held_at_a_step_go_on_only_once_every_fault_of_that_step_is_injected(tmp_path):
    recorder, released_when_injecting = Recorder(), []

    def inject(fault) -> None:  # a fault that takes a while (an exec in the node) must not find them gone
        released_when_injecting.append((str(fault), (tmp_path / "fired-5").exists()))
        if fault.node == "node1":
            raise docker.errors.APIError("container is not running")

    scheduler = FaultScheduler((parse_fault("pause:node0@step=5"), parse_fault("disconnect:node1@step=5"),
                                parse_fault("kill:node0@step=5")), inject, tmp_path, recorder.say, recorder.record)
    assert [str(f) for f in scheduler.fire_due(1.0, 5)] == ["pause:node0@step=5", "kill:node0@step=5"]
    assert released_when_injecting == [("pause:node0@step=5", False), ("disconnect:node1@step=5", False),
                                       ("kill:node0@step=5", False)]
    assert (tmp_path / "fired-5").exists()  # released after the last, the one that failed too
    assert [kind for kind, _ in recorder.events] == ["fault", "fault-failed", "fault"]


def test_a_fault_in_an_attempt_is_armed_by_the_one_before_and_counts_only_attempts_begun_after_it(tmp_path):
    recorder, injected, clock = Recorder(), [], [100.0]
    watch = ProgressWatch(tmp_path, recorder.record)
    scheduler = FaultScheduler((parse_fault("kill:node0@step=4"), parse_fault("kill:node1@step=+2"),
                                parse_fault("kill:node1@step=+2")), injected.append, tmp_path, recorder.say,
                               recorder.record, wall=lambda: clock[0])

    def report(rank: int, attempt: str, step: int, at: float) -> None:
        with open(tmp_path / f"rank{rank}.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": rank, "step": step, "time": at, "attempt": attempt}) + "\n")
        watch.poll(0.0, None)

    for step in range(1, 5):
        report(0, "first", step, 90.0 + step)
    assert watch.first_step_time == 91.0  # the first step's own time, kept as later steps come
    report(1, "first-b", 1, 90.5)  # another rank's, read later but taken earlier
    assert watch.first_step_time == 90.5
    assert not (tmp_path / "triggers.json").exists()  # nothing armed before the first fault fires
    assert [str(f) for f in scheduler.fire_due(5.0, watch.max_step, watch.attempt_steps)] == ["kill:node0@step=4"]
    # armed at the first fault: the second is listed for the attempts to come, the third waits its turn
    assert json.loads((tmp_path / "triggers.json").read_text()) == {"steps": [4], "in_attempt": [[2, "a1"]]}
    report(0, "first", 5, 101.0)  # the struck attempt's last step: not the next attempt's
    report(1, "first-b", 1, 99.0)
    assert scheduler.fire_due(6.0, watch.max_step, watch.attempt_steps) == []
    clock[0] = 110.0
    report(0, "second", 3, 105.0)
    assert scheduler.fire_due(7.0, watch.max_step, watch.attempt_steps) == []  # one step into it
    report(0, "second", 4, 106.0)
    assert [str(f) for f in scheduler.fire_due(8.0, watch.max_step, watch.attempt_steps)] == ["kill:node1@step=+2"]
    assert (tmp_path / "fired-a1").exists() and not (tmp_path / "fired-a2").exists()
    assert scheduler.armed == {1: 100.0, 2: 110.0}
    assert [f.fired_time for f in scheduler.fired] == [100.0, 110.0]
    assert [r.fired for r in scheduler.records(9.0, 5, True)] == [True, True, False]  # the third: same spec
    assert [r.reason for r in scheduler.records(9.0, 5, True) if not r.fired] == [
        "no attempt that began after the fault before it reached 2 step(s)"]


def test_a_stopped_run_fires_nothing_more_and_says_what_never_fired(tmp_path):
    recorder, injected = Recorder(), []
    scheduler = FaultScheduler((parse_fault("kill:node1@t=5"), parse_fault("pause:node0@t=1..9")), injected.append,
                               tmp_path, recorder.say, recorder.record)
    assert [str(f) for f in scheduler.fire_due(1.0, None)] == ["pause:node0@t=1..9"]
    scheduler.cancel()  # Ctrl-C: the run is being stopped
    assert not scheduler.waiting
    assert scheduler.fire_due(100.0, 50) == [] and len(injected) == 1  # no kill, and no undo of the pause either
    assert [(r.spec, r.fired, r.reason) for r in scheduler.records(100.0, 50, True)] == [
        ("pause:node0@t=1..9", True, ""), ("kill:node1@t=5", False, "the run was stopped before it fired")]


def test_a_fault_with_an_end_is_said_held_at_the_stop_only_where_its_node_still_ran(tmp_path):
    """A review (session 112): a fault with an end whose node had exited before the stop (its
    script returned) was said "still held when the run was stopped", where it held nothing for
    the stop to let go; only a fault without an end was looked for on the nodes still running.
    The store's own fault is its own: no node's exit lets it go."""
    scheduler, _ = scheduler_of(tmp_path, "slow:node2@t=1..100", "pause:node1@t=1..100", "pause:store@t=1..100",
                                inject=lambda fault: fault.node)
    assert len(scheduler.fire_due(2.0, None)) == 3
    scheduler.cancel([], live=["node0", "node1"])  # Ctrl-C, node2 gone
    assert {r.spec: r.held_at_stop for r in scheduler.records(10.0, None, False)} == {
        "slow:node2,cpus=0.25@t=1..100": False, "pause:node1@t=1..100": True, "pause:store@t=1..100": True}


def test_a_full_disk_that_met_no_write_before_the_stop_is_not_said_held_at_it(tmp_path):
    """A review (session 112): disk-full that no write met before a Ctrl-C ended "fired": false
    and "held_at_stop": true in outcome.json, a fault that did not fire said to hold the run."""
    scheduler, _ = scheduler_of(tmp_path, "disk-full:node1@t=1..100", inject=lambda fault: fault.node)
    assert len(scheduler.fire_due(2.0, None)) == 1
    scheduler.cancel([], live=["node0", "node1"])
    [full] = scheduler.records(10.0, None, False)
    assert (full.fired, full.held_at_stop) == (False, False)
    assert full.describe().startswith("disk-full:node1@t=1..100 did not fire: ")


def test_a_fault_that_fired_after_a_first_step_read_only_later_did_not_fall_before_the_first_step(tmp_path):
    """A worker's record of its first step can come a step late: a fault that fired when no
    step had been read yet, but after the first step's own time, came after it."""
    recorder, clock = Recorder(), [1000.0]
    scheduler = FaultScheduler((parse_fault("disconnect:node1@t=7..11"), parse_fault("pause:node0@t=2..3")),
                               lambda fault: None, tmp_path, recorder.say, recorder.record, wall=lambda: clock[0])
    clock[0] = 1002.0
    assert len(scheduler.fire_due(2.0, None)) == 1  # before the first step (at 1006.9)
    clock[0] = 1007.0
    assert len(scheduler.fire_due(7.0, None)) == 1  # step 1 was at 1006.9, its record not read yet
    paused, disconnected = marked_before_first_step(scheduler.records(20.0, 9, True), 9, first_step_time=1006.9)
    assert paused.before_first_step and not disconnected.before_first_step
    assert disconnected.describe() == "disconnect:node1@t=7..11 (7.0 s into the job)"


def test_every_fault_that_fired_is_in_the_summary_and_a_store_outage_too_short_to_be_felt_says_so(tmp_path):
    """The trial: pause:store@step=3..8 paused the store 1.8 s, less than the 5 s between the agents'
    keep-alive calls, and the summary said nothing of it (only a fault with more to say was listed)."""
    specs = ("pause:store@step=3..8", "disconnect:store@step=3..9", "slow:node1,cpus=0.5@step=3..8",
             "kill:node0@step=4")
    scheduler, recorder = scheduler_of(tmp_path, *specs, undo=lambda fault, node: None)
    scheduler.fire_due(124.0, 3)
    scheduler.fire_due(125.0, 4)
    scheduler.fire_due(125.8, 8)
    scheduler.fire_due(130.0, 9)
    unfelt = ("the store was out 1.8 s only, less than the 5 s between the torchrun agents' keep-alive calls to it,"
              " so the job may have made no call to it while it lasted; give it an end 5 s or more after its start"
              " (chaos draws such outages so)")
    assert f"fault ended: pause:store@step=3..8 (125.8 s into the job): {unfelt}" in recorder.said
    assert "fault ended: slow:node1,cpus=0.5@step=3..8 (125.8 s into the job)" in recorder.said  # not the store
    outcome = RunResult("r", tmp_path, [], Timings(job_s=130.0), faults=scheduler.records(131.0, 10, True))
    assert [line for line in format_summary(outcome).splitlines() if line.startswith("fault injected")] == [
        f"fault injected: pause:store@step=3..8 (124.0 s into the job, at step 3, until 125.8 s, held 1.8 s): {unfelt}",
        "fault injected: disconnect:store@step=3..9 (124.0 s into the job, at step 3, until 130.0 s, held 6.0 s)",
        "fault injected: slow:node1,cpus=0.5@step=3..8 (124.0 s into the job, at step 3, until 125.8 s, held 1.8 s)",
        "fault injected: kill:node0@step=4 (125.0 s into the job, at step 4)"]
    scheduler, recorder = scheduler_of(tmp_path, "pause:store@step=3..8", undo=lambda fault, node: None)
    scheduler.fire_due(124.0, 3)
    scheduler.end_early(lambda fault: fault.on_store, 125.0)  # a stop let it go: it was not asked to be short
    assert recorder.said[-1] == "fault ended: pause:store@step=3..8 (125.0 s into the job)"
    assert scheduler.fired[0].detail == ""


def test_a_store_outage_that_may_be_too_short_to_be_felt_is_said_before_the_run(make_run):
    from orchestrate.config.fault_spec import short_store_outage_note

    felt = "less than the 5 s between the torchrun agents' keep-alive calls to the store, the job may not feel it"
    assert short_store_outage_note(parse_fault("pause:store@t=2..4")) == (
        f"pause:store@t=2..4: the store is out 2 s only: {felt}; give it an end 5 s or more after its start")
    assert short_store_outage_note(parse_fault("disconnect:store@t=6..9.5")).startswith(
        "disconnect:store@t=6..9.5: the store is out 3.5 s only")
    assert short_store_outage_note(parse_fault("pause:store@step=3..8")) == (
        f"pause:store@step=3..8: how long the store is out depends on how fast the steps go; if {felt} (the summary"
        " says how long it held)")
    for long_enough in ("pause:store@t=2..7", "pause:store@t=3", "pause:node1@t=2..3", "kill:store@t=2"):
        assert short_store_outage_note(parse_fault(long_enough)) == "", long_enough
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", faults=(parse_fault("pause:store@t=1..2"),))
    job.check()
    assert "pause:store@t=1..2: the store is out 1 s only" in job.out.getvalue()


def test_a_fault_timed_into_the_start_up_is_said_to_have_fallen_before_the_first_step(tmp_path):
    recorder = Recorder()
    scheduler = FaultScheduler((parse_fault("partition:node0|node1@t=2..8"), parse_fault("pause:node1@t=9..10"),
                                parse_fault("torn-write:node0,path=ckpt/*@t=1")),
                               lambda fault: None, tmp_path, recorder.say, recorder.record)
    assert len(scheduler.fire_due(2.5, None)) == 2  # no worker has reported a step yet
    assert len(scheduler.fire_due(9.5, 3)) == 1
    early, later, torn = marked_before_first_step(scheduler.records(20.0, 30, True), 30)
    assert early.before_first_step and early.describe() == \
        "partition:node0|node1@t=2..8 (2.5 s into the job, before its first step, until 9.5 s, held 7.0 s)"
    assert not later.before_first_step and later.describe() == "pause:node1@t=9..10 (9.5 s into the job, at step 3)"
    assert not torn.fired and not torn.before_first_step  # armed, but it cut no file: it did not fire
    # a job that never reports a step: nothing is known of its steps, and nothing is said of them
    assert not any(r.before_first_step for r in marked_before_first_step(scheduler.records(20.0, None, False), None))
    outcome = RunResult("r", tmp_path, [], Timings(job_s=20.0), faults=[early, later, torn])
    assert [line for line in format_summary(outcome).splitlines() if line.startswith("fault injected")] == [
        "fault injected: partition:node0|node1@t=2..8 (2.5 s into the job, before its first step, until 9.5 s, held"
        " 7.0 s)", "fault injected: pause:node1@t=9..10 (9.5 s into the job, at step 3)"]  # every one that fired


def test_a_fault_that_cannot_be_injected_is_said_recorded_and_still_releases_its_step(tmp_path):
    recorder = Recorder()

    def refuse(fault):
        raise docker.errors.APIError("Container node1 is not running")

    scheduler = FaultScheduler((parse_fault("kill:node1@step=2"),), refuse, tmp_path, recorder.say, recorder.record)
    assert scheduler.fire_due(1.0, 2) == [] and scheduler.fired == []
    assert recorder.said == ["fault kill:node1@step=2 could not be injected: Container node1 is not running"]
    assert recorder.events[0][0] == "fault-failed" and (tmp_path / "fired-2").exists()


def test_an_injection_error_without_a_message_is_named_by_its_kind(tmp_path):
    recorder = Recorder()

    def time_out(fault):
        raise TimeoutError()  # an engine that did not answer in time says nothing more

    scheduler = FaultScheduler((parse_fault("kill:node1@t=1"),), time_out, tmp_path, recorder.say, recorder.record)
    assert scheduler.fire_due(1.0, None) == []
    assert recorder.said == ["fault kill:node1@t=1 could not be injected: TimeoutError"]


def test_the_fault_scheduler_warns_once_when_no_step_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr("orchestrate.faults.scheduler.NO_PROGRESS_WARNING_S", 1.0)
    recorder = Recorder()
    scheduler = FaultScheduler((parse_fault("kill:node1@step=2"),), print, tmp_path, recorder.say, recorder.record)
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=0.5)
    scheduler.warn_if_no_progress(progress_seen=True, since_first_worker_s=5.0)
    assert recorder.said == []
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=5.0)
    scheduler.warn_if_no_progress(progress_seen=False, since_first_worker_s=9.0)
    assert len(recorder.said) == 1 and "kill:node1@step=2 cannot fire" in recorder.said[0]


def test_a_step_fault_in_an_attempt_that_counts_its_steps_from_1_again_says_so(tmp_path):
    """A trial (session 112): a plain script (SGD, no step count) killed at step 7 resumed from
    its step 6; its new workers' counted steps began at 1 again, and kill:node0@step=10 fired at
    their 10th step, the script's 16th, said "at step 10" as if the job's. The fault and the
    recovery it makes say which count the step is; a resume said (Adam's count) keeps the job's."""
    from orchestrate.outcome.model import Recovery
    recorder, clock = Recorder(), [100.0]
    watch = ProgressWatch(tmp_path, recorder.record)
    scheduler = FaultScheduler((parse_fault("kill:node1@step=7"), parse_fault("kill:node0@step=10"),
                                parse_fault("pause:node1@t=30..31")), lambda fault: None, tmp_path,
                               recorder.say, recorder.record, wall=lambda: clock[0])

    def report(attempt: str, step: int, at: float, recovery=None, failed_since=None, **more) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": 0, "step": step, "time": at, "attempt": attempt, "counted": "optimizer",
                                     "began": 200.0 if attempt == "second" else 10.0, **more}) + "\n")
        watch.poll(0.0, recovery, failed_since)

    for step in range(1, 8):
        report("first", step, 90.0 + step)
    assert [str(f) for f in scheduler.fire_due(5.0, watch.max_step, watch.attempt_steps, watch.step_said)] == [
        "kill:node1@step=7"]
    assert scheduler.fired[0].describe() == "kill:node1@step=7 (5.0 s into the job, at step 7)"
    recovery = Recovery("node1", "injected fault kill:node1@step=7", failed_at=1.0, step_before=7)
    for step in range(1, 4):  # the new workers, resumed from the script's step 6, count from 1
        report("second", step, 210.0 + step, recovery if step == 1 else None, 150.0)
    assert watch.step_said() == (3, recovery)
    scheduler.fire_due(30.0, watch.max_step, watch.attempt_steps, watch.step_said)  # the pause, at their 3rd step
    for step in range(4, 11):
        report("second", step, 210.0 + step)
    assert [str(f) for f in scheduler.fire_due(40.0, watch.max_step, watch.attempt_steps, watch.step_said)] == [
        "kill:node0@step=10"]
    paused, killed = scheduler.fired[1:]
    anew = (" of the attempt after injected fault kill:node1@step=7, counted from 1 again: no rank said where it"
            " resumed (an optimizer without a step count, or a script that started over)")
    assert killed.describe() == f"kill:node0@step=10 (40.0 s into the job, at step 10{anew})"
    assert paused.describe() == (f"pause:node1@t=30..31 (30.0 s into the job, at step 3{anew}, until 40.0 s, held"
                                 " 10.0 s)")
    second = Recovery("node0", "injected fault kill:node0@step=10", 2.0, *watch.step_said()[:1],
                      counted_anew=watch.step_said()[1])
    assert second.describe() == f"node0 rejoined after injected fault kill:node0@step=10: last step before it 10{anew}"
    # events.jsonl (and the report page, from it) says the same step, in the same count
    after = {"step_counted_anew_after": {"node": "node1", "cause": "injected fault kill:node1@step=7"}}
    assert [(fields["spec"], fields["step"], fields.get("step_counted_anew_after")) for kind, fields in recorder.events
            if kind == "fault"] == [("kill:node1@step=7", 7, None), ("pause:node1@t=30..31", 3, after[
                "step_counted_anew_after"]), ("kill:node0@step=10", 10, after["step_counted_anew_after"])]
    # a rank that says where it resumed (Adam's count) numbers the steps as the job's again
    with open(tmp_path / "rank0.jsonl", "a") as handle:
        handle.write(json.dumps({"rank": 0, "resumed": 15, "time": 230.0}) + "\n")
    watch.poll(0.0, None)
    assert watch.step_said() == (10, None)


def test_an_attempt_that_started_over_is_not_said_to_have_an_optimizer_without_a_step_count(tmp_path):
    """A review (session 112): an Adam script restarted with no checkpoint to load counts its
    steps 1, 2, 3 again, and no rank says where it resumed (Adam's own count begins at 1 too), so
    its steps are counted anew as a plain SGD script's are; the note said "the optimizer keeps no
    step count" of an optimizer that keeps one. It says what is known: no rank said it resumed."""
    from orchestrate.node.step_counter import StepCounter
    from orchestrate.outcome.model import Recovery
    recorder = Recorder()
    watch = ProgressWatch(tmp_path, recorder.record)

    class Adam:  # its own count, begun anew: a fresh start, no state loaded
        param_groups = [{"lr": 0.1, "params": []}]

        def __init__(self) -> None:
            self.state = {"weight": {"step": 0}}

        def step(self) -> None:
            self.state["weight"]["step"] += 1

    def attempt(attempt: str, steps: int, began: float, recovery=None, failed_since=None) -> None:
        said = []
        counter = StepCounter(lambda step, at, metrics: said.append({"step": step, "counted": "optimizer"}),
                              lambda step, at: said.append({"resumed": step}), lambda: False)
        optimizer = Adam()
        for _ in range(steps):
            optimizer.step()
            counter.after_step(optimizer)
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            for index, fields in enumerate(said):
                handle.write(json.dumps({"rank": 0, "time": began + index, "attempt": attempt, "began": began,
                                         **fields}) + "\n")
        watch.poll(0.0, recovery, failed_since)

    attempt("first", 6, 10.0)
    recovery = Recovery("node1", "injected fault kill:node1@step=6", failed_at=1.0, step_before=6)
    attempt("second", 3, 200.0, recovery, 150.0)
    step, after = watch.step_said()
    assert step == 3 and after is recovery  # its steps 1, 2, 3 again, no resume said
    record = FaultRecord("kill:node0@step=3", "node0", True, 9.0, step, counted_anew=after)
    assert record.describe() == (
        "kill:node0@step=3 (9.0 s into the job, at step 3 of the attempt after injected fault kill:node1@step=6,"
        " counted from 1 again: no rank said where it resumed (an optimizer without a step count, or a script that"
        " started over))")


def test_a_step_counted_anew_after_a_death_with_no_fault_names_the_node_that_died(tmp_path):
    """A review (session 112): node1 died with no fault injected ("its death"), and node0 died in
    the attempt after it, whose steps were counted from 1 again: its recovery read "node0 rejoined
    after its death: last step before it 4 of the attempt after its death", the second "its" node1's,
    and outcome.json had "its death" alone. The node is named, and outcome.json says which recovery."""
    from orchestrate.outcome.model import Recovery
    from orchestrate.outcome.record import outcome_record
    recorder = Recorder()
    watch = ProgressWatch(tmp_path, recorder.record)

    def report(attempt: str, step: int, at: float, recovery=None, failed_since=None) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.write(json.dumps({"rank": 0, "step": step, "time": at, "attempt": attempt, "counted": "optimizer",
                                     "began": 200.0 if attempt == "second" else 10.0}) + "\n")
        watch.poll(0.0, recovery, failed_since)

    for step in range(1, 6):
        report("first", step, 90.0 + step)
    first = Recovery("node1", "its death", failed_at=1.0, step_before=5)
    for step in range(1, 5):
        report("second", step, 210.0 + step, first if step == 1 else None, 150.0)
    step, after = watch.step_said()
    second = Recovery("node0", "its death", 2.0, step, counted_anew=after)
    assert second.describe() == ("node0 rejoined after its death: last step before it 4 of the attempt after node1's"
                                 " death, counted from 1 again: no rank said where it resumed (an optimizer without a"
                                 " step count, or a script that started over)")
    fault = FaultRecord("pause:node0@step=4", "node0", True, 9.0, step, counted_anew=after)
    assert "at step 4 of the attempt after node1's death, counted" in fault.describe()
    outcome = RunResult("r", tmp_path, [], Timings(job_s=20.0, recoveries=[first, second]), faults=[fault])
    record = json.loads(json.dumps(outcome_record(outcome)))
    anew = {"recovery": 0, "node": "node1", "cause": "its death"}
    assert [r["step_counted_anew_after"] for r in record["recoveries"]] == [None, anew]
    assert [f["step_counted_anew_after"] for f in record["faults"]] == [anew]
