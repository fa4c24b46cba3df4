"""Hangs on GPUs: NCCL queues a collective on the GPU's stream and the call returns at once, so a
rank stuck in one waits later (``loss.item()``), with CUDA spinning a core. The record follows
each collective on the GPU (queued, running, done) by two marks on its stream, and the watchdog
takes a rank whose GPU stays in a collective as waiting, whatever CPU it uses. Measured on an
H200 first (benchmarks/gpu_check.py): before this, such a hang read "the job is working: ranks 0,
1 computing"."""
from __future__ import annotations

import json
import threading
from typing import Optional

import pytest

from orchestrate.hangs.diagnosis import diagnose
from orchestrate.hangs.snapshots import Collective, Frame, Probe, RankSnapshot
from orchestrate.hangs.stacks import group_stacks
from orchestrate.node.collective_log import CollectiveLog, gpus_of
from orchestrate.node.ddp_collectives import model_gpus
from tests.unit.test_hangs import answering_worker, quick_watchdog  # noqa: F401 - a fixture


class Point:
    """A point on a fake GPU stream: reached once the test says so."""

    def __init__(self) -> None:
        self.reached = False


class FakeGpu:
    """Places points in the order a stream reaches them, as gpu_marks.CudaMarks does on CUDA."""

    def __init__(self, ready: bool = True) -> None:
        self.points: list[Point] = []
        self.capturing = False
        self.ready = ready
        self.asked_from: set[str] = set()

    def place(self, devices):
        if self.capturing:
            return None
        placed = [(getattr(device, "index", 0), Point()) for device in devices]
        self.points += [point for _, point in placed]
        return placed

    def reached(self, points) -> bool:
        self.asked_from.add(threading.current_thread().name)
        return all(point.reached for _, point in points)

    def ready_here(self) -> bool:
        return self.ready

    def reach(self, count: int) -> None:
        """The GPU got past the first ``count`` points."""
        for point in self.points[:count]:
            point.reached = True


class CudaTensor:
    is_cuda = True
    device = "cuda:0"

    def __init__(self, *shape: int) -> None:
        self.shape, self.dtype = shape, "torch.float32"


class CpuTensor(CudaTensor):
    is_cuda = False


def states(log: CollectiveLog) -> list[str]:
    return [entry["state"] for entry in log.snapshot(settle=True)]


def test_a_collective_on_a_gpu_is_queued_then_running_then_done_as_the_gpu_gets_there():
    gpu = FakeGpu()
    log = CollectiveLog(gpu=gpu)
    all_reduce = log.wrap("all_reduce", lambda tensor, group=None, async_op=False: None, lambda g: "default")
    all_reduce(CudaTensor(4))
    all_reduce(CudaTensor(1))
    assert states(log) == ["queued", "queued"] and log.completed == 0  # the calls returned; the GPU is behind
    gpu.reach(1)  # the work before the first
    assert states(log) == ["running", "queued"] and log.completed == 0
    gpu.reach(3)  # the first done, the second reached
    assert states(log) == ["done", "running"] and log.completed == 1
    gpu.reach(4)
    assert states(log) == ["done", "done"] and log.completed == 2
    assert all(not key.startswith("_") for entry in log.snapshot() for key in entry)  # the points stay here
    json.dumps(log.snapshot())


def test_cpu_tensors_async_calls_and_a_stream_being_captured_are_done_when_the_call_returns():
    gpu = FakeGpu()
    log = CollectiveLog(gpu=gpu)
    all_reduce = log.wrap("all_reduce", lambda tensor, group=None, async_op=False: None, lambda g: "default")
    all_reduce(CpuTensor(4))
    all_reduce(CudaTensor(4), async_op=True)  # the script holds the work and waits on it itself
    gpu.capturing = True
    all_reduce(CudaTensor(4))  # being captured into a CUDA graph: no event may be recorded
    assert states(log) == ["done", "issued", "done"] and gpu.points == [] and log.completed == 3


def test_only_the_snapshot_thread_asks_the_gpu_and_only_where_it_may():
    gpu = FakeGpu()
    log = CollectiveLog(gpu=gpu)
    log.wrap("all_reduce", lambda tensor: None, lambda g: "default")(CudaTensor(4))
    gpu.reach(2)
    assert [e["state"] for e in log.snapshot()] == ["queued"] and not gpu.asked_from  # a failure's record: not asked
    server = threading.Thread(target=lambda: log.snapshot(settle=True), name="snapshot-server")
    server.start()
    server.join()
    assert gpu.asked_from == {"snapshot-server"} and log.completed == 1
    unready = FakeGpu(ready=False)  # no thread-local capture mode to be had: never asked
    log = CollectiveLog(gpu=unready)
    log.wrap("all_reduce", lambda tensor: None, lambda g: "default")(CudaTensor(4))
    unready.reach(2)
    assert states(log) == ["queued"] and not unready.asked_from


