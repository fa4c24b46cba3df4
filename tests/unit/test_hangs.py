"""Hang diagnosis, the pure parts: ranks grouped by stack, the first divergence of their
collectives, the watchdog's progress rules, torch's mismatch error in one line, and the
workers' collective record (without torch)."""
from __future__ import annotations

import dataclasses
import io
import json
import re
import time
import sys
from pathlib import Path
from typing import Optional

import pytest

from orchestrate.hangs.collectives import channel_ends, elements, first_divergence
from orchestrate.hangs.diagnosis import (ATTEMPT_CLOCK_SLACK_S, CUT_HINT, DDP_FORWARD_HINT, DEBUG_HINT,
                                        FSDP_FORWARD_HINT,
                                        HangDiagnosis, diagnose, loader_lines, loading_where, mismatch_divergence,
                                        timeout_diagnosis)
from orchestrate.hangs.snapshots import (Collective, Frame, LoaderSnapshot, Probe, RankSnapshot, last_snapshots,
                                         request_snapshots)
from orchestrate.hangs.stacks import group_stacks
from orchestrate.hangs.watchdog import HangWatch
from orchestrate.node.collective_log import CollectiveLog, describe_tensors
from orchestrate.outcome.judge import Failure
from orchestrate.outcome.root_cause import short_mismatch
from orchestrate.text import ordinal, ranks_text

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/distributed"


def stack(line: int, function: str = "<module>", call: str = "all_reduce") -> tuple[Frame, ...]:
    return (Frame("desync.py", line, function, "dist.all_reduce(x)"), Frame(f"{TORCH}/c10d_logger.py", 81, "wrapper"),
            Frame(f"{TORCH}/distributed_c10d.py", 2942, call))


def coll(seq: int, shapes: str = "float32[4]", state: str = "done", op: str = "all_reduce", group: str = "default",
         at: str = "desync.py:11") -> Collective:
    return Collective(seq, op, group, shapes, at, state)


def snap(rank: int, collectives: tuple[Collective, ...] = (), frames: Optional[tuple[Frame, ...]] = None,
         cpu_s: float = 1.0, completed: Optional[int] = None, pid: int = 100, lines: tuple = ()) -> RankSnapshot:
    done = sum(c.state == "done" for c in collectives) if completed is None else completed
    return RankSnapshot(rank, f"node{rank}", pid + rank, 0.0, cpu_s, frames if frames is not None else stack(11),
                        collectives, done, lines=lines)


def test_ranks_read_as_ranges():
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([2, 0, 1]) == "ranks 0-2"
    assert ranks_text([0, 2, 5, 6, 7]) == "ranks 0, 2, 5-7"
    assert ranks_text([4, 5]) == "ranks 4, 5"


def test_counts_read_as_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 10, 11, 12, 13, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "10th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]


def test_ranks_with_one_stack_form_one_group_and_the_odd_rank_comes_first():
    snapshots = {r: snap(r, (coll(21, state="entered"),)) for r in (0, 1, 2)}
    snapshots[3] = snap(3, (coll(21, "float32[1]", "entered", at="desync.py:14"),), frames=stack(14))
    groups = group_stacks(snapshots)
    assert [(g.ranks, g.where) for g in groups] == [((3,), "all_reduce at desync.py:14 in <module>"),
                                                   ((0, 1, 2), "all_reduce at desync.py:11 in <module>")]
    assert groups[1].lines()[0] == "ranks 0-2: all_reduce at desync.py:11 in <module>"
    assert groups[1].lines()[-1] == "    torch/distributed/distributed_c10d.py:2942 in all_reduce"


def test_a_deep_stack_shows_the_users_own_line_first_then_how_many_frames_lie_before_the_innermost():
    """broadcast_object_list calls broadcast: the innermost frames are all torch's, and the line
    of the user's that made the call would be left out (as on 2026-12-04, a p2p script's hang)."""
    frames = (Frame("p2p.py", 2, "<module>", "main()"), Frame("p2p.py", 15, "main", "dist.broadcast_object_list(o)"),
              Frame(f"{TORCH}/c10d_logger.py", 81, "wrapper"),
              Frame(f"{TORCH}/distributed_c10d.py", 3691, "broadcast_object_list", "broadcast(sizes)"),
              Frame(f"{TORCH}/c10d_logger.py", 81, "wrapper"),
              Frame(f"{TORCH}/distributed_c10d.py", 2841, "broadcast", "work.wait()"))
    [group] = group_stacks({0: snap(0, frames=frames)})
    assert group.lines() == [
        "rank 0: broadcast_object_list at p2p.py:15 in main",
        "    p2p.py:15 in main: dist.broadcast_object_list(o)",  # right before the innermost four: none between
        "    torch/distributed/c10d_logger.py:81 in wrapper",
        "    torch/distributed/distributed_c10d.py:3691 in broadcast_object_list: broadcast(sizes)",
        "    torch/distributed/c10d_logger.py:81 in wrapper",
        "    torch/distributed/distributed_c10d.py:2841 in broadcast: work.wait()"]
    deeper = frames[:2] + (Frame(f"{TORCH}/c10d_logger.py", 95, "inner"),) + frames[2:]
    assert group_stacks({0: snap(0, frames=deeper)})[0].lines()[1:4] == [
        "    p2p.py:15 in main: dist.broadcast_object_list(o)", "    ... 1 frame(s)",
        "    torch/distributed/c10d_logger.py:81 in wrapper"]
    # among them, or none of the user's: the innermost four alone
    assert len(group_stacks({0: snap(0, frames=frames[1:5])})[0].lines()) == 5
    assert len(group_stacks({0: snap(0, frames=frames[2:])})[0].lines()) == 5


def test_a_rank_outside_any_call_is_placed_at_its_own_frame():
    computing = (Frame("train.py", 40, "train"), Frame("train.py", 12, "evaluate"))
    assert group_stacks({0: snap(0, frames=computing)})[0].where == "evaluate at train.py:12"
    # a module of the user's package by its path in the work directory, as its frames and the
    # collective records say it; a file outside the work directory by its base name
    packaged = (Frame("mypkg/train.py", 40, "train"), Frame("mypkg/eval.py", 12, "evaluate"))
    assert group_stacks({0: snap(0, frames=packaged)})[0].where == "evaluate at mypkg/eval.py:12"
    crashed = (Frame("/workspace/mypkg/eval.py", 12, "evaluate"), Frame("/data/tools/metrics.py", 3, "score"))
    assert [frame.where for frame in crashed] == ["mypkg/eval.py:12", "metrics.py:3"]


def test_a_rank_in_torchs_code_is_placed_at_the_call_its_script_made_past_the_decorators():
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    connecting = (Frame("init.py", 3, "<module>"), Frame(f"{site}/distributed/c10d_logger.py", 95, "wrapper"),
                  Frame(f"{site}/distributed/distributed_c10d.py", 1762, "init_process_group"),
                  Frame(f"{site}/distributed/rendezvous.py", 230, "_tcp_rendezvous_handler"),
                  Frame(f"{site}/distributed/rendezvous.py", 189, "_create_c10d_store"))
    assert group_stacks({0: snap(0, frames=connecting)})[0].where == "init_process_group at init.py:3 in <module>"
    backward = (Frame("train.py", 14, "main"), Frame(f"{site}/_tensor.py", 625, "backward"),
                Frame(f"{site}/autograd/__init__.py", 354, "backward"),
                Frame(f"{site}/autograd/graph.py", 841, "_engine_run_backward"))
    assert group_stacks({0: snap(0, frames=backward)})[0].where == "backward at train.py:14 in main"
    only_torchs = connecting[1:]
    assert group_stacks({0: snap(0, frames=only_torchs)})[0].where == "_create_c10d_store at rendezvous.py:189"
    # every rank waits for its store: a hint on where init_method points
    stuck = probe(5, r0=snap(0, frames=connecting), r1=snap(1, frames=connecting))
    found = diagnose(stuck, probe(0, r0=snap(0, frames=connecting), r1=snap(1, frames=connecting)), {0, 1}, {}, 20)
    assert found.hung and found.lines()[-1].startswith("  every rank waits in init_process_group, for its store or for the others")
    some = probe(5, r0=snap(0, frames=connecting), r1=snap(1, frames=backward))
    found = diagnose(some, probe(0, r0=snap(0, frames=connecting), r1=snap(1, frames=backward)), {0, 1}, {}, 20)
    assert not any("init_method" in line for line in found.lines())  # rank 1 is past it


def test_ranks_in_init_process_group_beside_a_paused_node_get_no_hint_on_their_init_method():
    # a trial (session 112): Ctrl-C during pause:node1@t=2, before the job's first step; rank 0
    # waited in init_process_group for rank 1, whose node was paused, and the summary advised on
    # init_method (env://, tcp://localhost) as if the script's address were wrong
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    connecting = (Frame("train.py", 12, "<module>"), Frame(f"{site}/distributed/c10d_logger.py", 95, "wrapper"),
                  Frame(f"{site}/distributed/distributed_c10d.py", 1769, "init_process_group"))
    paused = {1: "is on node1, whose container is paused (injected fault pause:node1@t=2)"}
    found = diagnose(probe(5, r0=snap(0, frames=connecting)), probe(0, r0=snap(0, frames=connecting)), {0, 1},
                     paused, 13)
    lines = found.lines()
    assert found.hung and "  rank 1: " + paused[1] in lines
    assert not any("init_method" in line for line in lines), lines
    assert lines[-1] == ("  rank 0 waits in init_process_group for rank 1, which cannot answer (above): the process"
                         " group forms only once every rank has joined it")


def test_ranks_that_wait_for_processes_they_spawned_get_the_hint_that_torchrun_spawns_them_already():
    """The tutorial's mp.spawn script run under torchrun: the processes each rank spawns connect
    to torchrun's store as clients, and wait for ever for the store of their own they named."""
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    spawning = (Frame("basic.py", 21, "<module>"), Frame(f"{site}/multiprocessing/spawn.py", 364, "spawn"),
                Frame(f"{site}/multiprocessing/spawn.py", 320, "start_processes"),
                Frame(f"{site}/multiprocessing/spawn.py", 149, "join"))
    waiting = probe(5, r0=snap(0, frames=spawning), r1=snap(1, frames=spawning))
    found = diagnose(waiting, probe(0, r0=snap(0, frames=spawning), r1=snap(1, frames=spawning)), {0, 1}, {}, 120)
    assert found.hung and found.headline == ("no progress for 120 s: ranks 0, 1: spawn at basic.py:21 in <module>;"
                                             " ranks 0, 1 idle: neither computing nor in a collective (0.0% of a core)")
    assert found.lines()[-1].startswith("  every rank waits for processes it started with torch.multiprocessing.spawn:"
                                        " torchrun already starts one process per rank")
    # one rank elsewhere: not the spawn's doing alone
    other = probe(5, r0=snap(0, frames=spawning), r1=snap(1))
    found = diagnose(other, probe(0, r0=snap(0, frames=spawning), r1=snap(1)), {0, 1}, {}, 120)
    assert found.hung and not any("torch.multiprocessing.spawn" in line for line in found.lines())


def test_a_ddp_forward_pass_one_rank_makes_alone_gets_the_hint_that_it_broadcasts_the_buffers():
    """Rank 0 evaluates its DDP model alone: the forward pass broadcasts the buffers, and rank 1
    is in the barrier after it, or has exited. Ranks that all wait in it, or one in another
    collective, get no such hint."""
    buffers = coll(7, "buffers of DDP(Net)", "entered", op="broadcast", at="train.py:30")
    barrier = coll(7, "", "entered", op="barrier", at="train.py:40")
    history = (coll(5, "buffers of DDP(Net)", op="broadcast"), coll(6, "gradients of DDP(Net)"))
    parted = probe(5, r0=snap(0, history + (buffers,), frames=stack(30)), r1=snap(1, history + (barrier,), stack(40)))
    found = diagnose(parted, None, {0, 1}, {}, 30)
    assert found.headline == ("no progress for 30 s: collective #7: rank 0 entered broadcast(buffers of DDP(Net)) at"
                              " train.py:30; rank 1 entered barrier() at train.py:40")
    lines = found.lines()
    assert lines[-1] == (f"  {DDP_FORWARD_HINT}") and f"  {DEBUG_HINT}" not in lines
    # rank 1's script returned instead
    exited = {1: "has exited: its script returned on node1, whose torchrun runs on"}
    alone = diagnose(probe(5, r0=snap(0, history + (buffers,), frames=stack(30))), None, {0, 1}, exited, 30)
    assert alone.exited == (1,) and alone.lines()[-1] == f"  {DDP_FORWARD_HINT}"
    # every rank in the same forward pass: a slow peer or a lost one, not a forward made alone
    together = probe(5, r0=snap(0, history + (buffers,), frames=stack(30)), r1=snap(1, history + (buffers,), stack(30)))
    assert not any(DDP_FORWARD_HINT in line for line in diagnose(together, None, {0, 1}, {}, 30).lines())
    # rank 1 stopped (a fault): it did not answer, and no other rank was seen elsewhere
    stopped = diagnose(probe(5, r0=snap(0, history + (buffers,), frames=stack(30))), None, {0, 1},
                       {1: "is stopped: its process on node1 got SIGSTOP"}, 30)
    assert not any(DDP_FORWARD_HINT in line for line in stopped.lines())
    # a forward pass another rank's record shows is a training step's, where the waiting rank's own
    # record is too short to show its earlier one (the record keeps its last entries)
    shared = coll(7, "buffers of DDP(Net)", "entered", op="broadcast", at="train.py:30")
    rank0 = (coll(5, "buffers of DDP(Net)", op="broadcast", at="train.py:30"), coll(6, "gradients of DDP(Net)"),
             coll(7, "", "entered", op="barrier", at="train.py:40"))
    short = probe(5, r0=snap(0, rank0, stack(40)), r1=snap(1, (shared,), frames=stack(30)))
    lines = diagnose(short, None, {0, 1}, {}, 30).lines()
    assert not any(DDP_FORWARD_HINT in line for line in lines), lines
    # rank 0's forward pass returned (it computes after it) while rank 1 waits: not that forward pass
    past = probe(5, r0=snap(0, history + (coll(7, "buffers of DDP(Net)", op="broadcast", at="train.py:30"),),
                            frames=(Frame("train.py", 31, "<module>"),)), r1=snap(1, history + (barrier,), stack(40)))
    lines = diagnose(past, None, {0, 1}, {}, 30).lines()
    assert ("collective #7, where the ranks' calls first differ (rank 0 went on past it): rank 0 called"
            " broadcast(buffers" in lines[0]) and not any(DDP_FORWARD_HINT in line for line in lines)
    # a training step's forward pass, its line in both ranks' records: rank 0 made an extra barrier
    # (the odd one out is the barrier's rank), or rank 1 left after its last step
    step = coll(7, "buffers of DDP(Net)", "entered", op="broadcast", at="desync.py:11")
    trained = probe(5, r0=snap(0, history + (barrier,), stack(40)), r1=snap(1, history + (step,), frames=stack(11)))
    lines = diagnose(trained, None, {0, 1}, {}, 30).lines()
    assert f"  {DEBUG_HINT}" in lines and not any(DDP_FORWARD_HINT in line for line in lines)
    left = diagnose(probe(5, r0=snap(0, history + (step,), frames=stack(11))), None, {0, 1}, exited, 30).lines()
    assert left[-1].startswith("  a rank that exits while the others wait for it") and DDP_FORWARD_HINT not in left[-1]
    # on a GPU the broadcast returned once queued: the GPU is in it (running) while rank 0 waits on
    running = coll(7, "buffers of DDP(Net)", "running", op="broadcast", at="train.py:30")
    on_gpu = probe(5, r0=snap(0, history + (running,), frames=stack(31)), r1=snap(1, history + (barrier,), stack(40)))
    assert diagnose(on_gpu, None, {0, 1}, {}, 30).lines()[-1] == f"  {DDP_FORWARD_HINT}"
    # the collective timeout ended it: the records written as the collectives failed say the same
    failed = coll(7, "buffers of DDP(Net)", "failed", op="broadcast", at="train.py:30")
    ended = probe(5, r0=snap(0, history + (failed,), frames=stack(30)),
                  r1=snap(1, history + (coll(7, "", "failed", op="barrier", at="train.py:40"),), stack(40)))
    assert diagnose(ended, None, {0, 1}, {}, 0.0).lines()[-1] == f"  {DDP_FORWARD_HINT}"
    # parted elsewhere: the usual hint, and none about DDP's forward pass
    other = coll(7, "float32[4]", "entered", at="train.py:35")
    elsewhere = probe(5, r0=snap(0, history + (other,), frames=stack(35)), r1=snap(1, history + (barrier,), stack(40)))
    lines = diagnose(elsewhere, None, {0, 1}, {}, 30).lines()
    assert f"  {DEBUG_HINT}" in lines and not any(DDP_FORWARD_HINT in line for line in lines)


def test_a_forward_pass_is_made_alone_only_where_no_record_and_no_count_of_call_lines_shows_it_before():
    """Past the entries a record keeps, each rank's count of the collectives made from each line
    says whether a line is a training step's: the waiting rank's own count of more than one, or
    any count of another rank's; the waiting rank's own kept entries before its last say it too."""
    gradients = (coll(5, "gradients of DDP(Net)", at="train.py:20"), coll(6, "gradients of DDP(Net)", at="train.py:20"))
    buffers = coll(7, "buffers of DDP(Net)", "entered", op="broadcast", at="train.py:30")
    barrier = coll(7, "", "entered", op="barrier", at="train.py:40")

    def hint(rank0: tuple, lines0: tuple = (), lines1: tuple = ()) -> bool:
        parted = probe(5, r0=snap(0, rank0, frames=stack(30), lines=lines0),
                       r1=snap(1, gradients + (barrier,), stack(40), lines=lines1))
        return any(DDP_FORWARD_HINT in line for line in diagnose(parted, None, {0, 1}, {}, 30).lines())

    assert hint(gradients + (buffers,), lines0=(("train.py:30", 1),))  # its first time: made alone
    assert not hint(gradients + (buffers,), lines0=(("train.py:30", 2),))  # it made it before, past the kept entries
    assert not hint(gradients + (buffers,), lines1=(("train.py:30", 40),))  # so did rank 1, past its kept entries
    # its own kept entries: the same line's forward pass before the last, wherever it is among them
    elsewhere = coll(4, "buffers of DDP(Net)", op="broadcast", at="train.py:50")
    before = coll(5, "buffers of DDP(Net)", op="broadcast", at="train.py:30")
    assert not hint((elsewhere, before, buffers))
    assert hint((elsewhere, coll(5, "gradients of DDP(Net)", at="train.py:20"), buffers))
    # a diagnosis made with no counts (the dataclass's default) reads the records alone
    alone = HangDiagnosis(30.0, [], {0: [c.__dict__ for c in gradients + (buffers,)],
                                     1: [c.__dict__ for c in gradients + (barrier,)]}, None)
    assert alone.made_alone == DDP_FORWARD_HINT


def test_an_fsdp_forward_pass_one_rank_makes_alone_gets_the_hint_that_it_gathers_the_parameters():
    """Rank 0 evaluates its FSDP model alone: the forward pass gathers each module's parameters,
    and rank 1 is in the barrier after it. A training step's forward pass, its line in both
    ranks' records, gets the usual hint."""
    params = "parameters of FSDP(Linear)"
    history = (coll(5, params, op="all_gather_into_tensor", at="train.py:20"),
               coll(6, "gradients of FSDP(Linear)", op="reduce_scatter_tensor", at="train.py:21"))
    evaluating = coll(7, params, "entered", op="all_gather_into_tensor", at="train.py:30")
    barrier = coll(7, "", "entered", op="barrier", at="train.py:40")
    parted = probe(5, r0=snap(0, history + (evaluating,), frames=stack(30)), r1=snap(1, history + (barrier,), stack(40)))
    lines = diagnose(parted, None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #7: rank 0 entered all_gather_into_tensor(parameters of"
                        " FSDP(Linear)) at train.py:30; rank 1 entered barrier() at train.py:40")
    assert lines[-1] == f"  {FSDP_FORWARD_HINT}" and f"  {DEBUG_HINT}" not in lines
    assert not any(DDP_FORWARD_HINT in line for line in lines)
    # a training step's forward pass (rank 0 made an extra barrier): not a forward pass made alone
    step = coll(7, params, "entered", op="all_gather_into_tensor", at="train.py:20")
    trained = probe(5, r0=snap(0, history + (barrier,), stack(40)), r1=snap(1, history + (step,), frames=stack(20)))
    lines = diagnose(trained, None, {0, 1}, {}, 30).lines()
    assert f"  {DEBUG_HINT}" in lines and not any(FSDP_FORWARD_HINT in line for line in lines)
    # a deep model: a step is more entries than the diagnosis keeps, and the training forward
    # pass's line is in no rank's last entries; the lines each rank counted say it was made before
    backward = tuple(coll(seq, "gradients of FSDP(Linear)", op="reduce_scatter_tensor", at="train.py:21")
                     for seq in range(1, 8))
    first = coll(8, params, "entered", op="all_gather_into_tensor", at="train.py:20")
    counted = (("train.py:20", 97), ("train.py:21", 192), ("train.py:40", 2))
    deep = probe(5, r0=snap(0, backward + (first,), frames=stack(20), lines=counted),
                 r1=snap(1, backward + (coll(8, "", "entered", op="barrier", at="train.py:40"),), stack(40),
                         lines=counted))
    assert not any(FSDP_FORWARD_HINT in line for line in diagnose(deep, None, {0, 1}, {}, 30).lines())
    # rank 1 left (its script returned) while rank 0 began its next step: rank 0's own count says
    # that forward pass was made every step, so the rank that left is the hint, not the forward pass
    exited = {1: "has exited: its script returned on node1, whose torchrun runs on"}
    left = diagnose(probe(5, r0=snap(0, backward + (first,), frames=stack(20), lines=counted)), None, {0, 1}, exited, 30)
    assert left.lines()[-1].startswith("  a rank that exits while the others wait for it")
    # ... and where it was never made before (an evaluation), the hint is given
    evaluating = coll(8, params, "entered", op="all_gather_into_tensor", at="train.py:30")
    once = probe(5, r0=snap(0, backward + (evaluating,), frames=stack(30), lines=counted + (("train.py:30", 1),)),
                 r1=snap(1, backward + (coll(8, "", "entered", op="barrier", at="train.py:40"),), stack(40),
                         lines=counted))
    assert diagnose(once, None, {0, 1}, {}, 30).lines()[-1] == f"  {FSDP_FORWARD_HINT}"
    # a DDP model's buffers are not an FSDP model's parameters: each gets its own hint
    buffers = coll(7, "buffers of DDP(Net)", "entered", op="broadcast", at="train.py:30")
    ddp = probe(5, r0=snap(0, history + (buffers,), frames=stack(30)), r1=snap(1, history + (barrier,), stack(40)))
    assert diagnose(ddp, None, {0, 1}, {}, 30).lines()[-1] == f"  {DDP_FORWARD_HINT}"


def test_a_checkpoint_save_one_rank_makes_alone_gets_the_hint_that_dcp_save_is_a_collective(tmp_path):
    from orchestrate.hangs.diagnosis import DCP_HINT
    from orchestrate.hangs.snapshots import failed_collective

    history = (coll(5, "gradients of DDP(Net)", at="train.py:20"),)
    saving = coll(6, "in dcp.save", "entered", op="gather_object", at="train.py:25")
    stepping = coll(6, "gradients of DDP(Net)", "entered", at="train.py:20")
    parted = probe(5, r0=snap(0, history + (saving,), frames=stack(25)), r1=snap(1, history + (stepping,), stack(20)))
    lines = diagnose(parted, None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #6: rank 0 entered gather_object(in dcp.save) at train.py:25;"
                        " rank 1 entered all_reduce(gradients of DDP(Net)) at train.py:20")
    assert lines[-1] == f"  {DCP_HINT}" and f"  {DEBUG_HINT}" not in lines
    assert not any("training steps" in line for line in lines)  # rank 1's step is no clue of its own here
    # every rank saving together, one slow to write: no such hint
    together = probe(5, r0=snap(0, history + (saving,), frames=stack(25)), r1=snap(1, history + (saving,), stack(25)))
    assert not any(DCP_HINT in line for line in diagnose(together, None, {0, 1}, {}, 30).lines())
    # the record a rank wrote as its collective failed says which, from the attempt asked about
    (tmp_path / "rank0.json").write_text(json.dumps({
        "request": "failed", "reason": "collective failed", "rank": 0, "time": 500.0, "stacks": [],
        "collectives": [{"seq": 6, "op": "gather_object", "group": "default", "shapes": "in dcp.save",
                         "at": "train.py:25", "state": "failed"}]}))
    assert failed_collective(tmp_path, 0) == ("gather_object(in dcp.save)", "")
    assert failed_collective(tmp_path, 0, since=600.0) == ("", "") and failed_collective(tmp_path, 1) == ("", "")


