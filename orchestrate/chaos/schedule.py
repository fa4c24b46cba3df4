"""The chaos schedule (pure): N faults drawn from a seed, in training time.

Where the undisturbed run had steps (its script's own, or its optimizer's, counted), the faults
fall at steps, in the stretch after the job first wrote a file in its work directory (its
first checkpoint, as a rule), so that each can test a resume; where that stretch is too short
for them, they fall from step 2 on, and the verdict says the check was inconclusive. They keep
3 steps before the undisturbed run's last step (a resume with one step left tests little),
where the job is long enough, and never fall at its last. The first
fault is at a step of the job; each later one *into the attempt* that begins after the one
before (``@step=+N``), so it strikes in training time, whatever that attempt resumed from and
however long it took to start. Without steps, the faults fall at times over the undisturbed
run's job, after its first write.

The range is cut into N equal stretches and each fault falls in its own, so the faults are
spread out and each recovery has room before the next; the node and the kind of each are drawn
too. A kind may name the run's own rendezvous store for its target (``pause:store``,
``disconnect:store``): those faults aim at the store, never at a node. The same seed, count, kinds
and reference give the same schedule.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Union

from orchestrate.config.fault_spec import (DEFAULT_DEGRADED_RATE_BITS, DEFAULT_SLOW_CPUS, STORE_FELT_S, STORE_TARGET,
                                           FaultAction, FaultSpec, check_fault_levels)
from orchestrate.config.link import LinkSpec
from orchestrate.config.options import MIN_CPUS
from orchestrate.errors import UsageError
from orchestrate.text import counted


@dataclass(frozen=True)
class ChaosKind:
    """A kind of fault chaos draws, as ``--kinds`` names it: its action, aimed at a node or a rank
    the draw picks (``kill``), or at the run's own rendezvous store (``pause:store``)."""

    action: FaultAction
    on_store: bool = False

    def __str__(self) -> str:
        return f"{self.action.value}:{STORE_TARGET}" if self.on_store else self.action.value

    @property
    def lasting(self) -> bool:
        return self.action.lasting


def chaos_kind(kind: Union[ChaosKind, FaultAction]) -> ChaosKind:
    """A kind as chaos draws it: a bare :class:`FaultAction` aims at a node or a rank."""
    return kind if isinstance(kind, ChaosKind) else ChaosKind(FaultAction(kind))


# The kinds an elastic job is meant to survive: a node that dies, reboots or is taken back.
DEFAULT_KINDS = (ChaosKind(FaultAction.KILL), ChaosKind(FaultAction.RESTART), ChaosKind(FaultAction.PREEMPT))
# How long a drawn fault that lasts (a pause, a straggler, a hung rank) lasts at most.
LASTING_S = 10.0


# The steps a drawn fault keeps before the undisturbed run's last, where the job is long enough: a
# resume with one step left tests little (a forgotten LR scheduler shows from its second step on).
END_MARGIN_STEPS = 3


