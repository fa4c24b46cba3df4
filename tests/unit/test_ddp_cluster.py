"""The pytest plugin's fixture, where it decides without an engine: what it refuses and what it
says at a test's end."""
from __future__ import annotations

import io

import pytest

from orchestrate.errors import UsageError
from orchestrate.testing.cluster import DdpCluster


def test_chaos_refuses_a_static_rendezvous_it_would_have_replaced(tmp_path):
    cluster = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO())
    with pytest.raises(UsageError, match=r"ddp_cluster.chaos runs every run elastic \(c10d\), which its faults"
                                         r" need: drop rdzv='static'"):
        cluster.chaos("train.py", rdzv="static")
    assert cluster.checks == 0 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("keep, failed, said", [
    (True, True, True),    # a failing test under --ddp-keep: the check's runs are not kept, and it is said
    (True, False, False),  # a passing one: nothing to say
    (False, True, False),  # no --ddp-keep: nothing was asked
])
def test_a_failing_test_under_ddp_keep_says_its_chaos_runs_were_not_kept(tmp_path, keep, failed, said):
    cluster = DdpCluster(tmp_path, tmp_path / "runs", keep_failed=keep, out=io.StringIO())
    cluster.checks = 1
    lines = cluster.finish(test_failed=failed)
    assert lines == ([f"the chaos check's runs are not kept (--ddp-keep keeps ddp_cluster.run's): their logs and"
                      f" pages are under {tmp_path / 'runs'}"] if said else [])
