"""The workers' collective record and snapshots under real torchrun and gloo: a desync is seen
where it happens, DDP's backward passes too, a hung worker answers with its stack, so do its
DataLoader's worker processes, --collective-timeout reaches a plain script's process group, and
the hook imports no torch before the script does."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from orchestrate.hangs.collectives import GROUPS_HINT, ROOT_HINT, UNEVEN_HINT, first_divergence
from orchestrate.hangs.diagnosis import (BUSY_CPU_SHARE, DCP_HINT, DDP_FORWARD_HINT, DEBUG_HINT, FSDP_FORWARD_HINT,
                                        NEW_GROUP_HINT, SHORT_TIMEOUT_HINT, THREAD_ENDED_HINT, diagnose,
                                        timeout_diagnosis)
from orchestrate.hangs.snapshots import Probe, request_snapshots
from orchestrate.outcome.judge import Failure
from tests.workers.conftest import ROOT, hooked_torchrun, host_env

DESYNC = ROOT / "tests" / "jobs" / "desync.py"
DDP_BARRIER = ROOT / "tests" / "jobs" / "ddp_rank_barrier.py"
LOADER_STUCK = ROOT / "tests" / "jobs" / "loader_stuck.py"
P2P_SHORT = ROOT / "tests" / "jobs" / "p2p_short.py"
EVALUATE_ON_RANK0 = ROOT / "tests" / "jobs" / "evaluate_on_rank0.py"
FSDP_EVALUATE_ON_RANK0 = ROOT / "tests" / "jobs" / "fsdp_evaluate_on_rank0.py"
GROUP_ON_ONE_RANK = ROOT / "tests" / "jobs" / "group_on_one_rank.py"
GROUPS_IN_ANOTHER_ORDER = ROOT / "tests" / "jobs" / "groups_in_another_order.py"
DCP_SAVE_ON_RANK0 = ROOT / "tests" / "jobs" / "dcp_save_on_rank0.py"
ROOTS_DIFFER = ROOT / "tests" / "jobs" / "roots_differ.py"
TUTORIAL_SETUP = ROOT / "tests" / "jobs" / "tutorial_setup.py"
EVALUATE_TOO_LONG = ROOT / "tests" / "jobs" / "evaluate_too_long.py"
THREAD_ENDS = ROOT / "tests" / "jobs" / "thread_ends.py"
MOVES_THEN_HANGS = ROOT / "tests" / "jobs" / "moves_then_hangs.py"


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def start(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.Popen:
    debug = tmp_path / "debug"
    debug.mkdir(exist_ok=True)
    env = host_env(tmp_path, DDP_DEBUG_DIR=str(debug), PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.Popen(hooked_torchrun(2, *args), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def records_of_both_ranks(tmp_path: Path, name: str, script_text: str) -> dict[int, Any]:
    """Run ``script_text`` as ``name`` on two ranks, and return what each printed on its one
    ``RECORD RANK JSON`` line, checking both ranks said it alike."""
    script = tmp_path / name
    script.write_text(script_text)
    proc = start(tmp_path, "--", str(script))
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-2000:]
    records = {int(rank): json.loads(text) for rank, text in re.findall(r"^RECORD (\d) (.*)$", output, re.M)}
    assert set(records) == {0, 1} and records[0] == records[1], records
    return records


def test_a_hung_desync_answers_with_its_stacks_and_its_timeout_ends_it(tmp_path):
    every, extra = line_of(DESYNC, "dist.all_reduce(stats)"), line_of(DESYNC, "# DESYNC")
    proc = start(tmp_path, "--collective-timeout", "12", "--", str(DESYNC))
    try:
        probe = hung_probe(tmp_path, proc)
        for snapshot in probe.snapshots.values():
            assert snapshot.stack[-1].function == "all_reduce"  # torch's call it waits in, innermost
            assert (Path(snapshot.stack[0].file).name, snapshot.stack[0].line) == ("desync.py", every)
        divergence = first_divergence(probe.snapshots)
        assert divergence is not None
        # rank 0 went on past it, into its #5 (since 2026-12-07 said so, not as if both waited in #4)
        assert divergence.text == (f"collective #4, where the ranks' calls first differ (rank 0 went on past it):"
                                   f" rank 0 called all_reduce(float32[1]) at {DESYNC}:{extra}; rank 1 called"
                                   f" all_reduce(float32[4]) at {DESYNC}:{every}")
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "Timed out waiting 12000ms" in output  # the script gave no timeout; the hook's reached it
    written = [json.loads((tmp_path / "debug" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [w["reason"] for w in written] == ["collective failed"] * 2
    last = [w["collectives"][-1] for w in written]
    assert all(c["state"] == "failed" for c in last)
    # A rank that timed out waited the 12 s. The first to time out closes its connections, so its
    # peer, whose own timeout is due about then (later by how much later it entered), may fail on
    # the closed connection instead.
    assert all(c["ended"] - c["started"] > 11.5 for c in last if "Timed out waiting 12000ms" in c["error"]), last
    assert all("Timed out waiting 12000ms" in c["error"] or "Connection closed by peer" in c["error"] for c in last)
    assert any("Timed out waiting 12000ms" in c["error"] for c in last), last


def stop(proc: subprocess.Popen) -> None:
    """End a torchrun and its workers: SIGTERM, which it passes on to them, then SIGKILL."""
    proc.terminate()
    try:
        proc.communicate(timeout=60)
    finally:
        proc.kill()


def hung_probe(tmp_path: Path, proc: subprocess.Popen, timeout_s: float = 60) -> Probe:
    """Ask until both ranks answer from inside a collective, the same one two answers in a row
    (two ranks that meet in a collective of a healthy step are in one too, for a moment)."""
    return probe_when(tmp_path, proc, lambda p: len([s for s in p.snapshots.values() if s.in_collective]) == 2,
                      "hung where expected", timeout_s)


def where_each_rank_is(probe: Probe) -> dict[int, tuple]:
    """Each rank's collectives done and the one it is in: what moves while a job makes progress."""
    return {rank: (s.completed, s.in_collective and (s.in_collective.group, s.in_collective.seq, s.in_collective.op))
            for rank, s in probe.snapshots.items()}


