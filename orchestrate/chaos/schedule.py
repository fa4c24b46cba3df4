"""The chaos schedule (pure): N faults drawn from a seed, at training steps when the workers
report them, else at times spread over the undisturbed run's duration.

The range is cut into N equal stretches and each fault falls in its own, so the faults are
spread out and each recovery has room before the next; the node and the kind of each are drawn
too. The same seed, count, kinds and reference give the same schedule.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.errors import UsageError

# The kinds an elastic job is meant to survive: a node that dies, reboots or is taken back.
DEFAULT_KINDS = (FaultAction.KILL, FaultAction.RESTART, FaultAction.PREEMPT)


@dataclass(frozen=True)
class Reference:
    """What the undisturbed run showed: its last training step (None: none reported) and how
    long its job ran."""

    last_step: Optional[int]
    job_s: float


def parse_kinds(text: str) -> tuple[FaultAction, ...]:
    """``kill,restart,...`` as fault kinds.

    Raises:
        UsageError: Naming a kind that does not exist.
    """
    kinds = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        try:
            kinds.append(FaultAction(word))
        except ValueError:
            known = ", ".join(a.value for a in FaultAction)
            raise UsageError(f"--kinds: no fault kind {word!r} (kinds: {known})") from None
    if not kinds:
        raise UsageError("--kinds: name at least one fault kind, e.g. kill,restart")
    return tuple(dict.fromkeys(kinds))


def draw_schedule(seed: int, count: int, kinds: tuple[FaultAction, ...], nodes: list[str],
                  reference: Reference) -> tuple[FaultSpec, ...]:
    """``count`` faults from ``seed``: at steps of ``reference`` when it reported steps (never
    its first or last), else at times within its job's duration (never its first or last tenth).

    Raises:
        UsageError: When the reference leaves no room for ``count`` faults.
    """
    rng = random.Random(seed)
    if reference.last_step is not None:
        low, high = 2, reference.last_step - 1
        if high - low + 1 < count:
            raise UsageError(f"the undisturbed run reached step {reference.last_step}: no room for {count}"
                             " faults at distinct steps; ask for fewer, or train longer")
        points = _spread(rng, low, high, count, integer=True)
        return tuple(FaultSpec(rng.choice(kinds), rng.choice(nodes), at_step=int(p)) for p in points)
    low, high = reference.job_s * 0.1, reference.job_s * 0.9
    if high - low < count:
        raise UsageError(f"the undisturbed run's job took {reference.job_s:.1f} s: too short for {count} faults"
                         " spread over it; ask for fewer, or report steps with orchestrate.progress.report(step)")
    points = _spread(rng, low, high, count, integer=False)
    return tuple(FaultSpec(rng.choice(kinds), rng.choice(nodes), at_seconds=round(p, 1)) for p in points)


def _spread(rng: random.Random, low: float, high: float, count: int, *, integer: bool) -> list[float]:
    """One point drawn in each of ``count`` equal stretches of [low, high]."""
    width = (high - low + (1 if integer else 0)) / count
    points = []
    for i in range(count):
        start = low + i * width
        if integer:
            lo, hi = int(start), max(int(start), int(start + width) - 1)
            points.append(rng.randint(lo, hi))
        else:
            points.append(rng.uniform(start, start + width))
    return points
