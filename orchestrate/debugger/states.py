"""Which ranks are in their debugger, from what each said on the progress channel: it ``waits``
for a terminal (with the call that stopped it, and where), a terminal is ``attached`` (with where,
when a breakpoint set in the session stopped it again), the rank is ``running`` on to such a
breakpoint with the terminal still holding the session, or it ``left``. A newer process of the
rank (an elastic restart), or its script's end, closes what an older one said. Pure."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from orchestrate.errors import OrchestrateError
from orchestrate.node.remote_debugger import STOP_LINE_PREFIX, stop_words, where_text
from orchestrate.text import ranks_text

WAITS, ATTACHED, RUNNING, LEFT = "waits", "attached", "running", "left"


@dataclass(frozen=True)
class RankInDebugger:
    """One rank stopped in its debugger: by which call (``breakpoint()``...), where (the file as
    the user knows it, the line of the call, its function), since when (Unix seconds), and
    whether a terminal holds it now, and whether it runs on meanwhile (to a breakpoint set in the
    session: it is not stopped then)."""

    rank: int
    node: str
    attempt: str
    call: str
    file: str
    line: int
    function: str
    since: float
    attached: bool = False
    text: str = ""  # the source line it stopped at
    running: bool = False

    def where(self) -> str:
        """``bp.py:9 in <module>``."""
        return where_text(self.file, self.line, self.function)

    def what(self) -> str:
        """The source line it stopped at, or the call that stopped it where that is not known."""
        return self.text or self.call


class DebuggerStates:
    """The ranks in their debugger now, as the records are taken in the order each rank wrote them."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankInDebugger] = {}

    def attached(self) -> list[int]:
        """The ranks a terminal debugs now, stopped (not running on to a breakpoint set in the session)."""
        return sorted(rank for rank, stopped in self.ranks.items() if stopped.attached and not stopped.running)

    def take(self, rank: int, attempt: str, node: str, at: float, state: Optional[dict[str, Any]],
             finished: bool = False) -> Optional[tuple[str, RankInDebugger]]:
        """Take one record of ``rank``'s process ``attempt`` (``state``: what it said of its
        debugger, None for any other record); return what changed, as (``waits``, ``attached``
        or ``left``, the rank as it was or is now), or None."""
        known = self.ranks.get(rank)
        if known is not None and known.attempt != attempt:
            del self.ranks[rank]  # a new process of the rank: the old one ended in its debugger
            known = None
        if finished and known is not None:  # its script ended: it is in no debugger
            del self.ranks[rank]
            return LEFT, known
        if not isinstance(state, dict):
            return None
        said = state.get("state")
        if said == WAITS or said == ATTACHED and known is not None and "file" in state:
            line = state.get("line")
            now = RankInDebugger(rank, node, attempt, str(state.get("call", "")), str(state.get("file", "")),
                                 line if isinstance(line, int) and not isinstance(line, bool) else 0,
                                 str(state.get("function", "")), at, attached=said == ATTACHED,
                                 text=str(state.get("text", "")))
            self.ranks[rank] = now
            return said, now
        if known is None:
            return None
        if said == ATTACHED:
            self.ranks[rank] = replace(known, attached=True, running=False)
            return ATTACHED, self.ranks[rank]
        if said == RUNNING:
            self.ranks[rank] = replace(known, running=True)
            return RUNNING, self.ranks[rank]
        if said == LEFT:
            del self.ranks[rank]
            return LEFT, known
        return None


def waits_line(stopped: RankInDebugger, run_id: str) -> str:
    """What the launcher says as a rank stops in its debugger: the rank's own words."""
    return stop_words(stopped.rank, stopped.where(), stopped.what(), run_id)


def is_stop_line(text: str) -> bool:
    """Whether a worker's line is its own word that it stopped in its debugger (the launcher's
    console says :func:`waits_line` in its place)."""
    return (text.startswith(STOP_LINE_PREFIX + "rank ") and " stopped in its debugger at " in text
            and " debug it with: " in text)


def choose(stopped: dict[int, RankInDebugger], rank: Optional[int], run_id: str) -> RankInDebugger:
    """The rank a terminal debugs: ``rank``, or the one rank in its debugger where none is named.
    OrchestrateError, with what to do, where that rank is not waiting for a terminal."""
    waiting = sorted(r for r, s in stopped.items() if not s.attached)
    if rank is None:
        if len(stopped) == 1:
            rank = next(iter(stopped))
        elif not stopped:
            raise OrchestrateError(f"no rank of run {run_id} is in its debugger (a script stops there at"
                                   " breakpoint(), pdb.set_trace(), torch.distributed.breakpoint() or"
                                   " pdb.post_mortem(), and with run --pdb at an error it does not catch)")
        else:
            raise OrchestrateError(f"{ranks_text(stopped)} of run {run_id} are in their debugger:"
                                   f" name one (python -m orchestrate debug {run_id} {min(waiting or stopped)})")
    found = stopped.get(rank)
    if found is None:
        others = f"; {ranks_text(stopped)} {'is' if len(stopped) == 1 else 'are'}" if stopped else ""
        raise OrchestrateError(f"rank {rank} of run {run_id} is not in its debugger{others}")
    if found.attached:
        raise OrchestrateError(f"rank {rank} of run {run_id} is in a debugging session already (another"
                               " terminal's debug); one terminal at a time")
    return found
