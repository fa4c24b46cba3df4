"""The workers' record of their script's own store calls under real torchrun and gloo: the keys
a rank set and the key another waits for, and the hint the watchdog reads from them; not the
rendezvous's keys, which torch sets in the same store."""
from __future__ import annotations

from orchestrate.hangs.store_calls import store_hints
from orchestrate.hangs.snapshots import StoreWait, last_snapshots
from orchestrate.node.snapshot import STORE_FAILED_REASON
from tests.workers.conftest import ROOT
from tests.workers.test_collective_record import line_of, probe_when, start, stop

STORE_KEY_TYPO = ROOT / "tests" / "jobs" / "store_key_typo.py"


def test_a_rank_waiting_for_a_misspelled_store_key_is_recorded_with_the_key_and_told_the_key_set(tmp_path):
    proc = start(tmp_path, "--collective-timeout", "60", "--", str(STORE_KEY_TYPO))
    try:
        probe = probe_when(tmp_path, proc, lambda p: all(p.snapshots.get(r) and p.snapshots[r].store for r in (0, 1))
                           and bool(p.snapshots[1].store.waiting), "waited for the key")  # type: ignore[union-attr]
    finally:
        stop(proc)
    line = line_of(STORE_KEY_TYPO, "# TYPO")
    assert probe.snapshots[0].store.keys_set == ("dataset_ready",)  # type: ignore[union-attr]
    assert probe.snapshots[1].store.waiting == (  # type: ignore[union-attr]
        StoreWait("wait", ("datasetready",), f"{STORE_KEY_TYPO}:{line}"),)
    assert store_hints(probe.snapshots, {0, 1}) == [
        f"rank 1 waits in store.wait() at {STORE_KEY_TYPO}:{line} for store key 'datasetready', which no rank set"
        " (keys set that look like it: 'dataset_ready' by rank 0; check the key's spelling): a store's wait returns"
        " only once the key is set"]


def test_a_store_wait_that_times_out_shows_the_scripts_traceback_without_the_recorders_wrapper(tmp_path):
    script = tmp_path / "wait_timeout.py"
    script.write_text("from datetime import timedelta\n"
                      "import torch.distributed as dist\n"
                      "from torch.distributed.distributed_c10d import _get_default_store\n"
                      "dist.init_process_group('gloo')\n"
                      "_get_default_store().wait(['nokey'], timedelta(seconds=1))\n")
    proc = start(tmp_path, "--", str(script))
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "DistStoreError: wait timeout after 1000ms" in output
    assert f'File "{script}", line 5, in <module>' in output
    assert "store_calls.py" not in output
    # each rank wrote its record as the wait raised, the wait still in it: what the run's end reads
    records = last_snapshots(tmp_path / "debug")
    assert {rank: (r.reason, r.failed_in_store_call) for rank, r in records.items()} == {
        rank: (STORE_FAILED_REASON, StoreWait("wait", ("nokey",), f"{script.name}:5")) for rank in (0, 1)}
