from __future__ import annotations

import pytest

from orchestrate.config.fault_spec import FaultAction, FaultSpec, check_fault_nodes, parse_fault
from orchestrate.errors import UsageError
from orchestrate.faults.inject import probe_node
from tests.fakes import FakeContainer, FakeDockerClient


@pytest.mark.parametrize("text, expected", [
    ("kill:node1@step=20", FaultSpec(FaultAction.KILL, "node1", None, 20)),
    ("pause:node0@t=15", FaultSpec(FaultAction.PAUSE, "node0", 15.0, None)),
    ("disconnect:node2@t=2.5s", FaultSpec(FaultAction.DISCONNECT, "node2", 2.5, None)),
    ("restart:node1", FaultSpec(FaultAction.RESTART, "node1", None, None)),
])
def test_fault_specs_parse(text, expected):
    assert parse_fault(text) == expected
    assert parse_fault(str(expected)) == expected


@pytest.mark.parametrize("text, message", [
    ("explode:node1", "action must be one of kill, pause, disconnect, restart"),
    ("kill", "usage: ACTION:NODE"),
    ("kill:worker1", "usage: ACTION:NODE"),
    ("kill:node1@step=x", "usage: ACTION:NODE"),
    ("kill:node1@when=3", "usage: ACTION:NODE"),
])
def test_bad_fault_specs_are_refused_with_the_usage(text, message):
    with pytest.raises(UsageError, match=message):
        parse_fault(text)


def test_faults_fire_at_their_time_or_step():
    at_time, at_step, now = parse_fault("kill:node1@t=5"), parse_fault("kill:node1@step=20"), parse_fault("kill:node1")
    assert not at_time.due(4.9, None) and at_time.due(5.0, None)
    assert not at_step.due(100.0, None) and not at_step.due(100.0, 19) and at_step.due(0.0, 20)
    assert now.due(0.0, None)


def test_faults_must_target_nodes_of_the_run():
    check_fault_nodes([parse_fault("kill:node1")], ["node0", "node1"])
    with pytest.raises(UsageError, match="no node2 in this run"):
        check_fault_nodes([parse_fault("kill:node2")], ["node0", "node1"])


def test_probe_names_paused_gone_and_cut_off_nodes_but_not_ended_ones():
    import requests

    client = FakeDockerClient()
    container = FakeContainer(client, "p-node1-1", {"labels": {"com.docker.compose.project": "p"}})
    client.containers_by_name[container.name] = container
    container.status = "running"
    assert probe_node(container, "ddp") is None
    container.networks.clear()
    assert probe_node(container, "ddp") == "it is cut off from the ddp network"
    container.pause()
    assert probe_node(container, "ddp") == "its container is paused (hung)"
    # A node that ended is not hung: its own exit says how it ended (a peer's failure closed
    # its connections, and it exited before the probe; it must not be blamed).
    container.status = "exited"
    assert probe_node(container, "ddp") is None
    client.failures["reload"] = requests.exceptions.ConnectionError("Connection refused")
    assert probe_node(container, "ddp") is None  # an engine that cannot say blames no node
    del client.failures["reload"]
    del client.containers_by_name[container.name]
    assert probe_node(container, "ddp").startswith("its container is gone")


def test_oom_kills_come_from_the_cgroup_counter_or_the_exited_state():
    from orchestrate.faults.inject import oom_kills

    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"
    assert oom_kills({"Running": True}, v1) == 2
    assert oom_kills({"Running": True}, v2) == 1
    assert oom_kills({"Running": False, "OOMKilled": True}, None) == 1
    assert oom_kills({"Running": True}, "oom_kill 0\n") == 0