def test_a_collective_one_rank_skipped_is_named_at_the_line_it_skipped_it_not_only_where_the_ranks_part():
    """Rank 1 skipped the loop's 6th all_reduce (``if rank == 1 and i == 5: continue``): the
    ranks part at #10, where rank 1 has gone on to the broadcast after the loop while rank 0 is in
    the loop's 10th call. The counts of their call lines say where one is missing."""
    history = tuple(coll(seq, at="skip.py:9") for seq in range(1, 10))
    in_loop = coll(10, "float32[4]", "entered", at="skip.py:9")
    after = coll(10, "float32[1] from rank 0", "entered", op="broadcast", at="skip.py:12")
    behind = snap(0, history + (in_loop,), stack(9), lines=(("skip.py:9", 10),))
    skipped = snap(1, history + (after,), stack(12, call="broadcast"), lines=(("skip.py:9", 9), ("skip.py:12", 1)))
    lines = diagnose(probe(5, r0=behind, r1=skipped), None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #10: rank 0 entered all_reduce(float32[4]) at skip.py:9;"
                        " rank 1 entered broadcast(float32[1] from rank 0) at skip.py:12")
    fewer = ("  rank 1 made 9 all_reduce(float32[4]) calls at skip.py:9 where rank 0 made 10: rank 1 skipped one (it"
             " went on to skip.py:12), or ran that loop fewer times, or makes the call at skip.py:12 that rank 0"
             " has never made (a condition on the rank or its data)")
    assert fewer in lines and f"  {DEBUG_HINT}" in lines
    # where rank 0 made calls from skip.py:12 before (a loop in a loop), the call is no extra one
    before = snap(0, history + (in_loop,), stack(9), lines=(("skip.py:9", 10), ("skip.py:12", 2)))
    lines = diagnose(probe(5, r0=before, r1=skipped), None, {0, 1}, {}, 30).lines()
    assert ("  rank 1 made 9 all_reduce(float32[4]) calls at skip.py:9 where rank 0 made 10: rank 1 skipped one (it"
            " went on to skip.py:12), by a condition on the rank or its data (a `continue` or an `if` around the"
            " call), or ran that loop fewer times") in lines
    # three ranks, two of them still in the loop
    three = {"r0": behind, "r1": skipped, "r2": snap(2, history + (in_loop,), stack(9), lines=(("skip.py:9", 10),))}
    lines = diagnose(probe(5, **three), None, {0, 1, 2}, {}, 30).lines()
    assert ("  rank 1 made 9 all_reduce(float32[4]) calls at skip.py:9 where ranks 0, 2 made 10: rank 1 skipped one"
            " (it went on to skip.py:12), or ran that loop fewer times, or makes the call at skip.py:12 that"
            " ranks 0, 2 have never made (a condition on the rank or its data)") in lines
    # a line that reduces in another group too (its count takes in both): nothing said of it
    from orchestrate.hangs.collectives import mismatch

    shared = tuple(coll(seq, at="util.py:5") for seq in range(1, 6))
    subgroup = tuple(coll(seq, group="ranks 0,2", at="util.py:5") for seq in range(1, 6))
    in_util = coll(6, "float32[4]", "entered", at="util.py:5")
    helper = {rank: snap(rank, shared + subgroup + (in_util,), stack(5), lines=(("util.py:5", 11),)) for rank in (0, 2)}
    moved_on = coll(6, "float32[1] from rank 0", "entered", op="broadcast", at="skip.py:12")
    gone = snap(1, shared + (moved_on,), stack(12, call="broadcast"), lines=(("util.py:5", 5), ("skip.py:12", 1)))
    found = mismatch({0: helper[0], 1: gone, 2: helper[2]})
    assert found is not None and found.seq == 6 and found.fewer == "", found
    # a point-to-point channel's ends call from different lines by design: nothing said
    sends = tuple(coll(seq, "float32[8]", op="send", group="p2p 0->1", at="pipe.py:10") for seq in (1, 2))
    receives = tuple(coll(seq, "float32[8]", op="recv", group="p2p 0->1", at="pipe.py:9") for seq in (1, 2))
    sender = snap(0, sends + (coll(3, "float32[8]", "entered", op="send", group="p2p 0->1", at="pipe.py:10"),),
                  stack(10, call="send"), lines=(("pipe.py:10", 3),))
    receiver = snap(1, receives + (coll(3, "float32[4]", "entered", op="recv", group="p2p 0->1", at="pipe.py:9"),),
                    stack(9, call="recv"), lines=(("pipe.py:9", 3), ("pipe.py:10", 2)))
    found = mismatch({0: sender, 1: receiver})
    assert found is not None and (found.group, found.seq) == ("p2p 0->1", 3) and found.fewer == "", found
    # no count said where the records do not show one made fewer: as many, none at all, or not known
    for rank1_lines in ((("skip.py:9", 10), ("skip.py:12", 1)), (("skip.py:12", 1),), ()):
        other = snap(1, history + (after,), stack(12, call="broadcast"), lines=rank1_lines)
        lines = diagnose(probe(5, r0=behind, r1=other), None, {0, 1}, {}, 30).lines()
        assert not any("skipped" in line for line in lines), (rank1_lines, lines)


def test_a_barrier_one_rank_skipped_in_a_loop_names_that_rank_not_the_ranks_that_wait_in_it():
    """Each epoch all_reduces at :18, then validates with a barrier at :9; rank 3's validation
    raised in epoch 3, caught, so it skipped that barrier and is in its 4th all_reduce while
    ranks 0-2 are in their 3rd barrier. The counts read both ways (ranks 0-2 made "fewer" at :18,
    rank 3 fewer at :9); the records say every rank went from :18 to :9 before, never from :18 to
    :18, so rank 3 skipped the barrier. Before, the line that sorted first was named, and the hint
    said ranks 0-2 skipped an all_reduce."""
    from orchestrate.hangs.collectives import mismatch

    epoch = lambda n: (coll(2 * n - 1, at="bs.py:18"), coll(2 * n, "", op="barrier", at="bs.py:9"))
    history = epoch(1) + epoch(2) + (coll(5, at="bs.py:18"),)
    waiting = snap(0, history + (coll(6, "", "entered", op="barrier", at="bs.py:9"),), stack(9, call="barrier"),
                   lines=(("bs.py:18", 3), ("bs.py:9", 3)))
    skipped = snap(3, history + (coll(6, "float32[4]", "entered", at="bs.py:18"),), stack(18),
                   lines=(("bs.py:18", 4), ("bs.py:9", 2)))
    others = {rank: dataclasses.replace(waiting, rank=rank) for rank in (0, 1, 2)}
    found = mismatch({**others, 3: skipped})
    assert found is not None and found.seq == 6
    assert found.fewer == ("rank 3 made 2 barrier() calls at bs.py:9 where ranks 0-2 made 3: rank 3 skipped one (it"
                           " went on to bs.py:18), by a condition on the rank or its data (a `continue` or an `if`"
                           " around the call), or ran that loop fewer times"), found.fewer
    # records that show neither way taken before: nothing said rather than a guess
    bare = {rank: dataclasses.replace(s, collectives=s.collectives[-1:]) for rank, s in {**others, 3: skipped}.items()}
    found = mismatch(bare)
    assert found is not None and found.fewer == "", found.fewer


def barrier_skipped():
    """The probe of barrier_skip.py's hang: every step's backward pass at :19 and a barrier at :23
    that rank 1 skipped on its last batch; rank 0 waits in its 4th barrier, rank 1 in its 5th
    backward pass."""
    step = lambda n: (coll(2 * n + 1, "gradients of DDP(Sequential)", at="barrier_skip.py:19"),
                      coll(2 * n + 2, "", op="barrier", at="barrier_skip.py:23"))
    history = step(1) + step(2) + step(3) + (coll(9, "gradients of DDP(Sequential)", at="barrier_skip.py:19"),)
    waiting = snap(0, history + (coll(10, "", "entered", op="barrier", at="barrier_skip.py:23"),),
                   stack(23, call="barrier"), lines=(("barrier_skip.py:19", 4), ("barrier_skip.py:23", 4)))
    skipped = snap(1, history + (coll(10, "gradients of DDP(Sequential)", "entered", at="barrier_skip.py:19"),),
                   stack(19), lines=(("barrier_skip.py:19", 5), ("barrier_skip.py:23", 3)))
    return probe(5, r0=waiting, r1=skipped)


def test_a_barrier_one_rank_skips_in_a_ddp_training_loop_is_said_as_a_skipped_barrier_first():
    """barrier_skip.py (a user trial, 2026-12-07): every step's backward pass at :19, then a barrier
    at :23 that the last rank `continue`s past on an epoch's last batch. Rank 0 waits in its 4th
    barrier, rank 1 in its 5th backward pass. The counts of :23 say it directly: rank 1 made 3
    barrier() calls there where rank 0 made 4; before, only "rank 1 is in backward pass 5 ...,
    where rank 0 made 4 and called barrier() in its place" was said, as if the steps differed."""
    from orchestrate.hangs.collectives import UNEVEN_HINT

    lines = diagnose(barrier_skipped(), None, {0, 1}, {}, 30).lines()
    fewer = ("  rank 1 made 3 barrier() calls at barrier_skip.py:23 where rank 0 made 4: rank 1 skipped one (it went on"
             " to barrier_skip.py:19), by a condition on the rank or its data (a `continue` or an `if` around the"
             " call), or ran that loop fewer times")
    assert lines[-2:] == [fewer, f"  {UNEVEN_HINT}"], lines
    assert not any("backward pass 5" in line for line in lines), lines
    assert "skips a collective the others make" in UNEVEN_HINT


def test_a_long_hint_said_as_the_run_hung_is_said_in_short_in_its_summary_and_wrapped_on_a_terminal(monkeypatch):
    """The trial's DDP hint (1,100 characters on one line) was said as the run hung and again,
    whole, in the summary the same command printed; and a terminal wrapped it where it cut it."""
    from orchestrate.hangs.collectives import UNEVEN_HINT
    from orchestrate.outcome.summary import SAID_ABOVE, SAID_HINT_CHARS, hang_lines
    from orchestrate.text import for_terminal

    history = (coll(61, "gradients of DDP(Net)", at="train.py:20"),)
    left = snap(0, history + (coll(62, "", "entered", op="barrier", at="train.py:40"),), stack(40),
                lines=(("train.py:20", 30), ("train.py:40", 1)))
    in_step = snap(1, history + (coll(62, "gradients of DDP(Net)", "entered", at="train.py:20"),), stack(20),
                   lines=(("train.py:20", 31),))
    found = diagnose(probe(5, r0=left, r1=in_step), None, {0, 1}, {}, 30)
    assert hang_lines(found) == found.lines()[1:]  # said nowhere before: whole
    found.said = True
    short = hang_lines(found)
    assert short[:-1] == found.lines()[1:-1] and found.lines()[-1].endswith(UNEVEN_HINT)
    assert short[-1].startswith("  rank 1 is in backward pass 31") and short[-1].endswith(SAID_ABOVE)
    assert len(short[-1]) <= SAID_HINT_CHARS + 2
    assert found.advice()[-1].endswith(UNEVEN_HINT)  # outcome.json's text stays whole
    # the line of a call one rank skipped is where to look, no hint: whole
    found = diagnose(barrier_skipped(), None, {0, 1}, {}, 30)
    found.said = True
    assert len(found.divergence.fewer) > SAID_HINT_CHARS and hang_lines(found)[-2] == f"  {found.divergence.fewer}"
    assert hang_lines(found)[-1].endswith(SAID_ABOVE)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "80")
    hint = f"  {UNEVEN_HINT}"
    wrapped = for_terminal(f"HUNG: no progress\n{hint}", Terminal()).split("\n")
    assert wrapped[0] == "HUNG: no progress" and wrapped[1].startswith("  every rank must") and len(wrapped) > 10
    assert all(len(line) <= 80 for line in wrapped) and all(line.startswith("      ") for line in wrapped[2:])
    assert " ".join(line.strip() for line in wrapped[1:]) == UNEVEN_HINT
    assert all(len(line) <= 80 - len("[orchestrate] ") for line in for_terminal(hint, Terminal(), "[orchestrate] ")
               .split("\n"))
    assert for_terminal(hint, io.StringIO()) == hint  # a file, a pipe: one line as it was


def test_a_barrier_only_rank_0_makes_is_not_said_to_be_an_all_reduce_it_skipped():
    """Each step all_reduces at :11; rank 0 alone adds a barrier at :13 in step 3 (to write a log):
    it made its 4 all_reduces and waits in the barrier, the others in their 5th all_reduce. The
    counts read as rank 0 having made one fewer at :11; it skipped none. The others never made a
    call from :13, so the call made alone is said too; before, the hint said only that rank 0
    skipped an all_reduce."""
    history = tuple(coll(seq, at="lb.py:11") for seq in range(1, 5))
    alone = snap(0, history + (coll(5, "", "entered", op="barrier", at="lb.py:13"),), stack(13, call="barrier"),
                 lines=(("lb.py:11", 4), ("lb.py:13", 1)))
    stepping = {f"r{rank}": snap(rank, history + (coll(5, "float32[4]", "entered", at="lb.py:11"),), stack(11),
                                 lines=(("lb.py:11", 5),)) for rank in (1, 2, 3)}
    lines = diagnose(probe(5, r0=alone, **stepping), None, {0, 1, 2, 3}, {}, 30).lines()
    assert ("  rank 0 made 4 all_reduce(float32[4]) calls at lb.py:11 where ranks 1-3 made 5: rank 0 skipped one (it"
            " went on to lb.py:13), or ran that loop fewer times, or makes the call at lb.py:13 that ranks 1-3"
            " have never made (a condition on the rank or its data)") in lines, lines


def test_ranks_that_part_in_a_ddp_training_step_get_the_hint_that_they_took_different_numbers_of_steps(tmp_path):
    """Rank 0's share of the data ran out after 30 batches and it went on to the barrier after its
    loop, while rank 1 is in its 31st step: in its backward pass (all-reducing the gradients), or,
    for a model with buffers, in the forward pass before it. The hint says how many each made
    from that line, where the records count them, and what to do."""
    from orchestrate.hangs.collectives import UNEVEN_HINT
    from orchestrate.hangs.diagnosis import EXITED_HINT
    from orchestrate.hangs.snapshots import failed_collective

    history = (coll(61, "gradients of DDP(Net)", at="train.py:20"),)
    barrier = coll(62, "", "entered", op="barrier", at="train.py:40")
    backward = coll(62, "gradients of DDP(Net)", "entered", at="train.py:20")
    left = snap(0, history + (barrier,), stack(40), lines=(("train.py:20", 30), ("train.py:40", 1)))
    in_step = snap(1, history + (backward,), stack(20), lines=(("train.py:20", 31),))
    lines = diagnose(probe(5, r0=left, r1=in_step), None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #62: rank 0 entered barrier() at train.py:40; rank 1 entered"
                        " all_reduce(gradients of DDP(Net)) at train.py:20")
    # the call rank 0 is in instead, from a line rank 1 never made one from: likely the extra one
    extra = ("which rank 1 never made: likely the extra collective (one rank 0 makes on its own within a step, or one"
             " after its training loop, which it left first); ")
    assert lines[-1] == (f"  rank 1 is in backward pass 31 at train.py:20, where rank 0 made 30 and called barrier() at"
                         f" train.py:40 in its place, {extra}{UNEVEN_HINT}")
    assert f"  {DEBUG_HINT}" not in lines
    # a model with buffers: rank 1 waits in its step's forward pass, made from its line 31 times
    forward = coll(62, "buffers of DDP(Net)", "entered", op="broadcast", at="train.py:18")
    in_forward = snap(1, history + (forward,), stack(18), lines=(("train.py:18", 31), ("train.py:20", 30)))
    left_too = snap(0, history + (barrier,), stack(40), lines=(("train.py:18", 30), ("train.py:20", 30)))
    lines = diagnose(probe(5, r0=left_too, r1=in_forward), None, {0, 1}, {}, 30).lines()
    assert lines[-1] == (f"  rank 1 is in forward pass 31 at train.py:18, where rank 0 made 30 and called barrier() at"
                         f" train.py:40 in its place, {extra}{UNEVEN_HINT}")
    assert not any(DDP_FORWARD_HINT in line for line in lines)
    # a forward pass from a line rank 0 never made one from is an evaluation made alone: that
    # hint where it is the first, and neither where it was made before (an evaluation each epoch)
    once = snap(1, history + (forward,), stack(18), lines=(("train.py:18", 1),))
    lines = diagnose(probe(5, r0=left, r1=once), None, {0, 1}, {}, 30).lines()
    assert lines[-1] == f"  {DDP_FORWARD_HINT}" and not any(UNEVEN_HINT in line for line in lines)
    each_epoch = snap(1, history + (forward,), stack(18), lines=(("train.py:18", 3),))
    lines = diagnose(probe(5, r0=left, r1=each_epoch), None, {0, 1}, {}, 30).lines()
    assert not any(UNEVEN_HINT in line or DDP_FORWARD_HINT in line for line in lines), lines
    # rank 1 skipped a step's backward pass (a batch it dropped): it is in its next forward pass,
    # rank 0 in the backward pass: both in a step, in different passes, so no count is said
    ahead = snap(1, history + (forward,), stack(18), lines=(("train.py:18", 31), ("train.py:20", 29)))
    behind = snap(0, history + (backward,), stack(20), lines=(("train.py:18", 30), ("train.py:20", 30)))
    assert diagnose(probe(5, r0=behind, r1=ahead), None, {0, 1}, {}, 30).lines()[-1] == f"  {UNEVEN_HINT}"
    # two ranks in the step with different counts: no count is said for either
    apart = snap(2, history + (backward,), stack(20), lines=(("train.py:20", 32),))
    lines = diagnose(probe(5, r0=left, r1=in_step, r2=apart), None, {0, 1, 2}, {}, 30).lines()
    assert lines[-1] == f"  {UNEVEN_HINT}"
    alike = snap(2, history + (backward,), stack(20), lines=(("train.py:20", 31),))
    lines = diagnose(probe(5, r0=left, r1=in_step, r2=alike), None, {0, 1, 2}, {}, 30).lines()
    assert lines[-1] == (f"  ranks 1, 2 are in backward pass 31 at train.py:20, where rank 0 made 30 and called barrier()"
                         f" at train.py:40 in its place, {extra.replace('rank 1 never', 'ranks 1, 2 never')}{UNEVEN_HINT}")
    # rank 0's record holds no count of that line (it kept other lines): rank 1's count alone
    unknown = snap(0, history + (barrier,), stack(40), lines=(("train.py:40", 1),))
    lines = diagnose(probe(5, r0=unknown, r1=in_step), None, {0, 1}, {}, 30).lines()
    assert lines[-1] == f"  rank 1 is in backward pass 31 at train.py:20, while rank 0 called barrier() at train.py:40 in its place, {extra}{UNEVEN_HINT}"
    # a third rank exited as well: the hint once, from the divergence, and the one for any exit
    gone = {2: "has exited: its script returned on node2, whose torchrun runs on"}
    lines = diagnose(probe(5, r0=left, r1=in_step), None, {0, 1, 2}, gone, 30).lines()
    assert sum(UNEVEN_HINT in line for line in lines) == 1 and lines[-1] == f"  {EXITED_HINT}", lines
    # ranks 0 and 1 both in a backward pass, of different models (a step one of them skipped), beside it
    other_model = coll(62, "gradients of DDP(Net), DDP(Head)", "entered", at="train.py:20")
    both = probe(5, r0=snap(0, history + (other_model,), stack(20)), r1=in_step)
    lines = diagnose(both, None, {0, 1, 2}, gone, 30).lines()
    assert sum(UNEVEN_HINT in line for line in lines) == 1 and lines[-1] == f"  {EXITED_HINT}", lines
    # records that keep no counts: the hint without them
    bare = probe(5, r0=snap(0, history + (barrier,), stack(40)), r1=snap(1, history + (backward,), stack(20)))
    assert diagnose(bare, None, {0, 1}, {}, 30).lines()[-1] == f"  {UNEVEN_HINT}"
    # every rank in the same backward pass (a slow peer, a lost one): no such hint
    together = probe(5, r0=snap(0, history + (backward,), stack(20), lines=(("train.py:20", 31),)), r1=in_step)
    assert not any(UNEVEN_HINT in line for line in diagnose(together, None, {0, 1}, {}, 30).lines())
    # rank 0's script returned instead: this hint in place of the one for any rank that exits
    exited = {0: "has exited: its script returned on node0, whose torchrun runs on"}
    alone = diagnose(probe(5, r1=in_step), None, {0, 1}, exited, 30)
    assert alone.exited == (0,)
    assert alone.lines()[-1] == f"  rank 1 is in backward pass 31 at train.py:20: {UNEVEN_HINT}"
    uncounted = diagnose(probe(5, r1=snap(1, history + (backward,), stack(20))), None, {0, 1}, exited, 30)
    assert uncounted.lines()[-1] == f"  {UNEVEN_HINT}"
    elsewhere = snap(1, history + (coll(62, "float32[4]", "entered", at="train.py:33"),), stack(33))
    assert diagnose(probe(5, r1=elsewhere), None, {0, 1}, exited, 30).lines()[-1] == f"  {EXITED_HINT}"
    # the record a rank writes as its collective fails says whether it was a step's backward pass
    for shapes, op, count, kind in (("gradients of DDP(Net)", "all_reduce", 31, "backward pass"),
                                    ("buffers of DDP(Net)", "broadcast", 31, ""),  # the others' lines unknown
                                    ("buffers of DDP(Net)", "broadcast", 1, ""), ("float32[4]", "all_reduce", 31, "")):
        (tmp_path / "rank1.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": 1, "time": 500.0, "stacks": [],
            "lines": {"train.py:20": count},
            "collectives": [{"seq": 62, "op": op, "group": "default", "shapes": shapes, "at": "train.py:20",
                             "state": "failed"}]}))
        assert failed_collective(tmp_path, 1) == (f"{op}({shapes})", kind)


def test_ranks_in_init_process_group_are_said_to_wait_for_a_rank_that_has_not_called_it():
    """One rank waits for a file before init_process_group (a lock, a download only it makes): the
    others wait in init_process_group for it. Said as such, with why, not as a store's address."""
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    connecting = (Frame("late.py", 9, "<module>"), Frame(f"{site}/distributed/distributed_c10d.py", 1762,
                                                         "init_process_group"))
    waiting = (Frame("late.py", 8, "<module>", "time.sleep(1)"),)
    stuck = {0: snap(0, frames=connecting), 2: snap(2, frames=connecting), 1: snap(1, frames=waiting)}
    found = diagnose(probe(5, **{f"r{r}": s for r, s in stuck.items()}),
                     probe(0, **{f"r{r}": s for r, s in stuck.items()}), {0, 1, 2}, {}, 30)
    assert found.hung and found.not_joined == (1,)
    assert found.headline == ("no progress for 30 s: rank 1: not in init_process_group yet (<module> at late.py:8);"
                              " ranks 0, 2: init_process_group at late.py:9 in <module>")
    assert found.lines()[-1] == ("  init_process_group returns on no rank before every rank has called it: a rank"
                                 " that waits for something else before it (a file, a lock, a download only some"
                                 " ranks make) leaves the others waiting there until its timeout, 30 minutes by"
                                 " default")
    assert not any("init_method" in line for line in found.lines())
    # past init_process_group (a collective made), a rank elsewhere is not one that has not called it
    joined = {**stuck, 1: snap(1, (coll(1),), frames=waiting)}
    found = diagnose(probe(5, **{f"r{r}": s for r, s in joined.items()}),
                     probe(0, **{f"r{r}": s for r, s in joined.items()}), {0, 1, 2}, {}, 30)
    assert found.not_joined == () and "not in init_process_group" not in found.headline
    # nor a rank that computes: the job is working
    busy = {**stuck, 1: snap(1, frames=waiting, cpu_s=4.0)}
    found = diagnose(probe(5, **{f"r{r}": s for r, s in busy.items()}),
                     probe(0, **{f"r{r}": s for r, s in stuck.items()}), {0, 1, 2}, {}, 30)
    assert not found.hung and found.not_joined == ()


def test_a_rank_that_exited_while_another_waits_for_it_is_named_in_the_headline_with_its_own_hint():
    """A rank whose script ended before init_process_group (an early return on one rank): the
    others wait for it until torch's timeout; it is not the store's address that is wrong."""
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    connecting = (Frame("early.py", 5, "<module>"), Frame(f"{site}/distributed/distributed_c10d.py", 1762,
                                                          "init_process_group"))
    exited = {1: "has exited: its script returned on node1, whose torchrun runs on"}
    found = diagnose(probe(5, r0=snap(0, frames=connecting)), probe(0, r0=snap(0, frames=connecting)), {0, 1},
                     exited, 30)
    assert found.hung and [(a.rank, a.state) for a in found.activities] == [(0, "idle"), (1, "exited")]
    assert found.exited == (1,)
    assert found.headline == "no progress for 30 s: rank 0: init_process_group at early.py:5 in <module>; rank 1: exited"
    lines = found.lines()
    assert "  rank 1: has exited: its script returned on node1, whose torchrun runs on" in lines
    assert lines[-1].startswith("  a rank that exits while the others wait for it, in a collective or in"
                                " init_process_group, leaves them waiting until the process group's timeout")
    assert not any("init_method" in line for line in lines)
    # rank 0 busy outside any collective (an upload, say): rank 1 is named, but nobody waits for it
    uploading = (Frame("early.py", 30, "<module>"), Frame("early.py", 12, "upload"))
    found = diagnose(probe(5, r0=snap(0, frames=uploading)), probe(0, r0=snap(0, frames=uploading)), {0, 1}, exited,
                     30)
    assert found.hung and found.exited == (1,) and not found.someone_waits
    assert not any(line.startswith("  a rank that exits") for line in found.lines())
    # a rank that did not answer for another reason is no exited rank
    stopped = diagnose(probe(5, r0=snap(0, frames=connecting)), probe(0, r0=snap(0, frames=connecting)), {0, 1},
                       {1: "is stopped: its process on node1 got SIGSTOP"}, 30)
    assert stopped.exited == () and "exited" not in stopped.headline
    assert not any(line.startswith("  a rank that exits") for line in stopped.lines())


SITE = "/opt/venv/lib/python3.11/site-packages"
LOADING = (Frame("train.py", 21, "<module>"), Frame(f"{SITE}/torch/utils/data/dataloader.py", 732, "__next__"),
           Frame(f"{SITE}/torch/utils/data/dataloader.py", 1482, "_next_data"),
           Frame(f"{SITE}/torch/utils/data/dataloader.py", 1444, "_get_data"),
           Frame(f"{SITE}/torch/utils/data/dataloader.py", 1275, "_try_get_data"),
           Frame("/usr/lib/python3.11/multiprocessing/queues.py", 113, "get"))
LOOP = Frame(f"{SITE}/torch/utils/data/_utils/worker.py", 315, "_worker_loop")
# A forked worker's stack starts with its rank's frames: the script's loop over the loader, the fork
FORKED = (Frame("train.py", 21, "<module>"), Frame(f"{SITE}/torch/utils/data/dataloader.py", 494, "__iter__"),
          Frame("/usr/lib/python3.11/multiprocessing/popen_fork.py", 71, "_launch"),
          Frame("/usr/lib/python3.11/multiprocessing/process.py", 314, "_bootstrap"),
          Frame("/usr/lib/python3.11/multiprocessing/process.py", 108, "run"), LOOP)
IDLE_WORKER = (*FORKED, Frame("/usr/lib/python3.11/multiprocessing/queues.py", 113, "get"),
               Frame("/usr/lib/python3.11/multiprocessing/connection.py", 257, "poll"))
READING_WORKER = (*FORKED, Frame(f"{SITE}/torch/utils/data/_utils/fetch.py", 52, "fetch"),
                  Frame("data.py", 40, "__getitem__", "time.sleep(100000)"))
# a library's dataset (torchvision's, say): no frame of the user's own in the worker's loop
LIBRARY_WORKER = (*FORKED, Frame(f"{SITE}/torch/utils/data/_utils/fetch.py", 52, "fetch"),
                  Frame(f"{SITE}/vision/folder.py", 245, "__getitem__"),
                  Frame("/usr/lib/python3.11/threading.py", 320, "wait"))


def loader(rank: int, worker: int, stack: tuple[Frame, ...], cpu_s: float = 0.5, of: int = 7,
           pid: Optional[int] = None) -> LoaderSnapshot:
    """A worker's answer as the launcher reads it (of: its loader's base seed)."""
    return LoaderSnapshot.from_json({
        "rank": rank, "pid": 200 + worker if pid is None else pid, "loader_worker": worker, "loader_workers": 2,
        "loader": of, "cpu_s": cpu_s, "stacks": [{"main": True, "frames": [[f.file, f.line, f.function, f.code]
                                                                          for f in stack]}]})


