"""A container's log as the engine keeps it: each line with its stream (stdout or stderr) and
the engine's time of it.

The two streams are asked for apart. The engine cuts each stream into lines on its own, but a
merged log does not say which stream a line came from, and a line that a process writes in
pieces must be put together from its own stream's lines: torchrun's tee copies a worker's
unfinished stdout line (``print(..., end="")``) as it is, and the worker's stderr (a tqdm bar,
a warning) can go on meanwhile. So the lines so far are read from both streams and merged in
time order, and then each stream is followed live, each from its own last line.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from orchestrate.engine.client import engine_time, stream_lines
from orchestrate.engine.errors import engine_errors

log = logging.getLogger(__name__)

SOURCES = ("stdout", "stderr")
_TIMESTAMPED = re.compile(rb"^(\d{4}-\d\d-\d\dT[\d:.]+Z) ?(.*)$", re.S)


@dataclass(frozen=True)
class LogLine:
    """One line of a container's log: its stream, the engine's time of it (None if unstamped)."""

    source: str
    stamp: Optional[float]
    text: str


def parse_log_line(raw: bytes, source: str) -> LogLine:
    """A raw line of ``docker logs --timestamps``."""
    match = _TIMESTAMPED.match(raw)
    # NUL bytes out: torch's DataLoader worker writes one with its segfault message, and a
    # console or a log with one in it is binary to grep
    text = (match.group(2) if match else raw).decode("utf-8", "replace").rstrip("\r").replace("\0", "")
    return LogLine(source, engine_time(match.group(1).decode()) if match else None, text)


def _ask(source: str, since: Optional[float], **options: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"stdout": source == "stdout", "stderr": source == "stderr", "timestamps": True,
                              **options}
    if since is not None:
        kwargs["since"] = since
    return kwargs


def read_log(container: Any, since: Optional[float] = None) -> list[LogLine]:
    """Every line of the container's log so far (from ``since``, an engine time), both streams
    merged in time order (a stream's own order kept where its stamps tie).

    Raises:
        The engine's errors (:func:`engine_errors`), for a container that is gone.
    """
    lines: list[LogLine] = []
    for source in SOURCES:
        raw = container.logs(**_ask(source, since))
        lines += [parse_log_line(line, source) for line in raw.split(b"\n") if line]
    return sorted(lines, key=lambda line: line.stamp or 0.0)


def follow_log(container: Any, put: Callable[[Optional[LogLine]], None], since: Optional[float] = None,
               name: str = "log") -> None:
    """Put every line of the container's log (from ``since``) into ``put``: the lines so far in
    time order, then each as it comes, until the container stops; then None, once. Works in
    threads of its own (named after ``name``) and returns at once."""

    def run() -> None:
        try:
            history = read_log(container, since)
        except engine_errors() as exc:  # the container went away before its log could be asked for
            log.debug("%s: no log: %s", name, exc)
            put(None)
            return
        for line in history:
            put(line)
        left = [len(SOURCES)]
        lock = threading.Lock()

        def live(source: str) -> None:
            own = [line for line in history if line.source == source]
            last = own[-1].stamp if own else None
            # the engine's "since" takes lines from that time on: the ones read already are skipped
            skip = sum(1 for line in own if line.stamp == last) if last is not None else 0
            try:
                for raw in stream_lines(container.logs(stream=True, follow=True,
                                                       **_ask(source, last if last is not None else since))):
                    line = parse_log_line(raw, source)
                    if skip and line.stamp == last:
                        skip -= 1
                        continue
                    skip = 0
                    put(line)
            except engine_errors() as exc:  # the container went away before its log could be asked for
                log.debug("%s: %s stream ended: %s", name, source, exc)
            finally:
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        put(None)

        threading.Thread(target=live, args=(SOURCES[1],), name=f"{name}-{SOURCES[1]}", daemon=True).start()
        live(SOURCES[0])

    threading.Thread(target=run, name=name, daemon=True).start()
