"""``--compare-steps`` (pure): the metrics the ranks report per step (``report(step, loss=...)``)
in a disturbed run against the undisturbed run's, at every step both reached, every attempt's
included. A resume that restores the weights but not the data order or the random state shows
at the first step after it, before the final weights tell (if they ever do)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from orchestrate.outcome.progress import ProgressRecord


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
        return f"per-step metrics: {self.compared} value(s) match the undisturbed run's"


def close(value: float, reference: float, rtol: float) -> bool:
    return value == reference if rtol == 0 else abs(value - reference) <= rtol * abs(reference)


def compare_step_metrics(reference: Iterable[ProgressRecord], disturbed: Iterable[ProgressRecord],
                         rtol: float) -> StepsComparison:
    """Every metric of ``disturbed`` at a (rank, step) that ``reference`` reported too, in the
    order they were reported."""
    expected = {(r.rank, r.step): r.metrics for r in reference if r.step is not None and r.metrics}
    attempts: dict[int, list[str]] = {}
    compared = 0
    for record in sorted(disturbed, key=lambda r: r.time):
        seen = attempts.setdefault(record.rank, [])
        if record.attempt not in seen:
            seen.append(record.attempt)
        want = expected.get((record.rank, record.step))
        if record.step is None or not want:
            continue
        for name in sorted(record.metrics.keys() & want.keys()):
            compared += 1
            if not close(record.metrics[name], want[name], rtol):
                within = "" if rtol == 0 else f" (beyond --rtol {rtol:g})"
                return StepsComparison(compared, f"{name} first differs at step {record.step} (rank {record.rank},"
                                                 f" attempt {seen.index(record.attempt) + 1}):"
                                                 f" {record.metrics[name]:.6g} against {want[name]:.6g}"
                                                 f" undisturbed{within}")
    return StepsComparison(compared)