def test_a_rank_waiting_for_its_data_loader_is_shown_with_its_worker_processes():
    def loading_probe(at: float, worker_cpu_s: float) -> Probe:
        found = probe(at, r0=snap(0, frames=LOADING, cpu_s=1.0), r1=snap(1, (coll(5, state="entered"),), cpu_s=1.0))
        found.loaders = {0: [loader(0, 0, IDLE_WORKER), loader(0, 1, READING_WORKER, worker_cpu_s)]}
        return found

    found = diagnose(loading_probe(5, 0.5), loading_probe(0, 0.5), {0, 1}, {}, 20)
    assert found.hung
    assert found.headline == ("no progress for 20 s: rank 1 waits in all_reduce(float32[4]) #5 at desync.py:11;"
                              " rank 0 is at #0 (not in a collective: __next__ at train.py:21 in <module>, for its"
                              " DataLoader's worker 1 (pid 201): __getitem__ at data.py:40)")
    lines = found.lines()
    start = lines.index("  rank 0 waits for its DataLoader's worker processes; DataLoader(timeout=S) makes that wait"
                        " fail after S s:")
    assert lines[start + 1:] == ["    worker 0 (pid 200): idle, waits for the indices of its next batch",
                                 "    worker 1 (pid 201): __getitem__ at data.py:40",
                                 "        torch/utils/data/_utils/worker.py:315 in _worker_loop",
                                 "        torch/utils/data/_utils/fetch.py:52 in fetch",
                                 "        data.py:40 in __getitem__: time.sleep(100000)"]
    assert found.to_json()["loaders"]["0"][1]["pid"] == 201
    # a worker computing its batch is progress: the rank is loading data, not hung
    working = diagnose(loading_probe(5, 3.0), loading_probe(0, 0.5), {0, 1}, {}, 20)
    assert not working.hung
    assert working.activities[0].state == "busy"
    assert working.headline == "no output for 20 s, but the job is working: rank 0 loading data"
    assert working.activities[0].detail == ("loading data: its DataLoader's worker 1 (pid 201) computes (50% of a"
                                            " core) at __getitem__ at data.py:40")
    assert "  rank 0 is loading data: its DataLoader's worker 1 (pid 201) computes" in "\n".join(working.lines())
    shown = working.lines()  # where its workers are, without the hint on ending the wait
    assert "  rank 0 waits for its DataLoader's worker processes:" in shown
    assert "    worker 1 (pid 201): __getitem__ at data.py:40" in shown
    # another worker process (a new epoch's) is no CPU of the one before
    renewed = loading_probe(5, 3.0)
    renewed.loaders[0][1] = LoaderSnapshot(0, 301, 1, 2, 3.0, READING_WORKER)
    assert diagnose(renewed, loading_probe(0, 0.5), {0, 1}, {}, 20).hung
    # workers that did not answer (spawned, or holding the GIL): said so, with what can be done
    silent = diagnose(probe(5, r0=snap(0, frames=LOADING), r1=snap(1, (coll(5, state="entered"),))),
                      probe(0, r0=snap(0, frames=LOADING), r1=snap(1, (coll(5, state="entered"),))), {0, 1}, {}, 20)
    assert silent.lines()[-1] == ("  rank 0 waits for its DataLoader's worker processes (num_workers > 0), which did"
                                  " not answer (started by spawn or forkserver, holding the GIL, or started after the"
                                  " request): one is stuck in the dataset (a lock, a read that never returns) or slow;"
                                  " DataLoader(timeout=S) makes that wait fail after S s")
    site = f"{SITE}/torch/utils/data/dataloader.py"
    # no worker processes (num_workers=0): the dataset's own frame shows, and no hint
    single = (Frame("train.py", 21, "<module>"), Frame(site, 732, "__next__"), Frame(site, 786, "_next_data"),
              Frame("/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", 52, "fetch"),
              Frame("data.py", 40, "__getitem__"), Frame("/usr/lib/python3.11/threading.py", 320, "wait"))
    waiting = probe(5, r0=snap(0, frames=single), r1=snap(1, (coll(5, state="entered"),)))
    lines = diagnose(waiting, probe(0, r0=snap(0, frames=single), r1=snap(1, (coll(5, state="entered"),))), {0, 1},
                     {}, 20).lines()
    assert not any("DataLoader" in line for line in lines), lines
    fine = probe(5, r0=snap(0), r1=snap(1))
    assert not any("DataLoader" in line for line in diagnose(fine, probe(0, r0=snap(0), r1=snap(1)), {0, 1}, {},
                                                             20).lines())
    # workers of a rank that does not wait for them, or that did not answer itself, are not its wait
    fine.loaders = {0: [loader(0, 1, READING_WORKER)], 2: [loader(2, 1, READING_WORKER)]}
    assert diagnose(fine, probe(0, r0=snap(0), r1=snap(1)), {0, 1}, {}, 20).loaders == {}
    # a rank whose workers are all idle waits for none of them: its place is its own
    idle = probe(5, r0=snap(0, frames=LOADING), r1=snap(1, (coll(5, state="entered"),)))
    idle.loaders = {0: [loader(0, 0, IDLE_WORKER), loader(0, 1, IDLE_WORKER)]}
    assert diagnose(idle, probe(0, r0=snap(0, frames=LOADING), r1=snap(1, (coll(5, state="entered"),))), {0, 1}, {},
                    20).headline.endswith("rank 0 is at #0 (not in a collective: __next__ at train.py:21 in <module>)")


def test_a_diagnosis_keeps_each_ranks_last_eight_collectives_for_the_report():
    history = tuple(coll(seq) for seq in range(1, 11))
    found = diagnose(probe(5, r1=snap(1, history[:3]), r0=snap(0, history)), None, {0, 1}, {}, 20)
    assert {rank: [c["seq"] for c in entries] for rank, entries in found.collectives.items()} == {
        0: list(range(3, 11)), 1: [1, 2, 3]}


def test_the_first_divergence_is_the_same_collective_called_with_other_shapes():
    history = tuple(coll(s) for s in range(1, 21))
    snapshots = {0: snap(0, history + (coll(21, "float32[1]", "entered", at="desync.py:14"),)),
                 1: snap(1, history + (coll(21, "float32[4]", "entered", at="desync.py:11"),))}
    found = first_divergence(snapshots)
    assert found is not None and found.kind == "mismatch" and found.seq == 21
    assert found.text == ("collective #21: rank 0 entered all_reduce(float32[1]) at desync.py:14; rank 1 entered"
                          " all_reduce(float32[4]) at desync.py:11")


def test_a_mismatch_is_found_past_the_groups_it_cannot_compare_by_op_as_by_shape_and_names_four_ranks():
    # channels sort first: one whose receiver took from any rank, and that any-rank channel of one rank
    zero = snap(0, (coll(1, op="send", group="p2p 0->1"), coll(1, group="ranks 0,1", state="entered")))
    one = snap(1, (coll(1, op="recv", group="p2p any->1"), coll(1, op="recv", group="p2p 0->1"),
                   coll(1, op="all_gather", group="ranks 0,1", state="entered")))
    found = first_divergence({0: zero, 1: one})
    assert found is not None and found.text == (
        "collective #1 (group ranks 0,1): rank 0 entered all_reduce(float32[4]) at desync.py:11; rank 1 entered"
        " all_gather(float32[4]) at desync.py:11")
    # the ranks that made one call at one place together (session 114: each was said one by one)
    many = {rank: snap(rank, (coll(1, "float32[4]" if rank == 0 else "float32[1]", "entered"),)) for rank in range(6)}
    assert first_divergence(many).text == ("collective #1: rank 0 entered all_reduce(float32[4]) at desync.py:11;"
                                           " ranks 1-5 entered all_reduce(float32[1]) at desync.py:11")
    # four calls at most, the ranks of the others named
    apart = {rank: snap(rank, (coll(1, f"float32[{rank + 1}]", "entered"),)) for rank in range(6)}
    assert first_divergence(apart).text.endswith("; rank 3 entered all_reduce(float32[4]) at desync.py:11; ranks 4, 5"
                                                 " made other calls there")


def test_of_two_groups_whose_calls_part_the_one_that_parts_first_is_named():
    sub = "ranks 0,1"  # sorts after "default": the groups are not named in the order they are looked at
    before = tuple(coll(s) for s in range(1, 5)) + (coll(1, group=sub),)
    snapshots = {0: snap(0, before + (coll(2, "float32[1]", group=sub, at="desync.py:30"),
                                      coll(5, "float32[1]", "entered", at="desync.py:40"))),
                 1: snap(1, before + (coll(2, group=sub, at="desync.py:31"),
                                      coll(5, state="entered", at="desync.py:41")))}
    found = first_divergence(snapshots)
    assert found is not None and (found.seq, found.group) == (2, sub)
    assert found.text == ("collective #2 (group ranks 0,1), where the ranks' calls first differ (every rank went on"
                          " past it): rank 0 called all_reduce(float32[1]) at desync.py:30; rank 1 called"
                          " all_reduce(float32[4]) at desync.py:31")
    # at one number in both: the group looked at first
    tied = {0: snap(0, (coll(1, "float32[1]"), coll(1, "float32[1]", group=sub))),
            1: snap(1, (coll(1), coll(1, group=sub)))}
    assert first_divergence(tied).group == "default"


def test_a_different_op_at_one_sequence_number_diverges_too():
    snapshots = {0: snap(0, (coll(1), coll(2, op="barrier", shapes="", state="entered"))),
                 1: snap(1, (coll(1), coll(2, state="entered")))}
    found = first_divergence(snapshots)
    assert found is not None and "rank 0 entered barrier()" in found.text and "rank 1 entered all_reduce" in found.text


def test_when_the_ranks_agree_the_ones_that_never_arrived_are_named():
    arrived = tuple(coll(s) for s in range(1, 57)) + (coll(57, state="entered", at="train.py:9"),)
    snapshots = {r: snap(r, arrived) for r in (0, 2, 3)}
    found = first_divergence(snapshots, {0, 1, 2, 3}, {1: "is stopped: its process on node1 got SIGSTOP"})
    assert found is not None and found.kind == "missing"
    assert found.text == ("ranks 0, 2, 3 wait in all_reduce(float32[4]) #57 at train.py:9; rank 1 is stopped: its"
                          " process on node1 got SIGSTOP")
    passed = {**snapshots, 1: snap(1, arrived[:56] + (coll(57, state="issued"),))}  # its part sent (async)
    found = first_divergence(passed, {0, 1, 2, 3})
    assert found is None  # rank 1 is not behind: it did its part of #57
    loading = (Frame("train.py", 40, "<module>"), Frame("train.py", 12, "load_batch"))
    behind = {**snapshots, 1: snap(1, arrived[:56], frames=loading)}
    found = first_divergence(behind, {0, 1, 2, 3})
    assert found is not None and found.text.endswith("rank 1 is at #56 (not in a collective: load_batch at train.py:12)")
    without_a_stack = {**snapshots, 1: snap(1, arrived[:56], frames=())}
    found = first_divergence(without_a_stack, {0, 1, 2, 3})
    assert found is not None and found.text.endswith("rank 1 is at #56 (not in a collective)")


def test_ranks_waiting_in_different_process_groups_have_diverged():
    snapshots = {0: snap(0, (coll(5, group="ranks 0,1", state="entered"),)),
                 1: snap(1, (coll(3, op="barrier", shapes="", state="entered"),))}
    found = first_divergence(snapshots)
    assert found is not None and found.kind == "groups"
    # by their lowest rank, not by the groups' names ("default" sorts first)
    assert found.text == ("the ranks wait in different process groups: rank 0 waits in all_reduce(float32[4]) #5 of"
                          " group ranks 0,1 at desync.py:11; rank 1 waits in barrier() #3 of group default at"
                          " desync.py:11")
    snapshots[2] = snap(2, (coll(5, group="ranks 0,1", state="entered"),))
    assert first_divergence(snapshots).text.startswith("the ranks wait in different process groups: ranks 0, 2 wait in"
                                                       " all_reduce(float32[4]) #5 of group ranks 0,1 at desync.py:11;")


def test_a_rank_behind_in_another_group_does_not_hide_two_that_made_one_call_differently():
    """Pairs (0,1) and (2,3) reduce in their own groups, then all four over the world; rank 1 skips
    its pair's reduce and reduces over the world, while ranks 2, 3 go on to a barrier. Rank 0 waits
    for rank 1 in the pair's reduce, so it never made the world's call #6; ranks 1-3 made #6
    differently: that is the divergence, not "ranks 1-3 wait in all_reduce #6"."""
    done = tuple(coll(s) for s in range(1, 6))
    snapshots = {0: snap(0, done + (coll(4, group="ranks 0,1", state="entered", at="sub.py:16"),)),
                 1: snap(1, done + (coll(6, state="entered", at="sub.py:14"),)),
                 2: snap(2, done + (coll(6, op="barrier", shapes="", state="entered", at="sub.py:17"),)),
                 3: snap(3, done + (coll(6, op="barrier", shapes="", state="entered", at="sub.py:17"),))}
    found = first_divergence(snapshots, {0, 1, 2, 3})
    assert found is not None and found.kind == "mismatch"
    assert found.text == ("collective #6: rank 1 entered all_reduce(float32[4]) at sub.py:14; ranks 2, 3 entered"
                          " barrier() at sub.py:17")
    alike = {**snapshots, 1: snap(1, done + (coll(6, op="barrier", shapes="", state="entered", at="sub.py:17"),))}
    assert first_divergence(alike, {0, 1, 2, 3}).text.startswith(  # #6 made alike: rank 0 waits elsewhere
        "the ranks wait in different process groups: rank 0 waits in all_reduce(float32[4]) #4 of group ranks 0,1")
    # a record keeps its last entries: an old call that differs by design (an uneven all_to_all's
    # shapes) and that only the longer records still hold is not compared
    uneven = {r: coll(5, shapes=f"float32[{37 + r},8]", op="all_to_all_single") for r in (0, 1, 2)}
    records = {r: tuple(coll(s) for s in range(1, 5)) + (uneven[r],) + tuple(coll(s) for s in range(6, 41))
               for r in (0, 1)}
    trimmed = {0: snap(0, records[0] + (coll(41, state="entered"),)), 1: snap(1, records[1] + (coll(41, state="entered"),)),
               2: snap(2, tuple(coll(s) for s in range(10, 40)) + (coll(40, state="entered"),))}
    found = first_divergence(trimmed, {0, 1, 2})
    assert found.kind == "missing" and found.text.startswith("ranks 0, 1 wait in all_reduce(float32[4]) #41")


def sends(group: str, count: int, op: str = "send", last: str = "done", shapes: str = "float32[8]",
          at: str = "pipe.py:10") -> tuple[Collective, ...]:
    return tuple(coll(n, shapes, last if n == count else "done", op=op, group=group, at=at) for n in range(1, count + 1))


SAVING = (Frame("pipe.py", 30, "<module>"), Frame("pipe.py", 5, "save"))  # a rank outside any collective


def test_a_send_its_peer_never_receives_is_named_with_where_the_peer_is_instead():
    sender = snap(0, sends("p2p 0->1", 5, last="entered"))
    receiver = snap(1, sends("p2p 0->1", 4, op="recv", at="pipe.py:13") + (coll(1, "float32[8]", "entered",
                                                                                 at="pipe.py:14"),))
    found = first_divergence({0: sender, 1: receiver}, {0, 1})
    assert found is not None and (found.kind, found.seq, found.group) == ("p2p", 5, "p2p 0->1")
    assert found.text == ("rank 0 waits in send(float32[8]) #5 to rank 1 at pipe.py:10; rank 1 received 4 and waits"
                          " in all_reduce(float32[8]) #1 at pipe.py:14")
    lines = diagnose(probe(5, r0=sender, r1=receiver), probe(0, r0=sender, r1=receiver), {0, 1}, {}, 20).lines()
    assert not any("--debug-collectives" in line for line in lines)  # torch's check compares no sends
    # the other way round: a receive its peer never sends, the peer in no collective at all
    waiting = snap(1, sends("p2p 0->1", 3, op="recv", last="entered", at="pipe.py:13"))
    elsewhere = snap(0, sends("p2p 0->1", 2), frames=SAVING)
    found = first_divergence({0: elsewhere, 1: waiting}, {0, 1})
    assert found is not None and found.text == ("rank 1 waits in recv(float32[8]) #3 from rank 0 at pipe.py:13; rank 0"
                                                " sent 2 and is not in a collective: save at pipe.py:5")
    found = first_divergence({1: waiting}, {0, 1}, {0: "is stopped: its node is paused"})
    assert found is not None and found.text.endswith("from rank 0 at pipe.py:13; rank 0 is stopped: its node is paused")
    # a peer that is in it too is not the divergence
    assert first_divergence({0: snap(0, sends("p2p 0->1", 3, last="entered")),
                             1: snap(1, sends("p2p 0->1", 3, op="recv", last="entered"))}, {0, 1}) is None
    # but the rank that waits for both in a collective names them
    three = {0: snap(0, (coll(1),) + sends("p2p 0->1", 3, last="entered")),
             1: snap(1, (coll(1),) + sends("p2p 0->1", 3, op="recv", last="entered", at="pipe.py:13")),
             2: snap(2, (coll(1), coll(2, state="entered", at="pipe.py:20")))}
    found = first_divergence(three, {0, 1, 2})
    assert found is not None and found.text == (
        "rank 2 waits in all_reduce(float32[4]) #2 at pipe.py:20; rank 0 is at #1 (in send(float32[8]) #3 of group"
        " p2p 0->1); rank 1 is at #1 (in recv(float32[8]) #3 of group p2p 0->1)")


def test_a_send_whose_peer_receives_from_a_third_rank_is_said_to_name_the_wrong_rank():
    """Rank 0 sends to rank 2, whose dist.recv names src=1 (a typo for 0); rank 1 (and rank 3) wait
    in the barrier after it. The chain was named; now also that one of the two names the wrong rank, or
    (a review, session 113) that they are in the wrong order: the same records come of rank 2 receiving
    from rank 1 first where rank 1 sends only after the barrier."""
    sending = snap(0, sends("p2p 0->2", 1, last="entered", at="wrong.py:12"))
    receiving = snap(2, sends("p2p 1->2", 1, op="recv", last="entered", at="wrong.py:14"))
    barrier = lambda rank: snap(rank, (coll(1, "", "entered", op="barrier", at="wrong.py:15"),), stack(15, call="barrier"))
    ranks = {0: sending, 1: barrier(1), 2: receiving, 3: barrier(3)}
    found = first_divergence(ranks, {0, 1, 2, 3})
    assert found is not None and found.kind == "p2p"
    assert found.text.startswith("rank 0 waits in send(float32[8]) #1 to rank 2 at wrong.py:12; rank 2 waits in"
                                 " recv(float32[8]) #1 from rank 1 at wrong.py:14"), found.text
    said = ("rank 0 sends to rank 2 (send(float32[8]) at wrong.py:12), and rank 2 waits to receive from rank 1 instead"
            " (recv(float32[8]) at wrong.py:14): one of the two names the wrong rank, or they are in the wrong order"
            " (rank 2 receives from rank 1 before rank 0, and rank 1 sends later: make them in the order the peers do,"
            " or start them with dist.isend and dist.irecv and wait on both); a send's dst and a recv's src"
            " are global ranks, and a send is received only by a recv from its own rank (src=None receives from any)")
    assert found.hint == said
    lines = diagnose(probe(5, **{f"r{r}": s for r, s in ranks.items()}), None, {0, 1, 2, 3}, {}, 20).lines()
    assert f"  {said}" in lines, lines
    # the other way: rank 2 receives from rank 0, which sends to rank 3 instead
    to_three = snap(0, sends("p2p 0->3", 1, last="entered", at="wrong.py:12"))
    from_zero = snap(2, sends("p2p 0->2", 1, op="recv", last="entered", at="wrong.py:14"))
    found = first_divergence({0: to_three, 1: barrier(1), 2: from_zero, 3: barrier(3)}, {0, 1, 2, 3})
    assert found is not None and found.hint == (
        "rank 2 receives from rank 0 (recv(float32[8]) at wrong.py:14), and rank 0 waits to send to rank 3 instead"
        " (send(float32[8]) at wrong.py:12): one of the two names the wrong rank, or they are in the wrong order"
        " (rank 0 sends to rank 3 before rank 2, and rank 3 receives later: make them in the order the peers do, or"
        " start them with dist.isend and dist.irecv and wait on both); a send's dst and a recv's src are"
        " global ranks, and a send is received only by a recv from its own rank (src=None receives from any)"), found.hint
    # a peer that waits in a transfer with the rank itself, or in a collective: no such hint
    peer_in_barrier = {0: sending, 1: barrier(1), 2: barrier(2)}
    found = first_divergence(peer_in_barrier, {0, 1, 2})
    assert found is not None and found.hint == ""


def test_sends_and_receives_match_per_direction_and_their_tensors_must_agree():
    # an exchange: both send first, then receive (isend/irecv): no divergence for the order
    zero = snap(0, (coll(1, op="isend", group="p2p 0->1", state="issued"), coll(1, op="irecv", group="p2p 1->0",
                                                                                state="issued"),
                    coll(1, state="entered")))
    one = snap(1, (coll(1, op="isend", group="p2p 1->0", state="issued"), coll(1, op="irecv", group="p2p 0->1",
                                                                               state="issued"),
                   coll(1, state="entered")))
    assert first_divergence({0: zero, 1: one}, {0, 1}) is None
    # a receive of another size than was sent
    sent = snap(0, sends("p2p 0->1", 2, last="entered"))
    received = snap(1, sends("p2p 0->1", 1, op="recv") + (coll(2, "float32[4]", "entered", op="recv",
                                                                group="p2p 0->1", at="pipe.py:13"),))
    found = first_divergence({0: sent, 1: received}, {0, 1})
    assert found is not None and found.kind == "mismatch"
    assert found.text == ("collective #2 (group p2p 0->1): rank 0 entered send(float32[8]) at pipe.py:10; rank 1"
                          " entered recv(float32[4]) at pipe.py:13")


def test_a_chain_of_transfers_is_followed_to_the_rank_that_holds_it_up():
    stopped = {2: "is stopped: its node is paused"}
    chain = {0: snap(0, sends("p2p 0->1", 4, last="entered")),
             1: snap(1, sends("p2p 0->1", 3, op="recv", at="pipe.py:9") + sends("p2p 1->2", 3, last="entered"))}
    found = first_divergence(chain, {0, 1, 2}, stopped)
    assert found is not None and found.text == (
        "rank 0 waits in send(float32[8]) #4 to rank 1 at pipe.py:10; rank 1 received 3 and waits in send(float32[8])"
        " #3 to rank 2 at pipe.py:10; rank 2 is stopped: its node is paused")
    # the peer waits in a collective of a group whose other member is stopped
    grouped = {0: snap(0, sends("p2p 0->1", 1, last="entered")),
               1: snap(1, (coll(1, group="ranks 1,2", state="entered", at="pipe.py:20"),))}
    found = first_divergence(grouped, {0, 1, 2}, stopped)
    assert found is not None and found.text == (
        "rank 0 waits in send(float32[8]) #1 to rank 1 at pipe.py:10; rank 1 waits in all_reduce(float32[4]) #1 of"
        " group ranks 1,2 at pipe.py:20; rank 2 is stopped: its node is paused")
    # two ranks that both send first, each waiting for the other: a cycle
    cycle = {0: snap(0, sends("p2p 0->1", 1, last="entered")), 1: snap(1, sends("p2p 1->0", 1, last="entered"))}
    found = first_divergence(cycle, {0, 1})
    assert found is not None and found.text == (
        "rank 0 waits in send(float32[8]) #1 to rank 1 at pipe.py:10; rank 1 waits in send(float32[8]) #1 to rank 0"
        " at pipe.py:10: a cycle, each waits for the next")
    assert found.hint.startswith("dist.send returns only once its peer has received") and "batch_isend_irecv" in found.hint
    # a chain that ends at a stopped rank is no cycle: no hint about the order of sends
    assert not first_divergence(chain, {0, 1, 2}, stopped).hint


def test_a_transfers_peer_is_placed_on_its_gpu_past_its_stack_or_by_nothing_it_showed():
    waiting = snap(1, sends("p2p 0->1", 3, op="recv", last="entered", at="pipe.py:13"))
    on_gpu = snap(0, sends("p2p 0->1", 2) + (coll(1, state="running", at="pipe.py:20"),))
    found = first_divergence({0: on_gpu, 1: waiting}, {0, 1})
    assert found is not None and found.text.endswith("; rank 0 sent 2 and waits in all_reduce(float32[4]) #1 at"
                                                     " pipe.py:20, on the GPU")
    # what it waits for past its own stack (its DataLoader's worker), or a rank that showed no stack
    saving = snap(0, sends("p2p 0->1", 2), frames=SAVING)
    found = first_divergence({0: saving, 1: waiting}, {0, 1}, {}, {0: ", for its DataLoader's worker 1 (pid 201)"})
    assert found is not None and found.text.endswith("; rank 0 sent 2 and is not in a collective: save at pipe.py:5,"
                                                     " for its DataLoader's worker 1 (pid 201)")
    found = first_divergence({0: snap(0, sends("p2p 0->1", 2), frames=()), 1: waiting}, {0, 1})
    assert found is not None and found.text.endswith("; rank 0 sent 2 and is not in a collective")
    # a peer that did not answer, with no reason known; one not expected at all is not named
    found = first_divergence({1: waiting}, {0, 1})
    assert found is not None and found.text.endswith("from rank 0 at pipe.py:13; rank 0 did not answer")
    assert first_divergence({1: waiting}) is None
    # down a chain of transfers, the last rank's place past its stack
    chain = {0: snap(0, sends("p2p 0->2", 4, last="entered")), 1: saving,
             2: snap(2, sends("p2p 0->2", 3, op="recv") + sends("p2p 2->1", 3, last="entered"))}
    found = first_divergence(chain, {0, 1, 2}, {}, {1: ", for its DataLoader's worker 1 (pid 201)"})
    assert found is not None and found.text == (
        "rank 0 waits in send(float32[8]) #4 to rank 2 at pipe.py:10; rank 2 received 3 and waits in send(float32[8])"
        " #3 to rank 1 at pipe.py:10; rank 1 is not in a collective: save at pipe.py:5, for its DataLoader's worker 1"
        " (pid 201)")
    # the peer waits in a group's collective: each member not there, one past its stack too
    grouped = {0: snap(0, sends("p2p 0->1", 1, last="entered")),
               1: snap(1, (coll(1, group="ranks 1,2,3", state="entered", at="pipe.py:20"),)),
               2: snap(2, frames=SAVING)}
    found = first_divergence(grouped, {0, 1, 2, 3}, {3: "is stopped: its node is paused"},
                             {2: ", for its DataLoader's worker 1 (pid 201)"})
    assert found is not None and found.text == (
        "rank 0 waits in send(float32[8]) #1 to rank 1 at pipe.py:10; rank 1 waits in all_reduce(float32[4]) #1 of"
        " group ranks 1,2,3 at pipe.py:20; rank 2 is at #0 (not in a collective: save at pipe.py:5, for its"
        " DataLoader's worker 1 (pid 201)); rank 3 is stopped: its node is paused")