def probe_when(tmp_path: Path, proc: subprocess.Popen, ready: Callable[[Probe], bool], what: str,
               timeout_s: float = 60) -> Probe:
    """Ask until the ranks' answers are ``ready`` two answers in a row, with every rank where it
    was the time before; the later probe (``what``: for the failure). One answer is not enough:
    each rank answers at its own moment, and rank 0 may answer from inside the collective that
    rank 1, answering a moment later, has already left (the ranks look hung, and their records
    agree)."""
    deadline, before = time.monotonic() + timeout_s, None
    while True:
        probe = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=2)
        if ready(probe):
            if before is not None and where_each_rank_is(probe) == where_each_rank_is(before):
                return probe
            before = probe
        else:
            before = None
        assert time.monotonic() < deadline and proc.poll() is None, f"the ranks never {what}"
        time.sleep(0.5)


def probe_of_hung_job(tmp_path: Path, job: Path):
    """Run ``job`` on 2 ranks until they hang, and stop it; the probe that found them hung."""
    proc = start(tmp_path, "--collective-timeout", "60", "--", str(job))
    try:
        return hung_probe(tmp_path, proc)
    finally:
        stop(proc)


def test_a_ranks_answer_counts_the_bytes_gloo_moved_over_its_sockets_and_a_hung_ranks_count_stands_still(tmp_path):
    """The count that tells a collective moving a large buffer over a slow link from a hung one,
    under real gloo (on loopback, so the data moves between collectives that complete)."""
    proc = start(tmp_path, "--collective-timeout", "60", "--", str(MOVES_THEN_HANGS), str(tmp_path / "hang"))
    try:
        deadline, counted = time.monotonic() + 60, None
        while True:  # (the ranks move on between their answers: no two looks agree, nor need to)
            probe = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=5)
            now = {rank: s.socket_bytes for rank, s in probe.snapshots.items()}
            assert None not in now.values(), now
            if len(now) == 2 and counted is None:
                counted = now
            # an all-reduce of 40 MB on two ranks sends 40 MB and receives as much on each
            elif len(now) == 2 and min(now[rank] - counted[rank] for rank in (0, 1)) >= 40_000_000:
                break
            assert time.monotonic() < deadline and proc.poll() is None, (counted, now)
            time.sleep(0.5)
        (tmp_path / "hang").touch()
        hung = hung_probe(tmp_path, proc)
        time.sleep(1.0)
        still = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=5)
    finally:
        stop(proc)
    assert {r: s.in_collective.op for r, s in still.snapshots.items()} == {0: "recv", 1: "recv"}
    assert {r: s.socket_bytes for r, s in still.snapshots.items()} == {r: s.socket_bytes
                                                                        for r, s in hung.snapshots.items()}
    found = diagnose(still, hung, {0, 1}, {}, 60)
    assert found.hung and [a.state for a in found.activities] == ["collective", "collective"]


