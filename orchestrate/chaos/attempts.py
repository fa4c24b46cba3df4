"""What each fault of a disturbed run struck, and what the job redid after it (pure).

An elastic job that loses a node starts again: a new *attempt*, whose ranks are new worker
processes. Every progress record carries its worker's attempt token, so one rank's records
(the lowest rank that reported steps; rank 0 is in every attempt) split into the job's
attempts, in the order they began.

Where an attempt started from (its *offset*: the step before its first):

- steps the script reports itself are the job's own numbers: the step before the first;
- a ``resumed`` record says it (the script's ``report_resumed``, or Adam's carried step count);
- steps the start-up hook counted without a carried count start at 1 in every attempt: the
  first attempt starts from 0, and the last one of a job that ended where the undisturbed run
  ended did the reference's steps less its own; where that is every step (the job started over
  although it had restarted before), each attempt between them that counted from 1 with no
  carried count started over too: the same script took the same path on each restart;
  any other is unknown.

An attempt after a fault that fell before the job had written anything in its work directory
started from the beginning: there was nothing to resume from.

A fault *struck* the attempt that was running when it fired (or, fired before that attempt's
first step, its start-up); a torn write strikes at the write it cuts, which may come steps after
it was armed, and the file it cut was no save. The steps it had done are those reported by then,
and the step the launcher saw as it fired, where the rank read here reported it a moment later
(the launcher fires on the first rank's report). A fault that kills a node or a worker ends the attempt it struck; one
that lasts (a pause, a slow node, a split network) ends it where that attempt reported no step
after it and a later attempt began. The *next* attempt of a fault that ended its attempt is the
first that began after it; one that did not end its attempt has none (the job went on). Steps redone
for a fault are where the struck attempt had got less where the next one started from; in all,
the steps of every attempt less the undisturbed run's.

What the attempt after a fault loaded: the files any rank read with ``torch.load``, and the
checkpoint directories it read with ``torch.distributed.checkpoint``'s load (``dcp.load``), after
the fault struck and before the next one did (the workers' start-up hook says each, once per
process), and which the job had saved by ``torch.save`` or ``dcp.save`` before it (a checkpoint by
its kind): whether a job that started over read its save back (and ignored its step) or never
looked for it. A ``dcp.load`` of a directory reads every file the job wrote in it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from orchestrate.config.fault_spec import parse_fault
from orchestrate.errors import UsageError
from orchestrate.outcome.model import FaultRecord, WrittenFile
from orchestrate.outcome.progress import ProgressRecord
from orchestrate.text import listed


@dataclass
class Attempt:
    """One attempt of the job, as one rank saw it.

    Attributes:
        token: Its worker process's token.
        first_time: Epoch time of its first record.
        steps: Its distinct steps in the order reported, with their epoch times.
        resumed: The step it said it resumed from, if it said so.
        counted: Its steps were counted by the start-up hook (the script reported none).
        offset: The job's step before its first (0: from the beginning; None: unknown).
    """

    token: str
    first_time: float
    steps: list[tuple[int, float]] = field(default_factory=list)
    resumed: Optional[int] = None
    counted: bool = False
    offset: Optional[int] = None

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def numbered_as_the_job(self) -> bool:
        """Its step numbers are the job's own (not counted from 1 in this attempt)."""
        return not self.counted or self.resumed is not None or self.offset == 0

    def steps_by(self, time: float) -> list[tuple[int, float]]:
        return [(s, t) for s, t in self.steps if t <= time]

    def job_step(self, step: int) -> Optional[int]:
        """Its ``step`` as the job's step number (None: unknown)."""
        if self.numbered_as_the_job:
            return step
        return None if self.offset is None else self.offset + step


def one_ranks_records(records: Iterable[ProgressRecord]) -> list[ProgressRecord]:
    """The records of the lowest rank that reported steps (every rank's attempts are the same)."""
    records = list(records)
    ranks = sorted({r.rank for r in records if r.step is not None})
    return [r for r in records if r.rank == ranks[0]] if ranks else []


