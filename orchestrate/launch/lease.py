"""The GPU lease: two launches on one host never take the same GPUs.

GPUs are leased by labels on the containers that hold them (``io.ddp-compose.gpus``), so the
host lock is held from reading the free GPUs until the run's containers, with those labels,
exist: another launch then sees them taken.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from orchestrate.config.gpu_layout import check_lease, free_gpus
from orchestrate.config.request import RunRequest
from orchestrate.engine.gpus import GpuInventory, detect_gpus
from orchestrate.engine.locks import host_lock
from orchestrate.engine.runs import gpus_in_use, list_runs


def wants_gpus(request: RunRequest) -> bool:
    """Whether the run may get GPUs (it may still get none: an engine without GPUs runs it on CPUs)."""
    return not request.cpu and request.gpus_per_node != 0


@contextlib.contextmanager
def gpu_lease(client: Any, request: RunRequest, run_id: str, say: Optional[Callable[[str], None]] = None,
              inventory: Optional[GpuInventory] = None) -> Iterator[Optional[tuple[str, ...]]]:
    """Hold the lease while the caller plans and starts run ``run_id``; yield the free GPUs, in
    order. A CPU run takes no lock: one with ``--cpu`` or ``--gpus-per-node 0`` (None is yielded),
    and one on an engine with no GPUs (none are yielded, and the run decides on CPUs as a dry run
    would). ``inventory``: the engine's GPUs where the caller has asked already (else they are
    asked here).

    Raises:
        UsageError: When the GPUs asked for are held by other runs, naming them.
        LockTimeoutError: When another launch holds the lease for too long, naming it.
    """
    if not wants_gpus(request):
        yield None
        return
    inventory = inventory if inventory is not None else detect_gpus(client)
    if not inventory.count:  # nothing to share, so nothing to wait for: another run's bring-up holds no GPU of ours
        yield ()
        return
    with host_lock("gpu-lease", f"run {run_id}", say=say):
        yield free_gpu_ids(client, request, inventory)


def free_gpu_ids(client: Any, request: RunRequest, inventory: Optional[GpuInventory] = None) -> tuple[str, ...]:
    """The engine's GPUs (``inventory``, or asked now) that no live run holds."""
    inventory = inventory if inventory is not None else detect_gpus(client)
    held = gpus_in_use(list_runs(client)) if inventory.count else {}
    if held and request.gpus_per_node:
        # Shared, the run needs one node's GPUs at least; the nodes take turns on them.
        wanted = request.gpus_per_node * (1 if request.share_gpus else request.nodes)
        check_lease(wanted, inventory.indices, held)
    return free_gpus(inventory.indices if inventory.count else (), held)