def test_a_gpu_in_error_leaves_the_entry_as_it_was():
    class Broken(FakeGpu):
        def reached(self, points) -> bool:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    log = CollectiveLog(gpu=Broken())
    log.wrap("all_reduce", lambda tensor: None, lambda g: "default")(CudaTensor(4))
    assert states(log) == ["queued"]


def test_the_entry_the_gpu_has_not_finished_is_kept_however_many_come_after_it():
    # 100 collectives a step: the GPU stuck at the first, the CPU 99 ahead; only KEEP are kept
    gpu = FakeGpu()
    log = CollectiveLog(keep=8, gpu=gpu)
    all_reduce = log.wrap("all_reduce", lambda tensor: None, lambda g: "default")
    for size in range(1, 101):
        all_reduce(CudaTensor(size))
    gpu.reach(1)  # reached the first, not past it
    shown = log.snapshot(settle=True)
    assert [(e["seq"], e["state"]) for e in shown] == [(1, "running")] + [(seq, "queued") for seq in range(93, 101)]
    gpu.reach(200)  # all done: the window is KEEP again
    assert [e["seq"] for e in log.snapshot(settle=True)] == list(range(93, 101)) and len(log.entries) == 8


def test_a_record_the_gpu_is_far_behind_keeps_at_most_its_bound(monkeypatch):
    monkeypatch.setattr("orchestrate.node.collective_log.KEEP_ON_GPU", 20)
    log = CollectiveLog(keep=4, gpu=FakeGpu())
    all_reduce = log.wrap("all_reduce", lambda tensor: None, lambda g: "default")
    for size in range(1, 51):
        all_reduce(CudaTensor(size))
    assert len(log.entries) == 20 and log.entries[0]["seq"] == 31


def test_the_gpus_of_a_collective_are_its_first_cuda_tensors():
    assert gpus_of((CudaTensor(4),)) == ("cuda:0",)
    assert gpus_of(([CudaTensor(4)] * 2, CudaTensor(4))) == ("cuda:0",)
    assert gpus_of((CpuTensor(4), "sum")) == () and gpus_of(([{"a": 1}],)) == ()


def test_a_ddp_model_is_followed_on_every_gpu_its_parameters_are_on():
    class Parameter:
        def __init__(self, index: int) -> None:
            self.is_cuda, self.device = True, f"cuda:{index}"

    class Model:
        device_type = "cuda"

        def __init__(self, *indices: int) -> None:
            self.params = [Parameter(i) for i in indices]

        def parameters(self):
            return iter(self.params)

    assert model_gpus(Model(0, 0, 1, 1)) == ("cuda:0", "cuda:1")  # model parallel: both stages' GPUs
    on_cpu = Model(0)
    on_cpu.device_type = "cpu"
    assert model_gpus(on_cpu) == ()


AT_ITEM = (Frame("gpu_desync.py", 27, "<module>", "stats.sum().item()"),)


def coll(seq: int, state: str = "done", shapes: str = "float32[4]", at: str = "gpu_desync.py:23") -> Collective:
    return Collective(seq, "all_reduce", "default", shapes, at, state)


def snap(rank: int, collectives: tuple[Collective, ...], cpu_s: float) -> RankSnapshot:
    return RankSnapshot(rank, f"node{rank}", 40 + rank, 0.0, cpu_s, AT_ITEM, collectives,
                        sum(c.state == "done" for c in collectives))


def probes(first: dict[int, tuple[Collective, ...]], second: dict[int, tuple[Collective, ...]],
           spinning: bool = True) -> tuple[Probe, Probe]:
    """Two probes 5 s apart; ``spinning``: each rank used 2 cores meanwhile (CUDA's wait)."""
    before = Probe("a", 0.0, {r: snap(r, c, 1.0) for r, c in first.items()})
    now = Probe("b", 5.0, {r: snap(r, c, 11.0 if spinning else 1.0) for r, c in second.items()})
    return before, now