def attempts_of(records: Iterable[ProgressRecord], reference_steps: Optional[int] = None,
                completed: bool = False) -> list[Attempt]:
    """The job's attempts, in the order they began (see the module's text); ``reference_steps``:
    the undisturbed run's steps, ``completed``: the job ended where it ended."""
    attempts: dict[str, Attempt] = {}
    for record in sorted(one_ranks_records(records), key=lambda r: r.time):
        if record.init_call is not None or record.init_asked is not None or record.loaded is not None:
            continue  # the start-up (its group, the save it loads), not the attempt's work
        if record.dcp_saved:
            continue  # a checkpoint directory dcp.save wrote, not a step
        attempt = attempts.setdefault(record.attempt, Attempt(record.attempt, record.time))
        if record.resumed is not None:
            attempt.resumed = record.resumed
        if record.step is not None and all(record.step != s for s, _ in attempt.steps):
            attempt.steps.append((record.step, record.time))
            attempt.counted = attempt.counted or record.counted
    ordered = sorted((a for a in attempts.values() if a.steps or a.resumed is not None), key=lambda a: a.first_time)
    for index, attempt in enumerate(ordered):
        attempt.offset = starting_point(attempt, first=index == 0, last=index == len(ordered) - 1,
                                        reference_steps=reference_steps if completed else None)
    if started_over_at_the_end(ordered):
        for attempt in ordered[1:-1]:
            if attempt.offset is None and attempt.counted and attempt.resumed is None:
                attempt.offset = 0
    return ordered


def started_over_at_the_end(ordered: list[Attempt]) -> bool:
    """Whether the last of several attempts, counted from 1 with no carried count, is known to
    have done every step of the job again (it started from the beginning)."""
    last = ordered[-1] if len(ordered) > 1 else None
    return last is not None and last.counted and last.resumed is None and last.offset == 0


def starting_point(attempt: Attempt, *, first: bool, last: bool, reference_steps: Optional[int]) -> Optional[int]:
    """The job's step before the attempt's first (see the module's text)."""
    if attempt.resumed is not None:
        return attempt.resumed
    if not attempt.counted:
        return attempt.steps[0][0] - 1 if attempt.steps else None
    if first:
        return 0
    if last and reference_steps is not None:
        return max(0, reference_steps - attempt.count)
    return None


def job_steps(attempt: Attempt) -> Optional[int]:
    """The job's last step in an attempt that ran alone (the undisturbed run's count)."""
    if not attempt.steps:
        return None
    return attempt.job_step(max(step for step, _ in attempt.steps))


TORCH_SAVE, TORCH_LOAD = "torch.save", "torch.load"
DCP_SAVE, DCP_LOAD = "dcp.save", "dcp.load"  # torch.distributed.checkpoint's, into and from a directory


@dataclass(frozen=True)
class Load:
    """A file a rank loaded with ``torch.load``, or a checkpoint directory it loaded with
    ``dcp.load`` (``by``): its path as the workers name it (relative to the work directory where it
    is in it; "" a stream, whose file is not known), when (epoch time), and the rank."""

    path: str
    time: float
    rank: int
    by: str = TORCH_LOAD


def loads_of(records: Iterable[ProgressRecord]) -> list[Load]:
    """Every rank's loads, in the order they were made."""
    return sorted((Load(r.loaded, r.time, r.rank, DCP_LOAD if r.loaded_by_dcp else TORCH_LOAD)
                   for r in records if r.loaded is not None), key=lambda l: l.time)


def torch_saves_of(records: Iterable[ProgressRecord]) -> list[tuple[str, float]]:
    """The files the ranks said ``torch.save`` wrote (path, epoch time), in the order said."""
    return sorted(((r.wrote, r.time) for r in records if r.wrote and r.torch_save), key=lambda saved: saved[1])


def dcp_saves_of(records: Iterable[ProgressRecord]) -> list[tuple[str, float]]:
    """The checkpoint directories the ranks said ``dcp.save`` wrote (path, epoch time), in the order said."""
    return sorted(((r.dcp_saved, r.time) for r in records if r.dcp_saved), key=lambda saved: saved[1])


def inside(path: str, directory: str) -> bool:
    """Whether ``path`` is a file under ``directory`` (both named as the workers name them; pure)."""
    return path.startswith(directory.rstrip("/") + "/")