def test_a_ddp_backward_pass_is_recorded_as_its_gradient_all_reduce_where_a_barrier_meets_it(tmp_path):
    sync, barrier = line_of(DDP_BARRIER, "# SYNC"), line_of(DDP_BARRIER, "# DESYNC")
    probe = probe_of_hung_job(tmp_path, DDP_BARRIER)
    # the construction's check and broadcast, three steps' backward passes (the no_sync() ones
    # all-reduce nothing; the second step's first forward pass broadcasts the rebuilt buckets), then the barrier
    divergence = first_divergence(probe.snapshots)
    assert divergence is not None
    assert divergence.text == (f"collective #7: rank 0 entered barrier() at {DDP_BARRIER}:{barrier}; rank 1 entered"
                               f" all_reduce(gradients of DDP(Linear)) at {DDP_BARRIER}:{sync}")
    waiting = probe.snapshots[1].in_collective
    assert waiting is not None and waiting.is_backward_pass and not probe.snapshots[0].in_collective.is_backward_pass
    # rank 1 took one step more than rank 0 before they parted: its fourth backward pass
    assert divergence.hint == (f"rank 1 is in backward pass 4 at {DDP_BARRIER}:{sync}, where rank 0 made 3 and called"
                               f" barrier() at {DDP_BARRIER}:{barrier} in its place, which rank 1 never made: likely the"
                               " extra collective (one rank 0 makes on its own within a step, or one after its"
                               f" training loop, which it left first); {UNEVEN_HINT}")
    built, accumulate = line_of(DDP_BARRIER, "model = DistributedDataParallel("), line_of(DDP_BARRIER, "# ACCUMULATE")
    assert [(c.seq, c.op, c.shapes, c.at, c.state) for c in probe.snapshots[1].collectives] == [
        (1, "all_gather", "parameter shapes of DDP", f"{DDP_BARRIER}:{built}", "done"),
        (2, "broadcast", "parameters of DDP(Linear)", f"{DDP_BARRIER}:{built}", "done"),
        (3, "all_reduce", "gradients of DDP(Linear)", f"{DDP_BARRIER}:{sync}", "done"),
        (4, "broadcast", "rebuilt buckets of DDP(Linear)", f"{DDP_BARRIER}:{accumulate}", "done"),
        *[(seq, "all_reduce", "gradients of DDP(Linear)", f"{DDP_BARRIER}:{sync}", "done") for seq in (5, 6)],
        (7, "all_reduce", "gradients of DDP(Linear)", f"{DDP_BARRIER}:{sync}", "entered")]


def test_a_ddp_forward_pass_rank_0_makes_alone_is_named_as_the_broadcast_of_its_buffers(tmp_path):
    job = EVALUATE_ON_RANK0
    built, forward, backward = line_of(job, "# BUILD"), line_of(job, "# FORWARD"), line_of(job, "# BACKWARD")
    evaluate, barrier = line_of(job, "# EVALUATE"), line_of(job, "# BARRIER")
    probe = probe_of_hung_job(tmp_path, job)
    # every rank alike: the construction, then each step's forward (its buffers) and backward pass; the
    # second forward pass first broadcasts the buckets rebuilt after the first step
    step = [("broadcast", "buffers of DDP(Sequential)", forward),
            ("all_reduce", "gradients of DDP(Sequential)", backward)]
    steps = [(seq, op, shapes, f"{job}:{line}") for seq, (op, shapes, line) in enumerate(
        [("all_gather", "parameter shapes of DDP", built), ("broadcast", "parameters of DDP(Sequential)", built)]
        + step + [("broadcast", "rebuilt buckets of DDP(Sequential)", forward)] + step, start=1)]
    for rank in (0, 1):
        assert [(c.seq, c.op, c.shapes, c.at) for c in probe.snapshots[rank].collectives[:-1]] == steps
    diagnosis = diagnose(probe, None, {0, 1}, {}, None)
    assert diagnosis.headline == (f"no progress: collective #8: rank 0 entered broadcast(buffers of DDP(Sequential))"
                                  f" at {job}:{evaluate}; rank 1 entered barrier() at {job}:{barrier}")
    assert f"  {DDP_FORWARD_HINT}" in diagnosis.lines() and f"  {DEBUG_HINT}" not in diagnosis.lines()



