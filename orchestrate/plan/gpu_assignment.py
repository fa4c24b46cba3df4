"""Which host GPUs each node and each worker process gets (pure).

Without sharing, node ``i`` gets the ``i``-th block of ``G`` GPUs and each of its ``P``
processes spans ``G/P`` of them. With ``--share-gpus`` the nodes take their blocks in turn
from the GPUs the run has, wrapping around (two nodes, one GPU: both get GPU 0), and when a
node has more processes than GPUs, local rank ``l`` uses its node's GPU ``l mod G``. Two
workers on one GPU then need distinct NCCL host ids: NCCL refuses two ranks of one host on one
GPU ("Duplicate GPU detected"), and tells hosts apart by that id.
"""
from __future__ import annotations


def node_gpus(gpu_ids: tuple[str, ...], node_index: int, gpus_per_node: int, shared: bool) -> tuple[str, ...]:
    """The host GPUs of node ``node_index`` among the run's ``gpu_ids``."""
    if not gpus_per_node:
        return ()
    first = node_index * gpus_per_node
    if not shared:
        return gpu_ids[first:first + gpus_per_node]
    return tuple(gpu_ids[(first + k) % len(gpu_ids)] for k in range(gpus_per_node))


def process_gpus(gpus: tuple[str, ...], nproc_per_node: int) -> tuple[tuple[str, ...], ...]:
    """Each local rank's GPUs: a block of ``G/P`` when there are enough, else GPU ``l mod G``."""
    if not gpus:
        return tuple(() for _ in range(nproc_per_node))
    if nproc_per_node > len(gpus):
        return tuple((gpus[local % len(gpus)],) for local in range(nproc_per_node))
    per_process = len(gpus) // nproc_per_node
    return tuple(gpus[local * per_process:(local + 1) * per_process] for local in range(nproc_per_node))


def shared_gpus(assigned: dict[str, tuple[tuple[str, ...], ...]]) -> dict[str, list[str]]:
    """GPU -> the workers (``node/local L``) that share it, for the GPUs more than one uses.

    Args:
        assigned: Node name -> each local rank's GPUs.
    """
    users: dict[str, list[str]] = {}
    for node, per_process in assigned.items():
        for local, gpus in enumerate(per_process):
            for gpu in gpus:
                users.setdefault(gpu, []).append(f"{node}/local{local}")
    return {gpu: names for gpu, names in users.items() if len(names) > 1}
