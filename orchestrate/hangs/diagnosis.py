"""A hang's diagnosis (pure): what each rank is doing, the ranks grouped by stack, and the first
divergence of their collectives; and whether two probes some seconds apart show progress."""
from __future__ import annotations

from dataclasses import dataclass, field
import re
from pathlib import Path
from typing import Any, Optional

from orchestrate.hangs.collectives import Divergence, first_divergence
from orchestrate.hangs.snapshots import Probe, RankSnapshot, last_snapshots
from orchestrate.hangs.stacks import StackGroup, group_stacks, ranks_text

# A rank that used this share of a core between two probes is computing, not waiting. A rank
# that waits uses next to none (its snapshot thread wakes four times a second), while a computing
# rank on a crowded host may get a small share: measured in CI, 68% then under 25% of a core.
BUSY_CPU_SHARE = 0.05
DEBUG_HINT = "rerun with --debug-collectives: torch then stops at the first mismatched collective, naming both"
INIT_HINT = ("every rank waits in init_process_group for its store: under torchrun leave init_method out (env://,"
             " the MASTER_ADDR and MASTER_PORT torchrun sets); an address the script names itself"
             " (tcp://localhost:...) must be one every node reaches, where a store listens")

# A rank whose main thread waits here waits for its DataLoader's worker processes (the
# multi-process iterator's own methods: the single-process one has a _next_data too).
_LOADER_WAIT = ("torch/utils/data/dataloader.py", ("_try_get_data", "_get_data"))


def loader_hint(ranks: list[int]) -> str:
    """Where ranks wait for their DataLoader: what can be learned, and how to make it fail."""
    one = len(set(ranks)) == 1
    return (f"{ranks_text(ranks)} {'waits for its' if one else 'wait for their'} DataLoader's worker processes"
            " (num_workers > 0), whose stacks are not in the ranks' snapshots: a worker is stuck in the dataset"
            " (a lock, a read that never returns) or slow; DataLoader(timeout=S) makes that wait fail after S s")


@dataclass(frozen=True)
class RankActivity:
    """What one rank was doing between two probes."""

    rank: int
    state: str  # "collective" (waits in one), "busy" (computing), "idle" (neither), "stopped", "absent"
    detail: str = ""


def activity(rank: int, before: Optional[RankSnapshot], now: Optional[RankSnapshot], interval_s: float,
             absent_why: dict[int, str]) -> RankActivity:
    """A rank's activity from its snapshots of two probes (``before`` may be missing)."""
    if now is None:
        why = absent_why.get(rank, "did not answer")
        return RankActivity(rank, "stopped" if "stopped" in why or "paused" in why else "absent", why)
    share = cpu_share(before, now, interval_s)
    collective = now.in_collective
    # a DDP backward pass computes the gradients it all-reduces: busy there is computing
    if collective is not None and not (collective.is_backward_pass and share >= BUSY_CPU_SHARE):
        return RankActivity(rank, "collective", f"waits in {collective.call} #{collective.seq} at {collective.at}")
    if share >= BUSY_CPU_SHARE:
        return RankActivity(rank, "busy", f"computing ({share:.0%} of a core)")
    return RankActivity(rank, "idle", "neither computing nor in a recorded collective")


def cpu_share(before: Optional[RankSnapshot], now: RankSnapshot, interval_s: float) -> float:
    """The share of a core one process used between two snapshots (0 when they are not of one
    process, or no time passed)."""
    if before is None or before.pid != now.pid or interval_s <= 0:
        return 0.0
    return (now.cpu_s - before.cpu_s) / interval_s


def progressed(before: Probe, now: Probe) -> bool:
    """Whether any rank finished a collective, or computed, between the probes."""
    interval = max(now.at - before.at, 1e-6)
    for rank, snapshot in now.snapshots.items():
        earlier = before.snapshots.get(rank)
        if earlier is None or earlier.pid != snapshot.pid:
            return True  # a rank (re)started since: that is progress
        if snapshot.completed > earlier.completed:
            return True
        if cpu_share(earlier, snapshot, interval) >= BUSY_CPU_SHARE:
            return True
    return False


