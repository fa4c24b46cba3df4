"""Short version of benchmarks/checkpoint_torture.py (the benchmark runs 200 kills)."""
from __future__ import annotations

from benchmarks.checkpoint_torture import torture


def test_sigkill_during_saves_never_corrupts_the_latest_checkpoint(tmp_path):
    result = torture(tmp_path, kills=10, max_delay_s=0.4, size=500_000, seed=1)
    assert result.failures == []
    assert result.loads_ok >= 8  # the first kills may land before any save completed
    assert result.monotonic and result.steps[-1] > result.steps[0]
    assert len(list(tmp_path.glob(".*.tmp"))) <= 1, "stale temp files are cleaned by the next writer"
