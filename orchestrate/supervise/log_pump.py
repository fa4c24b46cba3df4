"""The log pump: each node's container log, from the engine, into whole worker lines on screen.

Threads per node and log stream read ``docker logs -f --timestamps``, stdout and stderr
apart (``engine.container_log``), and put each raw line, with its stream, into the
supervisor's inbox; :meth:`LogPump.take` turns what the supervisor takes out
into whole worker lines (joining the pieces torchrun's tee cuts), keeps them in the node's
log file and prints them rank-prefixed. A restarted container gets a new stream, and what
the old one left unfinished is shown first.
"""
from __future__ import annotations

import queue
import time
from typing import IO, Callable, Optional

from orchestrate.engine.container_log import LogLine, Since, advanced, follow_log
from orchestrate.supervise.api import LineArrived, LogEnded, Message, NodeTracker
from orchestrate.supervise.console_filter import ConsoleFilter
from orchestrate.supervise.worker_lines import OutputLine


class LogPump:
    """Streams node logs into ``inbox`` and shows the lines taken out of it."""

    def __init__(self, inbox: "queue.SimpleQueue[Message]", out: IO[str], width: int,
                 clock: Callable[[], float] = time.monotonic, verbose: bool = False) -> None:
        self.inbox = inbox
        self.out = out
        self.width = width
        self.clock = clock
        self.verbose = verbose
        self.console = ConsoleFilter()  # what the console leaves to the node logs, without -v

    def follow(self, tracker: NodeTracker, since: Since = None) -> list[OutputLine]:
        """Start a new stream of the node's log (from the start, or ``since`` an engine time, or
        one per stream);
        return (and show) the lines the previous stream left unfinished."""
        leftovers = self.show(tracker.output.end(time.time()))
        tracker.stream += 1
        tracker.log_open = True
        node, stream = tracker.name, tracker.stream

        def put(line: Optional[LogLine]) -> None:
            if line is None:
                self.inbox.put(LogEnded(node, stream, time.time(), self.clock()))
            else:
                self.inbox.put(LineArrived(node, stream, line.text, line.stamp or time.time(), self.clock(),
                                           line.source))

        follow_log(tracker.container, put, since, name=f"log-{node}-{stream}")
        return leftovers

    def take(self, tracker: NodeTracker, message: Message) -> list[OutputLine]:
        """The whole lines a message of this node completes, shown; none from a stream that a
        restart superseded. A :class:`LogEnded` closes the stream and flushes its pieces."""
        if message.stream != tracker.stream:  # type: ignore[union-attr]
            return []
        if isinstance(message, LogEnded):
            tracker.log_open = False
            return self.show(tracker.output.end(message.stamp), ended=tracker.name)
        assert isinstance(message, LineArrived)
        position = tracker.last_log_stamps.get(message.source, (0.0, 0))
        tracker.last_log_stamps[message.source] = advanced(position, message.stamp)
        return self.show(tracker.output.add(message.text, message.stamp, message.source))

    def show(self, lines: list[OutputLine], ended: Optional[str] = None) -> list[OutputLine]:
        """Print ``lines`` (the console's share of them, without -v); return them all.
        ``ended``: the node whose stream they end."""
        shown = lines if self.verbose else [s for line in lines for s in self.console.shown(line)]
        if ended is not None and not self.verbose:
            shown += self.console.flush(ended)
        for line in shown:
            self.out.write(line.render(self.width) + "\n")
        return lines

    def flush(self, trackers: list[NodeTracker]) -> None:
        """Write what was shown to the console, and what was kept to the node logs: once per
        batch of lines, not per line (a flush per line cost a third of the time of a job that
        prints fast)."""
        self.out.flush()
        for tracker in trackers:
            if not tracker.output.log_file.closed:
                tracker.output.flush()
