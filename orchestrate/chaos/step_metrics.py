"""``--compare-steps`` (pure): the metrics the ranks report per step (``report(step, loss=...)``;
for a script that reports none, the digest of its parameters the start-up hook takes at each
optimizer step, ``params``) in a disturbed run against the undisturbed run's, at every step both
reached, every attempt's included, each at the job's step (an attempt the hook counted from 1
again is placed where it started: :mod:`orchestrate.chaos.attempts`). A resume that restores the
weights but not the optimizer's state, the data order or the random state shows at the first
step after it, before the final weights tell (if they ever do), and is said to be that step."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from orchestrate.chaos.attempts import Attempt, attempts_of
from orchestrate.outcome.progress import ProgressRecord
from orchestrate.text import counted, ordinal


@dataclass(frozen=True)
class StepsComparison:
    """How many values were compared, and the first that differs (empty: none)."""

    compared: int
    first_difference: str = ""

    @property
    def equal(self) -> bool:
        return not self.first_difference

    def describe(self) -> str:
        if self.first_difference:
            return f"per-step metrics: {self.first_difference}"
        if not self.compared:
            return "per-step metrics: none compared (no metric at a step both runs reached)"
        return f"per-step metrics: {self.compared} value(s) match the undisturbed run's"


def close(value: float, reference: float, rtol: float) -> bool:
    return value == reference if rtol == 0 else abs(value - reference) <= rtol * abs(reference)


def apart(value: float, reference: float) -> tuple[str, str]:
    """The two values in 6 significant digits, or in full where those are alike."""
    shown = f"{value:.6g}", f"{reference:.6g}"
    return shown if shown[0] != shown[1] else (repr(value), repr(reference))


AttemptOf = Callable[[ProgressRecord], Optional[Attempt]]


def attempts_by_rank(records: Iterable[ProgressRecord], reference_steps: Optional[int] = None,
                     completed: bool = False) -> AttemptOf:
    """The attempt each record's worker was in, rank by rank (see
    :func:`~orchestrate.chaos.attempts.attempts_of`: ``reference_steps``, ``completed``). A rank's
    last attempt counts as the job's last (its start guessed from ``reference_steps``) only where
    it began after the lowest rank's attempt before its last had stepped for the last time: a rank
    an elastic job went on without has no part in the job's last attempt."""
    records = list(records)
    found: dict[tuple[int, str], Attempt] = {}
    job_attempts = attempts_of(records, reference_steps, completed)  # (the lowest rank's)
    last_began_after = (job_attempts[-2].steps[-1][1] if len(job_attempts) > 1 and job_attempts[-2].steps
                        else float("-inf"))
    for rank in {r.rank for r in records}:
        own = [r for r in records if r.rank == rank]
        mine = attempts_of(own, reference_steps, completed=False)
        in_last = completed and bool(mine) and mine[-1].first_time > last_began_after
        for attempt in attempts_of(own, reference_steps, in_last):
            found[(rank, attempt.token)] = attempt
    return lambda record: found.get((record.rank, record.attempt))


def job_step(record: ProgressRecord, attempt_of: AttemptOf) -> Optional[int]:
    """The record's step as the job's (None: not known, as for an attempt the hook counted from 1
    whose start is not known)."""
    if record.step is None:
        return None
    attempt = attempt_of(record)
    return record.step if attempt is None else attempt.job_step(record.step)


def since_the_resume(step: Optional[int], attempt: Optional[Attempt]) -> str:
    """What a first difference at the job's ``step`` in ``attempt`` (not the job's first) says of
    the resume it began with (pure): the first step after it shows what the resume restored; a
    later one, what it did not restore that is used only from then (a learning-rate scheduler's
    count, which sets the learning rate after the optimizer's restored one served a step). "": the
    attempt's start is not known, or was the beginning."""
    if step is None or attempt is None or not attempt.offset or not (attempt.resumed is not None or attempt.counted):
        return ""  # (an attempt whose steps the script reports without a resume: its first reported is no resume)
    after = step - attempt.offset
    if after == 1:
        return (f": the first step after the resume from step {attempt.offset}, so what the resume restored (the"
                " optimizer's state, the random state, the data order) is not what the undisturbed run had there")
    if after < 1:
        return ""
    return (f": the {ordinal(after)} step after the resume from step {attempt.offset}, so what the resume restored"
            f" served {counted(after - 1, 'step')} and something it did not restore shows only from then: a"
            " learning-rate scheduler's state, for one (the optimizer's restored learning rate serves the first step"
            " after a resume; a scheduler counting from 0 again sets the next ones), or an epoch's data order")


def compare_step_metrics(reference: Iterable[ProgressRecord], disturbed: Iterable[ProgressRecord],
                         rtol: float, reference_steps: Optional[int] = None, completed: bool = False
                         ) -> StepsComparison:
    """Every metric of ``disturbed`` at a (rank, job step) that ``reference`` reported too, in
    the order they were reported; ``reference_steps``: the undisturbed run's steps, ``completed``:
    the disturbed job succeeded, so its last attempt ended at the reference's last step (where an
    attempt counted from 1 started is guessed from both)."""
    reference, disturbed = list(reference), list(disturbed)
    in_reference = attempts_by_rank(reference)
    expected = {(r.rank, job_step(r, in_reference)): r.metrics for r in reference if r.step is not None and r.metrics}
    attempt_of = attempts_by_rank(disturbed, reference_steps, completed)
    attempts: dict[int, list[str]] = {}
    compared = 0
    for record in sorted(disturbed, key=lambda r: r.time):
        seen = attempts.setdefault(record.rank, [])
        if record.attempt not in seen:
            seen.append(record.attempt)
        step = job_step(record, attempt_of)
        want = expected.get((record.rank, step)) if step is not None else None
        if not want:
            continue
        for name in sorted(record.metrics.keys() & want.keys()):
            compared += 1
            if not close(record.metrics[name], want[name], rtol):
                within = "" if rtol == 0 else f" (beyond --rtol {rtol:g})"
                attempt = attempt_of(record)
                number = seen.index(record.attempt) + 1
                after_resume = since_the_resume(step, attempt) if number > 1 else ""
                value, against = apart(record.metrics[name], want[name])
                return StepsComparison(compared, f"{name} first differs at step {step} (rank {record.rank},"
                                                 f" attempt {number}): {value} against {against}"
                                                 f" undisturbed{within}{after_resume}")
    return StepsComparison(compared)
