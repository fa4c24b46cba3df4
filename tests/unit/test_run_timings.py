"""A run's timings from the engine's own clock (orchestrate/supervise/timings.py): bring-up,
rendezvous and job time, and each node's wall time, from its container's creation, start and
finish times and its first worker line; the supervisor's own clock where a container cannot say."""
from __future__ import annotations

import logging

import pytest

from orchestrate.engine.client import engine_time
from orchestrate.outcome.model import Recovery
from orchestrate.supervise.timings import run_timings
from tests.fakes import FakeDockerClient
from tests.unit.test_supervisor_collaborators import tracker_for

NOT_SET = "0001-01-01T00:00:00Z"


def at(seconds: float) -> str:
    """An engine timestamp ``seconds`` after 10:00 (nanoseconds, as the engine writes them)."""
    return f"2026-12-02T10:00:{seconds:012.9f}Z"


def epoch(seconds: float) -> float:
    return engine_time(at(seconds))  # type: ignore[return-value]


@pytest.fixture
def nodes(make_job, tmp_path):
    """Two nodes' trackers on a fake engine whose containers have ended; the test sets their times."""
    plan = make_job(nodes=2)
    client = FakeDockerClient()
    containers = [client.running(node.name) for node in plan.nodes]
    for container in containers:
        container.exit(0)
    trackers = [tracker_for(plan, index, container, tmp_path) for index, container in enumerate(containers)]
    yield client, containers, trackers
    for tracker in trackers:
        tracker.output.log_file.close()


def timed(container, created: float, started: float, finished) -> None:
    container.created, container.started = at(created), at(started)
    container.finished = at(finished) if finished is not None else NOT_SET


def test_the_phases_and_each_nodes_wall_time_come_from_the_engines_times(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 1.0, 21.0)
    timed(node1, 0.5, 2.5, 20.0)
    trackers[0].output.first_worker_line_at = epoch(5.0)
    trackers[1].output.first_worker_line_at = epoch(4.0)
    recoveries = [Recovery("node1", "kill:node1", failed_at=8.0)]
    timings = run_timings(trackers, 99.0, recoveries)
    assert timings.job_s == pytest.approx(20.0)  # the first start to the last end, not the supervisor's 99 s
    assert timings.bring_up_s == pytest.approx(2.5)  # the first creation to the last start
    assert timings.rendezvous_s == pytest.approx(3.0)  # the first start to the first worker's line
    assert [t.result.wall_s for t in trackers] == [pytest.approx(20.0), pytest.approx(17.5)]
    assert timings.recoveries == recoveries and timings.recoveries is not recoveries


def test_a_restarted_node_is_timed_from_its_first_start(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 12.0, 21.0)  # the engine's StartedAt is the restart's
    timed(node1, 0.0, 1.0, 20.0)
    trackers[0].first_started = epoch(1.0)
    timings = run_timings(trackers, 99.0, [])
    assert trackers[0].result.wall_s == pytest.approx(20.0) and timings.job_s == pytest.approx(20.0)


def test_a_node_still_running_or_removed_leaves_the_job_to_the_supervisors_clock(nodes, caplog):
    client, (node0, node1), trackers = nodes
    timed(node0, 0.0, 1.0, 21.0)
    timed(node1, 0.0, 2.0, None)  # not finished
    timings = run_timings(trackers, 99.0, [])
    assert (timings.job_s, timings.bring_up_s) == (99.0, None)  # one node's creation has no start beside it
    assert trackers[0].result.wall_s == pytest.approx(20.0) and trackers[1].result.wall_s == 0.0  # not timed
    timed(node1, 0.0, 2.0, 20.0)
    del client.containers_by_name[node0.name]  # removed: the engine cannot say; the next node is still timed
    caplog.set_level(logging.DEBUG, logger="orchestrate.supervise.timings")
    assert run_timings(trackers, 98.0, []).job_s == 98.0 and trackers[1].result.wall_s == pytest.approx(18.0)
    assert caplog.messages == ["timing node0: No such container: node0"]


def test_a_node_never_started_is_left_out_of_the_bring_up_and_one_that_ended_as_it_started_is_timed(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 1.5, 21.0)
    node1.created, node1.started, node1.finished = at(0.5), NOT_SET, NOT_SET  # created, never started
    assert run_timings(trackers, 99.0, []).bring_up_s == pytest.approx(1.5)  # node0's own creation to its start
    timed(node1, 0.5, 2.0, 2.0)  # it ended the moment it started
    timings = run_timings(trackers, 99.0, [])
    assert trackers[1].result.wall_s == 0.0 and timings.job_s == pytest.approx(19.5)  # both ended: the engine says


def test_a_finish_before_the_start_is_an_earlier_runs_and_not_counted(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 1.0, 21.0)
    timed(node1, 0.0, 30.0, 20.0)  # restarted at 30 s, still running: FinishedAt is the run before's
    timings = run_timings(trackers, 99.0, [])
    assert timings.job_s == 99.0 and trackers[1].result.wall_s == 0.0  # not timed


def test_a_phase_never_comes_out_below_zero_and_a_short_one_is_kept_as_it_is(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 0.25, 5.0)
    timed(node1, 0.0, 0.5, 5.0)
    trackers[0].output.first_worker_line_at = epoch(0.1)  # a line stamped before the start (clocks apart)
    timings = run_timings(trackers, 99.0, [])
    assert timings.bring_up_s == pytest.approx(0.5) and timings.rendezvous_s == 0.0
    trackers[0].output.first_worker_line_at = epoch(0.75)
    assert run_timings(trackers, 99.0, []).rendezvous_s == pytest.approx(0.5)


def test_no_worker_line_leaves_the_rendezvous_untimed(nodes):
    _, (node0, node1), trackers = nodes
    timed(node0, 0.0, 1.0, 21.0)
    timed(node1, 0.0, 1.0, 21.0)
    assert run_timings(trackers, 99.0, []).rendezvous_s is None
