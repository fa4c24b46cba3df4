"""What the console shows of the nodes' own lines (pure). The node logs keep every line, and
``-v`` shows them all; otherwise these are left to the logs:

- torchrun's INFO records (``I1123 01:03:22.761000 16858 .../api.py:890] ...``): its rendezvous rounds;
- torchrun's ``ChildFailedError`` report: its own traceback and the table that follows,
  printed whenever a worker exits non-zero. The run's summary names the failing rank, its exit
  code and its error in one line, so the console shows one line in its place;
- the C++ backtraces torch prints under some of its warnings and errors (``Exception raised from
  recvBytes at .../Utils.hpp:682 (most recent call first):``, then a ``frame #N: ...`` line per
  frame), as a node whose rendezvous store is lost prints 25 of them: one line in their place,
  after the warning that says what went wrong;
- the traceback under one of torchrun's own log records (``E1205 14:32:06.395000 8
  torch/.../api.py:965] Error waiting on exit barrier``, then ``Traceback (most recent call last):``,
  its frames and the exception, each line behind the record's header), as a node whose peer failed
  prints at its exit barrier: the record's first line and its exception show, one line in place
  of the frames;
- a log line of torch's said again and again (``[W1130 07:39:43.38 socket.cpp:767] [c10d] The client
  socket has failed to connect to [localhost]:12355``, once a second by every rank that looks for a
  store that is not there): the first shows, and the count of those that follow it in a row, once
  another line comes (:data:`SAID_AGAIN`);
- a rank's own line as it stops in its debugger (``[ddp-compose] rank 1 stopped in its debugger at
  ...``, for ``logs RUN``): the launcher says the same in its own line;
- most redraws of the workers' progress bars, each a line of its own (``progress_bars``), the
  empty line that a bar's first "\\r" makes (held until the next line on its stream: the rank's
  other stream may print before the bar's first redraw comes), and the spaces that wipe a bar
  left with ``leave=False``.

Every other worker line passes, and so does any other traceback (of the node supervisor, say).
"""
from __future__ import annotations

import re
from typing import Optional

from orchestrate.debugger.states import is_stop_line
from orchestrate.hangs.watchdog import CPP_BACKTRACE, CPP_FRAME
from orchestrate.supervise.progress_bars import BarThrottle, parse_redraw
from orchestrate.supervise.worker_lines import OutputLine
from orchestrate.text import counted

_AGENT_INFO = re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
_TRACEBACK = "Traceback (most recent call last):"
# The first frame of torchrun's own traceback: its console script, or torch.distributed.run.
_AGENT_FRAME = re.compile(r'^\s*File ".*(/torchrun|torch/distributed/run\.py)", line \d+')
_RULE = re.compile(r"^=+$")
REPORT_NOTE = "(torchrun's ChildFailedError report: see the summary below, the node log, or -v)"
BACKTRACE_NOTE = "(a C++ backtrace: see the node log, or -v)"
LOGGED_TRACEBACK_NOTE = "(its traceback: see the node log, or -v)"
# One of torch's log lines, C++ (glog: "[W1130 07:39:43.381603347 socket.cpp:767] ...") or Python
# ("W1130 07:08:17.270000 9 torch/.../api.py:725] ..."): ``said`` is it without its time (and pid).
_TORCH_LOG = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? (?P<said>[^\s\]]+\] .*)$")
SAID_AGAIN = "(the same line {more}: see the node log, or -v)"
SaidBy = tuple[str, Optional[int], Optional[int]]  # node, local rank, global rank


