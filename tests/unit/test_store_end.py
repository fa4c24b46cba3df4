"""Whether a run's own rendezvous store had ended before a node did, by the engine's finish
times: the order in which the engine's events or an inspection told of the two ends does not
decide it."""
from __future__ import annotations

import docker.errors

from orchestrate.engine.labels import COMPOSE_SERVICE_LABEL, RUN_ID_LABEL
from orchestrate.supervise.inspection import StoreEnd, store_ended_before
from tests.fakes import FakeDockerClient

EARLIER, LATER = "2026-11-25T10:00:00.100000000Z", "2026-11-25T10:00:00.200000000Z"


def ended(client: FakeDockerClient, name: str, finished: str, code: int, run_id: str = "r1") -> None:
    container = client.running(name, {RUN_ID_LABEL: run_id, COMPOSE_SERVICE_LABEL: name})
    container.exit(code)
    container.finished = finished


def test_a_store_that_ended_first_is_found_with_its_exit_code():
    client = FakeDockerClient()
    ended(client, "rdzv-store", EARLIER, 137)
    ended(client, "node0", LATER, 1)
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) == StoreEnd(137)


def test_a_store_that_ended_after_the_node_or_with_it_is_no_cause():
    client = FakeDockerClient()
    ended(client, "rdzv-store", LATER, 137)
    ended(client, "node0", EARLIER, 1)
    ended(client, "node1", LATER, 1)
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node1"]) is None


def test_a_running_store_another_runs_store_or_none_is_no_cause():
    client = FakeDockerClient()
    ended(client, "node0", LATER, 1)
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None  # none
    client.running("rdzv-store", {RUN_ID_LABEL: "r1", COMPOSE_SERVICE_LABEL: "rdzv-store"})
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None  # running
    assert store_ended_before(client, "r2", "rdzv-store", client.containers_by_name["node0"]) is None  # not this run's
    client.containers_by_name["rdzv-store"].exit(137)
    client.containers_by_name["rdzv-store"].finished = EARLIER
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) == StoreEnd(137)


def test_an_engine_that_does_not_answer_leaves_the_cause_unknown():
    client = FakeDockerClient()
    ended(client, "rdzv-store", EARLIER, 137)
    ended(client, "node0", LATER, 1)
    client.failures["containers.list"] = docker.errors.APIError("500 Server Error: the engine is busy")
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None
    del client.failures["containers.list"]
    client.failures["reload"] = docker.errors.NotFound("No such container: node0")
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None


def test_a_dead_store_counts_as_ended_and_a_running_one_never_by_an_earlier_finish():
    client = FakeDockerClient()
    ended(client, "rdzv-store", EARLIER, 137)
    ended(client, "node0", LATER, 1)
    store = client.containers_by_name["rdzv-store"]
    store.status = "dead"  # the engine could not stop it cleanly
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) == StoreEnd(137)
    store.status = "running"  # restarted: its last finish, before the node's, is not an end now
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) is None


def test_a_store_whose_exit_code_the_engine_did_not_give_ended_with_none():
    client = FakeDockerClient()
    ended(client, "rdzv-store", EARLIER, 137)
    ended(client, "node0", LATER, 1)
    client.containers_by_name["rdzv-store"].exit_code = None
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) == StoreEnd(None)


def test_a_store_container_removed_as_it_is_listed_leaves_the_one_that_ended():
    client = FakeDockerClient()
    ended(client, "old-rdzv-store", EARLIER, 0)  # a store Compose replaced, being removed
    client.containers_by_name["old-rdzv-store"].labels[COMPOSE_SERVICE_LABEL] = "rdzv-store"
    client.containers_by_name["old-rdzv-store"].vanishing = True
    ended(client, "rdzv-store", EARLIER, 137)
    ended(client, "node0", LATER, 1)
    assert store_ended_before(client, "r1", "rdzv-store", client.containers_by_name["node0"]) == StoreEnd(137)
