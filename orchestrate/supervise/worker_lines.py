"""Read what torchrun prints: worker lines, their ranks, and its failure report."""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Optional

from orchestrate.debugger.states import is_stop_line
from orchestrate.outcome.root_cause import (RootCause, chains_on, exception_chain, is_frame_line,
                                            parse_root_cause, says_chained, starts_traceback, users_frame_in)
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.progress_bars import continues, parse_redraw
from orchestrate.text import TORCHRUN_PREFIX

# torchrun --tee prefixes every worker line: "[<global rank>|<local rank>]:" with the launcher's
# template (plan.LOG_LINE_PREFIX_TEMPLATE), "[<role><local rank>]:" by default (plain compose up).
# torch's own "[rank<global rank>]:", before each line of an uncaught error on stderr, is part of
# the worker's text, never torchrun's prefix: taken for one, an elastic node's traceback was
# "local rank 1"'s, and a static node0's lines were cut at it.
# (text.TORCHRUN_PREFIX, which the summary's last lines of a node read too.)
_WORKER_LINE = re.compile(rf"^{TORCHRUN_PREFIX}(?P<text>.*)$")
# The same prefix anywhere in a line. torchrun's tee copies a worker's log file line by line,
# and a line the worker has not finished yet (a progress bar's "\r" update, print(..., end=""))
# is copied as far as it goes, prefixed: the rest follows later under a prefix of its own.
# So in "[0|0]:epoch 1[1|1]:loss 0.5", rank 0's line goes on after rank 1's, in a later line.
_WORKER_PREFIX = re.compile(TORCHRUN_PREFIX)
LAST_LINES = 20
# How many lines of a worker's latest traceback are kept, from its first on: where the user's own
# code was can lie far above the last lines, under torch's own frames.
TRACEBACK_LINES = 400
# How many lines after a traceback's last frame are kept with it: its exception (a message of
# several lines), not what the worker printed long after it went on from a traceback it caught.
AFTER_LAST_FRAME = 50


@dataclass(frozen=True)
class OutputLine:
    """One line of a node's output, attributed to a worker where torchrun says whose."""

    node: str
    text: str
    local_rank: Optional[int] = None
    global_rank: Optional[int] = None
    # The stream it came on ("stdout", "stderr"; "" where not known): a worker's two streams are
    # tee'd apart, so a line of one may arrive between two lines the worker wrote to the other.
    source: str = field(default="", compare=False)

    @property
    def prefix(self) -> str:
        """The label shown before the line: ``node1/rank3`` or ``node1``."""
        if self.global_rank is not None:
            return f"{self.node}/rank{self.global_rank}"
        if self.local_rank is not None:
            return f"{self.node}/local{self.local_rank}"
        return self.node

    def render(self, width: int = 0) -> str:
        """Return the line with its prefix, the prefix padded to ``width``."""
        return f"[{self.prefix}]".ljust(width + 2) + " " + self.text


def parse_line(node: NodePlan, raw: str) -> OutputLine:
    """Attribute one raw output line of ``node`` to its worker's global rank, if any."""
    match = _WORKER_LINE.match(raw)
    if match and match.group("rank") is not None:
        return OutputLine(node.name, match.group("text"), int(match.group("local")), int(match.group("rank")))
    if match:
        local_rank = int(match.group("local_rank"))
        if local_rank < len(node.global_ranks):
            return OutputLine(node.name, match.group("text"), local_rank, node.global_rank(local_rank))
        if not node.global_ranks:  # elastic: the rendezvous, not the plan, knows global ranks
            return OutputLine(node.name, match.group("text"), local_rank)
    return OutputLine(node.name, raw)


class WorkerLines:
    """Turns one node's raw output lines into whole worker lines.

    A raw line may hold pieces of several workers' lines, each behind its prefix (see
    ``_WORKER_PREFIX``): every piece but the last is unfinished, and is kept until its
    worker's line goes on in the same stream (stdout or stderr: a worker's two streams are
    tee'd apart, and one's line goes on while the other prints); the last piece ends a line.
    """

    def __init__(self, node: NodePlan) -> None:
        self.node = node
        self.unfinished: dict[tuple[str, int], OutputLine] = {}  # (stream, local rank) -> piece

    def feed(self, raw: str, source: str = "stdout") -> list[OutputLine]:
        """The lines that ``raw``, a line of stream ``source``, completes (none while it only
        holds unfinished pieces)."""
        pieces = self._pieces(raw)
        for piece in pieces[:-1]:
            self.unfinished[(source, piece.local_rank)] = self._joined(piece, source)  # type: ignore[index]
        last = pieces[-1]
        return [replace(self._joined(last, source) if last.local_rank is not None else last, source=source)]

    def flush(self) -> list[OutputLine]:
        """The unfinished lines as they are (their node's output has ended)."""
        lines, self.unfinished = [replace(line, source=source) for (source, _), line in self.unfinished.items()], {}
        return lines

    def _joined(self, piece: OutputLine, source: str) -> OutputLine:
        before = self.unfinished.pop((source, piece.local_rank), None)  # type: ignore[arg-type]
        return replace(piece, text=before.text + piece.text) if before else piece

    def _of_a_worker_here(self, piece: OutputLine) -> bool:
        if piece.local_rank is None:
            return False
        # An elastic run plans no ranks: any local rank may be a worker's.
        return not self.node.global_ranks or piece.local_rank < len(self.node.global_ranks)

    def _pieces(self, raw: str) -> list[OutputLine]:
        """``raw`` cut at every prefix of this node's workers; one piece if it begins with none."""
        first = parse_line(self.node, raw)
        if first.local_rank is None:
            return [first]
        cuts = [0] + [match.start() for match in _WORKER_PREFIX.finditer(raw, len(raw) - len(first.text))
                      if self._of_a_worker_here(parse_line(self.node, match.group()))]
        return [parse_line(self.node, raw[start:end]) for start, end in zip(cuts, cuts[1:] + [len(raw)])]


