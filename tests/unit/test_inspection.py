"""The supervisor's inspections alone (orchestrate/supervise/inspection.py): each node's
container as the engine describes it now, when the next look is due, and how long an engine
that does not answer is waited for, against the fake engine of tests/fakes.py."""
from __future__ import annotations

import docker.errors
import pytest

from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import describe
from orchestrate.errors import EngineLostError
from orchestrate.supervise.inspection import Inspector, Seen
from tests.fakes import FakeDockerClient
from tests.unit.test_supervisor_collaborators import tracker_for


@pytest.fixture
def looked_at(make_job, tmp_path):
    """Three nodes' trackers on a fake engine, and an inspector on a clock the test moves."""
    plan = make_job(nodes=3)
    client = FakeDockerClient()
    containers = [client.running(node.name) for node in plan.nodes]
    trackers = [tracker_for(plan, index, container, tmp_path) for index, container in enumerate(containers)]
    clock, said = [100.0], []
    yield client, containers, trackers, clock, said, Inspector(lambda: clock[0], said.append)
    for container in containers:
        container.killed.set()  # its fake process ends
    for tracker in trackers:
        tracker.output.log_file.close()


def test_an_inspection_sees_each_container_as_the_engine_says_and_a_removed_one_as_gone(looked_at):
    client, (removed, running, oom_killed), trackers, clock, said, inspector = looked_at
    oom_killed.oom_killed = True
    oom_killed.exit(137)
    del client.containers_by_name[removed.name]
    seen = inspector.inspect(trackers)
    assert seen == [Seen("node0", "gone", detail="No such container: node0"),
                    Seen("node1", "running", None, False, started_at=engine_time(running.started)),
                    Seen("node2", "exited", 137, True, started_at=engine_time(oom_killed.started))]
    assert [s.ended for s in seen] == [True, False, True] and said == []
    running.status = "dead"  # the engine could not stop it cleanly: it is no more
    assert inspector.inspect(trackers)[1] == Seen("node1", "dead", 0, False, started_at=engine_time(running.started))
    assert inspector.inspect(trackers)[1].ended


def test_the_next_inspection_is_due_an_interval_after_the_last_and_sooner_without_events(looked_at):
    _, _, trackers, clock, _, inspector = looked_at
    assert not inspector.due(101.9) and inspector.due(102.0)  # INSPECT_EVERY_S after it was made
    clock[0] = 110.0
    inspector.inspect(trackers)
    assert not inspector.due(111.9) and inspector.due(112.0)
    clock[0] = 111.0
    inspector.soon()  # a log stream ended: look now
    assert inspector.due(111.0)
    inspector.inspect(trackers)
    assert not inspector.due(112.9) and inspector.due(113.0)
    inspector.without_events()  # the event stream is gone: look now, then every half second
    assert inspector.due(111.0)
    inspector.inspect(trackers)
    assert not inspector.due(111.4) and inspector.due(111.5)


def test_an_engine_that_does_not_answer_is_said_once_and_ends_the_run_after_15_s(looked_at):
    client, _, trackers, clock, said, inspector = looked_at
    busy = docker.errors.APIError("500 Server Error: the engine is busy")
    client.failures["reload"] = busy
    assert inspector.inspect(trackers) == []
    clock[0] = 114.9
    assert inspector.inspect(trackers) == []  # not yet
    assert said == [f"the engine does not answer ({describe(busy)}); the run ends if it does not within 15 s"]
    clock[0] = 115.0
    with pytest.raises(EngineLostError) as lost:
        inspector.inspect(trackers)
    assert str(lost.value) == f"lost the Docker engine: no answer for 15 s ({describe(busy)})"


def test_an_engine_that_answers_again_is_said_and_its_silence_counted_anew(looked_at):
    client, _, trackers, clock, said, inspector = looked_at
    client.failures["reload"] = docker.errors.APIError("500 Server Error: the engine is busy")
    inspector.inspect(trackers)
    clock[0] = 107.0
    del client.failures["reload"]
    assert len(inspector.inspect(trackers)) == 3
    assert said[1:] == ["the engine answers again after 7 s"]
    client.failures["reload"] = docker.errors.APIError("500 Server Error: the engine is busy")
    clock[0] = 120.0  # 20 s after the first silence began, but only the start of this one
    assert inspector.inspect(trackers) == [] and said[2].startswith("the engine does not answer")
    clock[0] = 134.0
    assert inspector.inspect(trackers) == []
