from __future__ import annotations

import re

import pytest

from tests.workers.conftest import checksums


def test_hello_reports_each_rank_and_checks_all_reduce(torchrun):
    proc = torchrun(2, "app.hello")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = sorted(int(r) for r in re.findall(r"hello rank=(\d) local_rank=\d world_size=2", proc.stdout))
    assert ranks == [0, 1]
    assert proc.stdout.count("sum=3 expected=3 ok") == 2
    # torchrun's own log directory stays in the test's directory, not in the host's /tmp
    assert list(torchrun.cwd.glob("torchelastic_*")), sorted(p.name for p in torchrun.cwd.iterdir())


@pytest.mark.parametrize("demo", ["basic", "checkpoint", "model-parallel", "spanning"])
def test_toy_demo_ends_with_identical_replicas(torchrun, demo):
    proc = torchrun(2, "app.toy", "--demo", demo, "--steps", "10", "--checkpoint-dir", ".")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sums = checksums(proc.stdout)
    assert sorted(sums) == [0, 1] and len(set(sums.values())) == 1
    assert f"{demo}: replicas identical across 2 ranks" in proc.stdout


def test_toy_checkpoint_is_loaded_by_every_rank_then_removed(torchrun):
    proc = torchrun(2, "app.toy", "--demo", "checkpoint", "--steps", "5", "--checkpoint-dir", ".")
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = re.findall(r"rank (\d) loaded the checkpoint: checksum (\S+) matches", proc.stdout)
    assert sorted(r for r, _ in loaded) == ["0", "1"]
    assert not list(torchrun.cwd.glob("toy-*.pt")), "rank 0 removes the checkpoint at the end"


def test_toy_trains_with_different_data_per_rank(torchrun):
    one = checksums(torchrun(1, "app.toy", "--steps", "10").stdout)
    two = checksums(torchrun(2, "app.toy", "--steps", "10").stdout)
    assert one[0] != two[0], "two ranks averaging different data must not equal one rank alone"


def test_collectives_every_step_passes(torchrun):
    proc = torchrun(2, "app.collectives", "--rounds", "3", "--barrier-delay", "0.2", "--isend-delay", "0.2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for step in ("barrier", "ping-pong", "send-recv", "isend-irecv", "all-reduce", "butterfly"):
        assert f"--- {step}: OK" in proc.stdout
    assert "all steps passed" in proc.stdout
    pongs = re.findall(r"rank 0: ping (\d+) -> got pong (\d+)", proc.stdout)
    assert [(int(a), int(b)) for a, b in pongs] == [(0, 1), (2, 3), (4, 5)]
    assert "before wait() the buffer holds 0" in proc.stdout
    assert "after wait() the buffer holds 1" in proc.stdout


def test_butterfly_matches_the_true_mean_with_uneven_chunks(torchrun):
    proc = torchrun(3, "app.collectives", "--steps", "butterfly,all-reduce", "--vector-size", "7")
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [float(e) for e in re.findall(r"max error vs the true mean (\S+)", proc.stdout)]
    assert len(errors) == 3 and max(errors) < 1e-5
    assert proc.stdout.count("all_reduce(SUM) of ones = 3") == 3


def test_collectives_refuse_unknown_steps(torchrun):
    proc = torchrun(1, "app.collectives", "--steps", "nope")
    assert proc.returncode != 0
    assert "unknown steps ['nope']" in proc.stderr + proc.stdout
