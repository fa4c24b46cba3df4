"""How a run uses GPUs (pure): GPUs and processes per node from what was asked and what the engine has."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from orchestrate.errors import UsageError


@dataclass(frozen=True)
class GpuLayout:
    """How a run uses GPUs: per node, and processes per node. ``shared``: nodes, and the
    processes of a node, may share GPUs (``--share-gpus``): node ``i`` takes its GPUs from
    the run's in turn, wrapping around, and local rank ``l`` uses its node's GPU ``l mod G``."""

    gpus_per_node: int
    nproc_per_node: int
    backend: str
    shared: bool = False


def resolve_gpu_layout(
    *,
    nodes: int,
    nproc_per_node: Optional[int],
    gpus_per_node: Optional[int],
    available: Optional[int],
    cpu: bool = False,
    backend: str = "auto",
    share: bool = False,
) -> GpuLayout:
    """Decide GPUs per node, processes per node and the backend, or refuse.

    1. ``--cpu`` (or no GPUs and none asked for): 0 GPUs, Gloo, 1 process per node by default.
    2. ``--gpus-per-node`` not given: all available GPUs split evenly among the nodes (with
       ``--share-gpus``, at least one each).
    3. Processes per node default to one per GPU.
    4. Refused: more GPUs than available; fewer GPUs than nodes (two nodes would share
       one, which NCCL refuses); more processes than GPUs on a node; GPUs that cannot be
       split evenly among the processes that span them. With ``--share-gpus`` the first
       three are allowed: nodes wrap around the GPUs, and processes share their node's.

    Args:
        nodes: Number of nodes.
        nproc_per_node: ``--nproc-per-node``, or None for the default.
        gpus_per_node: ``--gpus-per-node``, or None for the default.
        available: GPUs the engine has, or None when unknown (no engine in a dry run).
        cpu: ``--cpu``.
        backend: ``--backend``: auto, nccl or gloo.
        share: ``--share-gpus``.

    Raises:
        UsageError: With the arithmetic and the alternatives.
    """
    alternatives = "use fewer nodes, fewer processes per node, --share-gpus, or --cpu for the Gloo variant"
    if cpu or (gpus_per_node is None and not available) or gpus_per_node == 0:
        given = "--cpu" if cpu else "--gpus-per-node 0" if gpus_per_node == 0 else ""
        why = given or ("the engine has no GPUs (no NVIDIA runtime in it)" if available == 0
                        else "no GPUs are known here (no engine was asked)")
        or_drop = f", or drop {given}" if given else ""
        if backend == "nccl":
            raise UsageError(f"--backend nccl needs GPUs, and this run has none: {why}; use --backend gloo{or_drop}")
        if share:
            raise UsageError(f"--share-gpus shares GPUs, and this run has none: {why}; drop --share-gpus{or_drop}")
        return GpuLayout(0, nproc_per_node or 1, "gloo")
    if available == 0:  # (GPUs asked for by number): none of the alternatives for fewer of them helps
        raise UsageError(f"--gpus-per-node {gpus_per_node} needs GPUs, and the engine has none (no NVIDIA runtime in"
                         f" it): drop --gpus-per-node, or use --cpu for the Gloo variant")
    if gpus_per_node is None:
        assert available is not None
        if available < nodes and not share:
            raise UsageError(
                f"{available} GPU(s) cannot give {nodes} nodes a GPU each (NCCL refuses two"
                f" nodes on one GPU): use --nodes {available} or fewer, --share-gpus to share them, or --cpu"
            )
        gpus_per_node = max(1, available // nodes)
    if available is not None and share and gpus_per_node > available:
        raise UsageError(f"--gpus-per-node {gpus_per_node} is more than the {available} GPU(s) the engine has,"
                         " even shared: ask for fewer")
    if available is not None and not share and nodes * gpus_per_node > available:
        raise UsageError(
            f"--nodes {nodes} x --gpus-per-node {gpus_per_node} needs {nodes * gpus_per_node}"
            f" GPUs, but the engine has {available}: {alternatives}"
        )
    nproc = nproc_per_node or gpus_per_node
    if nproc > gpus_per_node and not share:
        raise UsageError(
            f"--nproc-per-node {nproc} is more than the {gpus_per_node} GPU(s) per node: each"
            f" process needs its own GPU (NCCL refuses two ranks on one): use fewer processes per node,"
            f" --share-gpus, or --cpu for the Gloo variant"
        )
    if nproc <= gpus_per_node and gpus_per_node % nproc:
        raise UsageError(
            f"--gpus-per-node {gpus_per_node} cannot be split evenly among {nproc} processes"
            f" that each span several GPUs: use a divisor of {gpus_per_node} for --nproc-per-node"
        )
    return GpuLayout(gpus_per_node, nproc, "gloo" if backend == "gloo" else "nccl", share)


def free_gpus(indices: tuple[str, ...], held: dict[str, str]) -> tuple[str, ...]:
    """The host GPUs no live node of another run holds (``held``: GPU id -> run id)."""
    return tuple(g for g in indices if g not in held)


def check_lease(wanted: int, indices: tuple[str, ...], held: dict[str, str]) -> tuple[str, ...]:
    """The first ``wanted`` free GPUs; refused, naming the runs that hold the others.

    Raises:
        UsageError: ``4 GPUs wanted but only 2 are free: GPUs 0,1 are held by run R``.
    """
    free = free_gpus(indices, held)
    if len(free) >= wanted:
        return free[:wanted]
    holders: dict[str, list[str]] = {}
    for gpu, run in sorted(held.items()):
        holders.setdefault(run, []).append(gpu)
    named = "; ".join(f"GPUs {','.join(gpus)} are held by run {run}" for run, gpus in holders.items())
    raise UsageError(f"{wanted} GPU(s) wanted but only {len(free)} of {len(indices)} are free: {named}"
                     " (stop it with `python -m orchestrate stop RUN`, or ask for fewer)")