def test_a_channel_whose_receiver_took_from_any_rank_names_its_own_sender_alone_as_not_there():
    """Its receives are not matched with the sender's entry by entry (they may be out of step), but
    the sender that did not answer is still named, and no rank outside the channel."""
    receiver = snap(1, (coll(1, "float32[4]", op="recv", group="p2p any->1"),
                        coll(1, "float32[8]", "entered", op="recv", group="p2p 0->1", at="pipe.py:13")))
    found = first_divergence({1: receiver}, {0, 1, 2}, {0: "is stopped: its node is paused"})
    assert found is not None and found.text == ("rank 1 waits in recv(float32[8]) #1 of group p2p 0->1 at pipe.py:13;"
                                                " rank 0 is stopped: its node is paused")


def test_a_channel_is_read_from_its_group_name():
    assert channel_ends("p2p 0->1") == (0, 1)
    assert channel_ends("p2p 0->1 in pipeline stage") == (0, 1)  # a channel within a named process group
    assert channel_ends("p2p any->1") == (None, 1)
    assert channel_ends("p2p batch of rank 0") == (None, None)
    assert channel_ends("default") is None and channel_ends("ranks 0,1") is None


def test_a_tensors_dtype_and_element_count_are_what_a_send_and_its_receive_must_agree_on():
    assert elements("float32[2,4]") == ("float32", 8)
    assert elements("int64[3]") == ("int64", 3)
    assert elements("float32[]") == ("float32", 1)  # a scalar
    assert elements("gradients of DDP(Net)") == "gradients of DDP(Net)"  # not one tensor's: the text itself


def test_receives_from_any_rank_batches_and_reshaped_tensors_are_no_divergence():
    # a receive from any rank not yet returned: the receiver's channels are not compared, as the
    # receives after it may be out of step with the sender's sends
    sender = snap(0, sends("p2p 0->1", 1, shapes="float32[4]") + (coll(2, "float32[8]", "entered", op="send",
                                                                        group="p2p 0->1", at="pipe.py:10"),))
    receiver = snap(1, (coll(1, "float32[4]", "issued", op="irecv", group="p2p any->1"),
                        coll(1, "float32[8]", "entered", op="recv", group="p2p 0->1", at="pipe.py:13")))
    assert first_divergence({0: sender, 1: receiver}, {0, 1}) is None
    # only the receive from any rank waits: who did not answer is named, from every rank
    alone = {1: snap(1, (coll(1, "float32[8]", "entered", op="recv", group="p2p any->1", at="pipe.py:13"),)),
             0: snap(0, frames=(Frame("pipe.py", 30, "<module>"),))}
    found = first_divergence(alone, {0, 1, 2}, {2: "is stopped: its node is paused"})
    assert found is not None and found.text == ("rank 1 waits in recv(float32[8]) #1 of group p2p any->1 at pipe.py:13;"
                                                " rank 2 is stopped: its node is paused")
    # each rank's batches are its own: ranks that make different numbers of them do not diverge
    batches = {0: snap(0, (coll(1, "", op="batch_isend_irecv", group="p2p batch of rank 0"),
                           coll(2, "", op="batch_isend_irecv", group="p2p batch of rank 0"),
                           coll(1, "", "entered", op="barrier"))),
               1: snap(1, (coll(1, "", op="batch_isend_irecv", group="p2p batch of rank 1"),
                           coll(1, "", "entered", op="barrier")))}
    assert first_divergence(batches, {0, 1}) is None
    # a [2,4] tensor sent and received as an [8] one: gloo moves the bytes, no divergence
    sent = snap(0, sends("p2p 0->1", 1, shapes="float32[2,4]") + (coll(1, state="entered"),))
    received = snap(1, sends("p2p 0->1", 1, op="recv", shapes="float32[8]") + (coll(1, state="entered"),))
    assert first_divergence({0: sent, 1: received}, {0, 1}) is None
    wider = snap(1, sends("p2p 0->1", 1, op="recv", shapes="float64[8]") + (coll(1, state="entered"),))
    found = first_divergence({0: sent, 1: wider}, {0, 1})
    assert found is not None and found.kind == "mismatch"
    lines = diagnose(probe(5, r0=sent, r1=wider), probe(0, r0=sent, r1=wider), {0, 1}, {}, 20).lines()
    assert not any("--debug-collectives" in line for line in lines)


def test_only_a_groups_own_ranks_are_named_as_not_there():
    in_group = (coll(1, group="ranks 0,1"), coll(2, group="ranks 0,1", state="entered"))
    snapshots = {0: snap(0, in_group), 1: snap(1, in_group[:1]), 2: snap(2, (coll(1),))}
    found = first_divergence(snapshots, {0, 1, 2, 3}, {3: "did not answer"})
    assert found is not None and (found.kind, found.seq, found.group) == ("missing", 2, "ranks 0,1")
    # ranks 2 and 3 are not of the group: neither is behind in it, nor missing from it
    assert found.text == ("rank 0 waits in all_reduce(float32[4]) #2 of group ranks 0,1 at desync.py:11; rank 1 is at"
                          " #1 (not in a collective: all_reduce at desync.py:11 in <module>)")


def test_ranks_that_agree_and_are_all_there_do_not_diverge():
    same = (coll(1), coll(2, state="entered"))
    assert first_divergence({0: snap(0, same), 1: snap(1, same)}, {0, 1}) is None


def probe(at: float, **by_rank: RankSnapshot) -> Probe:
    return Probe(f"p{at}", at, {int(r[1:]): s for r, s in by_rank.items()})


def test_progress_between_two_probes_is_a_finished_collective_or_cpu_work():
    waiting = (coll(1), coll(2, state="entered"))
    still = diagnose(probe(5, r0=snap(0, waiting, cpu_s=1.0)), probe(0, r0=snap(0, waiting, cpu_s=1.0)), {0}, {}, 60)
    assert still.hung
    finished = diagnose(probe(5, r0=snap(0, waiting, completed=2)), probe(0, r0=snap(0, waiting)), {0}, {}, 60)
    assert not finished.hung
    restarted = diagnose(probe(5, r0=snap(0, waiting, pid=200)), probe(0, r0=snap(0, waiting)), {0}, {}, 60)
    assert not restarted.hung  # another process in its place, at the same count: a restart is progress
    computing = diagnose(probe(5, r0=snap(0, (coll(1),), cpu_s=5.0), r1=snap(1, waiting)),
                         probe(0, r0=snap(0, (coll(1),), cpu_s=1.0), r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert not computing.hung
    assert [a.state for a in computing.activities] == ["busy", "collective"]
    assert computing.headline == "no output for 60 s, but the job is working: rank 0 computing"


def test_a_share_of_a_core_is_cpu_time_over_the_time_between_probes_of_one_process():
    waiting = (coll(1), coll(2, state="entered"))

    def busy(cpu_before: float, cpu_now: float, at: float, pid_now: int = 100) -> tuple[bool, str]:
        found = diagnose(probe(at, r0=snap(0, (coll(1),), cpu_s=cpu_now, pid=pid_now), r1=snap(1, waiting)),
                         probe(0, r0=snap(0, (coll(1),), cpu_s=cpu_before), r1=snap(1, waiting)), {0, 1}, {}, 60)
        return not found.hung, found.activities[0].state

    assert busy(1.0, 1.25, 5) == (True, "busy")  # 5% of a core, the least that computes
    assert busy(1.0, 1.2, 5) == (False, "idle")
    assert busy(1.0, 1.03, 0.5) == (True, "busy")  # probes under a second apart: 6%
    # another process in its place: a restart (progress), its CPU time not compared with the last one's
    assert busy(1.0, 9.0, 5, pid_now=300) == (True, "idle")
    # its DataLoader's workers at 5% of a core compute its next batch
    loading = probe(5, r0=snap(0, frames=LOADING), r1=snap(1, waiting))
    loading.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=0.75)]}
    before = probe(0, r0=snap(0, frames=LOADING), r1=snap(1, waiting))
    before.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=0.5)]}
    found = diagnose(loading, before, {0, 1}, {}, 60)
    assert not found.hung and found.activities[0].state == "busy"
    # of two such workers, the one that computes the most is named
    loading.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=1.0), loader(0, 1, READING_WORKER, cpu_s=2.0)]}
    before.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=0.5), loader(0, 1, READING_WORKER, cpu_s=0.5)]}
    assert diagnose(loading, before, {0, 1}, {}, 60).activities[0].detail == (
        "loading data: its DataLoader's worker 1 (pid 201) computes (30% of a core) at __getitem__ at data.py:40")
    before.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=0.5)]}
    # in DDP's backward pass, 5% of a core computes the gradients it then all-reduces
    backward = (coll(1), coll(2, "gradients of DDP(Net)", "entered"))
    found = diagnose(probe(5, r0=snap(0, backward, cpu_s=1.25), r1=snap(1, waiting)),
                     probe(0, r0=snap(0, backward, cpu_s=1.0), r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert (found.activities[0].state, found.activities[0].detail) == ("busy", "computing (5% of a core)")
    # probes under a second apart: 0.03 s of a worker's CPU in 0.5 s is 6% of a core
    soon = probe(0.5, r0=snap(0, frames=LOADING), r1=snap(1, waiting))
    soon.loaders = {0: [loader(0, 0, READING_WORKER, cpu_s=0.53)]}
    found = diagnose(soon, before, {0, 1}, {}, 60)
    assert not found.hung and found.activities[0].detail == ("loading data: its DataLoader's worker 0 (pid 200)"
                                                             " computes (6% of a core) at __getitem__ at data.py:40")


def test_a_rank_that_did_not_answer_is_stopped_exited_or_absent_by_why_it_could_not():
    now, before = probe(5, r0=snap(0, (coll(1),))), probe(0, r0=snap(0, (coll(1),)))
    why = {1: "is stopped: its process on node1 got SIGSTOP", 2: "is on node2, whose container is paused",
           3: "has exited: its script returned on node3, which finished (exit code 0)"}
    found = diagnose(now, before, {0, 1, 2, 3, 4}, why, 60)
    assert [(a.rank, a.state, a.detail) for a in found.activities[1:]] == [
        (1, "stopped", why[1]), (2, "stopped", why[2]), (3, "exited", why[3]), (4, "absent", "did not answer")]


def test_a_working_jobs_ranks_whose_collectives_differ_in_shape_are_said_to_part_and_unheard_nodes_are_listed():
    """A job that works on (rank 0 computes inside its all-reduce) is looked at a moment apart: a
    divergence by ops or shapes is still worth saying, with its hint."""
    rank0, rank1 = coll(3, "float32[4]", "entered"), coll(3, "float32[1]", "entered")
    now = probe(5, r0=snap(0, (coll(1), coll(2), rank0), cpu_s=5.0), r1=snap(1, (coll(1), coll(2), rank1)))
    before = probe(0, r0=snap(0, (coll(1), coll(2), rank0), cpu_s=1.0), r1=snap(1, (coll(1), coll(2), rank1)))
    found = diagnose(now, before, {0, 1}, {}, 60)
    lines = found.lines()
    # (no collective completed: the progress said is rank 0's CPU, not "collectives completing")
    assert not found.hung and lines[0] == "no output for 60 s, but the job is working: rank 0 computing (80% of a core)"
    assert lines[-2:] == ["  first divergence: collective #3: rank 0 entered all_reduce(float32[4]) at desync.py:11;"
                          " rank 1 entered all_reduce(float32[1]) at desync.py:11", f"  {DEBUG_HINT}"]
    found.unheard_nodes = ["node1: 1 of its 2 ranks answered"]
    assert "  node1: 1 of its 2 ranks answered" in found.lines()


class Watched:
    """A HangWatch on a hand-moved clock, answering from a list of prepared probes."""

    def __init__(self, probes: list[Probe], diagnose_after_s: float = 60, end_after_s: Optional[float] = None,
                 absent: Optional[dict[int, str]] = None, collective_timeout_s: Optional[float] = None,
                 expected: frozenset[int] = frozenset({0, 1})) -> None:
        self.now = 0.0
        self.probes = probes
        self.said: list[str] = []
        self.asked = 0
        self.watch = HangWatch(diagnose_after_s, end_after_s, self.ask, self.answer, lambda: set(expected),
                               lambda ranks: {r: w for r, w in (absent or {}).items() if r in ranks},
                               self.said.append, lambda: self.now, recheck_s=5.0, answer_window_s=1.5,
                               collective_timeout_s=collective_timeout_s)

    def ask(self) -> str:
        self.asked += 1
        return f"request-{self.asked}"

    def answer(self, request: str, at: float) -> Probe:
        taken = self.probes.pop(0)
        taken.request, taken.at = request, at
        return taken

    def until(self, end: float):
        """Tick every half second up to ``end``; the first diagnosis that ends the run, if any."""
        while self.now < end:
            self.now += 0.5
            found = self.watch.poll(self.now)
            if found is not None:
                return found
        return None


def test_the_watchdog_looks_twice_says_a_hang_once_and_ends_it_only_when_asked():
    waiting = (coll(1), coll(2, state="entered"))
    hung = [probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(4)]
    watched = Watched(hung)
    watched.watch.progress(0.0)
    assert watched.until(53) is None and watched.asked == 0  # before the first look
    assert watched.until(59) is None and watched.asked == 2 and not watched.said  # two looks, not judged yet
    assert watched.until(61) is None  # judged at 60 s of quiet: hung, said, the run goes on
    assert watched.said[0].startswith("the job looks hung: no progress for 6")
    assert any("--hang-timeout S ends a run" in line for line in watched.said)
    said = len(watched.said)
    assert watched.until(500) is None and watched.asked == 2 and len(watched.said) == said  # said once
    assert watched.watch.diagnosis is not None and watched.watch.diagnosis.hung
    watched.watch.progress(501)  # a worker line: the quiet time starts again, the diagnosis is gone
    assert watched.watch.diagnosis is None
    assert watched.said[said:] == ["the job moved again after 501 s without progress: what looked hung was a long"
                                   " wait (a rank that waits on the network or a disk uses no CPU, so no look can"
                                   " tell it from a hang)"]
    watched.watch.progress(502)  # taken back once
    assert len(watched.said) == said + 1

    held = Watched([probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(4)])
    held.watch.progress(0.0)
    assert held.until(61) is None and held.said[0].startswith("the job looks hung")
    held.watch.progress(70, moved=False)  # held as asked (a fault with an end, a debugger), or its end's lines
    assert not any(line.startswith("the job moved again") for line in held.said)
    held.now, before = 70.0, len(held.said)
    assert held.until(125) is None and len(held.said) == before  # quiet since the hold, not since 0 s
    assert held.until(131) is None and held.said[before].startswith("the job looks hung: no progress for 6")
    held.watch.progress(150)
    assert held.said[-1].startswith("the job moved again after 80 s without progress")  # the quiet since the hold

    ending = Watched([probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(2)], end_after_s=20)
    ending.watch.progress(0.0)
    found = ending.until(30)
    assert found is not None and ending.asked == 2 and 20 <= ending.now <= 22
    assert found.cause.startswith("no progress for 2") and found.cause.endswith("s (--hang-timeout 20)")
    assert "ranks 0, 1: all_reduce at desync.py:11 in <module>" in found.headline


def test_a_hang_is_said_after_diagnose_after_and_ended_only_after_the_hang_timeout():
    waiting = (coll(1), coll(2, state="entered"))
    watched = Watched([probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(4)], diagnose_after_s=10,
                      end_after_s=30)
    watched.watch.progress(0.0)
    assert watched.until(25) is None
    assert watched.said and watched.said[0].startswith("the job looks hung: no progress for 1")
    assert not any("--hang-timeout S ends" in line for line in watched.said)  # it will: no advice
    found = watched.until(40)
    assert found is not None and 30 <= watched.now <= 32


def test_a_rank_busy_in_a_long_step_is_not_called_hung():
    waiting = (coll(1), coll(2, state="entered"))
    evaluating = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), evaluating, cpu_s=10.0 + 5 * i), r1=snap(1, waiting))
              for i in range(8)]
    watched = Watched(probes, diagnose_after_s=20, end_after_s=20)
    watched.watch.progress(0.0)
    assert watched.until(80) is None
    assert watched.asked >= 6  # it kept looking, and found rank 0 at work every time
    assert watched.said[0] == "no output for 20 s, but the job is working: rank 0 computing"
    assert "  rank 0 is computing (100% of a core)" in watched.said
    assert not any("hung" in line for line in watched.said)


@pytest.mark.parametrize("end_after_s", [None, 60.0])
def test_a_hang_timeout_that_passes_while_a_rank_computes_is_said_once_with_what_bounds_the_others_wait(end_after_s):
    """Rank 0 loops (``while True``) while rank 1 waits in its all-reduce: --hang-timeout never ends
    it (a computing rank makes progress), and, once its time has passed, that is said, with the
    option that bounds rank 1's wait; again after the job moved and went quiet again."""
    waiting = (coll(1), coll(2, state="entered"))
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i), r1=snap(1, waiting)) for i in range(200)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=end_after_s)
    watched.watch.progress(0.0)
    assert watched.until(50) is None and watched.said[0].startswith("no output for 1")
    assert not any("--hang-timeout" in line for line in watched.said)  # its time has not passed
    assert watched.until(300) is None
    notes = [line for line in watched.said if "--hang-timeout" in line]
    if end_after_s is None:
        assert notes == []
        return
    assert notes == ["--hang-timeout 60 has not ended the run: a rank that computes makes progress, and no look"
                     " tells a long step from an endless loop; --collective-timeout S ends a wait in a collective"
                     " after S seconds, saying where every rank was"]
    watched.watch.progress(300.0)
    assert watched.until(600) is None
    assert len([line for line in watched.said if "--hang-timeout" in line]) == 2


def test_a_hang_timeout_passed_where_the_run_has_a_collective_timeout_names_that_one_not_the_option():
    """The user set both: the note says what already bounds the waiting ranks, not to set it."""
    waiting = (coll(1), coll(2, state="entered"))
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i), r1=snap(1, waiting)) for i in range(80)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=60, collective_timeout_s=900)
    watched.watch.progress(0.0)
    assert watched.until(150) is None
    notes = [line for line in watched.said if "--hang-timeout" in line]
    assert notes == ["--hang-timeout 60 has not ended the run: a rank that computes makes progress, and no look"
                     " tells a long step from an endless loop; this run's --collective-timeout 900 ends the waits"
                     " in a collective (where the script gives its process groups no timeout of its own)"]


def test_a_hang_timeout_passed_while_every_rank_moves_its_collectives_data_says_so():
    """Every rank moves a 40 MB all_reduce over a slow link: the note names that, not a long step."""
    from dataclasses import replace

    waiting = (coll(1), coll(2, state="entered"))
    probes = [probe(0, r0=replace(snap(0, waiting), socket_bytes=2_000_000 * 5 * i),
                    r1=replace(snap(1, waiting), socket_bytes=2_000_000 * 5 * i)) for i in range(40)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=60)
    watched.watch.progress(0.0)
    assert watched.until(150) is None
    assert watched.said[0] == "no output for 10 s, but the job is working: ranks 0, 1 moving data"
    notes = [line for line in watched.said if "--hang-timeout" in line]
    assert notes == ["--hang-timeout 60 has not ended the run: a rank whose collective moves data makes progress"]


def test_a_hang_timeout_passed_while_one_rank_computes_and_another_moves_data_names_both():
    """Rank 0 computes while rank 1 moves a large collective's data (it waits for rank 0's part
    in a later one, say): the note says both make progress, not that every busy rank computes."""
    from dataclasses import replace

    waiting = (coll(1), coll(2, state="entered"))
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i),
                    r1=replace(snap(1, waiting), socket_bytes=2_000_000 * 5 * i)) for i in range(40)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=60)
    watched.watch.progress(0.0)
    assert watched.until(150) is None
    assert watched.said[0] == "no output for 10 s, but the job is working: rank 0 computing, rank 1 moving data"
    notes = [line for line in watched.said if "--hang-timeout" in line]
    assert notes == ["--hang-timeout 60 has not ended the run: a rank that computes makes progress, and so does one"
                     " whose collective moves data; no look tells a long step from an endless loop"]


def test_a_hang_timeout_passed_while_collectives_complete_with_no_rank_busy_says_they_complete():
    """Between each two looks both ranks completed a collective, and neither used CPU nor moved
    32 KiB/s: the note says the collectives completing are the progress, not a computing rank."""
    def completed(count: int) -> tuple[Collective, ...]:
        return tuple(coll(seq) for seq in range(1, count + 1))

    probes = [probe(0, r0=snap(0, completed(i + 1)), r1=snap(1, completed(i + 1))) for i in range(40)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=60)
    watched.watch.progress(0.0)
    assert watched.until(150) is None
    assert watched.said[0] == "no output for 10 s, but the job is working: collectives completing"
    notes = [line for line in watched.said if "--hang-timeout" in line]
    assert notes == ["--hang-timeout 60 has not ended the run: collectives that complete are progress"]


def test_a_hang_timeout_passed_while_every_rank_computes_names_no_collective_timeout():
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i),
                    r1=snap(1, (coll(1),), looping, cpu_s=10.0 + 5 * i)) for i in range(40)]
    watched = Watched(probes, diagnose_after_s=20, end_after_s=20)
    watched.watch.progress(0.0)
    assert watched.until(100) is None
    notes = [line for line in watched.said if "--hang-timeout" in line]
    assert len(notes) == 1 and notes[0].endswith("no look tells a long step from an endless loop")


def test_a_look_at_an_interrupt_that_gives_no_verdict_says_why():
    from orchestrate.hangs.watchdog import AT_THE_INTERRUPT

    waiting = (coll(1), coll(2, state="entered"))
    watched = Watched([probe(0, r0=snap(0, waiting)) for _ in range(2)])  # rank 1 does not answer
    watched.watch.progress(0.0)
    watched.now = 30.0
    assert watched.watch.look_at_the_end(lambda until: None, AT_THE_INTERRUPT) is None
    assert watched.said == ["no progress for 30 s: looking where every rank waits before they stop (3 s)",
                            "not every rank answered the look (one may be busy): no verdict"]
    moving = Watched([probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(2)])
    moving.watch.progress(0.0)
    moving.now = 30.0
    assert moving.watch.look_at_the_end(lambda until: moving.watch.progress(until), AT_THE_INTERRUPT) is None
    assert moving.said[-1] == "the job printed during the look: it moves, so no verdict"
    # a trial (session 112): Ctrl-C of an elastic job whose node1 a fault paused before its rendezvous
    # formed: no worker had begun, so no rank was known, and none could have been busy
    unstarted = Watched([probe(0) for _ in range(2)], expected=frozenset())
    unstarted.watch.progress(0.0)
    unstarted.now = 30.0
    assert unstarted.watch.look_at_the_end(lambda until: None, AT_THE_INTERRUPT) is None
    no_worker = ("no worker of the current attempt had started, so there was no rank to look at (an elastic job's"
                 " ranks are known once its rendezvous forms): no verdict")
    assert unstarted.said[-1] == no_worker
    # a review (session 112): after an elastic restart the ranks known are forgotten, though the
    # attempts before had workers: "no worker had started" was false of the job
    restarted = Watched([probe(0) for _ in range(2)])
    restarted.watch.progress(0.0)
    restarted.watch.expected = set  # every node restarted: the new attempt's ranks not known yet
    restarted.now = 30.0
    assert restarted.watch.look_at_the_end(lambda until: None, AT_THE_INTERRUPT) is None
    assert restarted.said[-1] == no_worker


def test_a_job_that_stays_quiet_and_working_is_said_again_with_where_every_rank_is_less_and_less_often():
    """No look tells a long step from a loop that never ends (``while True`` on rank 0 while rank 1
    waits): said again at 4, 8, 16... times the threshold of quiet, and never ended."""
    waiting = (coll(1), coll(2, state="entered"))
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i), r1=snap(1, waiting)) for i in range(80)]
    watched = Watched(probes, diagnose_after_s=20, end_after_s=20)
    watched.watch.progress(0.0)
    assert watched.until(700) is None
    again = [(watched.said.index(line), line) for line in watched.said if line.startswith("still")]
    assert [int(re.match(r"still no output after (\d+) s", line)[1]) // 10 for _, line in again] == [8, 16, 32, 64]
    assert again[0][1].endswith(", and the job still works: rank 0 computing; rank 0: evaluate at train.py:31;"
                                " rank 1: all_reduce at desync.py:11 in <module>")
    assert again[0][0] == len(watched.said) - 4  # the first look's lines, then the one-line reminders alone
    # a worker's line starts the quiet time again, and the first look's lines with it
    watched.probes += [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=500.0 + 5 * i), r1=snap(1, waiting))
                       for i in range(20)]
    watched.watch.progress(700.0)
    said = len(watched.said)
    assert watched.until(775) is None
    assert watched.said[said].startswith("no output for 2") and not any(
        line.startswith("still") for line in watched.said[said:])
    assert watched.until(800) is None and watched.said[-1].startswith("still no output after 8")


def test_a_job_said_hung_that_then_computes_is_no_longer_hung():
    """Said hung after --hang-diagnose-after, then a rank computes quietly before --hang-timeout:
    the hung verdict goes, and the working one is kept."""
    waiting = (coll(1), coll(2, state="entered"))
    evaluating = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    probes = [probe(0, r0=snap(0, waiting), r1=snap(1, waiting)) for _ in range(2)]
    probes += [probe(0, r0=snap(0, (coll(1),), evaluating, cpu_s=10.0 + 5 * i), r1=snap(1, waiting)) for i in range(40)]
    watched = Watched(probes, diagnose_after_s=10, end_after_s=60)
    watched.watch.progress(0.0)
    assert watched.until(30) is None
    assert watched.said[0].startswith("the job looks hung") and watched.watch.diagnosis is not None
    assert watched.until(100) is None  # looked again at --hang-timeout: it works, and is not ended
    assert watched.watch.diagnosis is None and watched.watch.working is not None
    assert any(line.startswith("no output for") and "but the job is working: rank 0 computing" in line
               for line in watched.said)


def test_a_rank_that_neither_answers_nor_is_explained_leaves_the_verdict_unknown():
    waiting = (coll(1), coll(2, state="entered"))
    watched = Watched([probe(0, r0=snap(0, waiting)) for _ in range(20)], diagnose_after_s=10, end_after_s=10)
    watched.watch.progress(0.0)
    assert watched.until(60) is None and watched.asked >= 4  # rank 1 may be busy holding the GIL: no verdict
    assert not watched.said and watched.watch.diagnosis is None


def test_a_stopped_rank_is_named_with_why_it_cannot_answer():
    waiting = (coll(1), coll(2, state="entered"))
    absent = {1: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1@t=5)"}
    watched = Watched([probe(0, r0=snap(0, waiting)), probe(0, r0=snap(0, waiting))], end_after_s=30, absent=absent)
    watched.watch.progress(0.0)
    found = watched.until(40)
    assert found is not None
    assert found.headline.endswith("rank 0 waits in all_reduce(float32[4]) #2 at desync.py:11; rank 1 is stopped:"
                                   " its process on node1 got SIGSTOP (injected fault hang-rank:1@t=5)")
    assert [a.state for a in found.activities] == ["collective", "stopped"]


