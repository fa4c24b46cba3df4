"""nccl-tests' bandwidth conventions (doc/PERFORMANCE.md), without torch.

algbw = size / time, size being the largest buffer one rank holds (all_gather's output,
reduce_scatter's input); busbw = algbw x a factor that makes it comparable with the link's
speed whatever the rank count n:

- all_reduce: 2(n-1)/n (a reduce-scatter then an all-gather, each moving (n-1)/n of it);
- all_gather, reduce_scatter, all_to_all: (n-1)/n;
- broadcast (and reduce): 1.
"""
from __future__ import annotations

FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second."""
    return size_bytes / seconds


def busbw(op: str, size_bytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth in bytes per second."""
    return algbw(size_bytes, seconds) * FACTORS[op](ranks)
