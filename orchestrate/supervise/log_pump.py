"""The log pump: each node's container log, from the engine, into whole worker lines on screen.

One thread per node and log stream reads ``docker logs -f --timestamps`` and puts each raw
line into the supervisor's inbox; :meth:`LogPump.take` turns what the supervisor takes out
into whole worker lines (joining the pieces torchrun's tee cuts), keeps them in the node's
log file and prints them rank-prefixed. A restarted container gets a new stream, and what
the old one left unfinished is shown first.
"""
from __future__ import annotations

import logging
import queue
import re
import threading
import time
from typing import IO, Any, Callable, Optional

from orchestrate.engine.client import engine_time, stream_lines
from orchestrate.engine.errors import engine_errors
from orchestrate.supervise.api import LineArrived, LogEnded, Message, NodeTracker
from orchestrate.supervise.console_filter import ConsoleFilter
from orchestrate.supervise.worker_lines import OutputLine

log = logging.getLogger(__name__)

_TIMESTAMPED = re.compile(rb"^(\d{4}-\d\d-\d\dT[\d:.]+Z) ?(.*)$", re.S)


class LogPump:
    """Streams node logs into ``inbox`` and shows the lines taken out of it."""

    def __init__(self, inbox: "queue.Queue[Message]", out: IO[str], width: int,
                 clock: Callable[[], float] = time.monotonic, verbose: bool = False) -> None:
        self.inbox = inbox
        self.out = out
        self.width = width
        self.clock = clock
        self.verbose = verbose
        self.console = ConsoleFilter()  # what the console leaves to the node logs, without -v

    def follow(self, tracker: NodeTracker, since: Optional[float] = None) -> list[OutputLine]:
        """Start a new stream of the node's log (from the start, or ``since`` an engine time);
        return (and show) the lines the previous stream left unfinished."""
        leftovers = self.show(tracker.output.end(time.time()))
        tracker.stream += 1
        tracker.log_open = True
        threading.Thread(target=self._read, args=(tracker.container, tracker.name, tracker.stream, since),
                         name=f"log-{tracker.name}-{tracker.stream}", daemon=True).start()
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
        tracker.last_log_stamp = message.stamp
        return self.show(tracker.output.add(message.text, message.stamp))

    def show(self, lines: list[OutputLine], ended: Optional[str] = None) -> list[OutputLine]:
        """Print ``lines`` (the console's share of them, without -v); return them all.
        ``ended``: the node whose stream they end."""
        shown = lines if self.verbose else [s for line in lines for s in self.console.shown(line)]
        if ended is not None and not self.verbose:
            shown += self.console.flush(ended)
        for line in shown:
            self.out.write(line.render(self.width) + "\n")
        self.out.flush()
        return lines

    def _read(self, container: Any, node: str, stream: int, since: Optional[float]) -> None:
        kwargs: dict[str, Any] = {"stream": True, "follow": True, "timestamps": True}
        if since is not None:
            kwargs["since"] = since
        try:
            for raw in stream_lines(container.logs(**kwargs)):
                match = _TIMESTAMPED.match(raw)
                # NUL bytes out: torch's DataLoader worker writes one with its segfault message, and a
                # console or a log with one in it is binary to grep
                text = (match.group(2) if match else raw).decode("utf-8", "replace").rstrip("\r").replace("\0", "")
                stamp = (engine_time(match.group(1).decode()) if match else None) or time.time()
                self.inbox.put(LineArrived(node, stream, text, stamp, self.clock()))
        except engine_errors() as exc:  # the container went away before its log could be asked for
            log.debug("log stream of %s ended: %s", node, exc)
        self.inbox.put(LogEnded(node, stream, time.time(), self.clock()))