def test_requests_are_answered_in_the_debug_directory_and_stale_answers_ignored(tmp_path):
    (tmp_path / "rank1.json").write_text(json.dumps({"request": "old", "rank": 1, "stacks": []}))
    ticks = iter(range(100))

    def answer(_seconds: float) -> None:  # a worker answering the request it finds
        request = json.loads((tmp_path / "request.json").read_text())["id"]
        (tmp_path / "rank0.json").write_text(json.dumps({
            "request": request, "rank": 0, "pid": 7, "cpu_s": 1.5, "completed": 3, "node": "node0",
            "collectives": [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "a.py:1",
                             "state": "entered"}],
            "stacks": [{"thread": "other", "main": False, "frames": [["t.py", 1, "run", ""]]},
                       {"thread": "MainThread", "main": True, "frames": [["a.py", 1, "<module>", "x()"]]}]}))

    got = request_snapshots(tmp_path, {0, 1}, timeout_s=3, clock=lambda: float(next(ticks)), sleep=answer)
    assert set(got.snapshots) == {0}  # rank 1's file answers an older request
    zero = got.snapshots[0]
    assert (zero.node, zero.cpu_s, zero.completed, zero.stack) == ("node0", 1.5, 3, (Frame("a.py", 1, "<module>", "x()"),))
    assert zero.in_collective == coll(1, "", "entered", op="barrier", at="a.py:1")
    assert set(last_snapshots(tmp_path)) == {0, 1}


def test_a_data_loader_worker_is_placed_in_its_own_loop_and_a_ranks_loaders_are_told_apart():
    # a library's dataset: the worker is where the library waits, not at the rank's loop it inherited
    library = loader(0, 1, LIBRARY_WORKER)
    assert library.stack[0] == LOOP and not library.idle
    assert loading_where([library]) == ", for its DataLoader's worker 1 (pid 201): wait at threading.py:320"
    # two DataLoaders (a persistent one, idle, and the one being read): numbered oldest first
    workers = [loader(0, 0, IDLE_WORKER, of=3, pid=150), loader(0, 1, IDLE_WORKER, of=3, pid=151),
               loader(0, 0, READING_WORKER, of=9, pid=300), loader(0, 1, IDLE_WORKER, of=9, pid=301)]
    lines = loader_lines(0, workers, hung=True)
    assert lines[0] == ("rank 0 waits for its DataLoader's worker processes; DataLoader(timeout=S) makes that wait fail"
                        " after S s:")
    assert loader_lines(0, workers, hung=False)[0] == "rank 0 waits for its DataLoader's worker processes:"
    assert [line.split(":")[0] for line in lines[1:] if not line.startswith("      ")] == [
        "  worker 0 of DataLoader 1 (pid 150)", "  worker 1 of DataLoader 1 (pid 151)",
        "  worker 0 of DataLoader 2 (pid 300)", "  worker 1 of DataLoader 2 (pid 301)"]
    # a worker deep in a library its dataset called: the dataset's own line first, then the innermost
    deep = (*FORKED, Frame(f"{SITE}/torch/utils/data/_utils/fetch.py", 52, "fetch"),
            Frame("data.py", 40, "__getitem__", "return decode(path)"),
            *(Frame(f"{SITE}/imagelib/io.py", line, f"step{line}") for line in range(1, 6)))
    assert loader_lines(0, [loader(0, 0, deep)], hung=False)[2:5] == [
        "      data.py:40 in __getitem__: return decode(path)", "      ... 1 frame(s)",
        "      imagelib/io.py:2 in step2"]
    # two ranks in one group, each waiting for its loader: the worker is named with its rank
    both = probe(5, r0=snap(0, frames=LOADING), r1=snap(1, frames=LOADING))
    both.loaders = {0: [loader(0, 0, IDLE_WORKER), loader(0, 1, IDLE_WORKER)],
                    1: [loader(1, 0, READING_WORKER, pid=300), loader(1, 1, IDLE_WORKER, pid=301)]}
    found = diagnose(both, both, {0, 1}, {}, 20)
    assert found.headline == ("no progress for 20 s: ranks 0, 1: __next__ at train.py:21 in <module>, for rank 1's"
                              " DataLoader's worker 0 (pid 300): __getitem__ at data.py:40")


def test_a_headline_names_the_first_three_places_and_a_lone_ranks_loader_worker_as_its_own():
    # five ranks, each somewhere else, none in a collective: the odd ones out, three of them
    apart = probe(5, **{f"r{r}": snap(r, frames=(Frame("wait.py", 10 + r, "<module>"),)) for r in range(5)})
    assert diagnose(apart, apart, set(range(5)), {}, 30).headline == (
        "no progress for 30 s: rank 0: <module> at wait.py:10; rank 1: <module> at wait.py:11;"
        " rank 2: <module> at wait.py:12; ranks 0-4 idle: neither computing nor in a collective (0.0% of a core)")
    # a rank alone in its group, waiting for its loader: "its" worker; a worker whose id is not
    # known yet is named by its pid alone
    alone = probe(5, r0=snap(0, frames=LOADING), r1=snap(1, frames=(Frame("wait.py", 3, "<module>"),)))
    alone.loaders = {0: [loader(0, 0, READING_WORKER, pid=300), loader(0, 1, IDLE_WORKER, pid=301)]}
    assert diagnose(alone, alone, {0, 1}, {}, 20).headline == (
        "no progress for 20 s: rank 0: __next__ at train.py:21 in <module>, for its DataLoader's worker 0 (pid 300):"
        " __getitem__ at data.py:40; rank 1: <module> at wait.py:3;"
        " rank 1 idle: neither computing nor in a collective (0.0% of a core)")
    unnumbered = LoaderSnapshot.from_json({"rank": 0, "pid": 300, "cpu_s": 0.5, "stacks": [
        {"main": True, "frames": [[f.file, f.line, f.function, f.code] for f in READING_WORKER]}]})
    assert unnumbered.worker is None
    assert loading_where([unnumbered]) == ", for its DataLoader's worker (pid 300): __getitem__ at data.py:40"


def test_a_request_waits_for_every_worker_of_a_waiting_ranks_loaders():
    answered = Probe("r", 0.0, {0: snap(0, frames=LOADING), 1: snap(1)})
    assert answered.loader_workers_missing()  # none yet
    answered.loaders = {0: [loader(0, 0, IDLE_WORKER)]}
    assert answered.loader_workers_missing()  # one of two
    answered.loaders[0].append(loader(0, 1, READING_WORKER))
    assert not answered.loader_workers_missing()
    answered.loaders[0].append(loader(0, 0, IDLE_WORKER, of=9, pid=400))
    assert answered.loader_workers_missing()  # another loader's, one of its two
    answered.loaders[0] = answered.loaders[0][:2]
    answered.snapshots[1] = snap(1, frames=LOADING)
    assert answered.loader_workers_missing()  # rank 1 waits too, and none of its answered


def test_a_data_loader_worker_waiting_at_a_lock_in_the_dataset_is_told_the_fork_copied_it_taken():
    """A trial's rank 1 ran a thread that held a threading.Lock while its DataLoader forked the
    workers, whose __getitem__ then took the lock: each worker waited for ever, and the summary
    said where and that DataLoader(timeout=S) ends the wait, not why (until 2026-12-07)."""
    at_lock = (*FORKED, Frame(f"{SITE}/torch/utils/data/_utils/fetch.py", 52, "fetch"),
               Frame("data.py", 19, "__getitem__", "with cache_lock:"))

    def hung_probe(at: float, *workers: tuple[tuple[Frame, ...], int]) -> Probe:
        found = probe(at, r0=snap(0, (coll(3, state="entered"),), cpu_s=1.0), r1=snap(1, frames=LOADING, cpu_s=1.0))
        found.loaders = {1: [loader(1, n, stack, cpu_s=0.5) for n, (stack, _) in enumerate(workers)]}
        return found

    found = diagnose(hung_probe(5, (at_lock, 0), (at_lock, 1)), hung_probe(0, (at_lock, 0), (at_lock, 1)), {0, 1},
                     {}, 20)
    assert found.hung
    hint = ("  rank 1's DataLoader worker 0 (pid 200) and worker 1 (pid 201) wait at a lock in the dataset"
            " (__getitem__ at data.py:19): a DataLoader worker is a fork of its rank with only the thread that"
            " forked it, so a lock that another thread of the rank held at the fork stays taken in the worker for ever")
    assert any(line.startswith(hint) for line in found.lines())
    assert any(line.startswith(hint.strip()) for line in found.to_json()["advice"])  # kept in outcome.json too
    # a worker that reads (no lock) or waits idle for its next batch gets no such hint
    other = diagnose(hung_probe(5, (READING_WORKER, 0), (IDLE_WORKER, 1)),
                     hung_probe(0, (READING_WORKER, 0), (IDLE_WORKER, 1)), {0, 1}, {}, 20)
    assert other.hung and not any("a fork of its rank" in line for line in other.lines())
    # nor one that waits in a library's thread wait (a pool the dataset made itself): the fork is no why
    library = diagnose(hung_probe(5, (LIBRARY_WORKER, 0)), hung_probe(0, (LIBRARY_WORKER, 0)), {0, 1}, {}, 20)
    assert library.hung and not any("a fork of its rank" in line for line in library.lines())


def test_a_rank_waiting_for_its_data_loader_is_answered_with_its_loaders_workers(tmp_path):
    frames = [[f.file, f.line, f.function, f.code] for f in LOADING]
    (tmp_path / "loader-rank0-90.json").write_text(json.dumps({"request": "old", "rank": 0, "pid": 90, "stacks": []}))
    asked: list[str] = []

    def answer(_seconds: float) -> None:  # the rank at once; its loader's workers one call later
        request = json.loads((tmp_path / "request.json").read_text())["id"]
        asked.append(request)
        (tmp_path / "rank0.json").write_text(json.dumps({
            "request": request, "rank": 0, "pid": 7, "stacks": [{"main": True, "frames": frames}]}))
        if len(asked) < 2:
            return
        for pid, worker in ((12, 1), (11, 0)):
            (tmp_path / f"loader-rank0-{pid}.json").write_text(json.dumps({
                "request": request, "rank": 0, "pid": pid, "cpu_s": 0.25, "loader_worker": worker,
                "loader_workers": 2, "stacks": [{"main": True, "frames": [["data.py", 40, "__getitem__", ""]]}]}))

    ticks = iter(range(100))
    got = request_snapshots(tmp_path, {0}, timeout_s=5, clock=lambda: float(next(ticks)), sleep=answer)
    assert not (tmp_path / "loader-rank0-90.json").exists()  # an earlier request's worker, gone with it
    assert len(asked) == 2  # it waited for the workers of the rank that waits for them
    assert [(w.worker, w.pid, w.workers, w.cpu_s) for w in got.loaders[0]] == [(0, 11, 2, 0.25), (1, 12, 2, 0.25)]
    assert got.loaders[0][0].stack == (Frame("data.py", 40, "__getitem__"),)
    assert set(got.snapshots) == {0} and got.snapshots[0].waits_for_data_loader
    # a rank that does not wait for its loader is not waited for: one call, no worker asked for
    asked.clear()
    frames[:] = [["a.py", 1, "<module>", ""]]
    got = request_snapshots(tmp_path, {0}, timeout_s=5, clock=lambda: float(next(ticks)), sleep=answer)
    assert len(asked) == 1 and got.loaders == {}


def test_a_collective_that_timed_out_is_diagnosed_from_what_the_ranks_wrote_as_it_failed(tmp_path):
    for rank, (shapes, line) in enumerate((("float32[1]", 14), ("float32[4]", 11))):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [],
            "collectives": [{"seq": 4, "op": "all_reduce", "group": "default", "shapes": shapes,
                             "at": f"desync.py:{line}", "state": "failed"}]}))
    failure = Failure("node0", 0, 1, "RuntimeError: [/pytorch/gloo/unbound_buffer.cc:78] Timed out waiting 15000ms"
                      " for recv operation to complete", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1})
    assert found is not None and found.cause.startswith("a collective timed out on node0 rank 0 (Timed out waiting")
    assert "collective #4: rank 0 entered all_reduce(float32[1]) at desync.py:14" in found.headline
    other = Failure("node0", 0, 1, "ValueError: bad batch", ())
    assert timeout_diagnosis(other, tmp_path, {0, 1}) is None
    stopped = Failure("node1", 1, 1, failure.exception, (), reason="rank 1 stopped answering: its worker process is"
                      " stopped (hung)")
    assert timeout_diagnosis(stopped, tmp_path, {0, 1}) is None  # the stopped rank explains the timeout better
    # gloo's connect retries "timed out" on a peer that refused: no collective waited
    refused = Failure("node0", 0, 1, "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out"
                      " connecting: SO_ERROR: Connection refused, remote=[172.26.0.2]:59829", ())
    assert timeout_diagnosis(refused, tmp_path, {0, 1}) is None
    # what torch said, after the exception's name and gloo's source file alone, and 120 characters of it
    assert found.cause == ("a collective timed out on node0 rank 0 (Timed out waiting 15000ms for recv operation to"
                           " complete)")
    colons = Failure("node0", 0, 1, "DistBackendError: [pair.cc:1] Timed out: waiting for rank 1: recv", ())
    assert timeout_diagnosis(colons, tmp_path, {0, 1}).cause.endswith("rank 0 (Timed out: waiting for rank 1: recv)")
    bare = Failure("node0", 0, 1, "Timed out waiting 15000ms for recv", ())
    assert timeout_diagnosis(bare, tmp_path, {0, 1}).cause.endswith("rank 0 (Timed out waiting 15000ms for recv)")
    long = Failure("node0", 0, 1, "RuntimeError: Timed out " + "x" * 200, ())
    assert timeout_diagnosis(long, tmp_path, {0, 1}).cause.endswith(f"rank 0 (Timed out {'x' * 110})")
    # a failure that names no rank (its node's torchrun's own): the node alone
    node_only = Failure("node1", None, 1, failure.exception, ())
    assert timeout_diagnosis(node_only, tmp_path, {0, 1}).cause.startswith("a collective timed out on node1 (Timed")
    # no ranks expected (none known): the ranks that wrote a record
    assert [a.rank for a in timeout_diagnosis(failure, tmp_path, set()).activities] == [0, 1]


def test_a_mismatch_that_torch_caught_is_placed_by_the_records_the_ranks_wrote_as_it_failed(tmp_path):
    for rank, (op, shapes, line) in enumerate((("barrier", "", 30), ("all_reduce", "gradients of DDP(Net)", 25))):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [],
            "collectives": [{"seq": 3, "op": "all_reduce", "group": "default", "shapes": "gradients of DDP(Net)",
                             "at": "train.py:25", "state": "done"},
                            {"seq": 4, "op": op, "group": "default", "shapes": shapes, "at": f"train.py:{line}",
                             "state": "failed"}]}))
    caught = Failure("node0", 0, 1, "collectives differ (--debug-collectives): rank 0 ran BARRIER (torch's sequence"
                     " number 8); rank 1 ran GATHER (torch's sequence number 0)", ())
    assert mismatch_divergence(caught, tmp_path) == ("collective #4: rank 0 entered barrier() at train.py:30; rank 1"
                                                     " entered all_reduce(gradients of DDP(Net)) at train.py:25")
    # rank 2 failed by itself, outside any collective: the others' records do not explain it
    assert mismatch_divergence(Failure("node1", 2, 1, "ValueError: bad batch", ()), tmp_path) == ""
    # rank 1's record is an earlier attempt's (written before the latest start): rank 0's alone shows none
    for rank, written in ((0, 700.0), (1, 500.0)):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({**record, "time": written}))
    assert mismatch_divergence(caught, tmp_path, since=400.0).startswith("collective #4: rank 0 entered barrier()")
    assert mismatch_divergence(caught, tmp_path, since=600.0) == ""
    (tmp_path / "rank1.json").unlink()  # one rank's record alone shows no divergence
    assert mismatch_divergence(caught, tmp_path) == ""


def test_a_barrier_skipped_that_torch_caught_points_in_your_code_at_the_barrier_not_the_step_after_it(tmp_path):
    """barrier_skip.py --debug-collectives (a user trial, 2026-12-07): torch's check failed rank 1
    in its next backward pass, at :19, and `in your code:` named that line; the records show rank 1
    made 3 barrier() calls at :23 where rank 0 made 4, the line to look at."""
    from orchestrate.hangs.diagnosis import place_failure
    from orchestrate.outcome.summary import own_error_lines

    backward = {"op": "all_reduce", "group": "default", "shapes": "gradients of DDP(Net)", "at": "bs.py:19"}
    barrier = {"op": "barrier", "group": "default", "shapes": "", "at": "bs.py:23"}
    history = [{**backward, "seq": 1, "state": "done"}, {**barrier, "seq": 2, "state": "done"}]
    for rank, (last, lines) in enumerate(((barrier, {"bs.py:19": 2, "bs.py:23": 2}),
                                          (backward, {"bs.py:19": 3, "bs.py:23": 1}))):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [], "time": 500.0,
            "lines": lines, "collectives": [*history, {**backward, "seq": 3, "state": "done"},
                                            {**last, "seq": 4, "state": "failed"}]}))
    caught = Failure("node1", 1, 1, "collectives differ (--debug-collectives): rank 1 ran ALLREDUCE of Float[9]"
                     " (torch's sequence number 6); rank 0 ran a collective of another kind (torch's check does not"
                     " say which)", (), users_frame="bs.py:19 in <module>: loss.backward()")
    placed = place_failure(caught, tmp_path, {0, 1}, 400.0)
    skipped = ("rank 1 made 1 barrier() call at bs.py:23 where rank 0 made 2: rank 1 skipped one (it went on to"
               " bs.py:19), by a condition on the rank or its data (a `continue` or an `if` around the call), or ran"
               " that loop fewer times")
    assert placed.skipped == skipped
    assert own_error_lines(caught, placed.skipped) == [f"  in your code: {skipped}"]
    assert own_error_lines(caught) == ["  in your code: bs.py:19 in <module>: loss.backward()"]
    # any other failure: nothing skipped is said
    assert place_failure(Failure("node1", 1, 1, "ValueError: bad batch", ()), tmp_path, {0, 1}, 400.0).skipped == ""



def test_a_mismatch_nobody_caught_is_placed_by_the_records_of_the_ranks_that_lost_their_peers(tmp_path):
    """gloo all-reduced 12 elements on rank 1 and 10 on the others: ranks 0 and 3 went on with
    what it gave them and finished, ranks 1 and 2 lost them. Their records say the sizes differ."""
    for rank, size in ((1, 12), (2, 10)):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [], "time": 1000.0,
            "collectives": [{"seq": 1, "op": "all_reduce", "group": "default", "shapes": f"float32[{size}]",
                             "at": "shapes.py:6", "state": "failed"}]}))
    lost = "RuntimeError: [/pytorch/gloo/transport/tcp/pair.cc:547] Connection closed by peer [172.20.0.3]:44754"
    expected = ("collective #1: rank 1 entered all_reduce(float32[12]) at shapes.py:6; rank 2 entered"
                " all_reduce(float32[10]) at shapes.py:6")
    assert mismatch_divergence(Failure("node0", 1, 1, lost, ()), tmp_path) == expected
    assert mismatch_divergence(Failure("node1", 2, 1, lost, ()), tmp_path, since=999.5) == expected
    # a record the slack for two nodes' clocks before the attempt began is still the attempt's
    assert mismatch_divergence(Failure("node1", 2, 1, lost, ()), tmp_path,
                               since=1000.0 + ATTEMPT_CLOCK_SLACK_S) == expected
    # the rank the failure names wrote no failed record (its error was its own), or an earlier attempt's
    assert mismatch_divergence(Failure("node0", 0, 1, lost, ()), tmp_path) == ""
    assert mismatch_divergence(Failure("node0", 1, 1, lost, ()), tmp_path, since=1100.0) == ""
    # the records say why they part otherwise (roots that differ): their own hint is given, not this
    for rank, root in ((1, 0), (2, 1)):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        record["collectives"][0].update(op="broadcast", shapes=f"float32[10] from rank {root}")
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(record))
    assert mismatch_divergence(Failure("node0", 1, 1, lost, ()), tmp_path) == ""
    # the same sizes: nothing parts
    record = json.loads((tmp_path / "rank1.json").read_text())
    record["collectives"][0]["shapes"] = "float32[10] from rank 1"
    (tmp_path / "rank1.json").write_text(json.dumps(record))
    assert mismatch_divergence(Failure("node0", 1, 1, lost, ()), tmp_path) == ""


def test_a_timeout_places_a_rank_that_wrote_no_record_by_its_answer_when_the_job_ended(tmp_path):
    """Rank 1 spins in a loop of its own while rank 0's all-reduce times out: it writes no record
    of a failed collective, but it answered the launcher's request as the failure ended the job."""
    done = {"seq": 7, "op": "all_reduce", "group": "default", "shapes": "gradients of DDP(Linear)",
            "at": "spin.py:17", "state": "done"}
    (tmp_path / "rank0.json").write_text(json.dumps({
        "request": "failed", "reason": "collective failed", "rank": 0, "time": 1000.0, "stacks": [],
        "collectives": [done, {**done, "seq": 8, "state": "failed"}]}))
    spinning = {"request": "r2", "rank": 1, "time": 1000.5, "collectives": [done],
                "stacks": [{"thread": "MainThread", "main": True,
                            "frames": [["spin.py", 16, "<module>", ""], ["spin.py", 11, "next_batch", ""]]}]}
    (tmp_path / "rank1.json").write_text(json.dumps(spinning))
    failure = Failure("node0", 0, 1, "RuntimeError: [/pytorch/gloo/unbound_buffer.cc:78] Timed out waiting 40000ms"
                      " for recv operation to complete", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1}, since=1000.2)
    assert found is not None
    assert found.headline.endswith("rank 0 waits in all_reduce(gradients of DDP(Linear)) #8 at spin.py:17; rank 1 is"
                                   " at #7 (not in a collective: next_batch at spin.py:11)")
    # an answer from before the ranks were asked (an earlier look of the watchdog's) is not taken:
    # the rank may have moved on since
    assert timeout_diagnosis(failure, tmp_path, {0, 1}, since=1001.0).headline.endswith("rank 1 did not answer")
    # one written as the ranks were asked is taken
    assert timeout_diagnosis(failure, tmp_path, {0, 1}, since=1000.5).headline.endswith("rank 1 is at #7 (not in a"
                                                                                        " collective: next_batch at"
                                                                                        " spin.py:11)")
    assert timeout_diagnosis(failure, tmp_path, {0, 1}).headline.endswith("rank 1 did not answer")
    # it did not answer, but left its stacks as torchrun ended it: where it was is said
    ended = timeout_diagnosis(failure, tmp_path, {0, 1}, since=1001.0, stopped_where={1: "next_batch at spin.py:11"})
    assert ended.headline.endswith("rank 1 did not answer, and was in next_batch at spin.py:11 when torchrun ended it")
    assert "  rank 1: did not answer, and was in next_batch at spin.py:11 when torchrun ended it" in ended.lines()
    # a rank that answered is placed by its answer, whatever its stacks say
    answered = timeout_diagnosis(failure, tmp_path, {0, 1}, since=1000.2, stopped_where={1: "elsewhere at spin.py:3"})
    assert answered.headline.endswith("rank 1 is at #7 (not in a collective: next_batch at spin.py:11)")

def test_a_rank_that_gloo_aborted_is_placed_by_its_crash_stack_beside_its_peers_failed_collectives(tmp_path):
    (tmp_path / "rank1.json").write_text(json.dumps({
        "request": "failed", "reason": "collective failed", "rank": 1, "stacks": [],
        "collectives": [{"seq": 4, "op": "all_reduce", "group": "default", "shapes": "gradients of DDP(Net)",
                         "at": "train.py:20", "state": "done"},
                        {"seq": 5, "op": "all_reduce", "group": "default", "shapes": "gradients of DDP(Net)",
                         "at": "train.py:20", "state": "failed"}]}))
    (tmp_path / "rank0.crash").write_text(
        "Fatal Python error: Aborted\n\n"
        "Thread 0x00007fa520500040 (most recent call first):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2942 in all_reduce\n'
        '  File "/opt/ddp-compose/orchestrate/node/collective_log.py", line 121 in collective\n'
        '  File "/workspace/train.py", line 23 in <module>\n'
        '  File "/opt/ddp-compose/orchestrate/node/worker_start.py", line 255 in <module>\n\n')
    aborted = Failure("node0", 0, -6, "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 12 vs 4. Received data size"
                      " doesn't match expected size. Is there a distributed collective mismatch in your code?", ())
    assert mismatch_divergence(aborted, tmp_path) == ("rank 0 aborted in all_reduce at train.py:23; rank 1 was in"
                                                      " all_reduce(gradients of DDP(Net)) #5 at train.py:20")
    (tmp_path / "rank0.crash").unlink()  # no stacks of its own: its peers' places still say where they were
    assert mismatch_divergence(aborted, tmp_path) == "rank 0 aborted; rank 1 was in all_reduce(gradients of DDP(Net)) #5" \
                                                     " at train.py:20"
    # another failure, the same records: nothing said
    assert mismatch_divergence(Failure("node0", 0, -6, "gloo::EnforceNotMet: something else", ()), tmp_path) == ""
    # a record of an earlier attempt (written before the latest start) places no peer
    record = json.loads((tmp_path / "rank1.json").read_text())
    (tmp_path / "rank1.json").write_text(json.dumps({**record, "time": 1000.0}))
    assert mismatch_divergence(aborted, tmp_path, since=1000.5).startswith("rank 0 aborted; rank 1 was in")
    assert mismatch_divergence(aborted, tmp_path, since=1100.0) == ""
    # a peer whose last collective finished was not in one as the rank went
    record["collectives"][-1]["state"] = "done"
    (tmp_path / "rank1.json").write_text(json.dumps(record))
    assert mismatch_divergence(aborted, tmp_path) == ""


def test_an_aborted_ranks_peers_are_named_three_at_most_with_a_group_not_the_default_one(tmp_path):
    """Peers in one call at one place are said together (session 114: one by one, three at most)."""
    lines = {1: 20, 2: 20, 3: 20, 4: 30, 5: 40, 6: 20}
    for rank, line in lines.items():
        group = "default" if rank != 2 else "1"
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [],
            "collectives": [{"seq": 5, "op": "all_reduce", "group": group, "shapes": "float32[8]",
                             "at": f"train.py:{line}", "state": "failed"}]}))
    aborted = Failure("node0", 0, -6, "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 12 vs 4. Received data size"
                      " doesn't match expected size. Is there a distributed collective mismatch in your code?", ())
    assert mismatch_divergence(aborted, tmp_path) == (
        "rank 0 aborted; ranks 1, 3, 6 were in all_reduce(float32[8]) #5 at train.py:20; rank 2 was in"
        " all_reduce(float32[8]) #5 of group 1 at train.py:20; rank 4 was in all_reduce(float32[8]) #5 at train.py:30;"
        " 1 more rank(s) elsewhere")
    (tmp_path / "rank5.json").unlink()  # three places: all named
    assert mismatch_divergence(aborted, tmp_path).endswith("rank 4 was in all_reduce(float32[8]) #5 at train.py:30")