@dataclass(frozen=True)
class Strike:
    """What one fault that fired struck, and what came after it.

    Attributes:
        spec: The fault.
        at_s: Seconds into the job it fired; ``at_step`` the step then (the launcher's view).
        steps_done: Steps the struck attempt had done by then (0: it struck in start-up).
        training_s: Seconds from that attempt's first step to the fault (None: in start-up).
        saved: The files the job had written in its work directory by then, the newest last
            (None: not followed).
        restarted: A new attempt began after it.
        resumed_from: Where that attempt started (0: the beginning; None: unknown).
        redone: The steps the next attempt did again (None: unknown).
        struck_step: The job's step when it struck, where that was later than it fired (a torn
            write's cut; None: it struck as it fired, or the step is not known).
        last_save: The file of ``saved`` to name: the newest still there when the run ended (a
            temporary file seen before it was renamed onto the save is no save); None: none was,
            and the newest is named.
        cut_save: A torn write's file, where the job had written it whole before the cut: the
            save it would have resumed from, cut (so not in ``saved``); "" for none.
        loaded: The files the ranks loaded with ``torch.load`` after it, before the next fault
            struck (None: loads were not followed).
        torch_save: The newest checkpoint by its kind saved before it: a file of ``saved`` written
            by ``torch.save`` (where that was a temporary file renamed onto the save, the save), or a
            directory ``dcp.save`` wrote, whichever was said last; "" for none.
        saved_by: What saved ``torch_save``: ``torch.save`` or ``dcp.save``.
        next_counted: The next attempt's steps were counted by the workers' start-up hook: numbered
            by the optimizer's count (its carried step), not by the script.
    """

    spec: str
    at_s: Optional[float]
    at_step: Optional[int]
    steps_done: int
    training_s: Optional[float]
    saved: Optional[tuple[str, ...]]
    restarted: bool
    resumed_from: Optional[int]
    redone: Optional[int]
    struck_step: Optional[int] = None
    last_save: Optional[str] = None
    cut_save: str = ""
    loaded: Optional[tuple[Load, ...]] = None
    torch_save: str = ""
    saved_by: str = TORCH_SAVE
    next_counted: bool = False

    @property
    def after_a_save(self) -> bool:
        return bool(self.saved)

    @property
    def named_save(self) -> Optional[str]:
        """The file said to have been saved before it (None: nothing was, or not followed)."""
        return self.last_save or (self.saved[-1] if self.saved else None)

    @property
    def resumed(self) -> Optional[bool]:
        """It was followed by an attempt that resumed (None: not known, or none followed)."""
        if not self.restarted or self.resumed_from is None:
            return None
        return self.resumed_from > 0

    @property
    def started_over(self) -> bool:
        """The attempt after it restarted from the beginning although the job had saved."""
        return self.after_a_save and self.resumed is False

    @property
    def loaded_saves(self) -> list[Load]:
        """The loads after it of files the job had written before it (its work directory's, a
        ``dcp.load`` of a directory that holds some, or the checkpoint it saved by its kind: one under
        ``/shared`` is not in the work directory's)."""
        return [load for load in self.loaded or ()
                if load.path and (load.path in (self.saved or ()) or self.holds_a_save(load)
                                  or load.path == self.torch_save)]

    def holds_a_save(self, load: Load) -> bool:
        """Whether ``load`` read a directory in which the job had written files before it (a ``dcp.load``'s)."""
        return any(inside(path, load.path) for path in self.saved or ())

    @property
    def loader(self) -> str:
        """What reads back the checkpoint it saved by its kind: ``torch.load``, or ``dcp.load``."""
        return DCP_LOAD if self.saved_by == DCP_SAVE else TORCH_LOAD

    @property
    def resume_skipped(self) -> bool:
        """It started over though the job had saved by ``torch.save`` or ``dcp.save``, and no rank
        loaded after it any file the job had written, nor a stream (a file not known): its resume
        never ran."""
        return (self.started_over and self.loaded is not None and bool(self.torch_save)
                and not self.loaded_saves and not any(load.path == "" for load in self.loaded))

    @property
    def loaded_and_started_over(self) -> bool:
        """It started over though a rank loaded after it a file the job had written before it."""
        return self.started_over and bool(self.loaded_saves)

    def describe_struck(self) -> str:
        if self.steps_done == 0:
            return "in its start-up (no step yet)"
        training = "" if self.training_s is None else f", {self.training_s:.1f} s training"
        return f"{self.steps_done} step(s){training}"

    def describe_saved(self) -> str:
        """The row's *saved before it*: the save named, and how many more files the job had written.
        A ``dcp.save``'s files are named by their directory (``ckpt/step_6/``), as its load is."""
        if self.saved is None:
            return "unknown"
        if not self.saved:
            return f"only {self.cut_save}, the file it cut" if self.cut_save else "no"
        named, others = self.named_save, len(self.saved) - 1
        if self.saved_by == DCP_SAVE and named is not None and inside(named, self.torch_save):
            named = self.torch_save.rstrip("/") + "/"
            others = sum(not inside(path, self.torch_save) for path in self.saved)
        more = f" (+{others} more)" if others else ""
        return f"yes: {named}{more}"

    def describe_next(self, skipped: int = 0) -> str:
        """The row's *next attempt*; ``skipped``: the undisturbed run's steps the verdict says the
        job never did after this resume (said beside those redone, so that the row does not read as
        a clean resume), numbered as the optimizer counts them where its steps were counted."""
        if not self.restarted:  # (a fault that ends its attempt, whose next ones reported no step: they failed early)
            return "no new attempt" if lasts(self.spec) else "no new attempt reported a step"
        if self.resumed_from is None:
            return ("started from a step not known (its steps were counted from 1 and no rank said where it resumed:"
                    " an optimizer that carries no step count, or one whose state was not loaded)")
        redone = "" if self.redone is None else f": {self.redone} step(s) redone"
        if self.loaded_and_started_over:
            return f"restarted from the beginning though it loaded {describe_loads(self.loaded_saves)}{redone}"
        if self.resume_skipped:
            return f"restarted from the beginning, loading no file it had written{redone}"
        if self.resumed_from == 0:
            return f"restarted from the beginning{redone}"
        loaded = f" ({describe_loads(self.loaded_saves)})" if self.loaded_saves else ""
        if skipped:
            redone = (f": {'?' if self.redone is None else self.redone} step(s) redone, {skipped} skipped"
                      + (f" ({OPTIMIZERS_COUNT})" if self.next_counted else ""))
        return f"resumed from step {self.resumed_from}{loaded}{redone}"