def test_an_fsdp_forward_pass_rank_0_makes_alone_is_named_as_the_gathering_of_its_parameters(tmp_path):
    job = FSDP_EVALUATE_ON_RANK0
    forward, backward = line_of(job, "# FORWARD"), line_of(job, "# BACKWARD")
    evaluate, barrier = line_of(job, "# EVALUATE"), line_of(job, "# BARRIER")
    probe = probe_of_hung_job(tmp_path, job)
    # every rank alike, each step: the two sharded layers' parameters gathered in the forward pass,
    # again in the backward pass (resharded after the forward), and their gradients reduce-scattered
    gather, scatter = ("all_gather_into_tensor", "parameters of FSDP(Linear)"), \
        ("reduce_scatter_tensor", "gradients of FSDP(Linear)")
    step = [(*gather, forward)] * 2 + [(*gather, backward)] * 2 + [(*scatter, backward)] * 2
    steps = [(seq, op, shapes, f"{job}:{line}") for seq, (op, shapes, line) in enumerate(step * 2, start=1)]
    for rank in (0, 1):  # each named, then the flat tensors it was given by position (the record keeps both)
        recorded = probe.snapshots[rank].collectives[:-1]
        assert [(c.seq, c.op, c.shapes.split(": ")[0], c.at) for c in recorded] == steps
        assert all(re.fullmatch(r"parameters of FSDP\(Linear\): float32\[\d+\], float32\[\d+\]", c.shapes)
                   for c in recorded if c.op == gather[0]), [c.shapes for c in recorded]
    diagnosis = diagnose(probe, None, {0, 1}, {}, None)
    assert re.fullmatch(rf"no progress: collective #13: rank 0 entered all_gather_into_tensor\(parameters of"
                        rf" FSDP\(Linear\): float32\[\d+\], float32\[\d+\]\) at {re.escape(f'{job}:{evaluate}')};"
                        rf" rank 1 entered barrier\(\) at {re.escape(f'{job}:{barrier}')}", diagnosis.headline), \
        diagnosis.headline
    assert f"  {FSDP_FORWARD_HINT}" in diagnosis.lines() and f"  {DEBUG_HINT}" not in diagnosis.lines()


def test_a_group_made_on_one_rank_only_is_the_first_divergence_with_its_own_hint(tmp_path):
    job = GROUP_ON_ONE_RANK
    made, every = line_of(job, "# ONLY_RANK_0"), line_of(job, "# EVERY_RANK")
    probe = probe_of_hung_job(tmp_path, job)
    divergence = first_divergence(probe.snapshots)
    assert divergence is not None
    # (rank 1 may have gone on past it too by the look: its new_group returns once rank 0's made its own)
    past = re.match(r"collective #1, where the ranks' calls first differ \((rank 0|every rank) went on past it\): ",
                    divergence.text)
    assert past is not None, divergence.text
    assert divergence.text[past.end():] == (f"rank 0 called new_group(ranks 0) at {job}:{made}; rank 1 called"
                                            f" new_group(ranks 0,1) at {job}:{every}")
    lines = diagnose(probe, None, {0, 1}, {}, None).lines()
    assert f"  {NEW_GROUP_HINT}" in lines and f"  {DEBUG_HINT}" not in lines