class ConsoleFilter:
    """Decides, line by line and node by node, what the console shows."""

    def __init__(self) -> None:
        self.held: dict[str, list[OutputLine]] = {}  # a traceback's first line, until its next says whose
        self.in_report: dict[str, int] = {}  # node -> rules seen so far in torchrun's report
        self.bars: BarThrottle[OutputLine] = BarThrottle()
        # a worker's empty line, until its next on the same stream (node, local rank, stream)
        self.blank: dict[tuple[str, Optional[int], str], OutputLine] = {}
        self.after_bar: set[tuple[str, Optional[int]]] = set()  # the workers whose last line was a redraw
        self.in_backtrace: set[tuple[str, Optional[int]]] = set()  # node or worker -> in a C++ backtrace
        # by node, local and global rank (a restarted worker is another): the torch log line said
        # last, without its time, and how many times it was said again since
        self.last_log: dict[SaidBy, str] = {}
        self.repeats: dict[SaidBy, int] = {}
        self.muted: set[tuple[str, Optional[int]]] = set()  # said again just now: its backtrace too is not shown
        # node -> where torchrun's log record came from ("torch/.../api.py:965]"), while in the
        # traceback under it
        self.in_logged_traceback: dict[str, str] = {}

    def _said_again(self, said_by: SaidBy) -> list[OutputLine]:
        """The line that counts the repeats of a torch log line (none if there were none); the
        run of repeats is over."""
        self.last_log.pop(said_by, None)
        count = self.repeats.pop(said_by, 0)
        if not count:
            return []
        node, local_rank, global_rank = said_by
        return [OutputLine(node, SAID_AGAIN.format(more=counted(count, "more time")), local_rank, global_rank)]

    def _runs_of(self, node: str) -> list[SaidBy]:
        """The node's runs of a torch log line (every repeat counted is of one), its own first, then
        its workers' in rank order."""
        return sorted((said_by for said_by in self.last_log if said_by[0] == node),
                      key=lambda s: (s[1] is not None, s[1] or 0, s[2] or 0))

    def _backtrace(self, line: OutputLine) -> Optional[list[OutputLine]]:
        """What shows of a C++ backtrace's line: its first becomes :data:`BACKTRACE_NOTE`, its frames
        (and the empty line after them) nothing; None for a line that is none of those."""
        key = (line.node, line.local_rank)
        if key in self.in_backtrace:
            if CPP_FRAME.match(line.text) or not line.text.strip():
                return []
            self.in_backtrace.discard(key)
        if CPP_BACKTRACE.match(line.text.strip()):
            self.in_backtrace.add(key)
            return [OutputLine(line.node, BACKTRACE_NOTE, line.local_rank, line.global_rank)]
        return None

    def _logged_traceback(self, line: OutputLine, log: Optional[re.Match]) -> Optional[list[OutputLine]]:
        """What shows of the traceback under one of torchrun's log records: its first line
        becomes :data:`LOGGED_TRACEBACK_NOTE`, its frames nothing, its exception itself; None for
        a line that is none of those (a worker's, another record's)."""
        if line.local_rank is not None:
            return None  # (a worker's line, between the node's: the node's record goes on)
        if log is None:
            where = self.in_logged_traceback.get(line.node)
            if where is not None and line.text.strip().endswith(f" {where}]"):
                return []  # the record's empty line (the header alone)
            self.in_logged_traceback.pop(line.node, None)
            return None
        where, _, said = log["said"].partition("] ")
        if self.in_logged_traceback.get(line.node) == where:
            if said[:1].isspace() or not said.strip():
                return []  # a frame, its code, its carets
            del self.in_logged_traceback[line.node]
            return None  # the exception: it shows
        self.in_logged_traceback.pop(line.node, None)
        if said.strip() == _TRACEBACK:
            self.in_logged_traceback[line.node] = where
            return [OutputLine(line.node, LOGGED_TRACEBACK_NOTE)]
        return None

    def shown(self, line: OutputLine) -> list[OutputLine]:
        """The lines to show now that ``line`` arrived (none, it, or lines held back before it)."""
        # (not inside torchrun's report, nor after a node's line held back: they come first)
        own = line.local_rank is not None or (line.node not in self.in_report and line.node not in self.held)
        if not own:
            return self._shown(line)
        if line.local_rank is None and _AGENT_INFO.match(line.text):
            return []  # torchrun's INFO records: left to the log, none of them counted as said again
        key = (line.node, line.local_rank)
        said_by = (line.node, line.local_rank, line.global_rank)
        log = _TORCH_LOG.match(line.text.strip())
        logged = self._logged_traceback(line, log)
        if logged is not None:
            return logged
        if log is not None and self.last_log.get(said_by) == log["said"]:
            self.repeats[said_by] = self.repeats.get(said_by, 0) + 1
            self.muted.add(key)
            self.in_backtrace.discard(key)  # (a log line ends the backtrace before it)
            return []
        backtrace = self._backtrace(line)
        if backtrace is not None:
            return [] if key in self.muted else backtrace
        self.muted.discard(key)
        # a line of torchrun's own (a restart, a stop) ends its workers' runs of repeats too
        ended = [said_by] if line.local_rank is not None else self._runs_of(line.node)
        said_again = [said for run in ended for said in self._said_again(run)]
        if log is not None:
            self.last_log[said_by] = log["said"]
        return [*said_again, *self._shown(line)]

    def _shown(self, line: OutputLine) -> list[OutputLine]:
        if line.local_rank is not None:
            return self._worker_line(line)
        node = line.node
        if node in self.in_report:
            if _RULE.match(line.text.strip()):
                self.in_report[node] += 1
                if self.in_report[node] == 2:  # the table's closing rule: the report is over
                    del self.in_report[node]
                    return [OutputLine(node, REPORT_NOTE)]
            return []
        if node in self.held:
            held = self.held.pop(node)
            if _AGENT_FRAME.match(line.text):
                self.in_report[node] = 0
                return []
            return [*held, *self.shown(line)]
        if line.text.strip() == _TRACEBACK:
            self.held[node] = [line]
            return []
        return [] if _AGENT_INFO.match(line.text) else [line]

    def flush(self, node: str) -> list[OutputLine]:
        """The node's stream ended: what was held back is shown, and a report cut short is over."""
        self.in_report.pop(node, None)
        blanks = [self.blank.pop(rank) for rank in [rank for rank in self.blank if rank[0] == node]]
        counted = [said for run in self._runs_of(node) for said in self._said_again(run)]
        self.muted = {key for key in self.muted if key[0] != node}
        self.in_backtrace = {key for key in self.in_backtrace if key[0] != node}
        self.in_logged_traceback.pop(node, None)
        return [*self.held.pop(node, []), *self.bars.flush(node), *blanks, *counted]

    def _worker_line(self, line: OutputLine) -> list[OutputLine]:
        rank = (line.node, line.local_rank)
        # (the empty line of a bar's first "\r" is on the bar's stream, stderr for tqdm; the
        # rank's stdout lines may arrive between it and the bar's first redraw)
        stream = (*rank, line.source)
        blank = self.blank.pop(stream, None)
        redraw = parse_redraw(line.text)
        if redraw is not None:  # the empty line before it, if any, is tqdm's first "\r"
            self.after_bar.add(rank)
            return self.bars.shown(line.node, line.local_rank, line, redraw)
        cleared = rank in self.after_bar and line.text and not line.text.strip()
        self.after_bar.discard(rank)
        if cleared:  # the spaces that wipe a bar left with leave=False
            return []
        before = [blank] if blank is not None else []
        if is_stop_line(line.text):
            return before
        if line.text == "":
            self.blank[stream] = line
            return before
        return [*before, line]
