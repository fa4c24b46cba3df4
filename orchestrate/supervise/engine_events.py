"""The engine's events of a run's containers (``start``, ``die`` with the exit code, ``oom``),
found by the run's label, into the supervisor's inbox: a thread. A stream that breaks or ends
says so (:class:`~orchestrate.supervise.api.EventsEnded`); the supervisor then inspects."""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.labels import COMPOSE_SERVICE_LABEL, RUN_ID_LABEL
from orchestrate.supervise.api import EngineEvent, EventsEnded, Message

log = logging.getLogger(__name__)


class EngineEvents:
    """Reads the events of run ``run_id``'s containers for the nodes named ``nodes``."""

    def __init__(self, client: Any, run_id: str, nodes: set[str], inbox: "queue.SimpleQueue[Message]",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.run_id = run_id
        self.nodes = nodes
        self.inbox = inbox
        self.clock = clock
        self.stream: Optional[Any] = None
        self.closed = threading.Event()

    def start(self) -> "EngineEvents":
        threading.Thread(target=self._read, name="engine-events", daemon=True).start()
        return self

    def close(self) -> None:
        self.closed.set()
        if self.stream is not None:
            try:
                self.stream.close()
            except engine_errors():  # already closed
                pass

    def _read(self) -> None:
        try:
            self.stream = self.client.events(
                decode=True, since=int(time.time()) - 1,
                filters={"type": "container", "label": f"{RUN_ID_LABEL}={self.run_id}"})
            if self.closed.is_set():  # closed while the stream was being opened: close() did not see it
                self.stream.close()
            for event in self.stream:
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                node = attrs.get(COMPOSE_SERVICE_LABEL, "")
                if node in self.nodes:
                    self.inbox.put(EngineEvent(node, event.get("Action", ""), attrs, event_time(event), self.clock()))
        except engine_errors() as exc:  # the engine went away, or the stream broke off
            if not self.closed.is_set():
                self.inbox.put(EventsEnded(describe(exc), self.clock()))
            return
        if not self.closed.is_set():  # the engine closed the stream itself (a daemon restart)
            self.inbox.put(EventsEnded("the engine closed the stream", self.clock()))


def event_time(event: dict) -> float:
    """An engine event's time in epoch seconds, to the nanosecond where the engine gives it (a
    restart's ``die`` and ``start`` fall in the same second)."""
    if event.get("timeNano"):
        return int(event["timeNano"]) / 1e9
    return float(event.get("time", 0))