def test_ranks_whose_gpus_stay_in_mismatched_collectives_are_hung_however_much_cpu_they_spin():
    # as measured on an H200: rank 0's extra 1-float all_reduce met rank 1's 4-float one; both
    # GPUs wait, both main threads spin in .item()
    rank0 = (coll(1), coll(2), coll(3), coll(4, shapes="float32[1]", at="gpu_desync.py:26"), coll(5, "running"))
    rank1 = (coll(1), coll(2), coll(3), coll(4, "running"))
    before, now = probes({0: rank0, 1: rank1}, {0: rank0, 1: rank1})
    found = diagnose(now, before, {0, 1}, {}, 15)
    assert found.hung
    assert found.headline == ("no progress for 15 s: collective #4, where the ranks' calls first differ (rank 0 went on"
                              " past it): rank 0 called all_reduce(float32[1]) at gpu_desync.py:26; rank 1 called"
                              " all_reduce(float32[4]) at gpu_desync.py:23")
    assert [(a.rank, a.state, a.detail) for a in found.activities] == [
        (0, "collective", "waits in all_reduce(float32[4]) #5 at gpu_desync.py:23, on the GPU"),
        (1, "collective", "waits in all_reduce(float32[4]) #4 at gpu_desync.py:23, on the GPU")]
    # the main threads are at one line, their GPUs in different collectives: two groups
    assert [g.where for g in found.groups] == [
        "<module> at gpu_desync.py:27; its GPU waits in all_reduce(float32[4]) #5 from gpu_desync.py:23",
        "<module> at gpu_desync.py:27; its GPU waits in all_reduce(float32[4]) #4 from gpu_desync.py:23"]


def test_ranks_that_agree_but_whose_gpus_stay_in_one_collective_are_hung_too():
    both = (coll(1), coll(2, "running"))
    before, now = probes({0: both, 1: both}, {0: both, 1: both})
    assert diagnose(now, before, {0, 1}, {}, 15).hung


def test_a_gpu_that_moves_on_or_computes_before_its_collective_is_progress():
    queued = (coll(1), coll(2, "queued"))
    running, finished = (coll(1), coll(2, "running")), (coll(1), coll(2), coll(3, "queued"))
    moved = diagnose(*reversed(probes({0: running, 1: running}, {0: finished, 1: running})), {0, 1}, {}, 15)
    assert not moved.hung  # rank 0's GPU finished #2 (and the rank queued #3)
    reached = diagnose(*reversed(probes({0: queued, 1: running}, {0: running, 1: running}, spinning=False)),
                       {0, 1}, {}, 15)
    assert not reached.hung  # rank 0's GPU got to #2 meanwhile, with no CPU used
    computing = diagnose(*reversed(probes({0: queued, 1: running}, {0: queued, 1: running})), {0, 1}, {}, 15)
    assert not computing.hung  # rank 0's GPU is still busy before #2: a long step on the GPU
    assert computing.activities[0].detail == "computing on the GPU, before all_reduce(float32[4]) #2 at gpu_desync.py:23"
    assert computing.headline == "no output for 15 s, but the job is working: rank 0 computing"


def test_a_backward_pass_on_the_gpu_is_computing_until_the_records_part():
    backward = Collective(3, "all_reduce", "default", "gradients of DDP(Net)", "train.py:40", "running")
    agreed = (coll(1), coll(2), backward)
    before, now = probes({0: agreed, 1: agreed}, {0: agreed, 1: agreed})
    long_step = diagnose(now, before, {0, 1}, {}, 15)
    assert not long_step.hung  # its GPU may be computing the gradients
    assert [(a.rank, a.state, a.detail) for a in long_step.activities] == [
        (rank, "busy", "computing on the GPU, in all_reduce(gradients of DDP(Net)) #3 at train.py:40")
        for rank in (0, 1)]
    odd = (coll(1), coll(2), coll(3, shapes="float32[1]", at="train.py:44"), coll(4, "running"))
    before, now = probes({0: odd, 1: agreed}, {0: odd, 1: agreed})
    parted = diagnose(now, before, {0, 1}, {}, 15)
    assert parted.hung and parted.divergence is not None and parted.divergence.text.startswith("collective #3, ")


def test_a_gpu_rank_waiting_for_a_peer_that_computes_on_its_cpu_is_progress():
    ahead = (coll(1), coll(2, "running"))
    before = Probe("a", 0.0, {0: snap(0, ahead, 1.0), 1: snap(1, (coll(1),), 1.0)})
    now = Probe("b", 5.0, {0: snap(0, ahead, 11.0), 1: snap(1, (coll(1),), 6.0)})
    found = diagnose(now, before, {0, 1}, {}, 15)
    assert not found.hung and found.activities[1].state == "busy"


@pytest.mark.parametrize("state", ["queued", "running"])
def test_a_rank_whose_gpu_has_not_finished_a_collective_is_grouped_by_it(state):
    rank0 = {0: snap(0, (coll(1), coll(2, state)), 1.0), 1: snap(1, (coll(1), coll(2)), 1.0)}
    groups = group_stacks(rank0)
    if state == "running":
        assert [g.ranks for g in groups] == [(0,), (1,)]
    else:  # the GPU has not reached it: the rank is where its stack is
        assert [g.ranks for g in groups] == [(0, 1)] and groups[0].where == "<module> at gpu_desync.py:27"


