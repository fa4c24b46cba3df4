"""The faults ``fault RUN`` did from another terminal, as the supervisor follows them: read from
the run's notes (:mod:`~orchestrate.faults.live_notes`), said, recorded once each, and blamed on
their node, as the run's own faults are. A storage fault armed from there fired only where a
worker met it (the workers' events of its key, read from the first): one that met no write is
listed as not fired, with why, as the run's own is."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Optional

from orchestrate.config.fault_spec import STORE_TARGET, FaultAction
from orchestrate.faults.live_notes import LiveFaultNote, LiveFaultReader
from orchestrate.faults.scheduler import unmet_storage_fault
from orchestrate.faults.storage import StorageEvent, StorageEvents
from orchestrate.outcome.events import read_events
from orchestrate.outcome.model import FaultRecord, marked_before_first_step
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.supervise.api import NodeTracker, RunSpec

# A fault from another terminal with an end is held at most this long beyond it, should its end
# never be noted (the `fault` process was killed): the hang watch then counts again.
LIVE_HOLD_MARGIN_S = 10.0


class LiveFaultWatch:
    """The live faults of one run.

    Args:
        spec: The run.
        trackers: Its nodes, by name (a node's ``result.fault`` is where its blame goes).
        started_time: The epoch time the supervisor began to follow the run.
        job_began: The epoch time the job began, where it began before that (an ``attach``:
            its nodes came up then); None: as the supervisor began (its launcher's own).
        max_step: The highest training step reported so far.
        say, record: Where its lines and events go.
    """

    def __init__(self, spec: RunSpec, trackers: dict[str, NodeTracker], started_time: float,
                 max_step: Callable[[], Optional[int]], say: Callable[[str], None],
                 record: Callable[..., None], job_began: Optional[float] = None) -> None:
        self.spec = spec
        self.trackers = trackers
        self.started_time = started_time
        self.job_began = started_time if job_began is None else job_began
        self.max_step = max_step
        self.say = say
        self.record = record
        self.reader = LiveFaultReader(spec.run_dir)
        self.done: dict[str, FaultRecord] = {}  # by the notes' fault id
        self.doing: dict[str, LiveFaultNote] = {}  # begun, not yet done or refused
        self.held: dict[str, float] = {}  # those with an end still to come: when it is due at the latest
        self.blamed: dict[str, list[LiveFaultNote]] = {}  # node -> the live faults it is blamed for, latest last
        self.recorded: Optional[set[tuple[str, str]]] = None  # events of them already in events.jsonl
        self.ended: set[str] = set()  # the ids of those whose end was noted
        self.storage_keys: dict[str, str] = {}  # a storage fault's key in the workers' events, by fault id
        self.met: dict[str, StorageEvent] = {}  # the first event of each key the workers recorded
        self.store_killed_by = ""  # the `fault RUN kill:store` that killed the run's own store, if one did
        self.storage_events = StorageEvents(spec.run_dir / PROGRESS_SUBDIR, from_start=True) if spec.run_dir.name \
            else None

    @property
    def holding(self) -> bool:
        """A fault with an end holds the job as asked: no progress is no hang."""
        return bool(self.held)

    def poll(self) -> None:
        """Take the notes and the workers' storage events added since the last poll; let go of
        holds whose end never came."""
        for note in self.reader.take():
            tracker = self.trackers.get(note.node)
            if tracker is not None or note.node == STORE_TARGET:  # (the run's own store is no node)
                self.on_note(tracker, note)
        for event in self.storage_events.poll() if self.storage_events is not None else []:
            self.met.setdefault(event.key, event)
            fired = self.done_with_key(event.key) if event.torn else None
            tracker = self.trackers.get(event.node)
            if fired is None or tracker is None or tracker.result.fault:
                continue
            start = tracker.latest_start or tracker.first_started  # a tear of an earlier container is not this one's
            if start is None or fired.fired_time is None or fired.fired_time >= start:
                tracker.result.fault = fired.spec  # its node's end is the tear's, whoever killed it (`fault RUN` did)
        wall = time.time()
        for fault_id in [i for i, until in self.held.items() if wall > until]:
            del self.held[fault_id]  # its end never came (the `fault` process was killed): held no more

    def records(self, max_step: Optional[int] = None, first_step_time: Optional[float] = None) -> list[FaultRecord]:
        """Every live fault done (those done before the job's first step marked so, where it
        reached ``max_step`` later), then those begun whose `fault` ended before the engine
        answered (when, in steps, is not known of them)."""
        unconfirmed = [FaultRecord(str(n.spec), n.node, True, self.into_job(n.time), fired_time=n.time,
                                   detail="`fault` ended before the engine answered") for n in self.doing.values()]
        done = [self.as_met(fault_id, record) for fault_id, record in self.done.items()]
        return [*marked_before_first_step(done, max_step, first_step_time), *unconfirmed]

    def as_met(self, fault_id: str, record: FaultRecord) -> FaultRecord:
        """A fault done, as far as it was met: a storage fault fired only where a worker met it
        (what it did is its detail); one that met no write did not fire."""
        key = self.storage_keys.get(fault_id)
        if key is None:
            return record
        event = self.met.get(key)
        if event is None:
            return replace(record, fired=False, reason=unmet_storage_fault(record, ended=fault_id in self.ended))
        return replace(record, detail=event.describe(), struck_file=event.file if event.torn else "")

    def spec_of(self, storage_key: str) -> Optional[str]:
        """The live storage fault whose workers' events have ``storage_key``; None: not one of them."""
        done = self.done_with_key(storage_key)
        return done.spec if done is not None else None

    def done_with_key(self, storage_key: str) -> Optional[FaultRecord]:
        """The record of the live storage fault done whose workers' events have ``storage_key``."""
        for fault_id, key in self.storage_keys.items():
            if key == storage_key and fault_id in self.done:
                return self.done[fault_id]
        return None

    def into_job(self, at: float) -> Optional[float]:
        """Seconds into the job of epoch time ``at``; None before the job began (its nodes came
        up), where nothing of the job is known to be before it."""
        elapsed = at - self.job_began
        return elapsed if elapsed >= 0 else None

    def step_at(self, at: float) -> Optional[int]:
        """The job's step at epoch time ``at``: the highest reported so far, where the supervisor
        followed the run then (a fault ``attach`` reads from before it followed: not known)."""
        return self.max_step() if at >= self.started_time else None

    def on_note(self, tracker: Optional[NodeTracker], note: LiveFaultNote) -> None:
        """One note. A node is blamed only for a fault done since its latest start: an earlier
        attempt's fault is not the restarted node's. (``tracker`` None: a fault to the run's own
        store, which a ``kill`` is blamed for as :attr:`store_killed_by`.)"""
        if tracker is None:
            self.on_store_note(note)
            return
        spec, node = str(note.spec), tracker.name
        start = tracker.latest_start or tracker.first_started
        current = start is None or note.time >= start  # both the host's clock; a restart may follow in ms
        if note.phase == "doing":
            self.doing[note.id] = note
            if current:
                self.blame(tracker, note)
            return
        if note.phase == "failed":  # noted as it began, then refused: `fault` said so, and it was not done
            self.doing.pop(note.id, None)  # None: its "doing" line was not a note (logged as such)
            self.unblame(tracker, note)
            self.say(f"fault from `python -m orchestrate fault` not done: {spec}: {note.error}")
            self.record_once(note, "fault-failed", node=node, spec=spec, error=note.error[:500])
            return
        if note.phase == "ended":
            self.ended.add(note.id)
            self.held.pop(note.id, None)
            if note.id in self.done:
                self.done[note.id] = replace(self.done[note.id], ended_s=self.into_job(note.time))
            self.unblame(tracker, note)
            self.say(f"fault ended by `python -m orchestrate fault`: {spec} on {node}")
            self.record_once(note, "fault-ended", node=node, spec=spec, action=note.spec.action.value)
            return
        began = self.doing.pop(note.id, note)  # done: from when it began (blamed then, if noted then)
        elapsed = self.into_job(began.time)
        fired = FaultRecord(spec, node, True, elapsed, self.step_at(began.time) if elapsed is not None else None,
                            fired_time=began.time)
        self.done[note.id] = fired
        if note.storage_key:
            self.storage_keys[note.id] = note.storage_key
        if note.spec.until_seconds is not None:  # `fault RUN` takes no end at a step
            held_s = note.spec.until_seconds - (note.spec.at_seconds or 0.0)
            self.held[note.id] = began.time + held_s + LIVE_HOLD_MARGIN_S
        if current and began is note:  # a rank fault, noted once done
            self.blame(tracker, note)
        done = "armed" if note.spec.action.on_storage else "injected"  # a storage fault fires at a write, if one comes
        self.say(f"fault {done} by `python -m orchestrate fault`: {fired.describe()}")
        self.record_once(began, "fault", node=node, spec=spec, action=note.spec.action.value, step=fired.step,
                         **({"rank": note.spec.rank} if note.spec.rank is not None else {}))

    def on_store_note(self, note: LiveFaultNote) -> None:
        """A note of a fault to the run's own store: said and recorded as a node's is; a kill is
        what killed the store from when it began until it was refused."""
        spec = str(note.spec)
        if note.phase == "doing":
            self.doing[note.id] = note
            if note.spec.action is FaultAction.KILL:
                self.store_killed_by = spec
            return
        if note.phase == "failed":
            self.doing.pop(note.id, None)
            if self.store_killed_by == spec:
                self.store_killed_by = ""
            self.say(f"fault from `python -m orchestrate fault` not done: {spec}: {note.error}")
            self.record_once(note, "fault-failed", node=note.node, spec=spec, error=note.error[:500])
            return
        if note.phase == "ended":
            self.ended.add(note.id)
            self.held.pop(note.id, None)
            if note.id in self.done:
                self.done[note.id] = replace(self.done[note.id], ended_s=self.into_job(note.time))
            self.say(f"fault ended by `python -m orchestrate fault`: {spec}")
            self.record_once(note, "fault-ended", node=note.node, spec=spec, action=note.spec.action.value)
            return
        began = self.doing.pop(note.id, note)
        elapsed = self.into_job(began.time)
        fired = FaultRecord(spec, note.node, True, elapsed,
                            self.step_at(began.time) if elapsed is not None else None, fired_time=began.time)
        self.done[note.id] = fired
        self.say(f"fault injected by `python -m orchestrate fault`: {fired.describe()}")
        self.record_once(began, "fault", node=note.node, spec=spec, action=note.spec.action.value, step=fired.step)

    def blame(self, tracker: NodeTracker, note: LiveFaultNote) -> None:
        """The node's fault, for the judge, the restart policy and the hang watch (a torn write's
        only once it tears, as for the run's own)."""
        if note.spec.action is FaultAction.TORN_WRITE:
            return
        tracker.result.fault = str(note.spec)
        if note.spec.action is FaultAction.LOSE:  # for good: no restart brings it back
            tracker.result.lost = str(note.spec)
        if note.spec.action.on_rank:
            tracker.result.culprit_rank = note.spec.rank
        blamed = self.blamed.setdefault(tracker.name, [])
        if note not in blamed:
            blamed.append(note)

    def unblame(self, tracker: NodeTracker, note: LiveFaultNote) -> None:
        """The node is well again, or the fault was never done: only this fault's blame goes, and
        the one before it that still stands (the same spec done before) is the node's again."""
        blamed = self.blamed.get(tracker.name, [])
        mine = [n for n in blamed if n.id == note.id]
        if not mine:
            return
        ours = tracker.result.fault == str(blamed[-1].spec)  # not since replaced by the run's own fault
        if tracker.result.lost == str(note.spec):  # a loss never done (or undone) took nothing
            tracker.result.lost = ""
        for found in mine:
            blamed.remove(found)
        start = tracker.latest_start or tracker.first_started  # one done to an earlier container stays gone
        standing = [n for n in blamed if start is None or n.time >= start]
        if ours:
            before = standing[-1] if standing else None
            tracker.result.fault = str(before.spec) if before else ""
            tracker.result.culprit_rank = before.spec.rank if before and before.spec.action.on_rank else None

    def record_once(self, note: LiveFaultNote, kind: str, **fields: Any) -> None:
        """Record a live fault's event once, at its note's time, however often the notes are read
        (every ``attach`` reads them from the first)."""
        if self.recorded is None:
            self.recorded = {(e.get("event"), e.get("fault_id")) for e in read_events(self.spec.run_dir)
                             if e.get("by") == "fault"}
        if (kind, note.id) in self.recorded:
            return
        self.recorded.add((kind, note.id))
        self.record(kind, **fields, by="fault", fault_id=note.id, time=note.time)