def test_two_groups_of_the_same_ranks_used_in_another_order_are_told_apart_by_the_order_torch_made_them(tmp_path):
    """Both groups are ranks 0,1: named by their ranks alone they were one group, both ranks
    waiting in its #1, and no divergence was found."""
    job = GROUPS_IN_ANOTHER_ORDER
    first, second = line_of(job, "# RANK_0_FIRST"), line_of(job, "# RANK_1_FIRST")
    probe = probe_of_hung_job(tmp_path, job)
    divergence = first_divergence(probe.snapshots)
    assert divergence is not None
    assert divergence.text == (f"the ranks wait in different process groups: rank 0 waits in all_reduce(float32[4]) #1"
                               f" of group ranks 0,1 at {job}:{first}; rank 1 waits in all_reduce(float32[4]) #1 of"
                               f" group ranks 0,1 (2nd group of them) at {job}:{second}")
    lines = diagnose(probe, None, {0, 1}, {}, None).lines()
    assert f"  {GROUPS_HINT}" in lines and f"  {DEBUG_HINT}" not in lines  # torch's check sees no such order


def test_ranks_that_broadcast_from_different_roots_part_there_and_a_gather_to_one_root_does_not(tmp_path):
    gathered, sent = line_of(ROOTS_DIFFER, "dist.gather("), line_of(ROOTS_DIFFER, "# ROOTS")
    probe = probe_of_hung_job(tmp_path, ROOTS_DIFFER)
    assert [c.where for c in probe.snapshots[0].collectives] == [
        f"gather(float32[1] to rank 0) #1 at {ROOTS_DIFFER}:{gathered}",
        f"broadcast(int64[1] from rank 0) #2 at {ROOTS_DIFFER}:{sent}"]
    lines = diagnose(probe, None, {0, 1}, {}, 30).lines()
    assert lines[0] == (f"no progress for 30 s: collective #2: rank 0 entered broadcast(int64[1] from rank 0) at"
                        f" {ROOTS_DIFFER}:{sent}; rank 1 entered broadcast(int64[1] from rank 1) at {ROOTS_DIFFER}:{sent}")
    assert f"  {ROOT_HINT}" in lines and f"  {DEBUG_HINT}" not in lines


def test_a_checkpoint_rank_0_saves_alone_is_named_as_dcp_save_with_its_own_hint(tmp_path):
    job = DCP_SAVE_ON_RANK0
    step, save = line_of(job, "# STEP"), line_of(job, "# SAVE")
    probe = probe_of_hung_job(tmp_path, job)
    waiting = probe.snapshots[0].in_collective
    assert waiting is not None and (waiting.call, waiting.at) == ("gather_object(in dcp.save)", f"{job}:{save}")
    assert probe.snapshots[1].in_collective.call == "all_reduce(gradients of DDP(Linear))"
    assert probe.snapshots[1].in_collective.at == f"{job}:{step}"
    lines = diagnose(probe, None, {0, 1}, {}, None).lines()
    assert f"  {DCP_HINT}" in lines and f"  {DEBUG_HINT}" not in lines

RECORD_PER_RANK = """
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
first = DDP(torch.nn.Linear(4, 2))
first(torch.randn(3, 4)).sum().backward()  # one step; the model is kept
probe = torch.nn.Linear(4, 1)
model = DDP(torch.nn.Bilinear(4, 4, 2))
with Join([model]):  # uneven inputs: rank 0 has 2 batches, rank 1 has 4
    for batch in range(2 if rank == 0 else 4):
        x = torch.randn(3, 4)
        model(x, x).sum().backward()
        if rank == 0:  # rank 0 alone backpropagates through a probe of its own: no all-reduce
            probe(x).sum().backward()
log = sys.modules["orchestrate.node.collective_log"]._failure_hooks[0].__self__.log
record = json.dumps([(e["seq"], e["op"], e["shapes"]) for e in log.snapshot()])
sys.stdout.write(f"RECORD {rank} {record}\\n")  # one write: the two ranks' lines cannot interleave
sys.stdout.flush()
dist.destroy_process_group()
"""


def test_every_rank_records_ddps_gradients_alike_with_uneven_inputs_a_kept_model_and_a_probe(tmp_path):
    records = records_of_both_ranks(tmp_path, "record_per_rank.py", RECORD_PER_RANK)
    ddp = [shapes for _, op, shapes in records[0] if shapes.startswith("gradients of")]
    # the first model's step, then four of the second (two of them rank 0's joined shadow of rank 1's)
    assert ddp == ["gradients of DDP(Linear)"] + ["gradients of DDP(Bilinear)"] * 4, records[0]


