"""How a preempted node's ranks met its SIGTERM (pure): which scripts ended cleanly (exit 0) after
it, how soon, and what each wrote meanwhile, as the run's failure says it.

A ``preempt`` fault is how a user tests the code that saves on preemption: the question it asks
is not whether the node ended (it always does) but whether each script caught the signal, saved,
and exited 0 within the grace, or died of the signal with nothing saved, or was still at it when
the grace ran out. The workers' start-up hook says on the progress channel when a script returned
(or exited 0) and which files it wrote; the launcher keeps those of the process that ran at the
signal (:class:`orchestrate.supervise.progress.ProgressWatch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from orchestrate.text import ranks_text

# How many files one sentence names; the rest are counted.
FILES_NAMED = 3


@dataclass(frozen=True)
class RankAfterSigterm:
    """One rank of a preempted node, after the SIGTERM.

    Attributes:
        rank: Its global rank.
        exited_after_s: Seconds from the SIGTERM until its script returned or exited 0; None: it
            did not (it died of the signal, failed, or was killed at the grace's end).
        wrote: The shared files it wrote whole after the SIGTERM (relative to the work directory).
        wrote_locally: The files on its node's own disk it wrote after the SIGTERM (absolute).
    """

    rank: int
    exited_after_s: Optional[float] = None
    wrote: tuple[str, ...] = ()
    wrote_locally: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"rank": self.rank, "exited_after_s": self.exited_after_s, "wrote": list(self.wrote),
                "wrote_locally": list(self.wrote_locally)}


@dataclass(frozen=True)
class Preemption:
    """A node's preemption: the grace its workers had between SIGTERM and SIGKILL, and how each
    of its ranks that reported on the progress channel met the SIGTERM."""

    grace_s: float
    ranks: tuple[RankAfterSigterm, ...]


def how_ranks_met_sigterm(preemption: Preemption, grace_ran_out: bool) -> str:
    """The ranks of a preempted node as they met its SIGTERM, for the failure's line:
    ``rank 1 exited 0 0.2 s after the SIGTERM (written after it: ckpt.pt)``; ``ranks 2, 3 did
    not exit 0 after the SIGTERM (to save on preemption, ...)``; "" when no rank reported.
    Ranks alike are said together. ``grace_ran_out``: the node got SIGKILL at the grace's end."""
    grace = f"{preemption.grace_s:g} s grace"
    exited = [r for r in preemption.ranks if r.exited_after_s is not None]
    not_exited = [r for r in preemption.ranks if r.exited_after_s is None]
    parts = []
    if exited:
        slowest = max(r.exited_after_s or 0.0 for r in exited)
        when = f"{slowest:.1f} s after" if len(exited) == 1 else f"within {slowest:.1f} s of"
        parts.append(f"{_ranks(exited)} exited 0 {when} the SIGTERM{_writes(exited)}")
    if not_exited:
        if grace_ran_out:
            parts.append(f"{_ranks(not_exited)} had not exited 0 when the {grace} ran out{_writes(not_exited)}")
        else:
            said = _writes(not_exited) or ("" if exited else f" (to save on preemption, a script catches SIGTERM,"
                                                             f" saves, and exits 0 within the {grace})")
            parts.append(f"{_ranks(not_exited)} did not exit 0 after the SIGTERM{said}")
    return "; ".join(parts)


def _ranks(ranks: list[RankAfterSigterm]) -> str:
    return ranks_text(r.rank for r in ranks)


def _writes(ranks: list[RankAfterSigterm]) -> str:
    """`` (written after it: ckpt.pt, /tmp/x.pt on its node's own disk, gone with a preempted
    node)``, or "" where no write after it is known."""
    shared = sorted({path for r in ranks for path in r.wrote})
    local = sorted({path for r in ranks for path in r.wrote_locally})
    named = [*shared, *(f"{path} on its node's own disk, gone with a preempted node" for path in local)]
    if not named:
        return ""
    more = len(named) - FILES_NAMED
    listed = ", ".join(named[:FILES_NAMED]) + (f" and {more} more" if more > 0 else "")
    return f" (written after it: {listed})"