def test_torchs_mismatch_error_becomes_one_line_naming_both_ranks():
    fingerprint = ("CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[{}], TensorDtypes=Float,"
                   " TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu))")
    text = (f"RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective:"
            f" {fingerprint.format(4)}, but Rank 0 is running collective: {fingerprint.format(1)}.Collectives differ"
            " in the following aspects: \t Tensor Tensor shapes: 4vs 1")
    assert short_mismatch(text) == ("collectives differ (--debug-collectives): rank 1 ran ALLREDUCE of Float[4] (torch's"
                                    " sequence number 3); rank 0 ran ALLREDUCE of Float[1] (torch's sequence number 3)"
                                    " (tensor shapes: 4 vs 1)")
    barrier = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective:"
               " CollectiveFingerPrint(SequenceNumber=8OpType=BARRIER), but Rank 1 is running collective:"
               " CollectiveFingerPrint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects:"
               " \t Sequence number: 8vs 0  Op type: BARRIERvs GATHER")  # torch 2.9.1's words for a barrier
    assert short_mismatch(barrier) == ("collectives differ (--debug-collectives): rank 0 ran BARRIER (torch's sequence"
                                       " number 8); rank 1 ran a collective of another kind (torch's check does not"
                                       " say which)")  # not torch's 'sequence number: 8 vs 0', against nothing
    first = barrier.replace("SequenceNumber=8", "SequenceNumber=0").replace("8vs 0", "0vs 0")
    # at the group's first collective, 0 is a number, but a gather with no tensors is no gather a script made
    assert short_mismatch(first) == ("collectives differ (--debug-collectives): rank 0 ran BARRIER (torch's sequence"
                                     " number 0); rank 1 ran a collective of another kind (torch's check does not"
                                     " say which)")
    reduce = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective:"
              f" {fingerprint.format(2).replace('=3', '=0')}, but Rank 1 is running collective:"
              " CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE).Collectives differ in the following aspects:"
              " \t Op type: ALLREDUCEvs REDUCE  Tensor Tensor shapes: 2vs  Tensor Tensor dtypes: Floatvs")
    assert short_mismatch(reduce) == ("collectives differ (--debug-collectives): rank 0 ran ALLREDUCE of Float[2]"
                                      " (torch's sequence number 0); rank 1 ran a collective of another kind (torch's"
                                      " check does not say which)")
    real = first.replace("SequenceNumber=0OpType=GATHER", "SequenceNumber=0, OpType=GATHER, TensorShape=[4],"
                                                          " TensorDtypes=Float")
    assert "rank 1 ran GATHER of Float[4] (torch's sequence number 0)" in short_mismatch(real)  # a gather it made
    # each aspect torch names, in its order
    assert short_mismatch("ValueError: x") == "ValueError: x"


class FakeTensor:
    def __init__(self, *shape: int) -> None:
        self.shape, self.dtype = shape, "torch.float32"


def test_the_record_keeps_outer_calls_their_state_and_the_callers_line():
    log = CollectiveLog(keep=3)

    def all_gather(tensors, tensor, group=None, async_op=False):
        return inner(tensor)

    inner = log.wrap("all_reduce", lambda tensor, group=None: "ok", lambda g: "default" if g is None else str(g))
    outer = log.wrap("all_gather", all_gather, lambda g: "default" if g is None else str(g))
    line = sys._getframe().f_lineno + 1
    assert outer([FakeTensor(4)] * 2, FakeTensor(4), "ranks 0,1") == "ok"
    [entry] = log.snapshot()  # the nested all_reduce is the all_gather's own business
    assert (entry["seq"], entry["op"], entry["group"], entry["shapes"], entry["state"]) == (
        1, "all_gather", "ranks 0,1", "2x float32[4], float32[4]", "done")
    assert entry["at"].endswith(f"test_hangs.py:{line}")

    def broken(tensor, group=None):
        raise RuntimeError("Timed out waiting 1000ms\nmore")

    with pytest.raises(RuntimeError):
        log.wrap("all_reduce", broken, lambda g: "default")(FakeTensor(1))
    assert log.snapshot()[-1]["state"] == "failed" and log.snapshot()[-1]["error"] == "RuntimeError: Timed out waiting 1000ms"
    for _ in range(3):
        inner(FakeTensor(2))
    assert [e["seq"] for e in log.snapshot()] == [2, 3, 4]  # the last KEEP, numbered per group
    assert log.completed == 4


def test_a_new_group_is_recorded_in_the_default_group_unless_only_its_members_call_it():
    from orchestrate.node.collective_log import describe_ranks

    log = CollectiveLog()
    made = []

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False):
        made.append(ranks)
        return f"group {ranks}"

    wrapped = log.wrap_new_group(new_group, lambda g: "default" if g is None else str(g))
    line = sys._getframe().f_lineno + 1
    assert wrapped([1, 0]) == "group [1, 0]" and wrapped() == "group None"
    assert wrapped([2, 3], use_local_synchronization=True) == "group [2, 3]"  # only its members call it
    assert wrapped([2, 3], None, None, None, True) == "group [2, 3]"
    assert made == [[1, 0], None, [2, 3], [2, 3]]
    assert [(e["seq"], e["op"], e["group"], e["shapes"], e["state"]) for e in log.snapshot()] == [
        (1, "new_group", "default", "ranks 0,1", "done"), (2, "new_group", "default", "all ranks", "done")]
    assert log.snapshot()[0]["at"].endswith(f"test_hangs.py:{line}")
    assert describe_ranks(range(3)) == "ranks 0,1,2" and describe_ranks([object()]) == "ranks ?"
    # a generator reaches torch whole (described as unknown, never read), and anything else is
    # left to torch: the record never changes or refuses the user's call
    made.clear()
    assert wrapped(r for r in (0, 1)) is not None and list(made[0]) == [0, 1]
    assert log.snapshot()[-1]["shapes"] == "ranks ?"

    class Tensorish:
        def __bool__(self):
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")

    assert wrapped(Tensorish()).startswith("group ") and describe_ranks(Tensorish()) == "ranks ?"


def test_ranks_that_made_their_groups_differently_part_at_new_group_with_its_own_hint():
    from orchestrate.hangs.diagnosis import NEW_GROUP_HINT

    own = coll(1, "ranks 0", op="new_group", at="train.py:9")
    every = coll(1, "ranks 0,1", op="new_group", at="train.py:10")
    waiting = (coll(2, "ranks 0,1", "entered", op="new_group", at="train.py:10"),)
    parted = probe(5, r0=snap(0, (own,) + waiting, frames=stack(10, call="new_group")),
                   r1=snap(1, (every, coll(2, "float32[1]", "entered", at="train.py:12")), stack(12)))
    lines = diagnose(parted, None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #1, where the ranks' calls first differ (every rank went on"
                        " past it): rank 0 called new_group(ranks 0) at train.py:9; rank 1 called new_group(ranks"
                        " 0,1) at train.py:10")
    assert f"  {NEW_GROUP_HINT}" in lines and f"  {DEBUG_HINT}" not in lines


def test_a_collective_with_a_root_is_recorded_with_it_and_the_list_only_the_root_gives_is_left_out(monkeypatch):
    import torch.distributed as dist

    log = CollectiveLog()

    def name(group):
        return "default" if group is None else str(group)

    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        return "ok"

    def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
        return "ok"

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
        return "ok"

    monkeypatch.setattr(dist, "get_global_rank", lambda group, rank: {0: 2, 1: 3}[rank])
    sent, gathered, objects = (log.wrap("broadcast", broadcast, name), log.wrap("gather", gather, name),
                               log.wrap("gather_object", gather_object, name))
    assert sent(FakeTensor(4), 1) == "ok" and sent(FakeTensor(4), src=0) == "ok"
    assert sent(FakeTensor(4), group="ranks 2,3", group_src=1) == "ok"  # the group's rank 1 is rank 3
    assert sent(FakeTensor(4), "a") == "ok"  # no rank: torch says so, the record keeps the call
    assert gathered(FakeTensor(4), [FakeTensor(4)] * 2, 0) == "ok" and gathered(FakeTensor(4), None, 0) == "ok"
    assert objects({"loss": 1.0}, [None, None], dst=0) == "ok"
    assert objects(FakeTensor(2), [FakeTensor(2)] * 2, 0) == "ok"  # objects that are tensors
    assert [e["shapes"] for e in log.snapshot()] == [
        "float32[4] from rank 1", "float32[4] from rank 0", "float32[4] from rank 3", "float32[4] from rank ?",
        "float32[4] to rank 0", "float32[4] to rank 0", "to rank 0", "float32[2] to rank 0"]
    log.add_describer(lambda op, frame: "in dcp.save" if op == "gather_object" else None)
    objects({"plan": 1}, None, 0)  # a library's collective: its root is the library's own
    assert log.snapshot()[-1]["shapes"] == "in dcp.save"
    # an object list every rank gives at one length: by its length, not the root's objects (since 2026-12-07)
    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        return "ok"

    listed = log.wrap("broadcast_object_list", broadcast_object_list, name)
    assert listed([{"lr": 0.1}, FakeTensor(3), [1.0]], src=0) == "ok" and listed(object_list=[None, None], src=0) == "ok"
    assert [e["shapes"] for e in log.snapshot()[-2:]] == ["3 objects from rank 0", "2 objects from rank 0"]


def test_ranks_that_name_different_roots_part_there_with_the_root_hint_not_torchs_check():
    from orchestrate.hangs.collectives import ROOT_HINT

    def waiting(rank: int, shapes: str) -> RankSnapshot:
        return snap(rank, (coll(1), coll(2, shapes, "entered", op="broadcast", at="job.py:10")),
                    stack(10, call="broadcast"))

    hung = probe(5, r0=waiting(0, "float32[4] from rank 0"), r1=waiting(1, "float32[4] from rank 1"))
    lines = diagnose(hung, None, {0, 1}, {}, 30).lines()
    assert lines[0] == ("no progress for 30 s: collective #2: rank 0 entered broadcast(float32[4] from rank 0) at"
                        " job.py:10; rank 1 entered broadcast(float32[4] from rank 1) at job.py:10")
    assert f"  {ROOT_HINT}" in lines and f"  {DEBUG_HINT}" not in lines
    # other tensors from one root: torch's check compares those
    other = diagnose(probe(5, r0=waiting(0, "float32[4] from rank 0"), r1=waiting(1, "float32[8] from rank 0")),
                     None, {0, 1}, {}, 30).lines()
    assert "broadcast(float32[8] from rank 0)" in other[0] and f"  {DEBUG_HINT}" in other and f"  {ROOT_HINT}" not in other
    both = diagnose(probe(5, r0=waiting(0, "float32[4] from rank 0"), r1=waiting(1, "float32[8] from rank 1")),
                    None, {0, 1}, {}, 30).lines()
    assert f"  {ROOT_HINT}" not in both  # the tensors differ too: not the roots alone


def test_a_ranks_record_of_a_failed_collective_is_not_overwritten_by_a_later_answer_until_it_goes_on(tmp_path):
    """The launcher asks the ranks still running where they are as a failure ends the job; a rank
    whose collective failed and is only going down keeps its record of the failure."""
    from orchestrate.node.snapshot import REQUEST_FILE, SnapshotWriter

    log = CollectiveLog()
    writer = SnapshotWriter(str(tmp_path), 0, log)

    def ask(request: str) -> str:
        (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": request}))
        writer.answer_pending()
        return json.loads((tmp_path / "rank0.json").read_text())["reason"]

    assert ask("a") == "requested"
    log.enter("all_reduce", "default", "float32[4]", "train.py:9")
    log.enter("all_reduce", "default", "float32[4]", "train.py:9")
    assert json.loads((tmp_path / REQUEST_FILE).read_text())["id"] == "a"
    assert ask("a2") == "requested" and json.loads((tmp_path / "rank0.json").read_text())["lines"] == {"train.py:9": 2}
    writer.on_collective_failed(log)
    assert json.loads((tmp_path / "rank0.json").read_text())["reason"] == "collective failed"
    assert ask("b") == "collective failed"  # asked as the job ends: the failure's record stands
    log.completed += 1  # it caught the error and completed another collective: it went on
    assert ask("c") == "requested"


def test_an_answer_says_the_share_of_a_core_the_rank_used_over_its_last_looks(tmp_path):
    """One look tells a computing rank from a waiting one: its snapshot thread samples the
    process's CPU time each time it wakes, and an answer says the share used since the oldest."""
    import time as clock

    from orchestrate.node.snapshot import CPU_SAMPLES, POLL_S, REQUEST_FILE, SnapshotWriter

    writer = SnapshotWriter(str(tmp_path), 0, CollectiveLog())
    assert writer.recent_cpu_share() is None  # no look taken yet
    writer.sample_cpu()
    assert writer.recent_cpu_share() is None  # too recent to say
    writer.cpu_samples.clear()
    writer.cpu_samples.append((clock.monotonic() - 2.0, clock.process_time() - 1.0))  # a core's half, 2 s ago
    share = writer.recent_cpu_share()
    assert share is not None and 0.45 < share < 0.6
    (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": "a"}))
    writer.answer_pending()
    answered = RankSnapshot.from_json(json.loads((tmp_path / "rank0.json").read_text()))
    assert answered.cpu_recent is not None and 0.45 < answered.cpu_recent < 0.6
    # only the last looks count: the oldest goes as a new one comes
    for _ in range(CPU_SAMPLES):
        writer.sample_cpu()
    assert len(writer.cpu_samples) == CPU_SAMPLES and clock.monotonic() - writer.cpu_samples[0][0] < POLL_S
    # with no earlier look of the launcher's, the diagnosis takes the rank's own share
    computing = diagnose(probe(0, r0=RankSnapshot(0, "node0", 10, 0.0, 5.0, stack(30, call="matmul"), (), 0,
                                                  cpu_recent=0.97)), None, {0}, {}, 0.0)
    assert [(a.state, a.detail) for a in computing.activities] == [("busy", "computing (97% of a core)")]
    waiting = diagnose(probe(0, r0=RankSnapshot(0, "node0", 10, 0.0, 5.0, stack(30, call="matmul"), (), 0,
                                                cpu_recent=0.01)), None, {0}, {}, 0.0)
    assert [a.state for a in waiting.activities] == ["idle"]


def test_tensors_are_described_by_dtype_and_shape_and_other_arguments_left_out():
    assert describe_tensors((FakeTensor(2, 3), "sum", [FakeTensor(1)] * 4)) == "float32[2,3], 4x float32[1]"
    assert describe_tensors(([{"a": 1}],)) == ""


def test_the_record_file_of_a_run_is_in_its_debug_directory(tmp_path):
    from orchestrate.hangs.snapshots import debug_dir

    assert debug_dir(tmp_path) == Path(tmp_path) / "debug"


def answering_worker(job, rank: int, collectives: list[dict], busy: bool = False, stop=None,
                     cpu_recent: Optional[float] = None, **more):
    """A Script.then that starts a worker's snapshot thread, as the hook does: it answers the
    launcher's requests in the run's debug directory (``busy``: its CPU time grows as it runs;
    ``cpu_recent``: the share of a core it says it used over its last looks; ``more``: other
    fields of its answers, such as ``debugger``)."""
    import threading
    import time

    def serve() -> None:
        directory = job.run_dir / "debug"
        started, answered = time.monotonic(), None
        while not (stop and stop.is_set()):
            try:
                request = json.loads((directory / "request.json").read_text())["id"]
            except (OSError, ValueError):
                request = None
            if request and request != answered:
                answered = request
                (directory / f"rank{rank}.json").write_text(json.dumps({
                    "request": request, "rank": rank, "pid": 40 + rank, "node": f"node{rank}", "completed": 1,
                    "time": time.time(),
                    "cpu_s": time.monotonic() - started if busy else 1.0, "cpu_recent": cpu_recent,
                    "collectives": collectives,
                    "stacks": [{"thread": "MainThread", "main": True,
                                "frames": [["train.py", 20 + rank, "<module>", ""]]}], **more}))
            time.sleep(0.05)

    return lambda: threading.Thread(target=serve, daemon=True).start()


@pytest.fixture
def quick_watchdog(monkeypatch):
    """The watchdog's looks a second apart, their answers half a second later."""
    monkeypatch.setattr("orchestrate.hangs.watchdog.RECHECK_S", 1.0)
    monkeypatch.setattr("orchestrate.hangs.watchdog.ANSWER_WINDOW_S", 0.5)


@pytest.mark.timeout(60)
def test_the_traceback_of_a_rank_that_dies_of_its_collectives_timeout_does_not_take_its_hang_back(make_run,
                                                                                                 quick_watchdog):
    """Said to look hung, then a --collective-timeout ends rank 0's wait: the traceback torch's
    excepthook prints as the rank dies ([rank0]: ...) is its end, not the job moving again; before,
    the run said 'the job moved again ...: what looked hung was a long wait', then failed HUNG."""
    import threading

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    out = io.StringIO()
    job = make_run(nodes=2, hang_diagnose_after=2, out=out)
    stuck = [{"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
              "state": "entered"}]
    dying = ["[0|0]:[rank0]: Traceback (most recent call last):", '[0|0]:[rank0]:   File "/workspace/train.py",'
             " line 9, in <module>", "[0|0]:[rank0]:     dist.all_reduce(t)", "[0|0]:[rank0]: RuntimeError:"
             " [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 40000ms for recv operation to complete"]
    job.client = fake_engine(
        FakeDockerClient(),
        node0=[Script(["[0|0]:step 1"], exit_code=1, then=answering_worker(job, 0, stuck, stop=stop), after=dying,
                      after_when=lambda: "the job looks hung" in out.getvalue())],
        node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, stuck, stop=stop))])
    try:
        job.run()
    finally:
        stop.set()
    text = out.getvalue()
    assert "the job looks hung" in text and "Timed out waiting 40000ms" in text
    assert "the job moved again" not in text, text


def test_a_rank_is_dying_from_its_tracebacks_first_line_while_its_lines_keep_torchs_prefix():
    """A review (session 113): every line beginning ``[rankN]: `` was taken as a dying rank's, so a
    script that prints in that style (``[rank0]: epoch 3 loss 0.52``) never took a hang back."""
    from orchestrate.hangs.watchdog import DyingRanks

    ranks = DyingRanks()
    assert not ranks.dying_line(0, "[rank0]: epoch 3 loss 0.52")  # the script's own style
    assert ranks.dying_line(0, "[rank0]: Traceback (most recent call last):")
    assert not ranks.dying_line(1, "[rank1]: epoch 3 loss 0.52")  # another rank's own line, meanwhile
    assert ranks.dying_line(0, '[rank0]:   File "/workspace/train.py", line 9, in <module>')
    assert ranks.dying_line(0, "[rank0]: RuntimeError: Timed out waiting 40000ms for recv operation to complete")
    assert not ranks.dying_line(0, "epoch 4 loss 0.5")  # (a new process of the rank, after a restart)
    assert not ranks.dying_line(0, "[rank0]: epoch 5 loss 0.49")


@pytest.mark.timeout(60)
def test_the_lines_of_a_hung_runs_own_end_do_not_take_its_hang_back(make_run, quick_watchdog):
    """Said to look hung, then ended by --hang-timeout: what its ranks print as they are stopped
    is the end the launcher made, not the job moving again."""
    import threading

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    out = io.StringIO()
    job = make_run(nodes=2, hang_diagnose_after=2, hang_timeout=4, out=out)
    stuck = [{"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
              "state": "entered"}]
    job.client = fake_engine(
        FakeDockerClient(),
        node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, stuck, stop=stop),
                      on_sigterm=["[0|0]:caught SIGTERM, saving"])],
        node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, stuck, stop=stop),
                      on_sigterm=["[1|0]:caught SIGTERM, saving"])])
    try:
        result = job.run()
    finally:
        stop.set()
    text = out.getvalue()
    assert result.hung and "the job looks hung" in text and "caught SIGTERM, saving" in text
    assert "the job moved again" not in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("elastic", [{}, {"rdzv": "c10d", "max_restarts": 3}], ids=["static", "elastic"])
def test_a_run_whose_ranks_make_no_progress_ends_hung_with_the_divergence(make_run, quick_watchdog, elastic):
    # (an elastic job's nodes, stopped for the hang, are not restarted: the job is ending)
    import threading

    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, hang_timeout=3, **elastic)
    done = {"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
            "state": "done"}
    stuck = [done, {**done, "seq": 2, "state": "entered", "at": "train.py:20"}]
    odd = [done, {**done, "seq": 2, "shapes": "float32[1]", "state": "entered", "at": "train.py:21"}]
    job.client = client = fake_engine(
        FakeDockerClient(), node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, stuck, stop=stop))],
        node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, odd, stop=stop))])
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.hung and result.exit_code == 1
    assert not [call for call in client.calls if call[0] == "restart"] and result.recoveries == []
    assert result.hang is not None and result.hang.divergence is not None
    assert result.hang.divergence.text == ("collective #2: rank 0 entered all_reduce(float32[4]) at train.py:20;"
                                           " rank 1 entered all_reduce(float32[1]) at train.py:21")
    summary = format_summary(result)
    assert "HUNG: no progress for " in summary and "(--hang-timeout 3): collective #2" in summary
    assert result.hang.said  # said as it hung, on the output the summary goes to: its long hints are not said again
    assert [r.state.value for r in result.results] == ["stopped", "stopped"]
    assert result.failure is not None and result.failure.describe().startswith("HUNG: no progress")
    outcome = json.loads((job.run_dir / "outcome.json").read_text())
    assert outcome["hang"]["divergence"] == result.hang.divergence.text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cpu_recent, collective_timeout", [(None, None), (0.01, None), (0.97, None), (0.97, 40)])
def test_a_collective_timeout_places_the_rank_that_wrote_no_record_by_its_answer_as_the_job_ended(make_run,
                                                                                                    cpu_recent,
                                                                                                    collective_timeout):
    """Rank 0's all-reduce times out while rank 1 is outside any collective: the launcher asks
    the ranks still running where they are as the failure ends the job, and rank 1's answer
    places it (without it, rank 1 "did not answer"). A rank 1 that was computing as it answered
    (by the CPU it used over its last looks) makes it a timeout shorter than its work, not a hang."""
    import threading

    from orchestrate.hangs.diagnosis import SHORT_TIMEOUT_HINT
    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine
    from tests.unit.test_launcher import report

    stop = threading.Event()
    job = make_run(nodes=2, collective_timeout=collective_timeout)
    done = {"seq": 7, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
            "state": "done"}

    def timed_out() -> None:
        (job.run_dir / "debug").mkdir(exist_ok=True)
        (job.run_dir / "debug" / "rank0.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": 0, "time": time.time() + 1.0,  # into its run
            "stacks": [],
            "collectives": [done, {**done, "seq": 8, "state": "failed"}]}))

    exc = "RuntimeError: [../gloo/unbound_buffer.cc:78] Timed out waiting 40000ms for recv operation to complete"
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:step 7", f"[0|0]:{exc}", *report(0, 0, exc=exc)], exit_code=1,
                                           then=timed_out)],
                             node1=[Script(["[1|0]:step 7"], hang=True,
                                           then=answering_worker(job, 1, [done], stop=stop, cpu_recent=cpu_recent))])
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.hang is not None and result.hang.cause.startswith("a collective timed out on node0 rank 0")
    summary = format_summary(result)
    if cpu_recent is not None and cpu_recent > 0.5:
        assert not result.hung and not result.hang.hung
        assert result.hang.headline == ("a collective timed out on node0 rank 0 (Timed out waiting 40000ms for recv"
                                        " operation to complete) as the job still worked: rank 1 computing")
        assert "HUNG" not in summary and f"FAILED: node0 rank 0 failed (exit code 1): {exc}" in summary
        assert f"\n  {result.hang.headline}\n" in summary and f"\n  rank 1 is computing (97% of a core)\n" in summary
        if collective_timeout is None:
            assert f"\n  {SHORT_TIMEOUT_HINT}\n" in summary
        else:  # the run's own option, not a suggestion of it (until 2026-12-07)
            assert SHORT_TIMEOUT_HINT not in summary
            assert ("takes longer than the process group's timeout, this run's --collective-timeout 40 (where the"
                    " script gives its process groups none of their own), so give a --collective-timeout longer than"
                    " 40 (or init_process_group a longer timeout of its own) or let every rank take part") in summary
        assert "at the last look" not in repr(result) and result.hang.headline not in repr(result)
        return
    assert result.hung and SHORT_TIMEOUT_HINT not in summary
    assert result.hang.headline.endswith("rank 0 waits in all_reduce(float32[4]) #8 at train.py:9; rank 1 is at #7"
                                         " (not in a collective: <module> at train.py:21)")
    assert summary.count(f"HUNG: {result.hang.headline}") == 1
    # the failed rank's record says which collective failed (a judge's hint reads it)
    assert {r.node.name: r.root_cause.collective for r in result.results if r.root_cause} == {
        "node0": "all_reduce(float32[4])"}


@pytest.mark.timeout(60)
def test_a_quiet_run_whose_rank_computes_is_not_ended(make_run, quick_watchdog):
    import threading
    import time

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, hang_timeout=2)
    waiting = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    started = time.monotonic()
    later = lambda: time.monotonic() - started > 6  # noqa: E731 - the long step's end
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:evaluating"], then=answering_worker(job, 0, [], busy=True, stop=stop),
                                           after=["agent: workers done"], after_when=later)],
                             node1=[Script(["[1|0]:waiting"], then=answering_worker(job, 1, waiting, stop=stop),
                                           after=["agent: workers done"], after_when=later)])
    try:
        result = job.run()
    finally:
        stop.set()
    # no rank's line after the look that found it working, and still none of it kept: the job ended by itself
    assert result.succeeded and result.hang is None
    text = job.out.getvalue()
    assert "but the job is working: rank 0 computing" in text and "HUNG" not in text


