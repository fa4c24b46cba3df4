"""The bandwidth arithmetic against nccl-tests' published formulas (doc/PERFORMANCE.md)."""
from __future__ import annotations

import pytest

from app import busbw


@pytest.mark.parametrize("op, ranks, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75), ("all_to_all", 4, 0.75),
    ("broadcast", 2, 1.0), ("broadcast", 16, 1.0),
])
def test_bus_factors_follow_nccl_tests(op, ranks, factor):
    # 1 GB in 1 s: algbw 1 GB/s, busbw = algbw x the factor
    assert busbw.algbw(1e9, 1.0) == 1e9
    assert busbw.busbw(op, 1e9, 1.0, ranks) == pytest.approx(factor * 1e9)


def test_a_worked_example():
    # an all_reduce of 1 GiB in 100 ms on 8 ranks: 10.74 GB/s algbw, x 2*7/8 = 18.79 GB/s busbw
    size, seconds = 2**30, 0.1
    assert busbw.algbw(size, seconds) / 1e9 == pytest.approx(10.737, rel=1e-3)
    assert busbw.busbw("all_reduce", size, seconds, 8) / 1e9 == pytest.approx(18.79, rel=1e-3)
