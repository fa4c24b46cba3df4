"""The engine's word on ranks that did not answer a snapshot request (``stacks RUN`` and the hang
watchdog): a paused node's ranks, a stopped process's rank, each with the fault that did it, and
nothing said of ranks that were not asked about or of a node the engine cannot inspect."""
from __future__ import annotations

import docker.errors

from orchestrate.supervise.rank_probe import RankHost, absent_reasons
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_supervisor_collaborators import node_container

STOPPED_RANKS_3_AND_5 = (0, b"3 4243\n5 4245\nend\n")  # what the rank script prints in node1


def hosts(client: FakeDockerClient, *nodes: tuple[str, tuple[int, ...], str]) -> list[RankHost]:
    found = []
    for name, ranks, fault in nodes:
        container = node_container(client, "r", name, Script(hang=True))
        container.start()
        found.append(RankHost(name, container, ranks, fault))
    return found


def test_a_paused_nodes_asked_ranks_and_a_stopped_rank_are_named_with_their_faults():
    client = FakeDockerClient()
    paused, stopped = hosts(client, ("node0", (0, 1), "pause:node0"), ("node1", (2, 3), ""))
    paused.container.pause()
    client.command_outputs[(stopped.container.name, "python3")] = STOPPED_RANKS_3_AND_5
    assert absent_reasons(client, [paused, stopped], {1, 2, 3}) == {
        1: "is on node0, whose container is paused (injected fault pause:node0)",
        3: "is stopped: its process on node1 got SIGSTOP"}  # 2 answers for itself; 5 was not asked about


def test_a_node_with_none_of_the_ranks_is_not_asked_and_the_next_one_still_is():
    client = FakeDockerClient()
    other, stopped = hosts(client, ("node0", (0, 1), ""), ("node1", (2, 3), "hang-rank:3"))
    client.command_outputs[(stopped.container.name, "python3")] = STOPPED_RANKS_3_AND_5
    assert absent_reasons(client, [other, stopped], {3}) == {
        3: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:3)"}
    assert [call for call in client.calls if call[1] == other.container.name] == []


def test_a_node_the_engine_cannot_inspect_is_left_out_and_the_others_are_not():
    client = FakeDockerClient()
    gone, paused = hosts(client, ("node0", (0,), ""), ("node1", (), ""))  # node1's ranks: any (elastic)

    def not_found() -> None:
        raise docker.errors.NotFound("No such container")
    gone.container.reload = not_found
    paused.container.pause()
    assert absent_reasons(client, [gone, paused], {0, 4}) == {0: "is on node1, whose container is paused",
                                                              4: "is on node1, whose container is paused"}