# Whose numbering a counted attempt's steps are in, where a script's own may differ (a loop that skipped a step).
OPTIMIZERS_COUNT = "steps by the optimizer's count"


def describe_loads(loads: list[Load]) -> str:
    """``ckpt.pt, loaded by rank 0``, ``model.pt and 1 more, loaded by ranks 0, 1`` (pure)."""
    files = list(dict.fromkeys(load.path or "a stream" for load in loads))
    ranks = sorted({load.rank for load in loads})
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + listed([str(r) for r in ranks], 3)
    return f"{listed(files, 1)}, loaded by {who}"


def strikes(faults: list[FaultRecord], attempts: list[Attempt], writes: Optional[list[WrittenFile]],
            records: Optional[list[ProgressRecord]] = None) -> list[Strike]:
    """What every fault that fired struck, in the order they fired, and what the ranks loaded
    after each (``records``: the run's progress records; None: loads not followed). An attempt
    found to have started from the beginning (nothing was saved before the fault that ended the
    one before) gets that offset, 0, so a later fault striking it knows how far it had got."""
    fired = sorted((f for f in faults if f.fired and f.fired_time is not None), key=struck_at)
    loads = loads_of(records) if records is not None else None
    torch_saves = torch_saves_of(records or [])
    dcp_saves = dcp_saves_of(records or [])
    result = []
    ended_before: Optional[float] = None  # when the fault before fired, where it ended its attempt
    for index, fault in enumerate(fired):
        at = struck_at(fault)
        until = struck_at(fired[index + 1]) if index + 1 < len(fired) else float("inf")
        running = [a for a in attempts if a.first_time <= at]
        struck = running[-1] if running else None
        if struck is not None and ended_before is not None and ended_before >= struck.first_time:
            struck = None  # the fault before ended that attempt: this one fell in the next one's start-up
        done = steps_done_by(struck, fault, at) if struck is not None else []
        following = [a for a in attempts if a.first_time > at]
        ended = bool(following) and ended_its_attempt(fault.spec, struck, at)
        ended_before = at if ended else None
        after = following[0] if ended else None
        reached = struck.job_step(done[-1][0]) if struck is not None and done else None
        redone = None
        if after is not None and after.offset is not None and reached is not None:
            redone = max(0, reached - after.offset)
        before = [w for w in writes or [] if w.time <= at and w.path != fault.struck_file]
        saved = None if writes is None else tuple(w.path for w in before)
        kept = [w.path for w in before if w.kept]
        start = after.offset if after is not None else None
        if after is not None and start is None and saved == ():
            start = after.offset = 0  # nothing saved yet: nothing to resume from (its steps are the job's)
            redone = reached
        # the torn file, first written before the fault was armed (the write it cut came after): a whole save, cut
        cut = fault.struck_file if fault.struck_file and any(
            w.path == fault.struck_file and w.time < (fault.fired_time or 0.0) for w in writes or []) else ""
        saved_by_torch = [(path, time) for path, time in torch_saves if time <= at]
        named = [path for path in kept if path in dict(saved_by_torch)]
        # a temporary file torch.save wrote, then renamed: the save is a kept file first seen after it was written
        gone = [time for path, time in saved_by_torch if path not in kept]
        renamed = [w.path for w in before if w.kept and any(w.time >= time for time in gone)]
        torch_save = (named or renamed or [path for path, _ in saved_by_torch] or [""])[-1]
        saved_by_dcp = [(path, time) for path, time in dcp_saves if time <= at]
        saved_by = TORCH_SAVE
        if saved_by_dcp and (not saved_by_torch or saved_by_dcp[-1][1] > saved_by_torch[-1][1]):  # said last
            torch_save, saved_by = saved_by_dcp[-1][0], DCP_SAVE
        result.append(Strike(fault.spec, fault.elapsed_s, fault.step, len(done),
                             at - done[0][1] if done else None, saved, after is not None, start, redone,
                             reached if fault.struck_time is not None else None, kept[-1] if kept else None,
                             cut_save=cut or "",
                             loaded=None if loads is None else tuple(l for l in loads if at < l.time <= until),
                             torch_save=torch_save, saved_by=saved_by,
                             next_counted=after is not None and after.counted))
    return result