def test_the_hook_imports_no_torch_before_the_script_does(tmp_path):
    script = tmp_path / "order.py"
    # one string per print: print writes its arguments one by one, and two ranks' writes interleave
    script.write_text("import sys\nprint(f\"torch before the script: {'torch' in sys.modules}\", flush=True)\n"
                      "import torch.distributed as dist\n"
                      "print(f\"recorded: {getattr(dist.all_reduce, '__ddp_compose_recorded__', False)}\","
                      " flush=True)\n")
    proc = start(tmp_path, "--", str(script))
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-2000:]
    assert output.count("torch before the script: False") == 2
    assert output.count("recorded: True") == 2


# The stuck one's workers are spawned (fresh interpreters, as forkserver's are: Python 3.14's
# default on Linux), the slow one's forked (the default before it).
@pytest.mark.parametrize("slow,start_method", [(False, "spawn"), (True, "fork")], ids=["stuck-spawned", "slow-forked"])
def test_a_rank_waiting_for_its_data_loader_answers_with_its_workers_stuck_one_hung_slow_one_working(
        tmp_path, slow, start_method):
    proc = start(tmp_path, "--", str(LOADER_STUCK), "--start", start_method, *(["--slow"] if slow else []))
    try:
        deadline = time.monotonic() + 90
        at_item_37 = {"decode_for_minutes", "<genexpr>"} if slow else {"__getitem__"}
        read = line_of(LOADER_STUCK, "# READ")
        # Until rank 0 has taken its 4 steps (batches 0-3) and waits for its loader, the worker with
        # item 37 is at it (its read, or its decoder), and rank 1 waits in its all-reduce: a rank
        # missing from the earlier look, or one that still had a step to finish, would be progress
        # between the two looks. A worker at item 37 alone is not enough: under load the other
        # worker's batch 3 can lag behind it, and rank 0 then takes step 3 between the looks.
        while True:
            before = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=3)
            zero, one = before.snapshots.get(0), before.snapshots.get(1)
            # rank 1 in an all-reduce rank 0 has not entered: not the one of step 4 it still finishes
            ahead = one is not None and one.in_collective is not None and zero is not None and all(
                c.seq < one.in_collective.seq for c in zero.collectives if c.group == one.in_collective.group)
            steps = sum(c.is_backward_pass and c.state == "done" for c in zero.collectives) if zero else 0
            if zero is not None and steps == 4 and zero.waits_for_data_loader and ahead and any(
                    f.file == str(LOADER_STUCK) and f.function in at_item_37 and (slow or f.line == read)
                    for w in before.loaders.get(0, []) for f in w.stack):
                break
            assert time.monotonic() < deadline and proc.poll() is None, (
                "rank 0 never waited for its DataLoader's stuck worker with rank 1 in its all-reduce", steps,
                {r: (s.stack[-1:], s.in_collective) for r, s in before.snapshots.items()}, before.loaders)
            time.sleep(0.5)
        time.sleep(2)  # two looks some seconds apart, as the watchdog takes them
        now = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=3)
    finally:
        stop(proc)
    assert {w.worker for w in now.loaders[0]} == {0, 1} and all(w.workers == 2 for w in now.loaders[0])
    busy, idle = now.loaders[0]  # batch 4 (items 32-39) is worker 0's; worker 1 has loaded its two
    assert idle.idle and not busy.idle
    # rank 1's workers (not waited for: rank 1 waits in DDP's all-reduce) have loaded their batches
    assert all(w.idle for w in now.loaders.get(1, []))
    assert busy.stack[0].function == "_worker_loop", busy.stack  # its own frames: none inherited from its rank
    found = diagnose(now, before, {0, 1}, {}, 20)
    assert set(found.loaders) == {0}  # shown for the rank that waits for them
    if slow:  # a decoder at work is progress: not hung
        assert not found.hung, found.lines()
        assert found.activities[0].state == "busy", found.activities
        assert found.activities[0].detail.startswith(f"loading data: its DataLoader's worker 0 (pid {busy.pid})")
        assert "loader_stuck.py:" in found.activities[0].detail
    else:
        looks = [({r: (s.pid, s.completed, s.cpu_s) for r, s in probe.snapshots.items()},
                  {r: [(w.pid, w.cpu_s) for w in ws] for r, ws in probe.loaders.items()}, probe.at) for probe in (before, now)]
        assert found.hung, (found.lines(), found.activities, looks)
        assert found.headline.endswith(f"(not in a collective: __next__ at loader_stuck.py:{line_of(LOADER_STUCK, 'for batch in')}"
                                       f" in main, for its DataLoader's worker 0 (pid {busy.pid}): __getitem__"
                                       f" at loader_stuck.py:{read})"), found.headline
        assert f"    worker 1 (pid {idle.pid}): idle, waits for the indices of its next batch" in found.lines()


