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
# How long a drawn fault that lasts (a pause, a straggler, a hung rank) lasts at most.
LASTING_S = 10.0


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
                  reference: Reference, world_size: Optional[int] = None) -> tuple[FaultSpec, ...]:
    """``count`` faults from ``seed``, one in each of ``count`` equal stretches: at a step of
    ``reference`` when it reported steps (never its first or last), else at a time within its
    job's duration (never its first or last tenth). Node faults aim at one of ``nodes``, rank
    faults at one of ``world_size`` ranks. A fault that lasts falls at a time (no step comes
    while a node or a rank hangs) and ends within its stretch, after at most
    :data:`LASTING_S`.

    Raises:
        UsageError: When the reference leaves no room for ``count`` faults.
    """
    rng = random.Random(seed)
    low_s, high_s = reference.job_s * 0.1, reference.job_s * 0.9
    by_steps = reference.last_step is not None and not all(k.lasting for k in kinds)
    if by_steps and reference.last_step - 2 < count:
        raise UsageError(f"the undisturbed run reached step {reference.last_step}: no room for {count}"
                         " faults at distinct steps; ask for fewer, or train longer")
    if not by_steps and high_s - low_s < count:
        raise UsageError(f"the undisturbed run's job took {reference.job_s:.1f} s: too short for {count} faults"
                         " spread over it; ask for fewer, or report steps with orchestrate.progress.report(step)")
    width_s = (high_s - low_s) / count
    schedule = []
    for i in range(count):
        kind = rng.choice(kinds)
        target = {"rank": rng.randrange(world_size or len(nodes))} if kind.on_rank else {"node": rng.choice(nodes)}
        if by_steps and not kind.lasting:
            first, last = _stretch(2, reference.last_step - 1, count, i)
            schedule.append(FaultSpec(kind, at_step=rng.randint(first, last), **target))
            continue
        start = rng.uniform(low_s + i * width_s, low_s + (i + 0.5 if kind.lasting else i + 1) * width_s)
        until = round(start + min(LASTING_S, width_s / 2), 1) if kind.lasting else None
        schedule.append(FaultSpec(kind, at_seconds=round(start, 1), until_seconds=until, **target))
    return tuple(schedule)


def _stretch(low: int, high: int, count: int, index: int) -> tuple[int, int]:
    """The steps of stretch ``index`` of ``count`` equal stretches of [low, high]."""
    width = (high - low + 1) / count
    first = low + int(index * width)
    return first, max(first, low + int((index + 1) * width) - 1)
