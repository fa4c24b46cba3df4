"""How a preempted node's ranks met its SIGTERM (pure): which scripts finished (exit 0) after it,
how soon, and what each opened to write meanwhile, as the run's failure says it.

A ``preempt`` fault is how a user tests the code that saves on preemption: the question it asks
is not whether the node ended (it always does) but whether each script caught the signal, saved,
and finished within the grace, or died of the signal, or was still at it when the grace ran out.
The workers' start-up hook says on the progress channel when a script returned (or exited 0) and
which files it opened to write, again after its node's SIGTERM; the launcher keeps those of the
process that ran at the signal (:class:`orchestrate.supervise.progress.ProgressWatch`). The
workers' records and the launcher's signal are timed by one clock, the kernel's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from orchestrate.text import ranks_text

# How many files one sentence names; the rest are counted.
FILES_NAMED = 3


@dataclass(frozen=True)
class RankAfterSigterm:
    """One rank of a preempted node, after the SIGTERM.

    Attributes:
        rank: Its global rank.
        finished_after_s: Seconds from the SIGTERM until its script returned or exited 0; None: it
            did not (it died of the signal, failed, or was killed at the grace's end).
        wrote: The shared files it opened to write whole after the SIGTERM (relative to the work
            directory).
        wrote_locally: The files on its node's own disk it opened to write after the SIGTERM
            (absolute).
        finished_before: Its script had returned (or exited 0) before the SIGTERM came.
    """

    rank: int
    finished_after_s: Optional[float] = None
    wrote: tuple[str, ...] = ()
    wrote_locally: tuple[str, ...] = ()
    finished_before: bool = False

    def to_json(self) -> dict:
        return {"rank": self.rank, "finished_before": self.finished_before, "finished_after_s": self.finished_after_s,
                "wrote": list(self.wrote), "wrote_locally": list(self.wrote_locally)}


@dataclass(frozen=True)
class Preemption:
    """A node's preemption: the fault that sent its SIGTERM, the grace its workers had before the
    SIGKILL, and how each of its ranks that reported on the progress channel met the SIGTERM;
    the last lines its lowest such rank printed (its handler's, not torchrun's own end), with
    that rank."""

    fault: str
    grace_s: float
    ranks: tuple[RankAfterSigterm, ...]
    last_lines: tuple[str, ...] = ()
    lines_rank: Optional[int] = None


class PreemptedResult(Protocol):
    """What the words below read of a node's result (:class:`orchestrate.outcome.node_result.NodeResult`,
    which holds a :class:`Preemption`: named by its shape, so that neither module imports the other)."""

    node: Any  # its plan: ``.name``
    fault: str
    grace_ran_out: bool
    preemption: Optional[Preemption]


def preemption_said(result: "PreemptedResult", results: Sequence["PreemptedResult"] = ()) -> str:
    """How a preempted node's ranks met its SIGTERM (:func:`how_ranks_met_sigterm`), where the
    preempt is still the fault the node's result names; else "". The advice is left out where a
    rank of any node of ``results`` finished after its SIGTERM: the script handles it, and a rank
    that did not finish lost its peers (their signals come apart)."""
    preemption = result.preemption
    if preemption is None or result.fault != preemption.fault:
        return ""
    return how_ranks_met_sigterm(preemption, result.grace_ran_out, advise=not any_finished((result, *results)))


def any_finished(results: Sequence["PreemptedResult"]) -> bool:
    """Whether a rank of any preempted node of ``results`` finished its script after its SIGTERM:
    then the script handles the signal, and a rank that did not finish lost its peers."""
    return any(rank.finished_after_s is not None for result in results if result.preemption
               for rank in result.preemption.ranks)


def recovered_preemption_said(node: str, cause: str, results: Sequence["PreemptedResult"]) -> str:
    """How the ranks of a node that an elastic job got back after a preempt met its SIGTERM, for
    the recovery's line (``cause``: the recovery's, ``injected fault preempt:node1@t=8``); "" for
    another cause, or a later preempt of the node (its first is the one read)."""
    for result in results:
        preemption = result.preemption
        if result.node.name == node and preemption is not None and cause == f"injected fault {preemption.fault}":
            return how_ranks_met_sigterm(preemption, result.grace_ran_out, advise=not any_finished(results))
    return ""


def how_ranks_met_sigterm(preemption: Preemption, grace_ran_out: bool, advise: bool = True) -> str:
    """The ranks of a preempted node as they met its SIGTERM, for the failure's line:
    ``rank 1 finished its script (exit 0) 0.2 s after the SIGTERM (opened to write after it:
    ckpt.pt)``; ``ranks 2, 3 did not finish their scripts after the SIGTERM (to save on
    preemption, ...)``; "" when no rank reported. Ranks alike are said together.
    ``grace_ran_out``: the node got SIGKILL at the grace's end; ``advise``: say how a script saves
    on preemption where no rank finished and none opened a file to write."""
    grace = f"{preemption.grace_s:g} s grace"
    before = [r for r in preemption.ranks if r.finished_before]
    finished = [r for r in preemption.ranks if not r.finished_before and r.finished_after_s is not None]
    unfinished = [r for r in preemption.ranks if not r.finished_before and r.finished_after_s is None]
    parts = []
    if before:
        parts.append(f"{_ranks(before)} had finished {_scripts(before)} before the SIGTERM")
    if finished:
        slowest = max(r.finished_after_s or 0.0 for r in finished)
        when = f"{slowest:.1f} s after" if len(finished) == 1 else f"within {slowest:.1f} s of"
        parts.append(f"{_ranks(finished)} finished {_scripts(finished)} (exit 0) {when} the SIGTERM"
                     f"{_writes(finished)}")
    if unfinished:
        if preemption.grace_s <= 0:  # (--stop-grace 0: the SIGKILL came with the SIGTERM, no grace to run out)
            parts.append(f"{_ranks(unfinished)} got SIGKILL with the SIGTERM, with no grace to finish"
                         f" {_scripts(unfinished)} in (--stop-grace 0){_writes(unfinished)}")
        elif grace_ran_out:
            parts.append(f"{_ranks(unfinished)} had not finished {_scripts(unfinished)} when the {grace} ran out"
                         f"{_writes(unfinished)}")
        else:
            said = _writes(unfinished) or ("" if finished or not advise else
                                           f" (to save on preemption, a script catches SIGTERM, saves, and exits 0"
                                           f" within the {grace})")
            parts.append(f"{_ranks(unfinished)} did not finish {_scripts(unfinished)} after the SIGTERM{said}")
    return "; ".join(parts)


def _ranks(ranks: list[RankAfterSigterm]) -> str:
    return ranks_text(r.rank for r in ranks)


def _scripts(ranks: list[RankAfterSigterm]) -> str:
    return "its script" if len(ranks) == 1 else "their scripts"


def _writes(ranks: list[RankAfterSigterm]) -> str:
    """`` (opened to write after it: ckpt.pt, /tmp/x.pt on its node's own disk, gone with a
    preempted node)``, or "" where it opened none (or said none)."""
    shared = sorted({path for r in ranks for path in r.wrote})
    local = sorted({path for r in ranks for path in r.wrote_locally})
    named = [*shared, *(f"{path} on its node's own disk, gone with a preempted node" for path in local)]
    if not named:
        return ""
    more = len(named) - FILES_NAMED
    listed = ", ".join(named[:FILES_NAMED]) + (f" and {more} more" if more > 0 else "")
    return f" (opened to write after it: {listed})"