def test_a_send_its_peer_never_receives_is_named_with_what_the_peer_did_instead(tmp_path):
    send, all_reduce = line_of(P2P_SHORT, "# SEND"), line_of(P2P_SHORT, "# ALL_REDUCE")
    proc = start(tmp_path, "--", str(P2P_SHORT))
    try:
        probe = hung_probe(tmp_path, proc)
    finally:
        stop(proc)
    zero, one = probe.snapshots[0], probe.snapshots[1]
    # a batch is numbered on its own; a receive from any rank in its sender's channel once it returned
    assert [(c.op, c.group, c.seq) for c in zero.collectives] == [
        ("batch_isend_irecv", "p2p batch of rank 0", 1), *[("send", "p2p 0->1", n) for n in range(1, 6)]]
    assert [(c.op, c.group, c.seq) for c in one.collectives] == [
        ("batch_isend_irecv", "p2p batch of rank 1", 1), *[("recv", "p2p 0->1", n) for n in range(1, 5)],
        ("all_reduce", "default", 1)]
    found = diagnose(probe, probe, {0, 1}, {}, 20)
    assert found.headline == (f"no progress for 20 s: rank 0 waits in send(float32[8]) #5 to rank 1 at"
                              f" {P2P_SHORT}:{send}; rank 1 received 4 and waits in all_reduce(float32[8]) #1 at"
                              f" {P2P_SHORT}:{all_reduce}")
    assert not any("--debug-collectives" in line for line in found.lines())  # torch's check has no sends


def test_a_rank_waiting_for_its_thread_that_raised_is_placed_with_the_threads_error(tmp_path):
    """The hook keeps a thread's uncaught error (Python still prints it): rank 1's loop waits in
    its queue's get, and its answer names the prefetch thread that ended, where it raised."""
    get, raised = line_of(THREAD_ENDS, "# GET"), line_of(THREAD_ENDS, "# RAISE")
    proc = start(tmp_path, "--", str(THREAD_ENDS))
    try:
        probe = probe_when(tmp_path, proc, lambda p: 1 in p.snapshots and p.snapshots[1].waits_for_threads
                           and 0 in p.snapshots and p.snapshots[0].in_collective is not None, "hung at the queue")
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "Exception in thread prefetcher" in output and "ValueError: corrupt record 5" in output
    found = diagnose(probe, probe, {0, 1}, {}, 20)
    name = THREAD_ENDS.name  # the job lies outside the work directory: named by its base name
    assert found.headline.endswith(f"rank 1 is at #5 (not in a collective: get at {name}:{get} in main;"
                                   f" its thread prefetcher: ended with ValueError: corrupt record 5 at"
                                   f" {name}:{raised} in prefetch)"), found.headline
    assert found.lines()[-1] == f"  {THREAD_ENDED_HINT}"
    # rank 0's prefetcher runs on: it waits to put its next batch
    assert [(t.name, t.error, t.stack[-1].function) for t in probe.snapshots[0].threads] == [("prefetcher", "", "wait")]


