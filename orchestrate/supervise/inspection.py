"""Polling the truth: the nodes' containers as the engine describes them now.

Engine events are fast, but a stream can break (a daemon restart, a remote ``DOCKER_HOST``
dropping) and then says nothing more; a node whose exit was never announced would be waited
for forever. So, as torch elastic's agent polls its workers apart from its policy loop, the
supervisor inspects every live node's container at an interval, and at once when the event
stream ends or a log stream ends without an exit. An engine that does not answer for
``ENGINE_LOST_S`` ends the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.labels import find_store_container
from orchestrate.errors import EngineLostError, NodeLookupError
from orchestrate.supervise.api import NodeTracker

# How often the containers are inspected while the event stream is up, and while it is down.
INSPECT_EVERY_S = 2.0
INSPECT_EVERY_WITHOUT_EVENTS_S = 0.5
# How long the engine may fail to answer before the run ends.
ENGINE_LOST_S = 15.0


@dataclass(frozen=True)
class Seen:
    """One container as the engine described it: ``status`` is the engine's (``running``,
    ``exited``, ...) or ``gone`` when the container no longer exists."""

    node: str
    status: str
    exit_code: Optional[int] = None
    oom_killed: bool = False
    detail: str = ""
    started_at: Optional[float] = None

    @property
    def ended(self) -> bool:
        return self.status in ("exited", "dead", "gone")


class Inspector:
    """Inspects the containers when it is time, and counts how long the engine has not answered."""

    def __init__(self, clock: Callable[[], float], say: Callable[[str], None]) -> None:
        self.clock = clock
        self.say = say
        self.interval_s = INSPECT_EVERY_S
        self.next_at = clock() + self.interval_s
        self.silent_since: Optional[float] = None

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def soon(self) -> None:
        """Inspect at the next tick (a log stream ended, or the event stream did)."""
        self.next_at = self.clock()

    def without_events(self) -> None:
        """The event stream is gone: inspection alone follows the nodes, more often."""
        self.interval_s = INSPECT_EVERY_WITHOUT_EVENTS_S
        self.soon()

    def inspect(self, trackers: list[NodeTracker]) -> list[Seen]:
        """Every container's state now; none while the engine does not answer.

        Raises:
            EngineLostError: When the engine has not answered for ``ENGINE_LOST_S``.
        """
        now = self.clock()
        self.next_at = now + self.interval_s
        seen = []
        for tracker in trackers:
            try:
                tracker.container.reload()
            except engine_errors() as exc:
                if classify(exc) is EngineFault.NOT_FOUND:
                    seen.append(Seen(tracker.name, "gone", detail=describe(exc)))
                    continue
                self.unanswered(exc, now)
                return []
            state = tracker.container.attrs.get("State", {})
            status = tracker.container.status
            code = state.get("ExitCode") if status in ("exited", "dead") else None
            seen.append(Seen(tracker.name, status, code, bool(state.get("OOMKilled")),
                             started_at=engine_time(state.get("StartedAt", ""))))
        if self.silent_since is not None:
            self.say(f"the engine answers again after {now - self.silent_since:.0f} s")
            self.silent_since = None
        return seen

    def unanswered(self, exc: BaseException, now: float) -> None:
        if self.silent_since is None:
            self.silent_since = now
            self.say(f"the engine does not answer ({describe(exc)}); the run ends if it does not within"
                     f" {ENGINE_LOST_S:.0f} s")
        elif now - self.silent_since >= ENGINE_LOST_S:
            raise EngineLostError(f"lost the Docker engine: no answer for {now - self.silent_since:.0f} s"
                                  f" ({describe(exc)})")


@dataclass(frozen=True)
class StoreEnd:
    """The run's own rendezvous store container, ended before a node: its exit code (None when
    the engine did not say)."""

    exit_code: Optional[int]


def store_ended_before(client: Any, run_id: str, service: str, node_container: Any) -> Optional[StoreEnd]:
    """Whether run ``run_id``'s store container (Compose service ``service``) had ended before
    the node's container did, as the engine's own clock says (None if not, or unknown).

    The store's ``die`` event can come after the nodes' exits, which an inspection may have
    seen first; the engine's finish times put them back in order."""
    try:
        found = find_store_container(client, run_id, service)
        node_container.reload()
    except (*engine_errors(), NodeLookupError):
        return None
    store = found.attrs.get("State", {})
    store_end = engine_time(store.get("FinishedAt", "")) if store.get("Status") in ("exited", "dead") else None
    node_end = engine_time(node_container.attrs.get("State", {}).get("FinishedAt", ""))
    if store_end is None or node_end is None or store_end >= node_end:
        return None
    code = store.get("ExitCode")
    return StoreEnd(int(code) if isinstance(code, int) else None)
