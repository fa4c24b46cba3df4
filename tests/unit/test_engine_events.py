"""The engine's events of a run's nodes into the supervisor's inbox
(orchestrate/supervise/engine_events.py): which events, with what in them, and how a stream that
breaks or ends is said, against the fake engine of tests/fakes.py."""
from __future__ import annotations

import json
import queue
import threading
import time

import pytest

from orchestrate.engine.errors import describe
from orchestrate.supervise.api import EngineEvent, EventsEnded
from orchestrate.supervise.engine_events import EngineEvents, event_time
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_supervisor_collaborators import drain, node_container


def subscribed(client: FakeDockerClient, streams: int = 1, timeout_s: float = 10.0) -> None:
    """Wait until ``streams`` event streams have been opened."""
    deadline = time.monotonic() + timeout_s
    while len(client.subscribers) < streams:
        assert time.monotonic() < deadline, "the events were never asked for"
        time.sleep(0.01)


def start_reading(events: EngineEvents) -> list[threading.Thread]:
    """Start ``events``; the reader thread it started (none if it has already ended)."""
    before = set(threading.enumerate())
    events.start()
    return [t for t in threading.enumerate() if t not in before and t.name == "engine-events"]


def ended(readers: list[threading.Thread], timeout_s: float = 10.0) -> bool:
    for reader in readers:
        reader.join(timeout_s)
    return not any(reader.is_alive() for reader in readers)


def test_engine_events_of_the_runs_nodes_reach_the_inbox_and_others_do_not(tmp_path):
    client = FakeDockerClient()
    mine = node_container(client, "r", "node0", Script(exit_code=3))
    other = node_container(client, "other", "node1", Script())  # a node of the same name, in another run
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0", "node1"}, inbox).start()
    try:
        subscribed(client)
        other.start()
        mine.start()
        taken = drain(inbox, lambda m: m.action == "die")
    finally:
        events.close()
    assert all(isinstance(m, EngineEvent) and m.node == "node0" for m in taken)
    assert [m.action for m in taken] == ["start", "die"] and taken[-1].attrs["exitCode"] == "3"
    assert all(m.attrs["io.ddp-compose.run-id"] == "r" for m in taken)


@pytest.mark.parametrize("event, seconds", [
    ({"time": 1764669600, "timeNano": 1764669600123456789}, 1764669600.123456789),  # to the nanosecond
    ({"time": 1764669600}, 1764669600.0),  # an engine that gives seconds alone
    ({}, 0.0)])
def test_an_events_time_is_the_engines_to_the_nanosecond_where_it_gives_it(event, seconds):
    assert event_time(event) == pytest.approx(seconds, abs=1e-6)


def test_each_event_carries_its_action_attributes_engine_time_and_when_it_was_taken_in():
    client = FakeDockerClient()
    node0 = node_container(client, "r", "node0", Script(hang=True))
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox, clock=lambda: 42.0).start()
    try:
        subscribed(client)
        node0.start()
        [message] = drain(inbox, lambda m: isinstance(m, EngineEvent))
    finally:
        events.close()
        node0.kill()
    [started] = [e for e in client.history if e["Action"] == "start"]
    assert message == EngineEvent("node0", "start", started["Actor"]["Attributes"], event_time(started), 42.0)
    assert ("events", json.dumps({"label": "io.ddp-compose.run-id=r", "type": "container"}, sort_keys=True)) \
        in client.calls  # this run's containers only


def test_a_node_that_started_just_before_the_events_were_asked_for_is_not_missed():
    client = FakeDockerClient()
    node0 = node_container(client, "r", "node0", Script(exit_code=2))
    node0.start()  # it may even have ended before the reader subscribed
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox).start()
    try:
        taken = drain(inbox, lambda m: isinstance(m, EngineEvent) and m.action == "die")
    finally:
        events.close()
    assert [m.action for m in taken] == ["start", "die"]


def test_a_stream_that_breaks_is_said_with_why_and_when():
    client = FakeDockerClient()
    client.events_break_after = 0
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox, clock=lambda: 42.0).start()
    try:
        [ended] = drain(inbox, lambda m: isinstance(m, EventsEnded))
    finally:
        events.close()
    assert ended == EventsEnded("Connection aborted: the engine went away", 42.0)


def test_a_stream_the_engine_closes_is_said_and_one_closed_here_is_not():
    client = FakeDockerClient()
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox, clock=lambda: 42.0).start()
    subscribed(client)
    client.subscribers[0].close()  # the daemon restarts: its stream just ends
    assert drain(inbox, lambda m: isinstance(m, EventsEnded)) == [EventsEnded("the engine closed the stream", 42.0)]
    events.close()
    closed_here = EngineEvents(client, "r", {"node0"}, inbox)
    [reader] = start_reading(closed_here)  # it waits for the next event
    assert reader.daemon  # it never holds the process open at its end
    subscribed(client, streams=2)
    closed_here.close()
    assert ended([reader]) and inbox.empty()


def test_a_stream_that_breaks_after_it_was_closed_here_is_not_said():
    client = FakeDockerClient()
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox)
    events.close()  # before it ever read: nothing to close
    client.events_break_after = 0
    assert ended(start_reading(events)) and inbox.empty()


def test_a_stream_closed_here_while_it_was_being_opened_is_closed_once_open():
    client = FakeDockerClient()
    inbox: "queue.Queue" = queue.Queue()
    events = EngineEvents(client, "r", {"node0"}, inbox)
    opening, opened = threading.Event(), threading.Event()
    open_stream = client.events

    def slow_to_open(**kwargs):
        opening.set()
        assert opened.wait(10)
        return open_stream(**kwargs)

    client.events = slow_to_open  # type: ignore[method-assign]
    readers = start_reading(events)
    assert opening.wait(10)
    events.close()  # no stream to close yet
    opened.set()
    assert ended(readers) and inbox.empty()  # the reader did not wait on the stream for ever
