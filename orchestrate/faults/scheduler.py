"""The fault scheduler: fires each requested fault when its time or training step comes.

``@step=N`` faults are exact: the ranks that reach step N (or the first step past it that they
report) wait on the progress channel until the fault is injected (:func:`mark_fired` lets them
go on), so no rank gets past step N first. ``@step=+N`` faults count in an attempt: each is armed when
every fault before it in the list has fired, and then counts the steps of the attempts that
began after that (the ranks of such an attempt wait at its N-th step the same way). Used by the
supervisor of a Compose run and by the Slurm backend.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Collection, Optional, Sequence

from orchestrate.config.fault_spec import STORE_FELT_S, FaultAction, FaultSpec
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import OrchestrateError
from orchestrate.faults.storage import STORAGE_REACH
from orchestrate.node.progress import TRIGGERS_FILE
from orchestrate.outcome.model import FaultRecord, Recovery, anew_fields
from orchestrate.text import times

# How long a run with @step faults may run with no progress reported before we say so.
NO_PROGRESS_WARNING_S = 30.0


def injection_errors() -> tuple[type[BaseException], ...]:
    """What an injection into a node that already ended raises (an engine error, a network
    that could not be found)."""
    return (*engine_errors(), OrchestrateError)


class FaultScheduler:
    """Holds the faults still to fire; :meth:`fire_due` injects those whose time has come, and
    undoes those whose end has come.

    ``inject`` does a fault and returns the node it landed on (a rank fault finds its node
    then); ``undo`` ends a lasting fault on that node.
    """

    def __init__(self, faults: tuple[FaultSpec, ...], inject: Callable[[FaultSpec], str], progress_dir: Path,
                 say: Callable[[str], None], record: Callable[..., None],
                 undo: Optional[Callable[[FaultSpec, str], None]] = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.faults = tuple(faults)
        self.to_fire = list(range(len(self.faults)))  # the faults still to fire, by their place in the list
        self.armed: dict[int, float] = {}  # @step=+N faults, by their place: the epoch time they were armed
        self.wall = wall
        self.inject = inject
        self.undo = undo
        self.progress_dir = progress_dir
        self.say = say
        self.record = record
        self.fired: list[FaultRecord] = []
        self.failed: list[FaultRecord] = []
        self.lasting: list[tuple[FaultSpec, str]] = []  # fired, with an end still to come
        self.stopped_first: list[FaultSpec] = []  # still to fire when the run was stopped
        self.held_at_stop: set[str] = set()  # fired, their end still to come when the run was stopped
        self.warned_no_progress = False
        self.notes: dict[str, list[str]] = {}  # what each fault that fired did, by its spec, every time it did it

    @property
    def pending(self) -> list[FaultSpec]:
        """The faults still to fire, in the order asked."""
        return [self.faults[i] for i in self.to_fire]

    def cancel(self, on_nodes: Sequence[str] = (), live: Optional[Collection[str]] = None) -> None:
        """Fire nothing more and end nothing more (the run is being stopped): the faults still
        held then are said so (the nodes' stop lets them go): those with an end to come, on a
        node among ``live``, the nodes still running (None: every node; the store's are its
        own), and those without one that last (a pause, a disconnect, a hung rank) among
        ``on_nodes``, the faults the nodes still running suffer now. A node that exited before
        the stop held nothing for the stop to let go."""
        self.held_at_stop.update(str(fault) for fault, node in self.lasting
                                 if live is None or fault.on_store or node in live)
        fired = {record.spec for record in self.fired}
        self.held_at_stop.update(str(f) for f in self.faults if str(f) in on_nodes and str(f) in fired
                                 and f.action.lasting and not f.has_end)
        self.stopped_first.extend(self.pending)
        self.to_fire.clear()
        self.lasting.clear()

    def end_early(self, which: Callable[[FaultSpec], bool], elapsed_s: float) -> None:
        """End now, before their end, the lasting faults that ``which`` takes (the run is being
        stopped: what they hold is let go first, and said)."""
        for fault, node in [(f, n) for f, n in self.lasting if which(f)]:
            self.lasting.remove((fault, node))
            self.end(fault, node, elapsed_s, early=True)

    @property
    def waiting(self) -> bool:
        """Faults still to fire, or to end."""
        return bool(self.pending or self.lasting)

    @property
    def step_faults(self) -> list[FaultSpec]:
        return [f for f in self.pending if f.at_step is not None]

    def announce(self) -> None:
        """Say how step faults fire (before the job's first step)."""
        if self.step_faults:
            self.say(f"{' '.join(str(f) for f in self.step_faults)}: fires when a worker reaches that step (its"
                     " optimizer's steps, counted, or its own orchestrate.progress.report(step)); ranks wait at"
                     " that step until the fault is injected")

    def arm(self) -> None:
        """Arm each ``@step=+N`` fault whose faults before it have all fired (or failed), and
        list it for the ranks of the attempts to come."""
        newly = [i for i in self.to_fire if self.faults[i].in_attempt and i not in self.armed
                 and not any(j < i for j in self.to_fire)]
        if not newly:
            return
        for i in newly:
            self.armed[i] = self.wall()
        write_triggers(self.progress_dir, job_step_triggers(self.faults),
                       [(self.faults[i].at_step or 0, attempt_key(i)) for i in self.armed if i in self.to_fire])

    def attempt_steps_of(self, index: int, attempt_steps: Callable[[float], Optional[int]]) -> Optional[int]:
        """The steps done in the attempt an armed ``@step=+N`` fault counts in (None: not armed,
        or no such attempt yet)."""
        return attempt_steps(self.armed[index]) if index in self.armed else None

    def fire_due(self, elapsed_s: float, step: Optional[int],
                 attempt_steps: Callable[[float], Optional[int]] = lambda since: None,
                 said: Callable[[], tuple[Optional[int], Optional[Recovery]]] = lambda: (None, None)
                 ) -> list[FaultSpec]:
        """Inject every fault whose time or step has come, and undo every fault whose end has
        come; return those injected. ``attempt_steps(since)`` is the most steps done in an
        attempt begun after ``since`` (epoch time), for ``@step=+N`` faults. ``said()``: where the
        attempt since an elastic recovery counts its steps from 1 again, its step and that
        recovery, said with the fault ((None, None): ``step`` is the job's)."""
        injected = []
        self.arm()
        due = [i for i in self.to_fire if self.faults[i].due(elapsed_s, step, self.attempt_steps_of(i, attempt_steps))]
        try:
            for index in due:
                injected += self.fire(index, elapsed_s, step, *said())
        finally:  # the ranks held at a step go on once every fault of that step is in (or failed)
            for index in due:
                fault = self.faults[index]
                if fault.in_attempt:
                    mark_fired(self.progress_dir, attempt_key(index))
                elif fault.at_step is not None:
                    mark_fired(self.progress_dir, fault.at_step)
        for fault, node in [(f, n) for f, n in self.lasting if f.end_due(elapsed_s, step)]:
            self.lasting.remove((fault, node))
            self.end(fault, node, elapsed_s)
        if injected:
            self.arm()  # the faults that count in the next attempt, listed before it begins
        return injected

    def fire(self, index: int, elapsed_s: float, step: Optional[int], anew_step: Optional[int] = None,
             anew_after: Optional[Recovery] = None) -> list[FaultSpec]:
        """Inject one due fault; say and record it, or why it could not be injected. Returns
        it, or nothing when it failed. ``anew_after``: the attempt it strikes counts its steps from
        1 again since that recovery, and is at ``anew_step`` of them, the step said."""
        fault = self.faults[index]
        self.to_fire.remove(index)
        try:
            node = self.inject(fault) or fault.node
        except injection_errors() as exc:  # a node that already ended cannot be faulted
            reason = f"could not be injected: {describe(exc)}"
            self.say(f"fault {fault} {reason}")
            self.record("fault-failed", node=fault.node, spec=str(fault), error=str(exc)[:500])
            self.failed.append(FaultRecord(str(fault), fault.node, fired=False, reason=reason))
            return []
        fired = FaultRecord(str(fault), node, True, elapsed_s, anew_step if anew_after is not None else step,
                            fired_time=self.wall(), counted_anew=anew_after)
        self.fired.append(fired)
        if fault.has_end:
            self.lasting.append((fault, node))
        self.say(f"fault injected: {fired.describe()}")
        self.record("fault", node=node, spec=str(fault), action=fault.action.value, step=fired.step,
                    **anew_fields(fired.counted_anew), **({"rank": fault.rank} if fault.rank is not None else {}))
        return [fault]

    def end(self, fault: FaultSpec, node: str, elapsed_s: float, early: bool = False) -> None:
        """Undo a lasting fault whose end has come (``early``: the run is being stopped first); say
        so, or why it could not be undone. A store outage that ended as asked before the job could
        feel it says so (:func:`unfelt_store_outage`), then and in the summary."""
        try:
            if self.undo is not None:
                self.undo(fault, node)
        except injection_errors() as exc:  # the node ended meanwhile: nothing left to undo
            self.say(f"fault {fault} could not be ended: {describe(exc)}")
            self.record("fault-end-failed", node=node, spec=str(fault), error=str(exc)[:500])
            return
        began_s = next((r.elapsed_s for r in self.fired if r.spec == str(fault) and r.ended_s is None), None)
        self.fired = [replace(r, ended_s=elapsed_s) if r.spec == str(fault) and r.ended_s is None else r
                      for r in self.fired]
        unfelt = unfelt_store_outage(fault, elapsed_s - began_s) if began_s is not None and not early else ""
        self.say(f"fault ended: {fault} ({elapsed_s:.1f} s into the job){f': {unfelt}' if unfelt else ''}")
        if unfelt:
            self.note(fault, unfelt)
        self.record("fault-ended", node=node, spec=str(fault), action=fault.action.value)

    def note(self, fault: FaultSpec, detail: str, struck: str = "") -> None:
        """Add what a fault that fired did (a torn write's file and byte) to its record, each
        distinct thing once (:func:`said_once`: a full disk that failed the same write in 8
        attempts says it once, with ``8 times``); ``struck``: the file it cut now (a torn write
        strikes when its node is killed, later than it fired)."""
        now = self.wall() if struck else None
        notes = self.notes.setdefault(str(fault), [])
        notes += [detail] if detail else []
        self.fired = [replace(r, detail=said_once(notes),
                              struck_time=r.struck_time if r.struck_time is not None else now,
                              struck_file=r.struck_file or struck)
                      if r.spec == str(fault) else r for r in self.fired]

    def records(self, elapsed_s: float, step: Optional[int], progress_seen: bool) -> list[FaultRecord]:
        """Every fault asked for: those that fired, then those that did not, with why (the job
        ending ``elapsed_s`` in, having reached training ``step``). A storage fault that was
        armed but met no write did not fire: a torn write that cut no file, a full disk that
        failed no write while it lasted."""
        fired, unfired = [], []
        on_storage = {str(f) for f in self.faults if f.action.on_storage}
        for record in self.fired:
            if record.spec in on_storage and not record.detail:  # (so it held nothing at the stop either)
                unfired.append(replace(record, fired=False, reason=unmet_storage_fault(record)))
            elif record.spec in self.held_at_stop and record.ended_s is None:
                fired.append(replace(record, held_at_stop=True))
            else:
                fired.append(record)
        for index in self.to_fire:
            fault = self.faults[index]
            if fault.in_attempt and index not in self.armed:
                reason = "the fault before it never fired"
            elif fault.in_attempt:
                reason = (f"no attempt that began after the fault before it reached {fault.at_step} step(s)")
            elif fault.at_step is not None and not progress_seen:
                reason = ("no worker reported a training step: no optimizer stepped (its steps are counted), and the"
                          " script reports none with orchestrate.progress.report(step); a fault at a time (@t=S) needs"
                          " neither")
            elif fault.at_step is not None:
                reason = f"the workers reached step {step} only, not step {fault.at_step}"
            else:
                reason = f"the job ended {elapsed_s:.1f} s in, before t={fault.at_seconds or 0:g} s"
            unfired.append(FaultRecord(str(fault), fault.node, fired=False, reason=reason))
        unfired += [FaultRecord(str(f), f.node, fired=False, reason="the run was stopped before it fired")
                    for f in self.stopped_first]
        return [*fired, *self.failed, *unfired]

    def warn_if_no_progress(self, progress_seen: bool, since_first_worker_s: Optional[float]) -> None:
        """Say once that step faults cannot fire when no worker has reported a step for long."""
        if (self.warned_no_progress or progress_seen or not self.step_faults or since_first_worker_s is None
                or since_first_worker_s <= NO_PROGRESS_WARNING_S):
            return
        self.warned_no_progress = True
        steps = " ".join(str(f) for f in self.step_faults)
        self.say(f"no worker has reported a training step in {NO_PROGRESS_WARNING_S:.0f} s: {steps} cannot"
                 " fire; no optimizer stepped (its steps are counted), and the script reports none with"
                 " orchestrate.progress.report(step)")


def unfelt_store_outage(fault: FaultSpec, held_s: float) -> str:
    """For a pause or disconnect of the run's store that held less than
    :data:`~orchestrate.config.fault_spec.STORE_FELT_S` (pure): that the job may not have felt it;
    "" for any other fault, or one that held long enough."""
    if not fault.on_store or fault.action not in (FaultAction.PAUSE, FaultAction.DISCONNECT) or held_s >= STORE_FELT_S:
        return ""
    return (f"the store was out {held_s:.1f} s only, less than the {STORE_FELT_S:g} s between the torchrun agents'"
            " keep-alive calls to it, so the job may have made no call to it while it lasted; give it an end"
            f" {STORE_FELT_S:g} s or more after its start (chaos draws such outages so)")


def said_once(details: Sequence[str]) -> str:
    """``details`` joined, each distinct one once, in the order first met, with how many times where
    it came more than once (pure): ``rank 0's write to ckpt.pt failed: ... (ENOSPC), 8 times``."""
    return "; ".join(detail + (f", {times(count)}" if count > 1 else "") for detail, count in Counter(details).items())


def unmet_storage_fault(record: FaultRecord, ended: bool = False) -> str:
    """Why a storage fault that was armed did not fire (pure): no worker of its node wrote a
    file it reaches while it was armed (from ``record.elapsed_s`` into the job, until its end,
    ``record.ended_s``, if it had one), and what such a fault reaches. ``ended``: its end came
    where when is not known (an ``attach`` that came later knows no time of a fault done before
    it); a time not known is left out."""
    armed = "it was armed" + (f" {record.elapsed_s:.1f} s into the job" if record.elapsed_s is not None else "")
    if record.ended_s is not None:
        armed += f" until {record.ended_s:.1f} s"
    meanwhile = "meanwhile" if ended or record.ended_s is not None else "after that"
    return f"{armed}, but no worker of {record.node} wrote a file it reaches {meanwhile} ({STORAGE_REACH})"


def attempt_key(index: int) -> str:
    """The trigger key of the ``@step=+N`` fault at ``index`` in the list."""
    return f"a{index}"


def job_step_triggers(faults: Sequence[FaultSpec]) -> list[int]:
    """The job's steps at which ranks wait for a fault (``@step=N``; not ``@step=+N``)."""
    return [f.at_step for f in faults if f.at_step is not None and not f.in_attempt]


def write_triggers(directory: Path, steps: list[int], in_attempt: Sequence[tuple[int, str]] = ()) -> None:
    """List the steps at which ranks wait for a fault (before the job starts), and the steps
    into an attempt (``(N, key)``) for the attempts to come. Written whole, then renamed: a rank
    that reads it never sees half of it."""
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / (TRIGGERS_FILE + ".tmp")
    temporary.write_text(json.dumps({"steps": sorted(set(steps)), "in_attempt": [list(t) for t in in_attempt]}))
    temporary.replace(directory / TRIGGERS_FILE)


def mark_fired(directory: Path, key: object) -> None:
    """Let the ranks waiting for fault ``key`` (its step, or its :func:`attempt_key`) go on: it
    has been injected."""
    (directory / f"fired-{key}").touch()
