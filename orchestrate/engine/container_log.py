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
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Union

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


# Where to read from: an engine time, or for each stream the time of the last line read and how
# many lines of that very time were read (the engine's ``since`` takes them again).
Position = tuple[float, int]
Since = Union[None, float, Mapping[str, Position]]
RESUMES = 3  # how often a stream that ends while its container runs (a dropped connection) is asked for again
RESUME_SLOWLY_S = 2.0  # at once; after that, every this often while the container runs: no line is lost for good


def _since(since: Since, source: str) -> Position:
    if isinstance(since, Mapping):
        return since.get(source, (0.0, 0))
    return (since or 0.0, 0)


def _ask(source: str, since: float, **options: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"stdout": source == "stdout", "stderr": source == "stderr", "timestamps": True,
                              **options}
    if since:
        kwargs["since"] = since
    return kwargs


def advanced(position: Position, stamp: Optional[float]) -> Position:
    """The position after reading a line of time ``stamp`` (an unstamped line moves nothing)."""
    last, at_last = position
    if stamp is None:
        return position
    return stamp, at_last + 1 if stamp == last else 1


def _unread(lines: Iterable[LogLine], position: Position) -> Iterator[LogLine]:
    """``lines``, asked for from the position's time, without the first ones of that time, which
    were read already."""
    stamp, skip = position
    for line in lines:
        if skip and line.stamp == stamp:
            skip -= 1
            continue
        skip = 0
        yield line


def read_log(container: Any, since: Since = None) -> list[LogLine]:
    """Every line of the container's log so far (from ``since``), both streams merged in time
    order (a stream's own order kept where stamps tie).

    Raises:
        The engine's errors (:func:`engine_errors`), for a container that is gone.
    """
    lines: list[LogLine] = []
    for source in SOURCES:
        position = _since(since, source)
        raw = container.logs(**_ask(source, position[0]))
        lines += _unread((parse_log_line(line, source) for line in raw.split(b"\n") if line), position)
    return sorted(lines, key=lambda line: line.stamp or 0.0)


def _still_running(container: Any) -> bool:
    try:
        container.reload()
    except engine_errors():
        return False
    return container.status in ("running", "paused")


def _run_started(container: Any) -> Optional[float]:
    """When the container's current run started, as the engine said at its latest look (None:
    it never started)."""
    started = container.attrs.get("State", {}).get("StartedAt", "")
    return engine_time(started) if isinstance(started, str) else None


def looked_at(container: Any) -> tuple[str, Optional[float]]:
    """The container's status and when its latest run started, looked at now ("gone" and None
    for one that is gone; None for one that has never started)."""
    try:
        container.reload()
    except engine_errors():
        return "gone", None
    return container.status, _run_started(container)


class _Stream:
    """One stream of the log, followed live from where the lines read so far end. The engine
    ends a live stream as its container stops, whether or not the reader has read what it
    holds (a job that printed 200,000 lines in 17 s lost nine in ten): the rest is then read
    from the stream's last line. A stream follows one run of the container: where it has
    started again by the time its stream ends (a restart), the new run is the next stream's."""

    def __init__(self, container: Any, source: str, read: list[LogLine], since: Position) -> None:
        self.container, self.source = container, source
        self.position = since
        self.run_started = _run_started(container)  # the run followed (as the container was last looked at)
        for line in read:
            if line.source == source:
                self.position = advanced(self.position, line.stamp)

    def follow(self, put: Callable[[LogLine], None], name: str) -> None:
        drops = 0  # in a row: ended while the container runs, with no new line
        while True:
            unfinished: list[bytes] = []  # cut off by a dropped connection: asked for again, whole
            read = False
            try:
                chunks = self.container.logs(stream=True, follow=True, **_ask(self.source, self.position[0]))
                raws = stream_lines(chunks, unfinished)
                for line in _unread((parse_log_line(raw, self.source) for raw in raws), self.position):
                    self.position = advanced(self.position, line.stamp)
                    put(line)
                    read = True
            except engine_errors() as exc:  # the container went away before its log could be asked for
                log.debug("%s: %s stream ended: %s", name, self.source, exc)
            drops = 0 if read else drops + 1
            if drops > RESUMES and not self.run_over():  # the engine keeps dropping it: asked for again, slower
                if drops == RESUMES + 1:
                    log.warning("%s: the engine ended the %s stream of a running container %d times in a row: asked"
                                " for again every %g s while it runs", name, self.source, drops, RESUME_SLOWLY_S)
                time.sleep(RESUME_SLOWLY_S)  # a back-off, not a wait for readiness (then looked at again)
            if self.run_over():
                if not self.rest(put, name):
                    for raw in unfinished:  # its last words, with no line end
                        put(parse_log_line(raw, self.source))
                return
            log.debug("%s: the %s stream ended while the container runs: asked for again", name, self.source)

    def run_over(self) -> bool:
        """The run this stream follows has ended: its container stopped, is gone, or has started
        again (looked at now)."""
        return not _still_running(self.container) or self.started_again()

    def started_again(self) -> bool:
        """The container runs a later run than the one this stream follows (as last looked at):
        asked for again, the stream would go on with the new run's lines as the old run's. The
        run followed started by the latest of the start seen as the stream began and the lines
        read since (where the container had started again before the stream began, they are the
        new run's); a stream begun before any start follows the first."""
        started = _run_started(self.container)
        if started is None or self.run_started is None:
            return False
        return started > max(self.run_started, self.position[0])

    def rest(self, put: Callable[[LogLine], None], name: str) -> bool:
        """Put what the stream holds past its last line read, the container stopped; False where
        the engine cannot say (the container is gone). A container started again since the
        stream began (a restart, whether its new run still runs or has ended too) keeps its new
        run's lines for the stream that follows that run."""
        try:
            raw = self.container.logs(**_ask(self.source, self.position[0]))
        except engine_errors() as exc:
            log.debug("%s: the rest of the %s stream: %s", name, self.source, exc)
            return False
        _still_running(self.container)  # looked at after the read: a run started since has lines of its own
        restarted_at = _run_started(self.container) if self.started_again() else None
        for line in _unread((parse_log_line(piece, self.source) for piece in raw.split(b"\n") if piece),
                            self.position):
            if restarted_at is not None and line.stamp is not None and line.stamp >= restarted_at:
                break
            self.position = advanced(self.position, line.stamp)
            put(line)
        return True


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
            put(None)  # no stream was started
            return
        streams = [_Stream(container, source, history, _since(since, source)) for source in SOURCES]
        threading.Thread(target=live, args=(streams[1],), name=f"{name}-{SOURCES[1]}", daemon=True).start()
        live(streams[0])

    threading.Thread(target=run, name=name, daemon=True).start()
