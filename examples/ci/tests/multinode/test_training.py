"""Multi-node tests of train.py, as they sit in a user's repository (tests/multinode/). The
ddp_cluster fixture comes with ddp-compose: installing it is enough. Run them with
``python -m pytest tests/multinode`` in the environment ddp-compose's set-up made."""


def test_every_replica_ends_with_the_same_parameters_on_two_nodes(ddp_cluster):
    result = ddp_cluster.run("train.py", "--steps", "20", nodes=2, nproc_per_node=2)
    assert result.succeeded  # on failure: the root cause and the failing rank's last lines
    checksums = {line for rank in range(4) for line in result.rank_output(rank) if line.startswith("final checksum")}
    assert len(checksums) == 1, checksums


def test_a_worker_that_dies_is_reported_by_its_rank(ddp_cluster):
    result = ddp_cluster.run("train.py", "--steps", "1000", nodes=2, nproc_per_node=2,
                             faults=["kill-rank:3@step=5"])
    assert result.exit_code == 1
    assert (result.root_cause.node, result.root_cause.rank) == ("node1", 3)
    assert [f.fired_at_step for f in result.faults] == [5]