@dataclass
class HangDiagnosis:
    """Where every rank is and why the job makes no progress.

    Attributes:
        quiet_s: Seconds without progress when it was made.
        groups: The ranks grouped by their main thread's stack, odd ones out first.
        collectives: Each rank's last collectives (oldest first).
        divergence: The first place their collectives part, if found.
        activities: What each rank was doing.
        hung: No rank made progress between the probes (else: they are working, quietly).
        cause: What ended the run, when it did ("no progress for 20 s", "a collective timed out").
    """

    quiet_s: float
    groups: list[StackGroup]
    collectives: dict[int, list[dict[str, Any]]]
    divergence: Optional[Divergence]
    activities: list[RankActivity] = field(default_factory=list)
    hung: bool = True
    cause: str = ""

    @property
    def headline(self) -> str:
        """One line: what is wrong, or what the ranks are doing."""
        if not self.hung:
            busy = [a.rank for a in self.activities if a.state == "busy"]
            doing = f"{ranks_text(busy)} computing" if busy else "collectives completing"
            return f"no output for {self.quiet_s:.0f} s, but the job is working: {doing}"
        cause = self.cause or f"no progress for {self.quiet_s:.0f} s"
        where = self.divergence.text if self.divergence else self.where_they_wait()
        return f"{cause}: {where}" if where else cause

    def where_they_wait(self) -> str:
        return "; ".join(f"{ranks_text(g.ranks)}: {g.where}" for g in self.groups[:3])

    def lines(self) -> list[str]:
        """The headline, what each group of ranks is doing, the divergence and a hint."""
        out = [self.headline]
        stopped = [a for a in self.activities if a.state in ("stopped", "absent")]
        for group in self.groups:
            out += ["  " + line for line in group.lines()]
        for absent in stopped:
            out.append(f"  rank {absent.rank}: {absent.detail}")
        busy = [a for a in self.activities if a.state == "busy"]
        for rank in busy:
            out.append(f"  rank {rank.rank} is {rank.detail}")
        if self.divergence is not None and self.divergence.kind != "missing":
            if self.divergence.text not in self.headline:
                out.append(f"  first divergence: {self.divergence.text}")
            out.append(f"  {DEBUG_HINT}")
        if self.hung and self.groups and all(g.where.startswith("init_process_group ") for g in self.groups):
            out.append(f"  {INIT_HINT}")
        loading = [rank for g in self.groups if any(f.file.endswith(_LOADER_WAIT[0]) and f.function in _LOADER_WAIT[1]
                                                    for f in g.stack) for rank in g.ranks]
        if self.hung and loading:
            out.append(f"  {loader_hint(loading)}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"headline": self.headline, "hung": self.hung, "quiet_s": self.quiet_s, "cause": self.cause,
                "groups": [{"ranks": list(g.ranks), "where": g.where,
                            "stack": [[f.file, f.line, f.function] for f in g.stack]} for g in self.groups],
                "divergence": None if self.divergence is None else self.divergence.text,
                "activities": [a.__dict__ for a in self.activities],
                "collectives": {str(rank): entries for rank, entries in self.collectives.items()}}


def diagnose(now: Probe, before: Optional[Probe], expected: set[int], absent_why: dict[int, str],
             quiet_s: float, cause: str = "") -> HangDiagnosis:
    """The diagnosis of the latest probe (``before``: the one some seconds earlier, for who is
    busy); ``absent_why``: why a rank that did not answer cannot (stopped, its node paused)."""
    interval = now.at - before.at if before is not None else 0.0
    ranks = sorted(expected | set(now.snapshots))
    activities = [activity(rank, before.snapshots.get(rank) if before else None, now.snapshots.get(rank), interval,
                           absent_why) for rank in ranks]
    return HangDiagnosis(
        quiet_s=quiet_s,
        groups=group_stacks(now.snapshots),
        collectives={rank: [c.__dict__ for c in s.collectives[-8:]] for rank, s in sorted(now.snapshots.items())},
        divergence=first_divergence(now.snapshots, expected, absent_why),
        activities=activities,
        hung=before is None or not progressed(before, now),
        cause=cause,
    )


# How torch says a collective waited past the process group's timeout (gloo, NCCL's watchdog).
_TIMED_OUT = re.compile(r"timed out|timeout", re.I)
# gloo's and NCCL's messages start with their source file: "[/pytorch/.../unbound_buffer.cc:78] ".
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def timeout_diagnosis(failure: Any, directory: Path, expected: set[int]) -> Optional[HangDiagnosis]:
    """A run that failed because a collective timed out is a hang that torch ended: its
    diagnosis from the snapshots the ranks wrote as their collectives failed (None when the
    failure is something else, or no rank wrote one)."""
    exception = getattr(failure, "exception", "") or ""
    if getattr(failure, "reason", "") or not _TIMED_OUT.search(exception):
        return None  # a node that stopped answering (or was OOM-killed) explains it better
    snapshots = {rank: s for rank, s in last_snapshots(directory).items() if s.reason == "collective failed"}
    if not snapshots:
        return None
    probe = Probe("failed", 0.0, snapshots)
    where = f"{failure.node} rank {failure.rank}" if getattr(failure, "rank", None) is not None else failure.node
    said = _SOURCE_PREFIX.sub("", exception.split(": ", 1)[-1]).strip()
    return diagnose(probe, None, expected or set(snapshots), {}, 0.0,
                    cause=f"a collective timed out on {where} ({said[:120]})")


def mismatch_divergence(failure: Any, directory: Path) -> str:
    """For a run that failed on torch's collective mismatch check (``--debug-collectives``):
    where the ranks' collectives part by the records they wrote as their collectives failed,
    with the call sites torch's error lacks ("" when the failure is something else, or the
    records do not show it)."""
    exception = getattr(failure, "exception", "") or ""
    if "collectives differ" not in exception and "Detected mismatch between collectives" not in exception:
        return ""
    snapshots = {rank: s for rank, s in last_snapshots(directory).items() if s.reason == "collective failed"}
    found = first_divergence(snapshots) if len(snapshots) > 1 else None
    return found.text if found is not None and found.kind == "mismatch" else ""