def test_ranks_that_name_a_store_of_their_own_are_told_so_while_they_wait_and_when_torch_gives_up(tmp_path):
    """The tutorial's setup() under torchrun: the record keeps the store the script named (its own
    MASTER_ADDR and MASTER_PORT, set after the hook read torchrun's) while the ranks wait; when the
    timeout ends the wait, the records the ranks wrote as init_process_group failed say it too."""
    from orchestrate.supervise.progress import ProgressWatch

    job, init = TUTORIAL_SETUP, line_of(TUTORIAL_SETUP, "# INIT")
    (tmp_path / "progress").mkdir()
    proc = start(tmp_path, "--collective-timeout", "10", "--", str(job), DDP_PROGRESS_DIR=str(tmp_path / "progress"))
    try:
        probe = probe_when(tmp_path, proc, lambda p: len(p.snapshots) == 2 and all(s.init for s in p.snapshots.values()),
                           "waited in init_process_group")
        torchrun_store = probe.snapshots[0].init.torchrun_store
        # each call was reported to the launcher as it was made, while its rank waits in it
        watch = ProgressWatch(tmp_path / "progress", lambda *args, **kwargs: None)
        watch.poll(0.0, None)
        assert {rank: (call.store, call.torchrun_store) for rank, call in watch.init_asked.items()} == {
            0: ("localhost:12355", torchrun_store), 1: ("localhost:12355", torchrun_store)}
        assert proc.poll() is None and watch.groups_made() == {}  # still waiting: no group made
        assert torchrun_store.startswith(("localhost:", "127.0.0.1:")) and torchrun_store != "localhost:12355"
        lines = diagnose(probe, None, {0, 1}, {}, 30).lines()
        assert lines[0] == f"no progress for 30 s: ranks 0, 1: init_process_group at {job.name}:{init} in setup"
        assert lines[-1] == (f"  ranks 0, 1 called init_process_group for a store at localhost:12355, from the"
                             f" MASTER_ADDR and MASTER_PORT the script set itself, where torchrun's store is at"
                             f" {torchrun_store}: they wait for a store that is not the job's; under torchrun leave"
                             " init_method out, and MASTER_ADDR and MASTER_PORT as torchrun sets them")
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "timed out after 10000ms" in output
    failure = Failure("node0", 0, 1, "torch.distributed.DistNetworkError: The client socket has timed out after 10000ms"
                      " while trying to connect to (localhost, 12355).", ())
    found = timeout_diagnosis(failure, tmp_path / "debug", {0, 1})
    assert found is not None and found.headline.startswith("init_process_group timed out on node0 rank 0")
    assert found.headline.endswith(f"init_process_group at {job.name}:{init} in setup")
    # the first to time out wrote its record; torchrun may stop the other before its own timeout
    assert re.match(r"  ranks? [01](, 1)? called init_process_group for a store at localhost:12355,", found.lines()[-1])


def test_a_timeout_while_a_rank_still_computes_is_told_from_a_hang_by_one_look(tmp_path):
    """Rank 0 evaluates alone past the process group's timeout while rank 1 waits in the barrier:
    one look, as the launcher takes when the first failure ends the job, tells the computing rank
    (by the CPU it used over its last looks) from the waiting one, and the timeout is not called
    a hang."""
    job = EVALUATE_TOO_LONG
    evaluating, barrier = line_of(job, "# EVALUATE"), line_of(job, "# BARRIER")
    proc = start(tmp_path, "--collective-timeout", "12", "--", str(job))
    try:

        def in_barrier(probe: Probe) -> bool:  # rank 1 waits in the barrier, and rank 0 has evaluated a while
            waiting = probe.snapshots[1].in_collective if 1 in probe.snapshots else None
            return waiting is not None and waiting.op == "barrier" and 0 in probe.snapshots \
                and probe.snapshots[0].cpu_recent is not None

        probe_when(tmp_path, proc, in_barrier, "waited in the barrier")
        asked = time.time() - 1.0
        time.sleep(2.5)  # the looks of rank 0's snapshot thread span its evaluation only
        probe = request_snapshots(tmp_path / "debug", {0, 1}, timeout_s=2)
        assert probe.snapshots[0].stack[-1].line == evaluating
        assert probe.snapshots[0].cpu_recent >= BUSY_CPU_SHARE > probe.snapshots[1].cpu_recent, probe.snapshots
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "Timed out waiting 12000ms" in output
    failure = Failure("node1", 1, 1, "RuntimeError: [/pytorch/gloo/unbound_buffer.cc:78] Timed out waiting 12000ms"
                      " for recv operation to complete", ())
    found = timeout_diagnosis(failure, tmp_path / "debug", {0, 1}, since=asked)
    assert found is not None and not found.hung
    assert found.headline == ("a collective timed out on node1 rank 1 (Timed out waiting 12000ms for recv operation to"
                              " complete) as the job still worked: rank 0 computing")
    assert [(g.ranks, g.where) for g in found.groups] == [
        ((0,), f"evaluate at {job.name}:{evaluating}"), ((1,), f"barrier at {job.name}:{barrier} in <module>")]
    assert f"  {SHORT_TIMEOUT_HINT}" in found.lines()
