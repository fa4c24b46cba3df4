"""Uneven nodes on real nodes: ``--nproc-per-node 2,1`` starts two workers on node0 and one on
node1, and every worker's global rank, local rank, world size and local world size are what
the plan said (tests/jobs/show_ranks.py prints what torchrun and the process group say)."""
from __future__ import annotations

import re

import pytest

from tests.integration.conftest import job_workdir, leftovers

pytestmark = pytest.mark.integration


def test_an_uneven_run_gives_every_rank_its_local_rank_and_world_size(orchestrate_run, docker_client, tmp_path):
    workdir = job_workdir(tmp_path, "show_ranks.py")
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2,1", "--workdir", str(workdir), "--",
                             "show_ranks.py")
    assert result.code == 0, result.output[-4000:]
    said = sorted(re.findall(r"^\[(node\d)/rank(\d)\] +ranks node=(\d) rank=(\d) local=(\d) world=(\d)"
                             r" local_world=(\d)$", result.output, re.M))
    assert said == [("node0", "0", "0", "0", "0", "3", "2"), ("node0", "1", "0", "1", "1", "3", "2"),
                    ("node1", "2", "1", "2", "0", "3", "1")], result.output[-3000:]
    assert re.search(r"^node0 +0,1 +succeeded", result.output, re.M), result.output[-2000:]  # the summary's ranks
    assert re.search(r"^node1 +2 +succeeded", result.output, re.M)
    assert leftovers(docker_client, result.project) == []