@pytest.mark.timeout(60)
def test_a_time_limit_shorter_than_the_watchdogs_wait_looks_at_every_rank_before_it_stops_them(make_run,
                                                                                                quick_watchdog):
    """A test's time limit (``ddp_cluster.run(timeout=10)``) under --hang-diagnose-after's 120 s:
    the watchdog never looked, so the limit looks once before it stops the nodes."""
    import threading

    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, timeout_s=4)
    waiting = [{"seq": 3, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, waiting, stop=stop),
                                           on_sigterm=["[0|0]:saving a checkpoint before exiting"])],
                             node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, waiting, stop=stop))])
    try:
        result = job.run()
    finally:
        stop.set()
    # (the line rank 0 wrote as the stop came is no progress that undoes the look)
    assert "saving a checkpoint before exiting" in job.out.getvalue()
    assert result.error.startswith("timed out") and result.hang is not None and result.hang.hung
    said = job.out.getvalue().splitlines()
    look = next(i for i, line in enumerate(said) if "at the time limit, hung: no progress for " in line)
    assert any("time limit of 4 s: stopping every node" in line for line in said[look + 1:])  # looked, then stopped
    lines = format_summary(result).splitlines()
    assert any(re.fullmatch(r"  while hung: no progress for \d+ s: rank 0: barrier at train.py:20 in <module>; rank 1:"
                            r" barrier at train.py:21 in <module>", line) for line in lines), "\n".join(lines)
    # what a failed `assert result.succeeded` shows says it too
    assert re.fullmatch(r"RunResult\(test-run: FAILED \(exit code 1\): timed out: the job did not end within 4 s; while"
                        r" hung: no progress for \d+ s: rank 0: barrier at train.py:20 in <module>; rank 1: barrier at"
                        r" train.py:21 in <module>\)", repr(result)), repr(result)
    # the watchdog turned off: no look, and nothing said of where the ranks were
    stop.clear()
    quiet = make_run("quiet-run", nodes=2, timeout_s=3, hang_diagnose_after=0)
    quiet.client = fake_engine(FakeDockerClient(),
                               node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(quiet, 0, waiting, stop=stop))],
                               node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(quiet, 1, waiting, stop=stop))])
    try:
        ended = quiet.run()
    finally:
        stop.set()
    assert ended.error.startswith("timed out") and ended.hang is None
    assert "at the time limit" not in quiet.out.getvalue()


@pytest.mark.timeout(60)
def test_ctrl_c_on_a_quiet_job_looks_at_every_rank_before_it_stops_them(make_run, quick_watchdog, when):
    """A user's Ctrl-C on a job that looks stuck, before --hang-diagnose-after's 120 s: where every
    rank waits is said and kept in the summary, then the nodes get their SIGTERM; a further
    Ctrl-C during the look cuts it short and kills them."""
    import _thread
    import threading
    import time

    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    waiting = [{"seq": 3, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    stop = threading.Event()
    job = make_run(nodes=2, stop_grace=5)
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, waiting, stop=stop),
                                           on_sigterm=["[0|0]:stopped by SIGTERM"])],
                             node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(job, 1, waiting, stop=stop))])
    quiet_since: list[float] = []

    def quiet_for_2_s() -> bool:
        if not quiet_since and job.out.getvalue().count("step 1") == 2:
            quiet_since.append(time.monotonic())
        return bool(quiet_since) and time.monotonic() - quiet_since[0] > 2

    when(quiet_for_2_s, _thread.interrupt_main)
    try:
        result = job.run()
    finally:
        stop.set()
    said = job.out.getvalue().splitlines()
    look = next(i for i, line in enumerate(said) if "at the interrupt, hung: no progress for " in line)
    assert re.search(r"no progress for \d+ s: looking where every rank waits before they stop \(1 s\)$", said[look - 1])
    assert any("stopped by SIGTERM" in line for line in said[look + 1:])  # looked, then stopped
    assert result.interrupted and result.exit_code == 130 and result.hang is not None and result.hang.hung
    assert any(re.fullmatch(r"  while hung: no progress for \d+ s: rank 0: barrier at train.py:20 in <module>; rank 1:"
                            r" barrier at train.py:21 in <module>", line) for line in format_summary(result).splitlines())

    # a further Ctrl-C during the look: no verdict, and the nodes killed at once
    stop.clear()
    again = make_run("again-run", nodes=1, stop_grace=60)
    again.client = fake_engine(FakeDockerClient(),
                               node0=[Script(["[0|0]:step 1"], hang=True, ignore_sigterm=True,
                                             then=answering_worker(again, 0, waiting, stop=stop))])
    quiet_since.clear()

    def quiet_again() -> bool:
        if not quiet_since and "step 1" in again.out.getvalue():
            quiet_since.append(time.monotonic())
        return bool(quiet_since) and time.monotonic() - quiet_since[0] > 2

    when(quiet_again, _thread.interrupt_main)
    when(lambda: "looking where every rank waits" in again.out.getvalue(), _thread.interrupt_main)
    started = time.monotonic()
    try:
        ended = again.run()
    finally:
        stop.set()
    assert time.monotonic() - started < 30  # not the 60 s grace
    assert "interrupted again: killing every node now" in again.out.getvalue()
    assert "at the interrupt" not in again.out.getvalue() and ended.hang is None
    assert [r.exit_code for r in ended.results] == [137]


@pytest.mark.timeout(60)
def test_a_time_limit_takes_no_look_at_a_job_that_prints_and_a_job_done_during_the_look_succeeds(make_run,
                                                                                                 quick_watchdog,
                                                                                                 monkeypatch):
    import threading
    import time

    from tests.fakes import FakeDockerClient, Script, fake_engine

    waiting = [{"seq": 3, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    # a job that prints to the end, too slow for its limit: no look, nothing said of a hang
    stop = threading.Event()
    printing = make_run("printing", nodes=2, timeout_s=3)
    printing.client = fake_engine(FakeDockerClient(),
                                  node0=[Script([f"[0|0]:step {i}" for i in range(200)], delay_s=0.05, hang=True,
                                                then=answering_worker(printing, 0, waiting, stop=stop))],
                                  node1=[Script(["[1|0]:step 1"], hang=True,
                                                then=answering_worker(printing, 1, waiting, stop=stop))])
    try:
        result = printing.run()
    finally:
        stop.set()
    assert result.error.startswith("timed out") and result.hang is None
    assert "at the time limit" not in printing.out.getvalue()
    # a job whose last line came a moment before the limit (within a look's recheck): no look either
    monkeypatch.setattr("orchestrate.hangs.watchdog.RECHECK_S", 2.5)
    stop = threading.Event()
    moments = make_run("moments", nodes=2, timeout_s=3)
    begun = time.monotonic()
    near_the_limit = lambda: time.monotonic() - begun > 2.4  # noqa: E731
    moments.client = fake_engine(FakeDockerClient(),
                                 node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(moments, 0, waiting, stop=stop),
                                               after=["[0|0]:step 2"], after_when=near_the_limit)],
                                 node1=[Script(["[1|0]:step 1"], hang=True, then=answering_worker(moments, 1, waiting, stop=stop))])
    try:
        result = moments.run()
    finally:
        stop.set()
    assert "step 2" in moments.out.getvalue()
    assert result.error.startswith("timed out") and result.hang is None
    # a quiet job whose nodes end during the look (after the limit, by themselves): it succeeded
    stop = threading.Event()
    late = make_run("late", nodes=2, timeout_s=3)
    started = time.monotonic()
    after_limit = lambda: time.monotonic() - started > 3.6  # noqa: E731 - in the look, which takes 1 s here
    late.client = fake_engine(FakeDockerClient(),
                              node0=[Script(["[0|0]:step 1"], then=answering_worker(late, 0, waiting, stop=stop),
                                            after=["agent: workers done"], after_when=after_limit)],
                              node1=[Script(["[1|0]:step 1"], then=answering_worker(late, 1, waiting, stop=stop),
                                            after=["agent: workers done"], after_when=after_limit)])
    try:
        done = late.run()
    finally:
        stop.set()
    assert done.succeeded and not done.error, repr(done)
    assert "time limit of 3 s: stopping every node" not in late.out.getvalue()


@pytest.mark.timeout(60)
def test_a_quiet_working_run_its_time_limit_ends_says_where_the_ranks_were_at_the_last_look(make_run, quick_watchdog):
    """Rank 0 computes on (a loop that never ends) while rank 1 waits in a barrier: no hang to
    end, but the run's time limit ends it, and the summary says where each was."""
    import threading

    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, hang_timeout=2, timeout_s=8)
    waiting = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:evaluating"], hang=True,
                                           then=answering_worker(job, 0, [], busy=True, stop=stop))],
                             node1=[Script(["[1|0]:waiting"], hang=True, then=answering_worker(job, 1, waiting, stop=stop))])
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.error.startswith("timed out") and result.hang is not None and not result.hang.hung
    lines = format_summary(result).splitlines()
    look = next(i for i, line in enumerate(lines) if line.startswith("  at the last look: "))
    assert re.fullmatch(r"  at the last look: no output for \d+ s, but the job is working: rank 0 computing",
                        lines[look]), lines[look]
    assert lines[look - 1].startswith("FAILED: timed out") or lines[look - 2].startswith("FAILED: timed out")
    assert "  rank 1: barrier at train.py:21 in <module>" in lines[look + 1:]
    assert not any(line.startswith("HUNG") for line in lines)


@pytest.mark.timeout(60)
def test_worker_lines_are_progress_whatever_the_ranks_answer(make_run, quick_watchdog):
    import threading

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=1, hang_timeout=2)
    stuck = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    steps = [f"[0|0]:step {i}" for i in range(60)]  # one line every 0.1 s, for 6 s: never 2 s of quiet
    job.client = fake_engine(FakeDockerClient(), node0=[Script(steps, delay_s=0.1)])
    answering_worker(job, 0, stuck, stop=stop)()  # stuck in a barrier, and idle, all along
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.succeeded and result.hang is None, job.out.getvalue()[-2000:]


@pytest.mark.timeout(60)
def test_torchs_own_retry_warnings_are_not_progress(make_run, quick_watchdog):
    import threading

    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=1, hang_timeout=2)
    stuck = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    retries = [f"[0|0]:[W1125 04:47:{i:02d}.251384384 socket.cpp:767] [c10d] The client socket has failed to connect"
               f" to [localhost]:23456 (errno: 99 - Cannot assign requested address)." for i in range(300)]
    job.client = fake_engine(FakeDockerClient(), node0=[Script(retries, delay_s=0.1, hang=True)])
    answering_worker(job, 0, stuck, stop=stop)()  # stuck in a barrier, and idle, all along
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.hung and result.exit_code == 1, job.out.getvalue()[-2000:]
    assert result.hang is not None and "(--hang-timeout 2)" in result.hang.cause
    printed = job.out.getvalue().count("The client socket has failed to connect")
    assert 0 < printed < 300  # ended while torch still retried (a line every 0.1 s, 30 s of them)


def test_torchs_log_lines_are_told_from_the_scripts_own():
    from orchestrate.hangs.watchdog import is_progress_line

    for torchs in ("[W1125 04:47:18.251384384 socket.cpp:767] [c10d] The client socket has failed to connect",
                   "[rank0]:W1125 04:44:57.430000 25084 torch/_logging/_internal.py:1199] [0/0] Profiler function",
                   "[rank1]:[E1125 04:44:57.430000 ProcessGroupNCCL.cpp:632] [PG 0 Rank 1] Watchdog caught"
                   " collective operation timeout",
                   "I1125 04:44:57.430000 25084 torch/distributed/elastic/agent/server/api.py:525] Rendezvous",
                   # the C++ backtrace under a store's failed connect, at every retry (seen 2026-12-04: a store host
                   # cut off by a partition kept the hang watch from ever growing quiet)
                   "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/socket.cpp:823 (most recent call"
                   " first):",
                   "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7f in libc10.so)",
                   "frame #34: /opt/venv/bin/python() [0x649167]"):
        assert not is_progress_line(torchs), torchs
    for scripts in ("step 10 loss 0.2320", "W1125 is not a date", "[rank0]: Traceback (most recent call last):",
                    "Warning: W1125 04:44:57.430000 quoted", "", "the frame #3 of the clip: done",
                    "Exception raised from the loader: see above"):
        assert is_progress_line(scripts), scripts


@pytest.mark.timeout(60)
@pytest.mark.parametrize("whose", ["the run's", "another terminal's"])
def test_a_fault_that_holds_the_job_as_asked_is_not_a_hang(make_run, quick_watchdog, whose):
    import threading
    import time

    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    spec = "slow:node0,cpus=0.1@t=0..5"
    own = whose == "the run's"
    job = make_run(nodes=1, hang_timeout=1.5, faults=[spec] if own else [])
    stuck = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    started = time.monotonic()

    def done_from_another_terminal() -> None:  # as `python -m orchestrate fault RUN slow:...` notes it
        if not own:
            note_live_fault(job.run_dir, "f1", parse_fault(spec), "node0", "done")

    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:start"], then=done_from_another_terminal,
                                                               after=["[0|0]:done"],
                                                               after_when=lambda: time.monotonic() - started > 6)])
    answering_worker(job, 0, stuck, stop=stop)()  # idle in a barrier while the fault lasts
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.succeeded and not result.hung, job.out.getvalue()[-2000:]
    said = [line for line in job.out.getvalue().splitlines() if "holds the job as asked" in line]
    held_by = re.escape(spec) if own else "a fault from `python -m orchestrate fault`"
    assert len(said) == 1 and re.fullmatch(  # once, past the hang timeout: why it did not end the run
        rf"\[orchestrate\] no progress for \d+ s while {held_by} holds the job as asked: no hang is judged until it"
        r" ends", said[0]), (said, job.out.getvalue()[-2000:])


def test_a_job_held_by_a_fault_past_the_threshold_is_said_once_until_it_moves_again():
    said: list[str] = []
    watch = HangWatch(0, 10, lambda: "r", lambda request, at: None, lambda: {0}, lambda ranks: {}, said.append,
                      lambda: 0.0)
    watch.progress(100.0, held_by="pause:node1@t=0..60")  # (moved: a hold before the job's first move is none)
    watch.progress(105.0, moved=False, held_by="pause:node1@t=0..60")
    watch.progress(109.9, moved=False, held_by="pause:node1@t=0..60")
    assert said == []
    watch.progress(110.0, moved=False, held_by="")  # a debugger's hold, or the job's own end: not said
    assert said == []
    for now in (110.0, 130.0):
        watch.progress(now, moved=False, held_by="pause:node1@t=0..60")
    assert said == ["no progress for 10 s while pause:node1@t=0..60 holds the job as asked: no hang is judged until"
                    " it ends"]
    watch.progress(131.0)  # it moved: a later hold is said again
    watch.progress(145.0, moved=False, held_by="a fault from `python -m orchestrate fault`")
    assert said[1:] == ["no progress for 14 s while a fault from `python -m orchestrate fault` holds the job as asked:"
                        " no hang is judged until it ends"]
    quiet = HangWatch(0, None, lambda: "r", lambda request, at: None, lambda: {0}, lambda ranks: {}, said.append,
                      lambda: 0.0)  # no hang watch: nothing to say
    quiet.progress(0.0)
    quiet.progress(500.0, moved=False, held_by="pause:node1@t=0..600")
    assert len(said) == 2


def test_a_starved_rank_that_computes_is_busy_and_a_waiting_one_is_not():
    """A computing rank on a crowded host may get a tenth of a core (seen in CI: 68%, then under
    25%); a rank waiting in a collective uses under 1% (its snapshot thread, measured)."""
    waiting = (coll(1), coll(2, state="entered"))
    starved = diagnose(probe(5, r0=snap(0, (coll(1),), cpu_s=1.5), r1=snap(1, waiting, cpu_s=1.0)),
                       probe(0, r0=snap(0, (coll(1),), cpu_s=1.0), r1=snap(1, waiting, cpu_s=1.0)), {0, 1}, {}, 30)
    assert not starved.hung and [a.state for a in starved.activities] == ["busy", "collective"]
    idle = diagnose(probe(5, r0=snap(0, (coll(1),), cpu_s=1.035), r1=snap(1, waiting, cpu_s=1.035)),
                    probe(0, r0=snap(0, (coll(1),), cpu_s=1.0), r1=snap(1, waiting, cpu_s=1.0)), {0, 1}, {}, 30)
    assert idle.hung and [a.state for a in idle.activities] == ["idle", "collective"]


def test_a_rank_in_a_ddp_backward_pass_that_computes_is_busy_and_one_that_waits_there_is_in_the_collective():
    """A DDP backward pass is recorded as its gradient all-reduce: a rank in it may be computing
    the gradients (a long backward pass), which is not waiting."""
    backward = (coll(1, shapes="gradients of DDP(Net)"), coll(2, shapes="gradients of DDP(Net)", state="entered"))
    barrier = (coll(1, shapes="gradients of DDP(Net)"), coll(2, op="barrier", shapes="", state="entered"))
    computing = diagnose(probe(5, r0=snap(0, backward, cpu_s=5.0), r1=snap(1, barrier, cpu_s=1.0)),
                         probe(0, r0=snap(0, backward, cpu_s=1.0), r1=snap(1, barrier, cpu_s=1.0)), {0, 1}, {}, 30)
    assert not computing.hung and [a.state for a in computing.activities] == ["busy", "collective"]
    assert computing.headline == "no output for 30 s, but the job is working: rank 0 computing"
    waiting = diagnose(probe(5, r0=snap(0, backward, cpu_s=1.0), r1=snap(1, barrier, cpu_s=1.0)),
                       probe(0, r0=snap(0, backward, cpu_s=1.0), r1=snap(1, barrier, cpu_s=1.0)), {0, 1}, {}, 30)
    assert waiting.hung and [a.state for a in waiting.activities] == ["collective", "collective"]
    assert waiting.headline == ("no progress for 30 s: collective #2: rank 0 entered all_reduce(gradients of DDP(Net))"
                                " at desync.py:11; rank 1 entered barrier() at desync.py:11")
    # a rank that computes in any other collective is still in it
    other = diagnose(probe(5, r0=snap(0, barrier, cpu_s=5.0), r1=snap(1, barrier, cpu_s=1.0)),
                     probe(0, r0=snap(0, barrier, cpu_s=1.0), r1=snap(1, barrier, cpu_s=1.0)), {0, 1}, {}, 30)
    assert [a.state for a in other.activities] == ["collective", "collective"]


def test_callbacks_for_one_module_all_run_once_it_is_imported_in_the_order_given(tmp_path, monkeypatch):
    from orchestrate.node.collective_log import when_imported

    (tmp_path / "later_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ran: list[str] = []
    finders = list(sys.meta_path)
    try:
        when_imported("later_module", lambda: ran.append("first"))
        when_imported("later_module", lambda: ran.append("second"))
        assert ran == []
        import later_module  # noqa: F401

        assert ran == ["first", "second"]
        when_imported("later_module", lambda: ran.append("now"))  # already there: at once
        assert ran == ["first", "second", "now"]
    finally:
        sys.meta_path[:] = finders
        sys.modules.pop("later_module", None)


def test_a_backward_pass_owns_the_collectives_any_thread_makes_while_it_runs():
    """Autograd runs a CUDA backward pass on device threads: a comm hook's collectives there are
    part of the DDP entry, never entries of their own after it."""
    import threading

    log = CollectiveLog()
    inner = log.wrap("all_reduce", lambda tensor, group=None: None, lambda g: "default")

    def backward_pass() -> None:
        worker = threading.Thread(target=inner, args=(FakeTensor(4),))
        worker.start()
        worker.join()

    log.call(backward_pass, (), {}, "all_reduce", "default", "gradients of DDP(Net)", "train.py:25", exclusive=True)
    inner(FakeTensor(4))  # after it: recorded again
    assert [(e["seq"], e["shapes"]) for e in log.snapshot()] == [(1, "gradients of DDP(Net)"), (2, "float32[4]")]
    log.call(backward_pass, (), {}, "all_reduce", "default", "gradients of DDP(Net)", "train.py:25")
    assert [e["shapes"] for e in log.snapshot()][-2:] == ["gradients of DDP(Net)", "float32[4]"]  # not exclusive


def test_a_start_up_callback_that_fails_says_so_and_never_fails_the_import(tmp_path, monkeypatch, capsys):
    from orchestrate.node.collective_log import when_imported

    (tmp_path / "torch_like.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finders = list(sys.meta_path)

    def broken() -> None:
        raise AttributeError("module 'torch.autograd' has no attribute 'backward'")

    try:
        when_imported("torch_like", broken)
        import torch_like

        assert torch_like.VALUE == 1
    finally:
        sys.meta_path[:] = finders
        sys.modules.pop("torch_like", None)
    assert ("[ddp-compose] start-up hook: test_a_start_up_callback_that_fails_says_so_and_never_fails_the_import"
            ".<locals>.broken skipped: AttributeError: module 'torch.autograd' has no attribute 'backward'"
            in capsys.readouterr().err)


def test_stacks_says_the_first_divergence_of_every_kind_though_it_leaves_the_headline_out():
    from orchestrate.supervise.rank_probe import stack_lines

    def lines_of(r0: RankSnapshot, r1: RankSnapshot) -> list[str]:
        found = diagnose(probe(2, r0=r0, r1=r1), probe(0, r0=r0, r1=r1), {0, 1}, {}, 0.0)
        assert found.divergence is not None and found.divergence.text in found.headline
        return stack_lines(found)

    # a desync: the two call sites, then how to catch it
    said = lines_of(snap(0, (coll(3), coll(4, "float32[1]", "entered", at="desync.py:14")), frames=stack(14)),
                    snap(1, (coll(3), coll(4, state="entered"))))
    mismatch = ("collective #4: rank 0 entered all_reduce(float32[1]) at desync.py:14; rank 1 entered"
                " all_reduce(float32[4]) at desync.py:11")
    assert said.index(mismatch) == said.index(DEBUG_HINT) - 1, said
    # before any other hint too, and before where each rank waits now (session 114: past them, last)
    from orchestrate.hangs.diagnosis import MIXED_BARRIERS_HINT, NEW_GROUP_ORDER_HINT
    found = diagnose(barriers_apart(), barriers_apart(), set(range(4)), {}, 0.0)
    said = stack_lines(found)
    assert said.index(found.divergence.text) == said.index(MIXED_BARRIERS_HINT) - 1, said
    found = diagnose(groups_made_in_two_orders(), groups_made_in_two_orders(), set(range(4)), {}, 0.0)
    said = stack_lines(found)
    order = next(i for i, line in enumerate(said) if line.startswith(NEW_GROUP_ORDER_HINT[:40]))
    assert said.index(found.divergence.text) == order - 2 and said[order - 1].startswith("now rank 0 waits"), said
    # a receive its peer never sends
    said = lines_of(snap(0, (coll(1, "", "entered", op="barrier", at="p2p.py:10"),), frames=stack(10, call="barrier")),
                    snap(1, (coll(1, "float32[3]", "entered", op="recv", group="p2p 0->1", at="p2p.py:8"),),
                         frames=stack(8, call="recv")))
    assert ("rank 1 waits in recv(float32[3]) #1 from rank 0 at p2p.py:8; rank 0 waits in barrier() #1 at p2p.py:10"
            in said), said
    # ranks that wait for one that never came: once
    said = lines_of(snap(0, (coll(1), coll(2, state="entered"))), snap(1, (coll(1),), frames=stack(30, "load")))
    assert sum("rank 1 is at #1" in line for line in said) == 1, said


@pytest.mark.timeout(60)
@pytest.mark.parametrize("node1_ends, reason", [
    (False, "has exited: its script returned on node1, whose torchrun runs on"),  # torchrun's exit barrier
    (True, "has exited: its script returned on node1, which finished (exit code 0)"),  # the barrier gave up
])
def test_a_rank_whose_script_returned_is_named_where_the_other_waits_for_it(make_run, quick_watchdog, node1_ends,
                                                                           reason):
    """Rank 1 returned before the collective rank 0 waits in. Its node runs on while torchrun waits
    for the others (up to 5 minutes), then ends 0: either way rank 1 is the one rank 0 waits for."""
    import threading

    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    job = make_run(nodes=2, hang_timeout=3)
    waiting = [{"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[1]", "at": "train.py:9",
                "state": "entered"}]

    def returned() -> None:  # the start-up hook's record of rank 1's script returning
        (job.run_dir / "progress").mkdir(parents=True, exist_ok=True)
        (job.run_dir / "progress" / "rank1.jsonl").write_text(json.dumps(
            {"rank": 1, "finished": True, "after_step": None, "time": time.time(), "attempt": "a"}) + "\n")
    client = FakeDockerClient()
    client.command_outputs[("ddp-test-run-node1-1", "python3")] = (0, b"end\n")  # no worker process left
    job.client = fake_engine(client,
                             node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, waiting, stop=stop))],
                             node1=[Script(["[1|0]:nothing to do"], hang=not node1_ends, then=returned)])
    try:
        result = job.run()
    finally:
        stop.set()
    assert result.hung and result.hang is not None, job.out.getvalue()[-2000:]
    assert [(a.rank, a.state, a.detail) for a in result.hang.activities] == [
        (0, "collective", "waits in all_reduce(float32[1]) #1 at train.py:9"), (1, "exited", reason)]
    summary = format_summary(result)
    assert "  a rank that exits while the others wait for it" in summary


def test_a_fault_that_cuts_the_network_the_ranks_wait_across_is_named_in_the_headline_and_a_hint():
    waiting = (coll(1), coll(2, state="entered"))
    both = (probe(5, r0=snap(0, waiting), r1=snap(1, waiting)), probe(0, r0=snap(0, waiting), r1=snap(1, waiting)))
    found = diagnose(*both, {0, 1}, {}, 60)
    assert found.cut_note == "" and "cut" not in " ".join(found.lines())  # none in effect: nothing said
    found.cut_by = ("partition:node0|node1@step=5",)
    assert found.headline.endswith(
        "ranks 0, 1: all_reduce at desync.py:11 in <module>; injected fault partition:node0|node1@step=5 cuts the"
        " nodes' network")
    assert found.lines()[-1] == "  " + CUT_HINT.format(faults="injected fault partition:node0|node1@step=5")
    assert found.to_json()["cut_by"] == ["partition:node0|node1@step=5"]
    found.cut_by = ("disconnect:node1", "partition:node0|node2")
    assert found.cut_note == "injected faults disconnect:node1, partition:node0|node2 cut the nodes' network"
    # ranks that wait for no other rank (idle outside any collective) wait for no network either
    idle = diagnose(probe(5, r0=snap(0, (coll(1),)), r1=snap(1, (coll(1),))),
                    probe(0, r0=snap(0, (coll(1),)), r1=snap(1, (coll(1),))), {0, 1}, {}, 60)
    idle.cut_by = ("disconnect:node1",)
    assert idle.hung and idle.cut_note == "" and "cut" not in " ".join(idle.lines())
    # a job that works is not the fault's hang
    working = diagnose(probe(5, r0=snap(0, waiting, cpu_s=5.0), r1=snap(1, waiting)), both[1], {0, 1}, {}, 60)
    working.cut_by = ("disconnect:node1",)
    assert not working.hung and not any("cut off" in line for line in working.lines())


