"""Comparing the ranks' collectives (pure): the first one where they differ, or, when they
agree, the ranks that never arrived where the others wait.

Collectives are matched by process group and sequence number within it: every rank of a group
must call the group's collectives in the same order, with the same op and the same shapes. The
steps:

1. In each group, the sequence numbers every member recorded are compared in order; the first
   where ops or shapes differ is the divergence ("collective #21: rank 0 entered
   all_reduce(float32[1]) at desync.py:14; rank 1 entered all_reduce(float32[4]) at
   desync.py:11").
2. Ranks that wait in different process groups have diverged too (one waits for a group the
   others never enter).
3. Otherwise, the ranks that wait name who has not arrived: ranks whose last collective in that
   group is older, or that did not answer at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from orchestrate.hangs.snapshots import Collective, RankSnapshot
from orchestrate.hangs.stacks import ranks_text, summary


@dataclass(frozen=True)
class Divergence:
    """Where the ranks' collectives part: one line that says it."""

    kind: str  # "mismatch" (they differ), "groups" (they wait in different groups), "missing" (some never came)
    text: str
    seq: Optional[int] = None
    group: str = ""


def entered(rank: int, collective: Collective) -> str:
    return f"rank {rank} entered {collective.call} at {collective.at}"


def by_group(snapshot: RankSnapshot) -> dict[str, dict[int, Collective]]:
    groups: dict[str, dict[int, Collective]] = {}
    for collective in snapshot.collectives:
        groups.setdefault(collective.group, {})[collective.seq] = collective
    return groups


def mismatch(snapshots: dict[int, RankSnapshot]) -> Optional[Divergence]:
    """Step 1: the first collective, in some group, that its ranks called differently."""
    per_rank = {rank: by_group(s) for rank, s in snapshots.items()}
    groups = sorted({g for record in per_rank.values() for g in record})
    found: list[tuple[float, Divergence]] = []
    for group in groups:
        members = {rank: record[group] for rank, record in per_rank.items() if group in record}
        if len(members) < 2:
            continue
        shared = set.intersection(*(set(calls) for calls in members.values()))
        for seq in sorted(shared):
            calls = {rank: members[rank][seq] for rank in sorted(members)}
            kinds = {(c.op, c.shapes) for c in calls.values()}
            if len(kinds) > 1:
                first = min(calls)
                odd = [r for r in calls if (calls[r].op, calls[r].shapes) != (calls[first].op, calls[first].shapes)]
                shown = [first, *odd][:4]
                where = "" if group == "default" else f" (group {group})"
                text = f"collective #{seq}{where}: " + "; ".join(entered(r, calls[r]) for r in shown)
                found.append((seq, Divergence("mismatch", text, seq, group)))
                break
    return min(found, key=lambda item: item[0])[1] if found else None


def waiting_in_different_groups(snapshots: dict[int, RankSnapshot]) -> Optional[Divergence]:
    """Step 2: ranks that wait in collectives of different process groups."""
    waiting = {rank: s.in_collective for rank, s in snapshots.items() if s.in_collective is not None}
    groups: dict[str, list[int]] = {}
    for rank, collective in waiting.items():
        assert collective is not None
        groups.setdefault(collective.group, []).append(rank)
    if len(groups) < 2:
        return None
    parts = []
    for group, ranks in sorted(groups.items(), key=lambda item: min(item[1])):
        collective = waiting[min(ranks)]
        assert collective is not None
        parts.append(f"{ranks_text(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {collective.call} #{collective.seq} of group {group} at"
                     f" {collective.at}")
    return Divergence("groups", "the ranks wait in different process groups: " + "; ".join(parts))


def missing(snapshots: dict[int, RankSnapshot], expected: set[int], absent_why: dict[int, str],
            elsewhere: Optional[dict[int, str]] = None) -> Optional[Divergence]:
    """Step 3: where the waiting ranks wait, and who is not there (behind, or not answering);
    ``elsewhere``: what a rank outside any collective waits for, past its own stack."""
    waiting = {rank: s.in_collective for rank, s in snapshots.items() if s.in_collective is not None}
    if not waiting:
        return None
    rank0 = min(waiting)
    target = waiting[rank0]
    assert target is not None
    there = sorted(r for r, c in waiting.items() if c is not None and (c.group, c.seq) == (target.group, target.seq))
    behind = []
    for rank in sorted(set(snapshots) - set(there)):
        mine = by_group(snapshots[rank]).get(target.group, {})
        last = max(mine) if mine else 0
        if last < target.seq:
            where = snapshots[rank].in_collective
            stack = snapshots[rank].stack
            doing = (f"in {where.call} #{where.seq} of group {where.group}" if where
                     else f"not in a collective: {summary(stack)}{(elsewhere or {}).get(rank, '')}" if stack
                     else "not in a collective")
            behind.append(f"rank {rank} is at #{last} ({doing})")
    for rank in sorted(expected - set(snapshots)):
        behind.append(f"rank {rank} {absent_why.get(rank, 'did not answer')}")
    if not behind:
        return None
    where = "" if target.group == "default" else f" of group {target.group}"
    text = f"{ranks_text(there)} {'waits' if len(there) == 1 else 'wait'} in {target.call} #{target.seq}{where} at {target.at}; " + "; ".join(behind)
    return Divergence("missing", text, target.seq, target.group)


def first_divergence(snapshots: dict[int, RankSnapshot], expected: Optional[set[int]] = None,
                     absent_why: Optional[dict[int, str]] = None,
                     elsewhere: Optional[dict[int, str]] = None) -> Optional[Divergence]:
    """The first place the ranks' collectives part (see the module's steps), or None when they
    agree and everyone expected is there (``elsewhere``: see :func:`missing`)."""
    return (mismatch(snapshots) or waiting_in_different_groups(snapshots)
            or missing(snapshots, set(expected or snapshots), absent_why or {}, elsewhere))
