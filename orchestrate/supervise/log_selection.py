"""Which nodes ``logs RUN --node --rank`` reads: chosen by name and rank, a run in the engine or one gone."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Protocol, TypeVar

from orchestrate.errors import UsageError


class NamedNode(Protocol):
    """What choosing nodes by ``--node`` and ``--rank`` needs of a node: a plan, or a recorded node."""

    @property
    def name(self) -> str: ...

    @property
    def global_ranks(self) -> tuple[int, ...]: ...


# (a node, where its lines are): a (NodePlan, container) of a run in the engine, a (RecordedNode, log file) of one gone
Chosen = TypeVar("Chosen", bound="tuple[NamedNode, Any]")


Line = TypeVar("Line")


def last(lines: Iterable[Line], tail: Optional[int]) -> list[Line]:
    """The last ``tail`` of ``lines`` (all of them for None): ``logs --tail``."""
    every = list(lines)
    return every if tail is None else every[max(0, len(every) - tail):]


def select_nodes(run_id: str, every: list[Chosen], node: Optional[str]) -> list[Chosen]:
    """Of ``every`` (node, source) pair, each pair, or ``node``'s only.

    Raises:
        UsageError: For a node the run does not have.
    """
    if node is None:
        return every
    chosen = [pair for pair in every if pair[0].name == node]
    if not chosen:
        names = ", ".join(p.name for p, _ in every)
        raise UsageError(f"--node {node}: run {run_id} has no such node (nodes: {names})")
    return chosen


def select_ranks(run_id: str, elastic: bool, every: list[Chosen], pairs: list[Chosen], ranks: Iterable[int]
                 ) -> list[Chosen]:
    """Of ``pairs`` (chosen of ``every``), those whose node holds ``ranks`` (every one of an
    elastic run: its rendezvous, not its plan, gave the ranks out).

    Raises:
        UsageError: For a rank the run does not have.
    """
    wanted = set(ranks)
    if not wanted or elastic:
        return pairs
    held = sorted(rank for plan, _ in every for rank in plan.global_ranks)
    missing = sorted(wanted - set(held))
    if missing:
        raise UsageError(f"--rank {missing[0]}: run {run_id} has no such rank (ranks {held[0]}-{held[-1]})")
    chosen = [pair for pair in pairs if wanted & set(pair[0].global_ranks)]
    if not chosen:
        rank = min(wanted)
        home = next(plan.name for plan, _ in every if rank in plan.global_ranks)
        raise UsageError(f"--rank {rank} is on {home}, not on --node {', '.join(plan.name for plan, _ in pairs)}")
    return chosen


def say_elastic_ranks_unchecked(run_id: str, wanted: set[int], say: Callable[[str], None]) -> None:
    say(f"run {run_id} is elastic: its rendezvous gives the ranks out, so --rank {min(wanted)} is not"
        " checked against it (a rank that never ran shows no line)")