@dataclass(frozen=True)
class Reference:
    """What the undisturbed run showed: its last training step (None: none reported or
    counted), how long its job ran, and the first file it wrote in its work directory (None:
    none, or not followed) with when: seconds into the job, and the first step reported
    after it; the files it wrote that the work directory held before the check (an earlier
    run's saves, which a job that resumes began from); and its first step and how many steps it
    did, where it did not begin at step 1 (a job that resumed from such a save: steps 7 to 30 are
    24 steps; None: from step 1 to its last)."""

    last_step: Optional[int]
    job_s: float
    first_write: Optional[str] = None
    first_write_s: Optional[float] = None
    first_step_after_write: Optional[int] = None
    held_before: tuple[str, ...] = ()
    first_step: Optional[int] = None
    steps_done: Optional[int] = None

    @property
    def step_count(self) -> Optional[int]:
        """How many steps the undisturbed run did (what steps redone are counted against)."""
        return self.steps_done if self.steps_done is not None else self.last_step

    def describe_steps(self) -> str:
        if self.last_step is None:
            return "no steps reported or counted"
        if (self.first_step or 1) > 1:
            return (f"{self.step_count} steps ({self.first_step} to {self.last_step}: it began from a save the work"
                    f" directory held)")
        return f"{self.step_count} steps"

    def describe_first_write(self) -> str:
        if not self.first_write:
            return ""
        where = (f"before step {self.first_step_after_write}" if self.first_step_after_write is not None
                 else f"{self.first_write_s or 0.0:.1f} s into the job")
        return f"{self.first_write}, {where}"

    def step_range(self, count: int) -> tuple[int, int]:
        """The steps faults fall at: after the first write when there is room for ``count``,
        else from the job's second step (2, where it began at 1); up to :data:`END_MARGIN_STEPS`
        before the last step where there is room for them so, else up to the one before it;
        never the last step."""
        ends = ((self.last_step or 0) - END_MARGIN_STEPS, (self.last_step or 0) - 1)
        saved = self.first_step_after_write
        starts = ((saved + 1,) if saved is not None else ()) + ((self.first_step or 1) + 1,)
        for first, last in [(first, last) for first in starts for last in ends]:
            if last - first + 1 >= count:
                return first, last
        return starts[-1], ends[-1]

    def time_range(self, count: int) -> tuple[float, float]:
        """The seconds into the job faults fall at: after the first write when there is room,
        else over the middle 80% of the job."""
        low_s, high_s = self.job_s * 0.1, self.job_s * 0.9
        if self.times_after_the_first_write(count):
            low_s = max(low_s, (self.first_write_s or 0.0) + 1)
        return low_s, high_s

    def times_after_the_first_write(self, count: int) -> bool:
        """Whether ``count`` faults at times fall after the first write (there is room there)."""
        low_s, high_s = self.job_s * 0.1, self.job_s * 0.9
        return self.first_write_s is not None and high_s - max(low_s, self.first_write_s + 1) >= count

    def describe_time_range(self, count: int) -> str:
        """Where ``count`` faults at times fall, in words: the stretch after the first write, or
        the job's middle 80%."""
        low_s, high_s = self.time_range(count)
        if self.times_after_the_first_write(count) and low_s > self.job_s * 0.1:
            return (f"after the undisturbed run's first write ({self.first_write}, {self.first_write_s:.1f} s into"
                    f" its {self.job_s:.1f} s job), from {low_s:.1f} s to {high_s:.1f} s")
        return f"over the middle of the undisturbed run's {self.job_s:.1f} s job, from {low_s:.1f} s to {high_s:.1f} s"


def parse_kinds(text: str) -> tuple[ChaosKind, ...]:
    """``kill,restart,pause:store,...`` as fault kinds; ``KIND:store`` aims at the run's own
    rendezvous store (``pause`` and ``disconnect``: a store that comes back; ``kill:store`` is
    refused, as no torchrun job outlives its store).

    Raises:
        UsageError: Naming a kind that does not exist, or a target chaos does not take.
    """
    kinds: list[ChaosKind] = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        name, colon, target = word.partition(":")
        try:
            action = FaultAction(name)
        except ValueError:
            known = ", ".join([a.value for a in FaultAction if a not in (FaultAction.PARTITION, FaultAction.LOSE)]
                              + [f"{a.value}:{STORE_TARGET}" for a in FaultAction if a.reaches_store and a.lasting])
            raise UsageError(f"--kinds: no fault kind {word!r} (kinds chaos draws: {known})") from None
        kinds.append(ChaosKind(action, on_store=bool(colon) and target == STORE_TARGET))
        if action is FaultAction.PARTITION:
            raise UsageError("--kinds: chaos does not draw partitions (their groups are yours to choose: give one to"
                             " run --fault, e.g. 'partition:node0|node1@t=5..20')")
        if action is FaultAction.LOSE:
            raise UsageError("--kinds: chaos does not draw lose: a job that goes on with fewer nodes ends with other"
                             " results than the undisturbed run's, which the check compares; give run --fault"
                             " lose:node1 with --nnodes MIN:MAX")
        if colon and target != STORE_TARGET:
            raise UsageError(f"--kinds: {word!r}: chaos draws the node or rank each fault aims at; the one target a"
                             f" kind may name is the run's rendezvous store, e.g. {action.value}:{STORE_TARGET}")
        if colon and not action.reaches_store:
            *others, last = [a.value for a in FaultAction if a.reaches_store and a.lasting]
            raise UsageError(f"--kinds: {word}: chaos aims {', '.join(others)} or {last} at the rendezvous store"
                             f" ({action.value} aims at a node)")
        if kinds[-1].on_store and not action.lasting:  # (a verdict that could never hold tests nothing)
            raise UsageError(f"--kinds: chaos does not draw {word}: torchrun's agents cannot outlive their rendezvous"
                             f" store, so no job survives its death and the check could never hold;"
                             f" pause:{STORE_TARGET} and disconnect:{STORE_TARGET} test a store that comes back"
                             f" (run --rdzv-store container --fault {word}@step=N shows how a job ends without it)")
    if not kinds:
        raise UsageError("--kinds: name at least one fault kind, e.g. kill,restart")
    return tuple(dict.fromkeys(kinds))


