"""DDP's forward pass waits on its peers in collectives of its own, which its C++ reducer makes:
under real torchrun and gloo, a rank that waits in the broadcast of its rebuilt buckets for a slow
peer is said to wait there, and the record has that broadcast where torch makes it, and nowhere
else."""
from __future__ import annotations

from orchestrate.hangs.diagnosis import diagnose
from tests.workers.conftest import ROOT
from tests.workers.test_collective_record import line_of, probe_when, records_of_both_ranks, start, stop

SLOW_SECOND_BATCH = ROOT / "tests" / "jobs" / "slow_second_batch.py"

def test_a_rank_waiting_for_a_slow_peer_in_ddps_rebuild_of_its_buckets_is_said_to_wait_there(tmp_path):
    """DDP's second forward pass first broadcasts the gradient buckets rank 0 rebuilt (C++, out of
    the Python collectives' reach): rank 0 waits there while rank 1 loads its batch. Unrecorded,
    rank 0 read as in no collective ("forward at ..."), like a rank that computes."""
    job = SLOW_SECOND_BATCH
    built, forward, backward, slow = (line_of(job, mark) for mark in ("# BUILD", "# FORWARD", "# BACKWARD", "# SLOW"))
    proc = start(tmp_path, "--collective-timeout", "60", "--", str(job))
    try:
        probe = probe_when(tmp_path, proc, lambda p: len(p.snapshots) == 2 and p.snapshots[1].stack[-1].line == slow
                           and any(f.function == "_pre_forward" for f in p.snapshots[0].stack), "rank 0 waits")
    finally:
        stop(proc)
    waiting = probe.snapshots[0].in_collective
    assert waiting is not None, [f.where for f in probe.snapshots[0].stack]
    assert (waiting.seq, waiting.call, waiting.at) == (5, "broadcast(rebuilt buckets of DDP(Sequential))",
                                                       f"{job}:{forward}")
    assert [(c.seq, c.shapes, c.at) for c in probe.snapshots[1].collectives] == [
        (1, "parameter shapes of DDP", f"{job}:{built}"), (2, "parameters of DDP(Sequential)", f"{job}:{built}"),
        (3, "buffers of DDP(Sequential)", f"{job}:{forward}"), (4, "gradients of DDP(Sequential)", f"{job}:{backward}")]
    diagnosis = diagnose(probe, None, {0, 1}, {}, 20)
    assert diagnosis.headline == (f"no progress for 20 s: rank 0 waits in broadcast(rebuilt buckets of"
                                  f" DDP(Sequential)) #5 at {job}:{forward}; rank 1 is at #4 (not in a collective:"
                                  f" next_batch at {job.name}:{slow})")
    assert diagnosis.activities[0].state == "collective"  # rank 1 may still be busy from its start, by its own look

REBUILT_BY_SETTING = """
import json, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
log = sys.modules["orchestrate.node.collective_log"]._failure_hooks[0].__self__.log
found = {}
for name, settings in (("default", {}), ("static_graph", {"static_graph": True}),
                       ("find_unused_parameters", {"find_unused_parameters": True})):
    model = DDP(torch.nn.Linear(4, 2), **settings)
    for step in range(4):
        model(torch.randn(3, 4)).sum().backward()
    kept = log.snapshot()[-7 if name != "find_unused_parameters" else -6:]  # this model's entries
    found[name] = [e["shapes"].split(" of ")[0] for e in kept]
sys.stdout.write(f"RECORD {rank} {json.dumps(found)}\\n")
sys.stdout.flush()
dist.destroy_process_group()
"""


def test_ddps_rebuilt_buckets_are_recorded_where_torch_rebuilds_them_and_nowhere_else(tmp_path):
    """When the reducer rebuilds (and broadcasts) its buckets is known only once it returns: after
    the first step, after the second with static_graph, never with find_unused_parameters."""
    records = records_of_both_ranks(tmp_path, "rebuilt_by_setting.py", REBUILT_BY_SETTING)
    built, step = ["parameter shapes", "parameters"], ["gradients"]
    assert records[0] == {"default": built + step + ["rebuilt buckets"] + step * 3,
                          "static_graph": built + step * 2 + ["rebuilt buckets"] + step * 2,
                          "find_unused_parameters": built + step * 4}, records[0]