def test_a_ddp_desync_on_nccl_as_an_h200_recorded_it_is_hung_at_its_divergence():
    # the records benchmarks/gpu_check.py read on an H200: rank 0 all-reduced its loss alone at
    # step 3, then both GPUs stayed in their next gradient all-reduce
    grads = "gradients of DDP(Linear)"

    def backward(seq: int, state: str = "done") -> Collective:
        return Collective(seq, "all_reduce", "default", grads, "gpu_ddp_desync.py:28", state)

    rank0 = (backward(1), backward(2), backward(3), coll(4, shapes="float32[1]", at="gpu_ddp_desync.py:32"),
             backward(5, "running"))
    rank1 = (backward(1), backward(2), backward(3), backward(4, "running"))
    before, now = probes({0: rank0, 1: rank1}, {0: rank0, 1: rank1})
    found = diagnose(now, before, {0, 1}, {}, 16)
    assert found.hung
    assert found.headline == ("no progress for 16 s: collective #4, where the ranks' calls first differ (rank 0 went on"
                              " past it): rank 0 called all_reduce(float32[1]) at gpu_ddp_desync.py:32; rank 1 called"
                              f" all_reduce({grads}) at gpu_ddp_desync.py:28")
    assert [a.detail for a in found.activities] == [f"waits in all_reduce({grads}) #5 at gpu_ddp_desync.py:28, on the GPU",
                                                    f"waits in all_reduce({grads}) #4 at gpu_ddp_desync.py:28, on the GPU"]


@pytest.mark.timeout(60)
def test_a_run_whose_gpus_wait_in_collectives_while_cuda_spins_ends_hung(make_run, quick_watchdog):
    import threading

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, hang_timeout=3)
    done = {"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
            "state": "done"}
    rank0 = [done, {**done, "seq": 2, "shapes": "float32[1]", "at": "train.py:12"}, {**done, "seq": 3, "state": "running"}]
    rank1 = [done, {**done, "seq": 2, "state": "running"}]
    job.client = fake_engine(
        FakeDockerClient(),
        node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, rank0, busy=True, stop=stop))],
        node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, rank1, busy=True, stop=stop))])
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.hung and result.exit_code == 1
    assert result.hang is not None and result.hang.divergence is not None
    assert result.hang.divergence.text == ("collective #2, where the ranks' calls first differ (rank 0 went on past"
                                           " it): rank 0 called all_reduce(float32[1]) at train.py:12; rank 1 called"
                                           " all_reduce(float32[4]) at train.py:9")
    assert "working" not in job.out.getvalue()


def test_a_point_that_cannot_be_placed_never_fails_the_scripts_call(monkeypatch):
    import sys
    import types

    from orchestrate.node.gpu_marks import CudaMarks

    def refuse(*args, **kwargs):
        raise RuntimeError("CUDA error: device-side assert triggered")

    cuda = types.SimpleNamespace(device=refuse, is_current_stream_capturing=refuse, Event=refuse)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    log = CollectiveLog(gpu=CudaMarks())
    assert log.wrap("all_reduce", lambda tensor: "result", lambda g: "default")(CudaTensor(4)) == "result"
    assert [e["state"] for e in log.snapshot()] == ["done"] and log.completed == 1


def test_a_rank_is_placed_at_the_oldest_collective_its_gpu_is_in_and_its_main_threads_wait_comes_first():
    two = (coll(1), coll(2, "running"), coll(3, "running"))
    before, now = probes({0: two}, {0: two})
    assert diagnose(now, before, {0}, {}, 15).activities[0].detail == (
        "waits in all_reduce(float32[4]) #2 at gpu_desync.py:23, on the GPU")
    barrier = Collective(1, "monitored_barrier", "ranks 0,1 (gloo)", "", "train.py:50", "entered")
    waiting = (coll(1), coll(2, "queued"), barrier)
    before, now = probes({0: waiting}, {0: waiting}, spinning=False)
    assert diagnose(now, before, {0}, {}, 15).activities[0].detail == (
        "waits in monitored_barrier() #1 of group ranks 0,1 (gloo) at train.py:50")


def test_a_working_jobs_note_names_no_divergence_of_ranks_seen_a_moment_apart():
    # two healthy process groups: each rank's GPU was in another group's collective as it was looked at
    a = (coll(1), Collective(1, "all_reduce", "ranks 0,1", "float32[4]", "tp.py:9", "running"))
    b = (coll(1, "running"), Collective(1, "all_reduce", "ranks 0,1", "float32[4]", "tp.py:9", "queued"))
    before = Probe("a", 0.0, {0: snap(0, (coll(1, "queued"),), 1.0), 1: snap(1, (coll(1, "queued"),), 1.0)})
    now = Probe("b", 5.0, {0: snap(0, a, 1.0), 1: snap(1, b, 1.0)})
    found = diagnose(now, before, {0, 1}, {}, 15)
    assert not found.hung and found.divergence is not None and found.divergence.kind == "groups"
    assert not any("divergence" in line or "--debug-collectives" in line for line in found.lines())
