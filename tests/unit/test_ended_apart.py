"""Ranks whose every call returned, yet whose collectives ended apart in a group of them all: the
run that succeeded says so (hangs.collectives.ended_apart), and not for subgroups made on their
members only, point-to-point channels, an elastic restart's renumbered ranks or a rank unsaid."""
from __future__ import annotations

from orchestrate.hangs.collectives import ended_apart

DDP = "buffers of DDP(Sequential)"
GRADS = "gradients of DDP(Sequential)"


def training(steps: int, eval_after: int | None = None, start: int = 1) -> list[list]:
    """A DDP training loop's records, as collective_log.at_end keeps them: each step's forward
    broadcast (line 10) and backward all-reduce (line 11), an evaluation's forward (line 15)
    after step ``eval_after``."""
    calls, seq = [], start
    for step in range(steps):
        for op, shapes, line in (("broadcast", DDP, 10), ("all_reduce", GRADS, 11)):
            calls.append(["default", seq, op, shapes, f"h1.py:{line}"])
            seq += 1
        if step == eval_after:
            calls.append(["default", seq, "broadcast", DDP, "h1.py:15"])
            seq += 1
    return calls


def at_end(calls: list[list], world: int = 2, **counts: int) -> dict:
    made = {"default": max((c[1] for c in calls if c[0] == "default"), default=0), **counts}
    return {"counts": made, "calls": calls, "world": str(world)}


def test_rank_0s_evaluation_of_a_ddp_model_ends_its_collectives_one_ahead_and_names_where_they_part():
    said = ended_apart({0: at_end(training(20, eval_after=5)), 1: at_end(training(20))})
    assert said == ("in the default group, the ranks made different numbers of collectives: rank 0 made 41, rank 1"
                    f" made 40; they part at collective #13: rank 0 entered broadcast({DDP}) at h1.py:15; rank 1"
                    f" entered broadcast({DDP}) at h1.py:10")


def test_an_extra_call_at_the_end_is_named_and_records_cut_short_of_the_start_name_none():
    extra = training(3) + [["default", 7, "barrier", "", "h1.py:30"]]
    assert ended_apart({0: at_end(extra), 1: at_end(training(3))}) == (
        "in the default group, the ranks made different numbers of collectives: rank 0 made 7, rank 1 made 6;"
        " the others never made collective #7: rank 0 entered barrier() at h1.py:30")
    # records that keep the last calls only, all alike: the counts alone, no guess at where
    kept = [c for c in extra if c[1] > 2]
    assert ended_apart({0: at_end(kept), 1: at_end([c for c in training(3) if c[1] > 2])}) == (
        "in the default group, the ranks made different numbers of collectives: rank 0 made 7, rank 1 made 6")


def test_ranks_alike_subgroups_of_some_ranks_and_point_to_point_are_no_warning():
    alike = {rank: at_end(training(4), world=3) for rank in range(3)}
    assert ended_apart(alike) == ""
    # new_group(ranks=[0, 1]) of 3 ranks: only its members call it; a group of every rank is compared
    sub = ["ranks 0,1", 1, "all_reduce", "float32[4]", "s.py:5"]
    members = {0: at_end(training(4) + [sub], world=3, **{"ranks 0,1": 1}),
               1: at_end(training(4) + [sub], world=3, **{"ranks 0,1": 1}), 2: alike[2]}
    assert ended_apart(members) == ""
    whole = ["ranks 0,1,2 (2nd group of them)", 1, "barrier", "", "s.py:9"]
    apart = {0: at_end(training(4) + [whole], world=3, **{whole[0]: 1}), 1: alike[1], 2: alike[2]}
    assert ended_apart(apart).startswith("in group ranks 0,1,2 (2nd group of them), the ranks made different"
                                         " numbers of collectives: rank 0 made 1, ranks 1, 2 made 0")
    p2p = {0: at_end(training(4), **{"p2p 0->1": 3}), 1: at_end(training(4), **{"p2p 0->1": 2})}
    assert ended_apart(p2p) == ""


def test_an_elastic_restarts_renumbered_ranks_or_a_rank_that_did_not_say_are_not_compared():
    # rank 1's new process in a world of 2 after a restart from 3: its counts began again
    assert ended_apart({0: at_end(training(20), world=3), 1: at_end(training(5), world=2)}) == ""
    assert ended_apart({0: at_end(training(20), world=3), 1: at_end(training(5), world=3)}) == ""  # rank 2 unsaid
    assert ended_apart({0: at_end(training(20)), 1: {"counts": "?", "calls": [], "world": "2"}}) == ""
