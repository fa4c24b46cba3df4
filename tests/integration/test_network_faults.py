"""A split network on real nodes: an elastic job of 4 nodes split 2|2, each group still
reaching its own nodes and none of the other's, until the split heals (tests/jobs/reach_peers.py
says which nodes each worker reaches, every half second)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest import leftovers

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def reached(output: str, rank: int) -> list[str]:
    """What ``rank`` reached at each try, in order."""
    return re.findall(rf"^\[node\d/rank{rank}\] +rank {rank} at [\d.]+ s reaches (\S+)$", output, re.M)


def test_a_partition_splits_four_nodes_two_and_two_each_group_keeping_its_links_until_it_heals(
        orchestrate_run, docker_client, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(JOBS / "reach_peers.py", workdir)
    result = orchestrate_run("--nodes", "4", "--rdzv", "c10d", "--workdir", str(workdir),
                             "--fault", "partition:node0,node1|node2,node3@t=8..14", "--", "reach_peers.py",
                             "--seconds", "20")
    assert result.code == 0, result.output[-4000:]
    assert "fault injected: partition:node0,node1|node2,node3@t=8..14 (" in result.output
    assert "fault ended: partition:node0,node1|node2,node3@t=8..14 (" in result.output
    everyone = {0: "node1,node2,node3", 1: "node0,node2,node3", 2: "node0,node1,node3", 3: "node0,node1,node2"}
    own_group = {0: "node1", 1: "node0", 2: "node3", 3: "node2"}
    for rank in range(4):
        seen = reached(result.output, rank)
        assert everyone[rank] in seen, (rank, seen)
        since_up = seen[seen.index(everyone[rank]):]  # every peer listening
        # its own group is reached all along, through the split and its heal
        assert all(own_group[rank] in tried.split(",") for tried in since_up), (rank, seen)
        # the split: 2 s or more (4 tries) reaching its own group only; whole again at the end
        # (a try while the routes are added or deleted, node by node, may see some of each)
        split = [i for i, tried in enumerate(since_up) if tried == own_group[rank]]
        assert len(split) >= 4 and split == list(range(split[0], split[0] + len(split))), (rank, seen)
        assert set(since_up[-4:]) == {everyone[rank]}, (rank, seen)
    assert leftovers(docker_client, result.project) == []
