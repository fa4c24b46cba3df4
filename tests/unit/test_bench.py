"""The benchmarks' summaries: pure functions of the figures."""
from __future__ import annotations

import pytest

from orchestrate.bench.collectives import collectives_summary, format_collectives
from orchestrate.bench.ddp import ddp_summary, format_ddp
from orchestrate.bench.launcher import format_launcher, launcher_summary


def all_reduce_at_64mb(busbw: float, pairs: int = 1, **wire: float) -> dict:
    """The results of a 2-node bench collectives: one 64 MB all_reduce, and the wire."""
    return {"world_size": 2 * pairs, "nodes": 2, "local_world_size": pairs,
            "wire": {**wire, "pairs": pairs, "bytes": 1},
            "results": [{"op": "all_reduce", "size": 64 << 20, "time_s": 0.07, "iters": 5,
                         "algbw_Bps": busbw * pairs / (2 * pairs - 1), "busbw_Bps": busbw, "ok": True}]}


def test_busbw_is_set_against_one_tcp_stream_and_the_goal_is_judged():
    results = all_reduce_at_64mb(0.96e9, single_stream_Bps=1.5e9, per_pair_Bps=1.5e9)
    summary = collectives_summary(results, "rate=1gbit")
    assert summary["all_reduce_64MB_of_wire"] == pytest.approx(0.64)
    assert summary["link"] == "rate=1gbit"
    text = format_collectives(summary)
    assert "all_reduce busbw at 64 MB: 64% of one TCP stream (meets the 60% goal)" in text
    assert " 64M " in text


def test_all_reduce_is_also_set_against_the_wire_both_ways():
    results = all_reduce_at_64mb(0.9e9, single_stream_Bps=2.0e9, per_pair_Bps=2.0e9, both_ways_Bps=1.2e9)
    summary = collectives_summary(results)
    assert summary["all_reduce_64MB_of_wire"] == pytest.approx(0.45)
    assert summary["all_reduce_64MB_of_both_ways"] == pytest.approx(0.75)
    assert summary["both_ways_of_single_stream"] == pytest.approx(0.6)
    text = format_collectives(summary)
    assert "both ways at once 1.200 GB/s each way (60% of one stream)" in text
    assert "45% of one TCP stream (misses the 60% goal); 75% of the wire both ways, its ceiling" in text


def test_both_ways_summed_over_several_pairs_is_not_called_the_all_reduces_ceiling():
    results = all_reduce_at_64mb(0.45e9, pairs=2, single_stream_Bps=1.5e9, per_pair_Bps=3.0e9, both_ways_Bps=1.8e9)
    summary = collectives_summary(results)
    assert summary["all_reduce_64MB_of_both_ways"] is None
    text = format_collectives(summary)
    assert "both ways at once 1.800 GB/s each way" in text and "ceiling" not in text


def test_without_a_second_node_there_is_no_wire_fraction():
    summary = collectives_summary({"wire": None, "results": [{"op": "broadcast", "size": 4, "time_s": 1e-4,
                                   "iters": 5, "algbw_Bps": 4e4, "busbw_Bps": 4e4, "ok": True}]})
    assert summary["results"][0]["of_wire"] is None and summary["all_reduce_64MB_of_wire"] is None


def test_ddp_overhead_efficiency_and_speedup_over_the_naive_form():
    run = {"model": "resnet50", "nodes": 2, "local_world_size": 1, "parameter_tensors": 161, "forms": [
        {"form": "local", "step_s": 1.0}, {"form": "ddp-1MB", "step_s": 1.25}, {"form": "ddp-25MB", "step_s": 1.1},
        {"form": "naive", "step_s": 2.2}]}
    summary = ddp_summary(run)
    assert summary["best_ddp"] == "ddp-25MB"
    assert summary["overhead"] == pytest.approx(0.1)
    assert summary["scaling_efficiency"] == pytest.approx(1 / 1.1)
    assert summary["speedup_over_naive"] == pytest.approx(2.0)
    assert "2.00x faster than one all_reduce per parameter (meets the 1.5x goal; 161 tensors)" in format_ddp([summary])


def test_the_launcher_is_judged_against_the_hand_made_baseline():
    summary = launcher_summary({"launcher": [7.0, 7.4, 7.2], "hand-made": [6.8, 6.5, 6.6], "torchx local_docker": []},
                               [{"nodes": 2, "wall_s": 7.2, "bring_up_s": 0.7, "rendezvous_s": 5.0, "job_s": 6.0,
                                 "teardown_s": 0.4}])
    assert summary["ratio_to_hand_made"] == pytest.approx(7.2 / 6.6)
    assert "torchx local_docker" not in summary["side_by_side"]  # not installed: no column
    assert summary["scaling"][0]["rest_of_job_s"] == pytest.approx(1.0)
    assert "launcher / hand-made: 1.09x (meets the 1.1x goal)" in format_launcher(summary)
