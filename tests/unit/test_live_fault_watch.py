"""The supervisor's side of ``fault RUN``: the notes another terminal leaves, read as they come,
said, recorded once each, and blamed on the node they hit for as long as they last (the judge, the
restart policy and the hang watch read that blame)."""
from __future__ import annotations

import json
import time
from typing import Optional

import pytest

from orchestrate.faults.storage import STORAGE_REACH
from orchestrate.node.storage_faults import EVENTS_FILE as STORAGE_EVENTS_FILE
from orchestrate.outcome.events import EVENTS_FILE
from orchestrate.outcome.model import FaultRecord
from orchestrate.plan.layout import LIVE_FAULTS_FILE, PROGRESS_SUBDIR
from orchestrate.supervise.api import RunSpec
from orchestrate.supervise.live_faults import LIVE_HOLD_MARGIN_S, LiveFaultWatch
from tests.fakes import FakeDockerClient
from tests.unit.test_supervisor_collaborators import Recorder, node_container, tracker_for

SAID = "fault injected by `python -m orchestrate fault`: "


class Watched:
    """A 2-node run's watch (rank 0 on node0, rank 1 on node1), begun ``STARTED_S`` before now,
    whose workers have reported step 7; the notes are written as ``fault`` writes them."""

    STARTED_S = 3.0

    def __init__(self, make_job, tmp_path, job_began_s: Optional[float] = None) -> None:
        """``job_began_s``: an attach's, seconds before now its nodes came up."""
        self.now = float(int(time.time()))  # whole seconds: the times below add up exactly
        self.run_dir = tmp_path
        self.recorder = Recorder()
        client = FakeDockerClient()
        plan = make_job(nodes=2)
        self.trackers = {f"node{i}": tracker_for(plan, i, node_container(client, "r", f"node{i}"), tmp_path)
                         for i in range(2)}
        self.watch = LiveFaultWatch(RunSpec("r", "ddp-r", tmp_path, ()), self.trackers, self.now - self.STARTED_S,
                                    lambda: 7, self.recorder.say, self.recorder.record,
                                    job_began=None if job_began_s is None else self.now - job_began_s)

    def note(self, fault_id: str, at_s: float, spec: str, node: str, phase: str, error: str = "") -> None:
        """A note ``at_s`` seconds from now, then the watch's poll."""
        entry = {"id": fault_id, "time": self.now + at_s, "spec": spec, "node": node, "phase": phase,
                 **({"error": error} if error else {})}
        with open(self.run_dir / LIVE_FAULTS_FILE, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
        self.watch.poll()

    def blame(self, node: str) -> tuple[str, object]:
        result = self.trackers[node].result
        return result.fault, result.culprit_rank


@pytest.fixture
def watched(make_job, tmp_path) -> Watched:
    return Watched(make_job, tmp_path)


def test_a_fault_with_an_end_is_blamed_from_its_start_held_with_a_margin_and_let_go_at_its_end(watched):
    spec = "pause:node1@t=2..7"
    watched.note("a", 0.0, spec, "node1", "doing")
    assert watched.blame("node1") == (spec, None)  # as it begins: the node's silence never comes before its cause
    assert watched.recorder.said == [] and not watched.watch.holding
    watched.note("a", 0.5, spec, "node1", "done")  # timed from when it began
    assert watched.recorder.said == [SAID + f"{spec} (3.0 s into the job, at step 7)"]
    assert watched.recorder.events == [("fault", {"node": "node1", "spec": spec, "action": "pause", "step": 7,
                                                  "by": "fault", "fault_id": "a", "time": watched.now})]
    assert watched.watch.held == {"a": watched.now + 5.0 + LIVE_HOLD_MARGIN_S} and watched.watch.holding
    watched.note("a", 5.0, spec, "node1", "ended")
    assert not watched.watch.holding and watched.blame("node1") == ("", None)
    assert watched.recorder.said[-1] == f"fault ended by `python -m orchestrate fault`: {spec} on node1"
    assert watched.recorder.events[-1] == ("fault-ended", {"node": "node1", "spec": spec, "action": "pause",
                                                           "by": "fault", "fault_id": "a", "time": watched.now + 5})
    assert watched.watch.records(7) == [FaultRecord(spec, "node1", True, 3.0, 7, ended_s=8.0, fired_time=watched.now)]
    assert watched.blame("node0") == ("", None)


def test_a_held_fault_whose_end_never_came_is_let_go_after_its_margin_and_only_it(watched):
    # the `fault` process was killed: no end is noted, and the hang watch must count again
    began = {"gone": -(5.0 + LIVE_HOLD_MARGIN_S) - 1, "live": 0.0}
    for fault_id, began_s in began.items():
        watched.note(fault_id, began_s, "pause:node1@t=0..5", "node1", "doing")
        watched.note(fault_id, began_s, "pause:node1@t=0..5", "node1", "done")
    assert watched.watch.held == {"live": watched.now + began["live"] + 5.0 + LIVE_HOLD_MARGIN_S}


def test_a_refused_fault_is_said_with_its_error_unblamed_and_never_counted_as_done(watched):
    watched.note("b", 1.0, "disconnect:node0", "node0", "doing")
    assert watched.blame("node0") == ("disconnect:node0", None)
    error = "the engine refused: " + "x" * 600
    watched.note("b", 1.5, "disconnect:node0", "node0", "failed", error)
    assert watched.blame("node0") == ("", None) and watched.watch.doing == {}
    assert watched.recorder.said == [f"fault from `python -m orchestrate fault` not done: disconnect:node0: {error}"]
    assert watched.recorder.events == [("fault-failed", {"node": "node0", "spec": "disconnect:node0",
                                                         "error": error[:500], "by": "fault", "fault_id": "b",
                                                         "time": watched.now + 1.5})]
    assert watched.watch.records(7) == []


def test_a_loss_the_engine_refused_loses_nothing(watched):
    watched.note("c", 1.0, "lose:node1", "node1", "doing")
    assert watched.trackers["node1"].result.lost == "lose:node1"  # (blamed before the engine answers)
    watched.note("c", 1.5, "lose:node1", "node1", "failed", "the engine refused")
    assert watched.trackers["node1"].result.lost == "" and watched.blame("node1") == ("", None)


def test_a_refusal_whose_beginning_could_not_be_read_is_still_said(watched):
    with open(watched.run_dir / LIVE_FAULTS_FILE, "a") as handle:
        handle.write('{"id": "b", "phase": "doing", "spec": "disconnect:node0", "node": "node0", "ti\n')  # torn
    watched.note("b", 1.5, "disconnect:node0", "node0", "failed", "refused")
    assert watched.recorder.said == ["fault from `python -m orchestrate fault` not done: disconnect:node0: refused"]
    assert watched.blame("node0") == ("", None) and watched.watch.records(7) == []


def test_a_rank_fault_noted_once_done_blames_its_rank(watched):
    watched.note("c", 2.0, "kill-rank:1", "node1", "done")
    assert watched.blame("node1") == ("kill-rank:1", 1)
    assert watched.recorder.events == [("fault", {"node": "node1", "spec": "kill-rank:1", "action": "kill-rank",
                                                  "step": 7, "rank": 1, "by": "fault", "fault_id": "c",
                                                  "time": watched.now + 2})]
    assert watched.recorder.said == [SAID + "kill-rank:1 (5.0 s into the job, at step 7, on node1)"]
    assert not watched.watch.holding


def test_a_fault_done_to_a_nodes_earlier_container_is_not_the_restarted_nodes(watched):
    restarted = watched.trackers["node1"]
    restarted.first_started, restarted.latest_start = watched.now - 60, watched.now + 10
    watched.note("old", 9.0, "kill-rank:1", "node1", "done")
    assert watched.blame("node1") == ("", None)
    watched.note("new", 10.0, "hang-rank:1", "node1", "done")  # at the restart's own time: the new node's
    assert watched.blame("node1") == ("hang-rank:1", 1)
    fresh = watched.trackers["node0"]
    fresh.first_started = watched.now + 20  # no restart: its first start counts
    watched.note("early", 19.0, "pause:node0", "node0", "doing")
    assert watched.blame("node0") == ("", None)
    assert [r.spec for r in watched.watch.records(7)] == ["kill-rank:1", "hang-rank:1", "pause:node0"]  # all done


@pytest.mark.parametrize("rank_fault_at_the_restart, blame_given_back", [
    (True, ("kill-rank:1", 1)),  # done at the restart's own time: the new container's, its rank the culprit again
    (False, ("", None)),  # the only earlier blame is the earlier container's: nothing is given back
])
def test_the_end_of_a_fault_gives_back_only_blame_for_the_nodes_current_container(watched, rank_fault_at_the_restart,
                                                                                  blame_given_back):
    restarted = watched.trackers["node1"]
    restarted.first_started = watched.now - 60
    watched.note("before", 1.0, "slow:node1", "node1", "done")
    restarted.latest_start = watched.now + 5
    if rank_fault_at_the_restart:
        watched.note("at", 5.0, "kill-rank:1", "node1", "done")
    watched.note("after", 6.0, "pause:node1", "node1", "doing")
    watched.note("after", 8.0, "pause:node1", "node1", "ended")
    assert watched.blame("node1") == blame_given_back


def test_a_torn_write_is_recorded_but_blamed_only_once_it_tears(watched):
    watched.note("d", 1.0, "torn-write:node0", "node0", "doing")
    watched.note("d", 1.0, "torn-write:node0", "node0", "done")
    assert watched.blame("node0") == ("", None)
    assert [kind for kind, _ in watched.recorder.events] == ["fault"]


def test_the_end_of_a_fault_gives_the_node_back_the_blame_that_still_stands(watched):
    watched.note("slow", 1.0, "slow:node1", "node1", "done")
    watched.note("hang", 2.0, "hang-rank:1", "node1", "done")
    assert watched.blame("node1") == ("hang-rank:1", 1)
    watched.note("hang", 3.0, "hang-rank:1", "node1", "ended")
    assert watched.blame("node1") == ("slow:node1,cpus=0.25", None)  # the rank is no longer the culprit
    watched.note("hang", 3.0, "hang-rank:1", "node1", "ended")  # a second end: nothing is blamed on it
    assert watched.blame("node1") == ("slow:node1,cpus=0.25", None)
    watched.trackers["node1"].result.fault = "kill:node1@t=9"  # the run's own fault, since
    watched.note("slow", 4.0, "slow:node1", "node1", "ended")
    assert watched.blame("node1") == ("kill:node1@t=9", None)  # not a live fault's to take back


def test_an_attach_reading_the_notes_again_says_them_but_records_each_once(watched):
    with open(watched.run_dir / EVENTS_FILE, "w") as handle:  # what the launcher recorded of fault "a"
        handle.write(json.dumps({"event": "fault", "time": watched.now, "by": "fault", "fault_id": "a"}) + "\n")
        handle.write(json.dumps({"event": "fault", "time": watched.now, "by": "run", "fault_id": "e"}) + "\n")
    watched.note("a", 0.0, "pause:node1", "node1", "done")
    watched.note("e", 1.0, "pause:node0", "node0", "done")
    watched.note("e", 1.0, "pause:node0", "node0", "done")  # the same note twice (read again)
    assert len(watched.recorder.said) == 3
    assert [(kind, fields["fault_id"]) for kind, fields in watched.recorder.events] == [("fault", "e")]


def test_a_note_of_another_node_is_ignored_and_one_before_the_watch_began_has_no_time_in_the_job(watched):
    watched.note("x", 0.0, "pause:node7", "node7", "done")
    assert watched.recorder.said == [] and watched.watch.records(7) == []
    watched.note("s", -Watched.STARTED_S, "pause:node1", "node1", "done")  # as the watch began: 0 s into the job
    assert watched.watch.records(7) == [FaultRecord("pause:node1", "node1", True, 0.0, 7, fired_time=watched.now - 3)]
    watched.watch.done.clear()
    watched.note("f", -4.0, "pause:node0", "node0", "done")  # an `attach` reads every note from the first
    assert watched.watch.records(7) == [FaultRecord("pause:node0", "node0", True, None, None,
                                                    fired_time=watched.now - 4)]
    assert watched.recorder.said[-1] == SAID + "pause:node0"
    watched.note("g", 1.0, "pause:node1", "node1", "doing")  # its `fault` ended before the engine answered
    assert watched.watch.records(7)[-1] == FaultRecord("pause:node1", "node1", True, 4.0, fired_time=watched.now + 1,
                                                       detail="`fault` ended before the engine answered")


def test_an_attach_times_a_fault_from_when_the_nodes_came_up_and_gives_a_step_only_once_it_followed(make_job,
                                                                                                      tmp_path):
    """An attach begun 3 s ago on a run whose nodes came up 20 s ago and whose first step came 15 s
    ago: a fault done now is 20 s into the job (not 3), at the step the workers reported; one done
    before the attach followed is timed too, but its step then is not known (whether it came
    before the first step is: by the step's own record)."""
    attached = Watched(make_job, tmp_path, job_began_s=20.0)
    attached.note("a", 0.0, "pause:node1", "node1", "done")
    attached.note("b", -10.0, "pause:node0", "node0", "done")
    attached.note("c", -18.0, "pause:node0", "node0", "done")
    attached.note("d", -25.0, "pause:node0", "node0", "done")  # before its nodes came up: no time in the job
    assert attached.watch.records(7, first_step_time=attached.now - 15) == [
        FaultRecord("pause:node1", "node1", True, 20.0, 7, fired_time=attached.now),
        FaultRecord("pause:node0", "node0", True, 10.0, None, fired_time=attached.now - 10),
        FaultRecord("pause:node0", "node0", True, 2.0, None, fired_time=attached.now - 18, before_first_step=True),
        FaultRecord("pause:node0", "node0", True, None, None, fired_time=attached.now - 25)]
    assert attached.recorder.said[0] == SAID + "pause:node1 (20.0 s into the job, at step 7)"


def storage_event(watched: Watched, key: str, kind: str = "disk-full", **fields) -> None:
    """What a worker of node1 records where it meets a storage fault."""
    progress = watched.run_dir / PROGRESS_SUBDIR
    progress.mkdir(exist_ok=True)
    with open(progress / STORAGE_EVENTS_FILE, "a") as handle:
        handle.write(json.dumps({"kind": kind, "key": key, "node": "node1", "file": "ckpt.pt", "rank": 1, **fields})
                     + "\n")


def storage_note(watched: Watched, fault_id: str, at_s: float, spec: str, phase: str, key: str = "") -> None:
    entry = {"id": fault_id, "time": watched.now + at_s, "spec": spec, "node": "node1", "phase": phase,
             **({"storage_key": key} if key else {})}
    with open(watched.run_dir / LIVE_FAULTS_FILE, "a") as handle:
        handle.write(json.dumps(entry) + "\n")
    watched.watch.poll()


def test_a_full_disk_armed_from_another_terminal_fired_only_where_a_worker_met_it(watched):
    met, unmet = "disk-full:node1@t=0..4", "disk-full:node1,path=x/*@t=0..2"
    storage_note(watched, "m", 0.0, met, "done", key="s1")
    storage_note(watched, "u", 0.0, unmet, "done", key="s2")
    assert watched.recorder.said[0] == f"fault armed by `python -m orchestrate fault`: {met} (3.0 s into the job, at step 7)"
    storage_event(watched, "s1")
    storage_event(watched, "s-own")  # the run's own fault's: not this one's
    watched.watch.poll()
    storage_note(watched, "u", 2.0, unmet, "ended")
    assert watched.watch.spec_of("s1") == met and watched.watch.spec_of("s-own") is None
    fired, not_fired = watched.watch.records(7)
    assert fired == FaultRecord(met, "node1", True, 3.0, 7, fired_time=watched.now,
                                detail="rank 1's write to ckpt.pt failed: no space left on device (ENOSPC)")
    assert not not_fired.fired and not_fired.spec == unmet
    assert not_fired.reason == ("it was armed 3.0 s into the job until 5.0 s, but no worker of node1 wrote a file it"
                                f" reaches meanwhile ({STORAGE_REACH})")


def test_a_torn_write_from_another_terminal_names_the_file_it_cut_and_one_that_cut_none_did_not_fire(watched):
    spec = "torn-write:node1"
    storage_note(watched, "t", 0.0, spec, "done", key="s1")
    assert not watched.watch.records(7)[0].fired  # armed: no write met it yet
    storage_event(watched, "s1", kind="torn-write", byte=10, size=20)
    watched.watch.poll()
    [record] = watched.watch.records(7)
    assert record.fired and record.struck_file == "ckpt.pt"
    assert record.detail == "rank 1's write of ckpt.pt was cut at byte 10 of 20"


def test_a_storage_event_read_before_its_note_or_before_the_watch_began_still_counts(make_job, tmp_path):
    first = Watched(make_job, tmp_path)
    storage_event(first, "s1")  # a worker met it before the watch read the note (or `attach` began)
    later = Watched(make_job, tmp_path)
    storage_note(later, "m", 0.0, "disk-full:node1", "done", key="s1")
    [record] = later.watch.records(7)
    assert record.fired and "ENOSPC" in record.detail


def test_a_storage_fault_done_before_an_attach_that_met_no_write_says_no_time_it_does_not_know(watched):
    # `attach` came after: the notes fall before it followed the run, and their times into the job are not known
    spec = "disk-full:node1@t=0..2"
    storage_note(watched, "u", -10.0, spec, "done", key="s1")
    storage_note(watched, "u", -8.0, spec, "ended")
    storage_note(watched, "v", -10.0, "disk-full:node1", "done", key="s2")  # still armed as the job ended
    ended, armed = watched.watch.records(7)
    assert (ended.fired, ended.elapsed_s, ended.ended_s) == (False, None, None)
    assert ended.reason == f"it was armed, but no worker of node1 wrote a file it reaches meanwhile ({STORAGE_REACH})"
    assert armed.reason == f"it was armed, but no worker of node1 wrote a file it reaches after that ({STORAGE_REACH})"


def test_a_torn_write_blames_the_container_it_cut_not_one_restarted_after_it(watched):
    """`fault RUN torn-write` cut node1's write and killed it: an attach that reads the cut blames
    node1's end on it; once node1 restarted after the cut (an elastic job), that container's
    end is its own."""
    storage_note(watched, "t", -5.0, "torn-write:node1", "done", key="s1")
    (watched.run_dir / PROGRESS_SUBDIR).mkdir(exist_ok=True)
    with open(watched.run_dir / PROGRESS_SUBDIR / STORAGE_EVENTS_FILE, "a") as handle:
        handle.write(json.dumps({"kind": "torn-write", "key": "s1", "node": "node1", "file": "ckpt.pt", "rank": 1,
                                 "byte": 10, "size": 100}) + "\n")
    restarted = watched.trackers["node1"]
    restarted.latest_start = watched.now - 1.0  # started again after the cut
    watched.watch.poll()
    assert watched.blame("node1") == ("", None)
    with open(watched.run_dir / PROGRESS_SUBDIR / STORAGE_EVENTS_FILE, "a") as handle:  # the same cut, read anew
        handle.write(json.dumps({"kind": "torn-write", "key": "s1", "node": "node1", "file": "ckpt.pt", "rank": 1,
                                 "byte": 10, "size": 100}) + "\n")
    restarted.latest_start = watched.now - 6.0  # the container the cut was in
    watched.watch.poll()
    assert watched.blame("node1") == ("torn-write:node1", None)


def test_a_run_without_a_directory_has_no_notes_and_no_storage_events_to_read(make_job, tmp_path):
    from pathlib import Path

    watched = Watched(make_job, tmp_path)
    bare = LiveFaultWatch(RunSpec("r", "ddp-r", Path(""), ()), watched.trackers, watched.now, lambda: 7,
                          watched.recorder.say, watched.recorder.record)
    bare.poll()  # nothing to read, and no error for it
    assert bare.records(7) == [] and bare.storage_events is None


def test_a_kill_of_the_store_from_another_terminal_is_its_killer_from_its_start_until_refused(watched):
    watched.note("k", 0.0, "kill:store", "store", "doing")
    assert watched.watch.store_killed_by == "kill:store"  # as it begins: the store's death may be seen first
    assert watched.blame("node0") == ("", None) and watched.blame("node1") == ("", None)  # no node's fault
    watched.note("k", 0.2, "kill:store", "store", "failed", error="409 Conflict: not running")
    assert watched.watch.store_killed_by == ""
    assert watched.recorder.said == ["fault from `python -m orchestrate fault` not done: kill:store: 409 Conflict:"
                                     " not running"]
    watched.note("j", 1.0, "kill:store", "store", "doing")
    watched.note("j", 1.5, "kill:store", "store", "done")
    assert watched.watch.store_killed_by == "kill:store"
    assert watched.recorder.said[-1] == SAID + "kill:store (4.0 s into the job, at step 7)"
    assert [e for e in watched.recorder.events if e[0] == "fault"] == [
        ("fault", {"node": "store", "spec": "kill:store", "action": "kill", "step": 7, "by": "fault",
                   "fault_id": "j", "time": watched.now + 1.0})]
    assert watched.watch.records(7) == [FaultRecord("kill:store", "store", True, 4.0, 7, fired_time=watched.now + 1.0)]


def test_a_store_hung_from_another_terminal_holds_no_job_and_its_end_is_said(watched):
    spec = "pause:store@t=0..5"
    watched.note("p", 0.0, spec, "store", "doing")
    watched.note("p", 0.1, spec, "store", "done")
    assert not watched.watch.holding and watched.watch.store_killed_by == ""  # the workers go on meanwhile
    watched.note("p", 5.0, spec, "store", "ended")
    assert watched.recorder.said[-1] == f"fault ended by `python -m orchestrate fault`: {spec}"
    assert watched.watch.records(7) == [FaultRecord(spec, "store", True, 3.0, 7, ended_s=8.0, fired_time=watched.now)]