def steps_done_by(attempt: Attempt, fault: FaultRecord, at: float) -> list[tuple[int, float]]:
    """The steps ``attempt`` had done when ``fault`` struck (at ``at``): those its rank reported
    by then, and the step the launcher saw as it fired where this rank reported that step just
    after. The ranks of a step report it at nearly one moment and the launcher fires on the first
    report it reads, so the rank read here may be a step behind: its next step is the one the
    fault fired at. Not for a fault that struck later than it fired (a torn write's cut)."""
    done = attempt.steps_by(at)
    if not done or fault.struck_time is not None or fault.step is None:
        return done
    following = attempt.steps[len(done):]
    if following and done[-1][0] == fault.step - 1 and following[0][0] == fault.step:
        return done + following[:1]
    return done


def struck_at(fault: FaultRecord) -> float:
    """The epoch time a fault struck: when it fired, or later where it was armed to strike at a
    write (a torn write strikes when it cuts the file, and its node is killed)."""
    return fault.struck_time if fault.struck_time is not None else fault.fired_time or 0.0


def lasts(spec: str) -> bool:
    """Whether a fault lasts until undone (a pause, a slow node): one the job may go on through;
    one that kills a node or a worker (or a spec not of ours) does not."""
    try:
        return parse_fault(spec).action.lasting
    except UsageError:
        return False


def ended_its_attempt(spec: str, struck: Optional[Attempt], at: float) -> bool:
    """Whether the fault fired at ``at`` ended the attempt it struck (a later attempt began): one
    that kills a node or a worker always does; one that lasts (a pause, a slow node, a split
    network) did where the attempt it struck reported no step after it, and did not where the job
    went on through it, or where it fell in a start-up (the fault before ended that attempt)."""
    if not lasts(spec):
        return True
    return struck is not None and not any(t > at for _, t in struck.steps)


def ended_at(attempts: list[Attempt], records: Iterable[ProgressRecord]) -> Optional[int]:
    """The job's step the last attempt ended at (its highest), where its own records tell it:
    steps numbered as the job's (reported by the script, or counted on from a carried count or
    from the beginning). None where that would only be assumed from where the undisturbed run
    ended, or where an attempt of the rank's records reported no step (one killed after a single
    counted step reports none: the counter holds a first step until the second, and says it at
    the process's end only where the process ends on its own), so that the attempts known are not
    all the job did."""
    if not attempts or not attempts[-1].steps:
        return None
    stepped = {a.token for a in attempts if a.steps}
    # (a worker's own records: its group made or asked, a resume, its end; not a DataLoader worker's writes)
    if any(record.attempt not in stepped and (record.init_call is not None or record.init_asked is not None
                                              or record.resumed is not None or record.finished)
           for record in one_ranks_records(records)):
        return None
    last = attempts[-1]
    return max(step for step, _ in last.steps) if last.numbered_as_the_job else None


def steps_redone(attempts: list[Attempt], reference_steps: Optional[int],
                 struck: Iterable[Strike] = ()) -> Optional[int]:
    """The steps redone in all (None: no steps known): the steps of every attempt less the
    undisturbed run's, or the steps the faults' rows say were redone where more (a resume that
    skipped a step did as many in all as the undisturbed run, having redone one)."""
    if reference_steps is None or not attempts:
        return None
    return max(0, sum(a.count for a in attempts) - reference_steps, redone_by(struck))


def redone_by(struck: Iterable[Strike]) -> int:
    """The steps the faults' rows say the attempts after them did again (0 where none is known)."""
    return sum(strike.redone for strike in struck if strike.redone is not None)