def test_a_diagnosis_prints_as_the_summary_says_it_and_a_failed_assert_shows_its_headline():
    waiting = (coll(1), coll(2, state="entered"))
    found = diagnose(probe(5, r0=snap(0, waiting), r1=snap(1, waiting)),
                     probe(0, r0=snap(0, waiting), r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert str(found) == "\n".join(found.lines()) and len(found.lines()) > 1  # print(result.hang): every line
    assert repr(found) == f"HangDiagnosis(hung: {found.headline})"  # `assert result.hang is None`: not 16 fields
    working = diagnose(probe(5, r0=snap(0, waiting, cpu_s=5.0), r1=snap(1, waiting)),
                       probe(0, r0=snap(0, waiting), r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert repr(working) == f"HangDiagnosis(not hung: {working.headline})"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("whose", ["the run's", "another terminal's", "none"])
def test_a_hang_across_a_network_a_fault_cut_names_the_fault_and_no_other(make_run, quick_watchdog, whose):
    import threading

    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault
    from orchestrate.outcome.summary import format_summary
    from tests.fakes import FakeDockerClient, Script, fake_engine

    stop = threading.Event()
    spec = "disconnect:node1"
    slow = "slow:node0,cpus=0.5"  # in effect too, and cuts nothing
    job = make_run(nodes=2, hang_timeout=2, faults=[slow, f"{spec}@t=0"] if whose == "the run's" else [slow])
    stuck = [{"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
              "state": "entered"}]

    def node1_starts() -> None:
        answering_worker(job, 1, stuck, stop=stop)()
        if whose == "another terminal's":  # as `python -m orchestrate fault RUN disconnect:node1` notes it
            for phase in ("doing", "done"):
                note_live_fault(job.run_dir, "f1", parse_fault(spec), "node1", phase)

    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:step 1"], hang=True, then=answering_worker(job, 0, stuck, stop=stop))],
                             node1=[Script(["[1|0]:step 1"], hang=True, then=node1_starts)])
    try:
        result = job.run()
    finally:
        stop.set()
    summary = format_summary(result)
    assert result.hung, summary
    named = spec  # (the run's own, @t=0, is written without its start)
    if whose == "none":
        assert "cuts the nodes' network" not in summary and "cut off" not in summary
        return
    assert result.hang.headline.endswith(f"all_reduce at train.py:21 in <module>; injected fault {named} cuts the"
                                         " nodes' network"), summary
    # said whole as the run hung, then in short in the summary on the same output (since 2026-12-07)
    assert CUT_HINT.format(faults=f"injected fault {named}") in job.out.getvalue()
    assert f"  {CUT_HINT.format(faults=f'injected fault {named}')[:60]}" in summary
    assert "(said in full above)" in summary


def test_a_rank_whose_child_processes_compute_is_working_and_one_in_a_collective_is_not_made_so():
    """rank 0 waits in a pool's map (no collective) while the pool's process computes: it was
    taken as hung, "rank 0 is at #1 (not in a collective: map at pool_prep.py:14)"."""
    from dataclasses import replace

    waiting = (coll(1), coll(2, state="entered"))
    mapping = (Frame("prep.py", 14, "<module>", "res = pool.map(work, range(2))"),
               Frame("/usr/lib/python3.11/multiprocessing/pool.py", 367, "map"),
               Frame("/usr/lib/python3.11/multiprocessing/pool.py", 768, "get"),
               Frame("/usr/lib/python3.11/threading.py", 622, "wait"))
    deadlocked = (Frame("prep.py", 20, "<module>", "with lock:"),)  # a helper process of its own spins on

    def rank_0(children_cpu_s: float, collectives: tuple = (coll(1),)) -> RankSnapshot:
        return replace(snap(0, collectives, frames=mapping), children_cpu_s=children_cpu_s)

    found = diagnose(probe(5, r0=rank_0(9.0), r1=snap(1, waiting)), probe(0, r0=rank_0(4.0), r1=snap(1, waiting)),
                     {0, 1}, {}, 60)
    assert not found.hung
    assert found.activities[0].state == "busy" and found.activities[0].detail.startswith(
        "computing in its child processes (100% of a core) while it waits at map at")
    assert found.headline == "no output for 60 s, but the job is working: rank 0 computing"
    idle = diagnose(probe(5, r0=rank_0(4.0), r1=snap(1, waiting)), probe(0, r0=rank_0(4.0), r1=snap(1, waiting)),
                    {0, 1}, {}, 60)
    assert idle.hung  # its children did nothing meanwhile
    # in a collective, what its children do is no progress of its (a DataLoader's workers prefetching on)
    in_collective = diagnose(probe(5, r0=rank_0(9.0, waiting), r1=snap(1, waiting)),
                             probe(0, r0=rank_0(4.0, waiting), r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert in_collective.hung
    # a rank that waits for no child (a lock it holds): a child of its that spins is no progress of its
    stuck = replace(rank_0(4.0), stack=deadlocked)
    spinning = diagnose(probe(5, r0=replace(stuck, children_cpu_s=9.0), r1=snap(1, waiting)),
                        probe(0, r0=stuck, r1=snap(1, waiting)), {0, 1}, {}, 60)
    assert spinning.hung


def test_a_rank_whose_sockets_move_its_collectives_data_is_working_and_one_whose_sockets_are_quiet_is_not():
    """Every rank waits in an all_reduce of 40 MB over a 10 mbit link, using no CPU: it was taken
    as hung after --hang-timeout, though its sockets moved about 2 MB/s."""
    from dataclasses import replace

    from orchestrate.hangs.diagnosis import MOVING_BYTES_PER_S

    waiting = (coll(1), coll(2, shapes="float32[10000000]", state="entered", at="slow.py:7"))

    def rank(r: int, moved: Optional[int], pid: int = 100, collectives: tuple = waiting) -> RankSnapshot:
        return replace(snap(r, collectives, pid=pid), socket_bytes=moved)

    def judged(now: tuple[Optional[int], Optional[int]], before: tuple[Optional[int], Optional[int]],
               pid: int = 100, collectives: tuple = waiting) -> HangDiagnosis:
        return diagnose(probe(5, r0=rank(0, now[0], pid, collectives), r1=rank(1, now[1], collectives=collectives)),
                        probe(0, r0=rank(0, before[0], collectives=collectives),
                              r1=rank(1, before[1], collectives=collectives)), {0, 1}, {}, 60)

    moving = judged((1_000_000 + 10_000_000, 1_000_000), (1_000_000, 1_000_000))  # rank 0: 2 MB/s
    assert not moving.hung
    assert moving.activities[0].state == "busy"
    assert moving.activities[0].detail == "moving data in all_reduce(float32[10000000]) #2 at slow.py:7 (2.0 MB/s)"
    assert moving.activities[1].state == "collective"  # its own sockets were quiet
    assert moving.headline == "no output for 60 s, but the job is working: rank 0 moving data"
    assert "  rank 0 is moving data in all_reduce(float32[10000000]) #2 at slow.py:7 (2.0 MB/s)" in moving.lines()
    # a hung job's ranks: their sockets quiet, or all but quiet (a store's polls), below the threshold
    quiet = judged((1_000_000, 1_000_000), (1_000_000, 1_000_000))
    assert quiet.hung and quiet.activities[0].detail.startswith("waits in all_reduce")
    below = int(5 * MOVING_BYTES_PER_S) - 1
    assert judged((1_000_000 + below, 1_000_000 + below), (1_000_000, 1_000_000)).hung
    assert not judged((1_000_000 + below + 1, 1_000_000), (1_000_000, 1_000_000)).hung
    # a count that fell (a socket closed meanwhile, taking its bytes along) is no progress either
    assert judged((10, 10), (1_000_000, 1_000_000)).hung
    # a rank that did not count (an older hook, no /proc) is not compared
    assert judged((None, None), (1_000_000, 1_000_000)).hung
    assert judged((10_000_000, 10_000_000), (None, None)).hung
    # outside any collective, moving bytes is no progress of a collective's
    assert judged((11_000_000, 1_000_000), (1_000_000, 1_000_000), collectives=(coll(1),)).hung
    # on a GPU (NCCL), the GPU branch judges: a collective the GPU is in stays a wait
    on_gpu = (coll(1), coll(2, state="running"))
    assert judged((11_000_000, 11_000_000), (1_000_000, 1_000_000), collectives=on_gpu).hung


def test_a_restarted_ranks_socket_bytes_are_not_compared_with_its_predecessors():
    from dataclasses import replace

    from orchestrate.hangs.diagnosis import activity, socket_rate

    waiting = (coll(1), coll(2, state="entered"))
    old = replace(snap(0, waiting, pid=100), socket_bytes=1_000)
    new = replace(snap(0, waiting, pid=200), socket_bytes=50_000_000)  # its count is its own, from 0
    assert socket_rate(old, new, 5.0) == 0.0
    assert activity(0, old, new, 5.0, {}, (), False).detail == "waits in all_reduce(float32[4]) #2 at desync.py:11"
    same = replace(new, pid=old.pid)
    assert RankSnapshot.from_json({"rank": 0, "pid": 100, "socket_bytes": 1_000}).socket_bytes == 1_000
    assert RankSnapshot.from_json({"rank": 0}).socket_bytes is None  # a record of an older hook's
    assert socket_rate(old, same, 5.0) == (50_000_000 - 1_000) / 5.0
    assert activity(0, old, same, 5.0, {}, (), False).detail.startswith("moving data in all_reduce")


def test_the_bytes_a_processs_tcp_sockets_moved_are_counted_and_its_other_descriptors_are_not(tmp_path):
    import socket
    import threading

    from orchestrate.node.snapshot import socket_bytes

    before = socket_bytes()
    assert before is not None
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    unix_a, unix_b = socket.socketpair()  # a Unix socket is no TCP: it counts nothing, and fails nothing
    try:
        payload = b"x" * 1_000_000
        total = 0
        sender = threading.Thread(target=client.sendall, args=(payload,))
        sender.start()
        while total < len(payload):
            total += len(peer.recv(1 << 20))
        sender.join()
        unix_a.sendall(b"y" * 10_000)
        after = socket_bytes()
        # sent by one of this process's sockets and received by another: counted twice, each way once
        assert after is not None and after - before >= 2 * len(payload)
        assert after - before < 2 * len(payload) + 10_000  # the Unix socket's bytes are not counted
        client.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)  # the process's own sockets stay open
    finally:
        for each in (client, peer, server, unix_a, unix_b):
            each.close()
    assert socket_bytes(str(tmp_path / "none")) is None


def test_counting_a_processs_socket_bytes_leaves_its_blocking_sockets_blocking():
    """A review (session 113): the count made a socket object over each descriptor with
    socket.fromfd, which under socket.setdefaulttimeout() (a script's, for its downloads) set
    O_NONBLOCK on the open file the user's descriptor shares: its blocking recv then raised
    BlockingIOError, and a look could crash the job it looked at."""
    import fcntl
    import os
    import socket

    from orchestrate.node.snapshot import socket_bytes

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.settimeout(None)  # blocking, as a store's or a native library's socket is
    socket.setdefaulttimeout(30)
    try:
        assert socket_bytes() is not None
    finally:
        socket.setdefaulttimeout(None)
    try:
        for each in (client, peer):
            assert not fcntl.fcntl(each.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        for each in (client, peer, server):
            each.close()


def test_the_cpu_of_a_processs_live_descendants_is_read_from_proc(tmp_path):
    import os

    from orchestrate.node.snapshot import children_cpu_s

    tick = os.sysconf("SC_CLK_TCK")

    def process(pid: int, parent: int, ticks: int, name: str = "python3") -> None:
        (tmp_path / str(pid)).mkdir()
        # (a command's name may hold spaces and parentheses: the fields are read past its last one)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} 1 1 0 -1 4194560 10 0 0 0"
                                                  f" {ticks} {ticks} 0 0 20 0 1 0 100 1000 10\n")
    process(10, 1, 100)  # the rank
    process(11, 10, 2 * tick, "pool (worker) 1")  # its pool's process: 4 s
    process(12, 11, tick)  # a grandchild: 2 s
    process(13, 1, 50 * tick)  # another's
    (tmp_path / "self").mkdir()
    assert children_cpu_s(10, str(tmp_path)) == 6.0
    assert children_cpu_s(13, str(tmp_path)) == 0.0
    assert children_cpu_s(10, str(tmp_path / "none")) == 0.0


@pytest.mark.timeout(60)
def test_a_real_child_processs_cpu_counts_for_its_parent():
    import os
    import subprocess
    import sys
    import time

    from orchestrate.node.snapshot import children_cpu_s

    before = children_cpu_s(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        deadline = time.monotonic() + 30
        while children_cpu_s(os.getpid()) < before + 0.3:
            assert time.monotonic() < deadline, "the child's CPU never counted"
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()


def test_a_backward_pass_is_counted_apart_from_the_other_collectives_made_from_its_line(tmp_path):
    """u03 of session 114's trial: ``opt.zero_grad(); loss.backward(); opt.step()`` on one line,
    where a ZeroRedundancyOptimizer's step() broadcasts 4 times after each backward pass, and rank
    0 alone makes consolidate_state_dict's broadcast at line 16 after its 3rd step. Rank 1 is in
    its 4th backward pass, not its 16th (every collective made from the line), and rank 0's
    broadcast is named as the likely extra collective, from the records as the nodes write them."""
    from orchestrate.hangs.collectives import UNEVEN_HINT
    from orchestrate.node.ddp_collectives import BACKWARD_PASS
    from orchestrate.node.snapshot import REQUEST_FILE, SnapshotWriter

    def step(log: CollectiveLog) -> None:
        log.call(lambda: None, (), {}, "all_reduce", "default", "gradients of DDP(Net)", "zero.py:14",
                 counted_as=BACKWARD_PASS)
        for _ in range(4):  # the optimizer's step() broadcasts each rank's shard of the parameters
            log.call(lambda: None, (), {}, "broadcast", "default", "float32[16] from rank 0", "zero.py:14")

    answered = {}
    for rank in (0, 1):
        log = CollectiveLog()
        for _ in range(3):
            step(log)
        if rank == 0:
            log.enter("broadcast", "default", "int64[1] from rank 1", "zero.py:16")
        else:
            log.enter("all_reduce", "default", "gradients of DDP(Net)", "zero.py:14", counted_as=BACKWARD_PASS)
        directory = tmp_path / f"rank{rank}"
        directory.mkdir()
        (directory / REQUEST_FILE).write_text(json.dumps({"id": "a"}))
        SnapshotWriter(str(directory), rank, log).answer_pending()
        answered[f"r{rank}"] = RankSnapshot.from_json(json.loads((directory / f"rank{rank}.json").read_text()))
    assert dict(answered["r1"].lines) == {"zero.py:14": 16}  # every collective made from the line
    lines = diagnose(probe(5, **answered), None, {0, 1}, {}, 30).lines()
    assert lines[-1] == ("  rank 1 is in backward pass 4 at zero.py:14, where rank 0 made 3 and called broadcast(int64[1]"
                         " from rank 1) at zero.py:16 in its place, which rank 1 never made: likely the extra collective (one"
                         " rank 0 makes on its own within a step, or one after its training loop, which it left"
                         f" first); {UNEVEN_HINT}")
    # where rank 1 made collectives from line 16 before (a broadcast every epoch), it is not said to be the extra one
    again = dataclasses.replace(answered["r1"], lines=(("zero.py:14", 16), ("zero.py:16", 1)))
    lines = diagnose(probe(5, r0=answered["r0"], r1=again), None, {0, 1}, {}, 30).lines()
    assert lines[-1] == ("  rank 1 is in backward pass 4 at zero.py:14, where rank 0 made 3 and called broadcast(int64[1]"
                         f" from rank 1) at zero.py:16 in its place: {UNEVEN_HINT}")
    # rank 0's script returned instead: rank 1's backward passes are counted so too
    exited = {0: "has exited: its script returned on node0, whose torchrun runs on"}
    alone = diagnose(probe(5, r1=answered["r1"]), None, {0, 1}, exited, 30)
    assert alone.lines()[-1] == f"  rank 1 is in backward pass 4 at zero.py:14: {UNEVEN_HINT}"


def test_a_rank_that_left_its_loop_on_its_own_early_stop_gets_the_hint_to_agree_on_the_stop():
    """u10 of session 114's trial: each rank early-stops on its own validation loss; rank 1 broke
    out after 5 steps and waits in the barrier after its loop, rank 0 is in its 6th backward
    pass. The hint lists a rank's own decision to stop among the causes, with its fix."""
    history = (coll(6, "gradients of DDP(Linear)", at="stop.py:14"),)
    trains_on = snap(0, history + (coll(7, "gradients of DDP(Linear)", "entered", at="stop.py:14"),), stack(14),
                     lines=(("stop.py:14", 6),))
    stopped = snap(1, history + (coll(7, "", "entered", op="barrier", at="stop.py:23"),), stack(23),
                   lines=(("stop.py:14", 5), ("stop.py:23", 1)))
    hint = diagnose(probe(5, r0=trains_on, r1=stopped), None, {0, 1}, {}, 30).lines()[-1]
    assert hint.startswith("  rank 0 is in backward pass 6 at stop.py:14, where rank 1 made 5 and called barrier() at"
                           " stop.py:23 in its place, which rank 0 never made: ")
    assert ("leaves the loop on a decision of its own (early stopping on its own validation loss, a NaN check, a time"
            " budget: agree on it, e.g. all_reduce the stop flag with ReduceOp.MAX before breaking") in hint


def barriers_apart(checked: bool = False) -> Probe:
    """Session 114's u11: ranks 0, 1, 3 in monitored_barrier, rank 2 in a plain barrier (2x2)."""
    snapshots = {rank: dataclasses.replace(
        snap(rank, (coll(1, "", "entered", op="barrier" if rank == 2 else "monitored_barrier",
                         at="mixed.py:8" if rank == 2 else "mixed.py:10"),), stack(8 if rank == 2 else 10)),
        collectives_checked=checked) for rank in range(4)}
    return Probe("b", 5, snapshots)


def test_a_hang_under_torchs_check_is_not_told_to_rerun_with_it_but_what_the_mismatch_means():
    """Session 114's trial reran a hung job with --debug-collectives, as the hint said, and got the
    same hang and the same hint. The rank's record says whether it runs under the check."""
    from orchestrate.hangs.diagnosis import CHECKED_MISSED_HINT

    before = {rank: snap(rank, (coll(5, "float32[4]" if rank else "float32[1]", "entered"),)) for rank in (0, 1)}
    plain = diagnose(Probe("a", 5, before), None, {0, 1}, {}, 30).lines()
    assert f"  {DEBUG_HINT}" in plain and f"  {CHECKED_MISSED_HINT}" not in plain
    checked = {rank: dataclasses.replace(s, collectives_checked=True) for rank, s in before.items()}
    lines = diagnose(Probe("a", 5, checked), None, {0, 1}, {}, 30).lines()
    assert f"  {CHECKED_MISSED_HINT}" in lines and not any("rerun with --debug-collectives" in ln for ln in lines)
    # the rank writes it from its environment: --debug-collectives, or the same level by --env
    assert RankSnapshot.from_json({"rank": 0, "collectives_checked": True}).collectives_checked
    assert not RankSnapshot.from_json({"rank": 0}).collectives_checked  # a record of an older hook's


def test_a_rank_says_in_its_record_whether_it_runs_under_torchs_check(tmp_path, monkeypatch):
    from orchestrate.node.snapshot import REQUEST_FILE, SnapshotWriter

    writer = SnapshotWriter(str(tmp_path), 0, CollectiveLog())
    said = []
    for level, request in (("DETAIL", "a"), ("INFO", "b")):
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", level)
        (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": request}))
        writer.answer_pending()
        said.append(json.loads((tmp_path / "rank0.json").read_text())["collectives_checked"])
    assert said == [True, False]


def test_monitored_barrier_against_barrier_says_to_make_one_barrier_call_not_to_rerun_with_the_check():
    """u11 (session 114): torch's check does not catch it, so --debug-collectives was no help."""
    from orchestrate.hangs.diagnosis import CHECKED_MISSED_HINT, MIXED_BARRIERS_HINT

    for checked in (False, True):
        lines = diagnose(barriers_apart(checked), None, set(range(4)), {}, 20).lines()
        assert f"  {MIXED_BARRIERS_HINT}" in lines, lines
        assert f"  {DEBUG_HINT}" not in lines and f"  {CHECKED_MISSED_HINT}" not in lines
    assert "monitored_barrier on every rank or on none" in MIXED_BARRIERS_HINT


def groups_made_in_two_orders() -> Probe:
    """Session 114's u05 (2x2), as its records were: every rank makes the groups 0,2 1,3 0,1 2,3,
    the odd ranks 0,1 2,3 first; each waits in a later new_group than the one where they parted."""
    made = {0: ("0,2", "1,3", "0,1"), 1: ("0,1", "2,3", "0,2", "1,3"), 2: ("0,2", "1,3", "0,1", "2,3"),
            3: ("0,1", "2,3")}
    return Probe("g", 5, {rank: snap(rank, tuple(
        coll(seq, f"ranks {group}", "entered" if seq == len(groups) else "done", op="new_group", at="order.py:14")
        for seq, group in enumerate(groups, 1)), stack(14, call="new_group")) for rank, groups in made.items()})


def test_groups_made_in_another_order_on_some_ranks_say_so_and_where_each_waits_now():
    """u05: the hint said to make every group on every rank, which the script did, and the
    headline named collective #1, which every rank had finished, as if they waited in it."""
    from orchestrate.hangs.diagnosis import NEW_GROUP_HINT, NEW_GROUP_ORDER_HINT

    found = diagnose(groups_made_in_two_orders(), None, set(range(4)), {}, 20)
    lines = found.lines()
    assert found.headline == ("no progress for 20 s: collective #1, where the ranks' calls first differ (every rank"
                              " went on past it): ranks 0, 2 called new_group(ranks 0,2) at order.py:14; ranks 1, 3"
                              " called new_group(ranks 0,1) at order.py:14")
    hint = next(line for line in lines if line.startswith("  the ranks make the same groups in different orders"))
    assert hint == "  " + NEW_GROUP_ORDER_HINT.format(order=(
        "at #1, ranks 0, 2 make new_group(ranks 0,2), which rank 1 makes as its #3; ranks 1, 3 make new_group(ranks"
        " 0,1), which ranks 0, 2 make as their #3")), hint
    assert f"  {NEW_GROUP_HINT}" not in lines
    assert ("  now rank 0 waits in new_group(ranks 0,1) #3 at order.py:14; rank 1 waits in new_group(ranks 1,3) #4 at"
            " order.py:14; rank 2 waits in new_group(ranks 2,3) #4 at order.py:14; rank 3 waits in new_group(ranks 2,3)"
            " #2 at order.py:14") in lines
    # groups made on their members only: the group one side made there the other never makes
    alone = {0: ("0",), 1: ("0,1",)}
    parted = Probe("g", 5, {rank: snap(rank, tuple(coll(seq, f"ranks {g}", "entered", op="new_group", at="one.py:9")
                                                   for seq, g in enumerate(groups, 1)))
                            for rank, groups in alone.items()})
    lines = diagnose(parted, None, {0, 1}, {}, 20).lines()
    assert f"  {NEW_GROUP_HINT}" in lines and not any("different orders" in line for line in lines)
    assert not any(line.startswith("  now ") for line in lines)  # they wait where they part: said above


def test_ranks_behind_at_one_place_are_named_together():
    """Session 114's u09 (2x2): ranks 2, 3 wait for a file outside any collective while ranks 0, 1
    wait in a barrier; each of the two was said one by one."""
    waiting = coll(1, "", "entered", op="barrier", at="local.py:17")
    polling = (Frame("local.py", 14, "<module>", "time.sleep(0.5)"),)
    snapshots = {**{r: snap(r, (waiting,), stack(17, call="barrier")) for r in (0, 1)},
                 **{r: snap(r, (), polling) for r in (2, 3)}}
    found = first_divergence(snapshots, {0, 1, 2, 3})
    assert found is not None and found.text == ("ranks 0, 1 wait in barrier() #1 at local.py:17; ranks 2, 3 are at #0"
                                                " (not in a collective: <module> at local.py:14)")
    # one rank behind is said as before, and a rank that did not answer by its own words
    alone = {r: s for r, s in snapshots.items() if r != 3}
    assert first_divergence(alone, {0, 1, 2, 3}).text.endswith(
        "; rank 2 is at #0 (not in a collective: <module> at local.py:14); rank 3 did not answer")



def test_ranks_that_made_as_many_steps_one_collective_apart_are_told_of_the_extra_call_not_of_uneven_steps():
    """u02 of session 114's trial (2x2): rank 0 evaluates alone under `if rank == 0:`, an
    all_reduce at line 7, which gloo paired with the others' gradient all-reduce #7; rank 0 went
    on to its next backward pass (#8). Every rank is in its 5th backward pass, one collective
    apart: "ranks 1-3 are in backward pass 5, where rank 0 made 5 and is in all_reduce(...) at
    :7 instead" said rank 0 was where it no longer was, and counts alike as if they differed."""
    from orchestrate.hangs.collectives import UNEVEN_HINT

    grads = "gradients of DDP(Linear)"
    evaluating = snap(0, (coll(6, grads, at="e.py:24"), coll(7, "float32[1]", at="e.py:7"),
                          coll(8, grads, "entered", at="e.py:24")), stack(24),
                      lines=(("e.py:24", 5), ("e.py:7", 1)))
    training = snap(1, (coll(6, grads, at="e.py:24"), coll(7, grads, "entered", at="e.py:24")), stack(24),
                    lines=(("e.py:24", 5),))
    hint = diagnose(probe(5, r0=evaluating, r1=training), None, {0, 1}, {}, 30).lines()[-1]
    assert hint == ("  rank 1 is in backward pass 5 at e.py:24, and rank 0 made 5 too, one collective apart: rank 0"
                    " called all_reduce(float32[1]) at e.py:7 before it, which rank 1 never made: likely an extra"
                    " collective rank 0 makes on its own within a step, which set every collective after it one apart;"
                    f" {UNEVEN_HINT}")


def test_groups_made_in_two_orders_before_the_last_collectives_shown_are_still_said_made_in_two_orders():
    """Session 115 (h2): the new_group hint read the diagnosis's last 8 collectives of each rank
    (what it shows), though the records keep 64: a job that made its groups, trained ten steps on
    the default group and hung in a subgroup was told to make every group on every rank, which
    it did. The groups made are read from the whole record."""
    from orchestrate.hangs.diagnosis import COLLECTIVES_SHOWN, NEW_GROUP_HINT, NEW_GROUP_ORDER_HINT

    made = {0: ("0,2", "1,3", "0,1", "2,3"), 1: ("0,1", "2,3", "0,2", "1,3"), 2: ("0,2", "1,3", "0,1", "2,3"),
            3: ("0,1", "2,3", "0,2", "1,3")}
    snapshots = {}
    for rank, groups in made.items():
        calls = tuple(coll(seq, f"ranks {group}", op="new_group", at="order.py:14")
                      for seq, group in enumerate(groups, 1))
        steps = tuple(coll(seq, at="order.py:20") for seq in range(5, 5 + COLLECTIVES_SHOWN + 2))
        waiting = coll(1, state="entered", group="ranks 0,1" if rank < 2 else "ranks 2,3", at="order.py:25")
        snapshots[rank] = snap(rank, calls + steps + (waiting,), stack(25))
    found = diagnose(Probe("g", 5, snapshots), None, set(range(4)), {}, 20)
    assert all(not any(c["op"] == "new_group" for c in shown) for shown in found.collectives.values())
    lines = found.lines()
    assert "  " + NEW_GROUP_ORDER_HINT.format(order=(
        "at #1, ranks 0, 2 make new_group(ranks 0,2), which ranks 1, 3 make as their #3; ranks 1, 3 make"
        " new_group(ranks 0,1), which ranks 0, 2 make as their #3")) in lines, lines
    assert f"  {NEW_GROUP_HINT}" not in lines

