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
from typing import Any, Callable, Mapping, Optional, Union

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


Since = Union[None, float, Mapping[str, float]]  # an engine time, or one per stream
RESUMES = 3  # how often a stream that ends while its container runs (a dropped connection) is asked for again


def _since(since: Since, source: str) -> Optional[float]:
    return since.get(source) if isinstance(since, Mapping) else since


def _ask(source: str, since: Optional[float], **options: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"stdout": source == "stdout", "stderr": source == "stderr", "timestamps": True,
                              **options}
    if since is not None:
        kwargs["since"] = since
    return kwargs


def read_log(container: Any, since: Since = None) -> list[LogLine]:
    """Every line of the container's log so far (from ``since``, an engine time, or one per
    stream), both streams merged in time order (a stream's own order kept where stamps tie).

    Raises:
        The engine's errors (:func:`engine_errors`), for a container that is gone.
    """
    lines: list[LogLine] = []
    for source in SOURCES:
        raw = container.logs(**_ask(source, _since(since, source)))
        lines += [parse_log_line(line, source) for line in raw.split(b"\n") if line]
    return sorted(lines, key=lambda line: line.stamp or 0.0)


def _still_running(container: Any) -> bool:
    try:
        container.reload()
    except engine_errors():
        return False
    return container.status in ("running", "paused")


class _Stream:
    """One stream of the log, followed live from where the lines read so far end: the engine's
    ``since`` takes the lines of that very time again, and they are skipped."""

    def __init__(self, container: Any, source: str, read: list[LogLine], since: Optional[float]) -> None:
        self.container, self.source = container, source
        own = [line for line in read if line.source == source]
        self.last = own[-1].stamp if own else since
        self.at_last = sum(1 for line in own if line.stamp == self.last) if own else 0  # lines of that time read

    def follow(self, put: Callable[[LogLine], None], name: str) -> None:
        for resumed in range(RESUMES + 1):
            skip = self.at_last
            try:
                for raw in stream_lines(self.container.logs(stream=True, follow=True, **_ask(self.source, self.last))):
                    line = parse_log_line(raw, self.source)
                    if skip and line.stamp == self.last:
                        skip -= 1
                        continue
                    skip = 0
                    self.at_last = self.at_last + 1 if line.stamp == self.last else 1
                    self.last = line.stamp if line.stamp is not None else self.last
                    put(line)
            except engine_errors() as exc:  # the container went away before its log could be asked for
                log.debug("%s: %s stream ended: %s", name, self.source, exc)
            if not _still_running(self.container):
                return
            log.debug("%s: the %s stream ended while the container runs: asked for again", name, self.source)


def follow_log(container: Any, put: Callable[[Optional[LogLine]], None], since: Since = None,
               name: str = "log") -> None:
    """Put every line of the container's log (from ``since``) into ``put``: the lines so far in
    time order, then each as it comes, until the container stops; then None, once, whatever
    happened (a stream that ends while the container runs is asked for again, from its last
    line). Works in threads of its own (named after ``name``) and returns at once."""
    left = [len(SOURCES)]
    lock = threading.Lock()

    def done() -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                put(None)

    def live(stream: _Stream) -> None:
        try:
            stream.follow(put, name)
        except Exception:  # a bug: logged, and the log still ends
            log.exception("%s: following the %s stream failed", name, stream.source)
        finally:
            done()

    def run() -> None:
        try:
            history = read_log(container, since)
            for line in history:
                put(line)
        except Exception as exc:  # the container went away before its log could be asked for, or a bug
            log.debug("%s: no log: %s", name, exc, exc_info=not isinstance(exc, engine_errors()))
            left[0] = 1
            done()
            return
        streams = [_Stream(container, source, history, _since(since, source)) for source in SOURCES]
        threading.Thread(target=live, args=(streams[1],), name=f"{name}-{SOURCES[1]}", daemon=True).start()
        live(streams[0])

    threading.Thread(target=run, name=name, daemon=True).start()