@dataclass
class NodeOutput:
    """Everything one node printed: kept in a log file, and its last lines in memory."""

    node: NodePlan
    log_file: IO[str]
    tail: deque = field(default_factory=lambda: deque(maxlen=400))
    rank_tails: dict[int, deque] = field(default_factory=dict)
    # each worker's latest traceback, from its first line; with those it was chained from
    tracebacks: dict[int, list[str]] = field(default_factory=dict)
    kept_up_to: dict[int, int] = field(default_factory=dict)  # how long each may grow: its latest's own TRACEBACK_LINES
    after_frames: dict[int, int] = field(default_factory=dict)  # lines kept since its last frame
    first_worker_line_at: Optional[float] = None
    worker_lines: WorkerLines = field(init=False)

    def __post_init__(self) -> None:
        self.worker_lines = WorkerLines(self.node)

    def add(self, raw: str, at: float, source: str = "stdout") -> list[OutputLine]:
        """Record one raw line of stream ``source``, received at time ``at``; return the lines
        it completes."""
        self.tail.append(raw)
        return self._keep(self.worker_lines.feed(raw, source), at)

    def end(self, at: float) -> list[OutputLine]:
        """The node's output has ended: record and return the lines its workers left unfinished."""
        return self._keep(self.worker_lines.flush(), at)

    def _keep(self, lines: list[OutputLine], at: float) -> list[OutputLine]:
        for line in lines:
            self.log_file.write(line.render() + "\n")
            # (a rank's own line that it stopped in its debugger is in its log, not its last lines:
            # the launcher said it as it came, and it is stale once the rank has gone on or failed)
            if line.local_rank is not None and not is_stop_line(line.text):
                key = line.global_rank if line.global_rank is not None else line.local_rank
                tail = self.rank_tails.setdefault(key, deque(maxlen=LAST_LINES))
                if tail and _redraws_one_bar(tail[-1], line.text):
                    tail[-1] = line.text  # a progress bar's redraw replaces the one before it
                else:
                    tail.append(line.text)
                self._keep_traceback(key, line.text)
                if self.first_worker_line_at is None:
                    self.first_worker_line_at = at
        return lines

    def _keep_traceback(self, rank: int, text: str) -> None:
        """Keep a worker's line where it belongs to its latest traceback: from its first line,
        up to TRACEBACK_LINES, and up to AFTER_LAST_FRAME lines past its last frame; after the
        tracebacks of the exceptions it was chained from (``raise ... from``), where it follows one."""
        kept = self.tracebacks.get(rank)
        if starts_traceback(text):
            if kept and chains_on(kept):  # raised from the one before: kept after it (its last lines)
                del kept[:-(TRACEBACK_LINES // 2)]
            else:
                self.tracebacks[rank] = kept = []
            self.kept_up_to[rank] = len(kept) + TRACEBACK_LINES
            kept.append(text)
            self.after_frames[rank] = 0
            return
        keeps = (kept is not None and len(kept) < self.kept_up_to[rank]
                 and (is_frame_line(text) or self.after_frames[rank] < AFTER_LAST_FRAME))
        if not keeps and says_chained(text):  # after an exception raised with no traceback: its last lines
            before = list(self.rank_tails.get(rank, ()))[:-1]  # (the tail has this line already)
            self.tracebacks[rank], self.kept_up_to[rank], self.after_frames[rank] = [*before, text], TRACEBACK_LINES, 0
        elif keeps:
            self.after_frames[rank] = 0 if is_frame_line(text) else self.after_frames[rank] + 1
            kept.append(text)

    def flush(self) -> None:
        """Write what was kept to the log file (the supervisor does after each batch of lines)."""
        self.log_file.flush()

    def last_lines(self, rank: Optional[int] = None, count: int = 10) -> list[str]:
        """Return the last lines of one worker, or of the whole node when ``rank`` is None."""
        lines = list(self.rank_tails.get(rank, ())) if rank is not None else []
        if not lines:
            lines = [ln for ln in self.tail if ln.strip()]
        return lines[-count:]

    def traceback_of(self, rank: int, exception: str) -> list[str]:
        """A worker's latest traceback (with those it was chained from) where it is the one of
        ``exception``, the error it failed with; [] where it is not (one it printed and went on from)."""
        lines = self.tracebacks.get(rank, [])
        said = exception.splitlines()[0][:80] if exception else ""
        if not said or not any(said in line for line in lines):
            return []
        return lines

    def users_frame(self, rank: int, exception: str) -> str:
        """Where the user's own code was in the traceback of a worker that failed with
        ``exception`` (see :func:`users_frame_in`); "" where its latest traceback is not that
        exception's, or has no frame of the user's."""
        return users_frame_in(self.traceback_of(rank, exception))

    def exception_chain(self, rank: int, exception: str) -> tuple[str, ...]:
        """The exceptions a worker that failed with ``exception`` had it raised from (see
        :func:`exception_chain`); () where its latest traceback is not that exception's."""
        return exception_chain(self.traceback_of(rank, exception))

    def root_cause(self) -> Optional[RootCause]:
        """The root cause torchrun reported on this node, if it reported one."""
        return parse_root_cause(list(self.tail))


def _redraws_one_bar(before: str, text: str) -> bool:
    first, then = parse_redraw(before), parse_redraw(text)
    return first is not None and then is not None and continues(first, then)


def open_node_log(run_dir: Path, node: NodePlan) -> IO[str]:
    """Open the log file of ``node`` in ``run_dir`` for writing."""
    return open(run_dir / f"{node.name}.log", "w", encoding="utf-8")