def drawn_levels(kind: FaultAction, node_cpus: Optional[float], link: Optional[LinkSpec]) -> dict:
    """The level a drawn fault of ``kind`` takes: its kind's default, or less where the nodes
    have less (``--cpus-per-node``, the ``--link`` rate): half the node's CPUs, a tenth of the
    link's rate, so that a slow or a degrade slows the node it strikes."""
    if kind is FaultAction.SLOW and node_cpus:
        return {"cpus": min(DEFAULT_SLOW_CPUS, max(round(node_cpus / 2, 2), MIN_CPUS))}
    if kind is FaultAction.DEGRADE and link is not None and link.rate_bits:
        return {"rate_bits": min(DEFAULT_DEGRADED_RATE_BITS, max(link.rate_bits // 10, 1))}
    return {}


def check_drawn_levels(kinds: Sequence[Union[ChaosKind, FaultAction]], node: str, node_cpus: Optional[float],
                       link: Optional[LinkSpec]) -> None:
    """Refuse, before any run, kinds whose drawn level could not slow the nodes (a slow of nodes
    that have the least CPUs a node may have).

    Raises:
        UsageError: Naming the kind and the node's own level.
    """
    actions = [chaos_kind(kind).action for kind in kinds]
    drawn = [FaultSpec(action, node=node, at_seconds=1.0, **drawn_levels(action, node_cpus, link))
             for action in actions if action in (FaultAction.SLOW, FaultAction.DEGRADE)]
    check_fault_levels(drawn, link, node_cpus, said="--kinds: a drawn ")


def draw_schedule(seed: int, count: int, kinds: Sequence[Union[ChaosKind, FaultAction]], nodes: list[str],
                  reference: Reference, world_size: Optional[int] = None, node_cpus: Optional[float] = None,
                  link: Optional[LinkSpec] = None) -> tuple[FaultSpec, ...]:
    """``count`` faults from ``seed``, one in each of ``count`` equal stretches of training time
    (see the module's text): at steps of ``reference`` when it had steps (never its last), else
    at times within its job (never its first or last tenth). Node faults aim at one of
    ``nodes``, rank faults at one of ``world_size`` ranks, storage faults at the first node (the
    one of global rank 0, which saves in most scripts), a store kind at the rendezvous store. A
    fault that lasts falls at a time
    (no step comes while a node or a rank hangs) and ends within its stretch, after at most
    :data:`LASTING_S`; the fault after it counts the job's steps again, as no attempt begins. A
    slow or a degrade takes a level below the node's own (:func:`drawn_levels`). A pause or
    disconnect of the store lasts :data:`STORE_FELT_S` at least, so that the agents feel it.

    Raises:
        UsageError: When the reference leaves no room for ``count`` faults, or its stretches no
            room for a store fault that lasts to be felt.
    """
    kinds = tuple(chaos_kind(kind) for kind in kinds)
    rng = random.Random(seed)
    by_steps = reference.last_step is not None and not all(k.lasting for k in kinds)
    low_step, high_step = reference.step_range(count) if by_steps else (0, 0)
    if by_steps and high_step - low_step + 1 < count:
        raise UsageError(f"the undisturbed run reached step {reference.last_step}: no room for {count}"
                         " faults at distinct steps; ask for fewer, or train longer")
    low_s, high_s = reference.time_range(count)
    if not by_steps and high_s - low_s < count:
        raise UsageError(f"the undisturbed run's job took {reference.job_s:.1f} s: too short for {count} faults"
                         " spread over it; ask for fewer, or train longer")
    width_s = (high_s - low_s) / count
    lasting_on_store = [kind for kind in kinds if kind.on_store and kind.lasting]
    if lasting_on_store and store_outage_s(reference, count) < STORE_FELT_S:
        raise UsageError(f"--kinds {lasting_on_store[0]}: {too_short_for_store_outages(reference, count)}")
    schedule: list[FaultSpec] = []
    previous_step: Optional[int] = None  # the step of the fault before, when it began a new attempt
    for i in range(count):
        drawn = rng.choice(kinds)
        kind = drawn.action
        if drawn.on_store:
            target: dict = {"node": STORE_TARGET}
        elif kind.on_rank:
            target = {"rank": rng.randrange(world_size or len(nodes))}
        elif kind.on_storage:  # the first node holds global rank 0, which saves in most scripts
            target = {"node": nodes[0]}
        else:
            target = {"node": rng.choice(nodes)}
        target.update(drawn_levels(kind, node_cpus, link))
        if by_steps and not kind.lasting:
            first, last = _stretch(low_step, high_step, count, i)
            step = rng.randint(first, last)
            if previous_step is None:
                schedule.append(FaultSpec(kind, at_step=step, **target))
            else:
                schedule.append(FaultSpec(kind, at_step=step - previous_step, in_attempt=True, **target))
            previous_step = step
            continue
        previous_step = None
        start = rng.uniform(low_s + i * width_s, low_s + (i + 0.5 if kind.lasting else i + 1) * width_s)
        until = round(start + min(LASTING_S, width_s / 2), 1) if kind.lasting else None
        schedule.append(FaultSpec(kind, at_seconds=round(start, 1), until_seconds=until, **target))
    return tuple(schedule)


def store_outage_s(reference: Reference, count: int) -> float:
    """How long each of ``count`` drawn outages of the store lasts: half its stretch of the
    times faults fall at, and :data:`LASTING_S` at most."""
    low_s, high_s = reference.time_range(count)
    return min(LASTING_S, (high_s - low_s) / count / 2)


def too_short_for_store_outages(reference: Reference, count: int) -> str:
    """Why ``count`` store outages of :data:`STORE_FELT_S` each do not fit the times faults
    fall at (pure): that stretch, what it leaves each, how many fit, and how long a job gives
    them room."""
    low_s, high_s = reference.time_range(count)
    fitting = max((n for n in range(count) if n and store_outage_s(reference, n) >= STORE_FELT_S), default=0)
    longer = job_s_for_store_outages(reference, count)
    fewer = f"ask for {counted(fitting, 'fault')}, or " if fitting else ""
    return (f"the faults fall {reference.describe_time_range(count)}: {high_s - low_s:.1f} s for {count} fault(s),"
            f" {store_outage_s(reference, count):.1f} s of store outage each at most (half its own stretch), under"
            f" the {STORE_FELT_S:g} s torchrun's agents need to feel it (they call the store every {STORE_FELT_S:g} s:"
            f" a shorter outage may go unfelt); {fewer}train longer (a job of {longer:.1f} s or more, against"
            f" {reference.job_s:.1f} s, gives {count} room)")


def job_s_for_store_outages(reference: Reference, count: int) -> float:
    """The shortest job whose stretch of fault times gives each of ``count`` store outages
    :data:`STORE_FELT_S` (pure): the undisturbed run's where it does, else the first tenth of a
    second past it that does (never a shorter job, though one may fit where its faults fall
    over the middle).

    Each outage lasts half its share of the stretch (:func:`store_outage_s`), so the stretch must
    be ``2 * count * STORE_FELT_S`` wide. The stretch is the job's middle 80% (``0.8 * job_s``
    wide), or, where the faults fall after the first write, from a second after that write to
    90% of the job (``0.9 * job_s - first_write_s - 1`` wide, where that exceeds the middle's
    start). They fall after it only where that leaves ``count`` seconds, so a job long enough
    over the middle may already have moved them there: it fits only where they have not moved,
    and the length after the move is computed then.
    """
    if store_outage_s(reference, count) >= STORE_FELT_S:
        return reference.job_s
    wanted_s = 2 * count * STORE_FELT_S
    past_job = math.floor(round(reference.job_s * 10, 6)) + 1  # in tenths: the first past the undisturbed run's

    def tenth_from(job_s: float) -> float:
        return max(past_job, math.ceil(round(job_s * 10, 6))) / 10

    over_middle = tenth_from(wanted_s / 0.8)
    if reference.first_write_s is None or store_outage_s(replace(reference, job_s=over_middle), count) >= STORE_FELT_S:
        return over_middle
    return tenth_from(max(wanted_s / 0.8, (wanted_s + reference.first_write_s + 1) / 0.9))


def _stretch(low: int, high: int, count: int, index: int) -> tuple[int, int]:
    """The steps of stretch ``index`` of ``count`` equal stretches of [low, high], in whole
    numbers (a float's width lost the last step where ``count`` times it rounded down)."""
    steps = high - low + 1
    first = low + index * steps // count
    return first, max(first, low + (index + 1) * steps // count - 1)
