"""Network faults on real nodes: an elastic job of 4 nodes split 2|2, each group still reaching
its own nodes and none of the other's, until the split heals (tests/jobs/reach_peers.py says
which nodes each worker reaches, every half second); a lossy link whose packets an iptables rule
drops, where the kernel has no netem."""
from __future__ import annotations

import io
import re

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import job_workdir, leftovers, read_to_end, remove_project, start_run, wait_for

pytestmark = pytest.mark.integration


def reached(output: str, rank: int) -> list[str]:
    """What ``rank`` reached at each try, in order."""
    return re.findall(rf"^\[node\d/rank{rank}\] +rank {rank} at [\d.]+ s reaches (\S+)$", output, re.M)


@pytest.mark.slow
def test_a_partition_splits_four_nodes_two_and_two_each_group_keeping_its_links_until_it_heals(
        docker_client, tmp_path):
    """Split from the command line (``fault RUN``) once every worker reaches every peer, so a slow
    start on a busy machine cannot let the split pass before the workers look."""
    workdir = job_workdir(tmp_path, "reach_peers.py")
    # --link gives the nodes NET_ADMIN, which the routes need (as a run with a partition fault has)
    proc, lines = start_run(tmp_path / "runs", "--nodes", "4", "--rdzv", "c10d", "--link", "rate=10gbit",
                            "--workdir", str(workdir), "--", "reach_peers.py", "--seconds", "240",
                            "--until", "healed")
    everyone = {0: "node1,node2,node3", 1: "node0,node2,node3", 2: "node0,node1,node3", 3: "node0,node1,node2"}
    own_group = {0: "node1", 1: "node0", 2: "node3", 3: "node2"}
    seen: list[str] = []
    run_id = ""
    try:
        run_id = wait_for(lines, r"\[orchestrate\] run (\S+): bringing up", seen, timeout=120)[1]
        for rank in range(4):
            wait_for(lines, rf"rank {rank} at [\d.]+ s reaches {everyone[rank]}$", seen, timeout=120)
        said = io.StringIO()
        assert main(["fault", run_id, "partition:node0,node1|node2,node3@t=0..6"], out=said) == 0, said.getvalue()
        (workdir / "healed").touch()  # the workers try 6 times more, then end
        output = read_to_end(proc, lines, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if run_id:
            remove_project(docker_client, f"ddp-{run_id}")
    assert proc.returncode == 0, output[-4000:]
    assert f"injected partition into node0,node1|node2,node3 of run {run_id}" in said.getvalue()
    assert f"ended partition:node0,node1|node2,node3@t=0..6 on node0 of run {run_id}" in said.getvalue()
    for rank in range(4):
        seen_by_rank = reached(output, rank)
        since_up = seen_by_rank[seen_by_rank.index(everyone[rank]):]  # every peer listening
        # its own group is reached all along, through the split and its heal
        assert all(own_group[rank] in tried.split(",") for tried in since_up), (rank, seen_by_rank)
        # the split: consecutive tries reaching its own group only; whole again at the end (a try
        # while the routes are added or deleted, node by node, may see some of each)
        split = [i for i, tried in enumerate(since_up) if tried == own_group[rank]]
        assert len(split) >= 2 and split == list(range(split[0], split[0] + len(split))), (rank, seen_by_rank)
        assert set(since_up[-4:]) == {everyone[rank]}, (rank, seen_by_rank)
        # each waited, listening, for every peer's last try
        assert f"rank {rank} done; peers done: {everyone[rank]}" in output, output[-3000:]
    assert leftovers(docker_client, f"ddp-{run_id}") == []


def dropped_by_the_loss_rule(docker_client, container_name: str) -> int:
    """The packets a node's iptables loss rule dropped so far (read as root in the node; asked
    again where docker's exec lost the listing, docker/docker-py#2042)."""
    listing = ""
    for _ in range(3):
        listing = docker_client.containers.get(container_name).exec_run(
            ["iptables", "-w", "-L", "INPUT", "-v", "-x", "-n"], user="0:0").output.decode()
        if listing.startswith("Chain INPUT"):
            break
    [rule] = [line.split() for line in listing.splitlines() if "statistic mode random" in line]
    assert rule[2] == "DROP", listing
    return int(rule[0])


def test_a_lossy_link_drops_packets_by_iptables_where_the_kernel_has_no_netem_and_the_job_still_runs(
        docker_client, tmp_path):
    workdir = job_workdir(tmp_path, "count_retransmits.py")
    proc, lines = start_run(tmp_path / "runs", "--nodes", "2", "--link", "loss=1%", "--workdir", str(workdir), "--",
                            "count_retransmits.py", "--hold", "120", "--until", "counted")
    seen: list[str] = []
    project = ""
    try:
        project = "ddp-" + wait_for(lines, r"\[orchestrate\] run (\S+): bringing up", seen, timeout=120)[1]
        wait_for(lines, r"rank 1 holding for", seen, timeout=120)
        # 80 MB each way went through each node's rule: thousands of packets, 1% of them dropped
        for node in ("node0", "node1"):
            assert dropped_by_the_loss_rule(docker_client, f"{project}-{node}-1") > 0
        (workdir / "counted").touch()  # the nodes may go
        output = read_to_end(proc, lines, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if project:
            remove_project(docker_client, project)
    assert proc.returncode == 0, output[-4000:]
    # this machine kind's kernel has no netem: the launcher says what it used instead
    assert "--link loss=1%: by iptables statistic (this kernel has no netem)" in output
    assert len(re.findall(r"rank \d retransmitted \d+ sum 32$", output, re.M)) == 2, output[-3000:]
    assert leftovers(docker_client, project) == []
