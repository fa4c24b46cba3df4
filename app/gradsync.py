"""Gradient synchronisation by hand: what DDP does for you, written out.

- :func:`average_gradients`: one all_reduce (SUM) per parameter, then divide by the world
  size (the distributed-primitives notebook's ``average_gradients``).
- :func:`butterfly_all_reduce`: the notebook's butterfly all-reduce, generalised to any
  length: every rank owns one chunk, gathers that chunk from everybody with isend/irecv,
  averages it, and sends the averaged chunk back to everybody.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    """Average every parameter's gradient across ranks, one all_reduce per parameter."""
    world_size = float(dist.get_world_size())
    for param in model.parameters():
        if param.grad is None:
            continue
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size


def butterfly_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Replace ``tensor`` (any shape) by its mean across ranks, in place, with point-to-point ops.

    1. Split the flattened tensor into ``world_size`` chunks; chunk ``i`` belongs to rank ``i``.
    2. Send every other chunk to its owner; receive everybody's copy of our own chunk.
    3. Average the copies of our chunk.
    4. Send our averaged chunk to everybody; receive every other averaged chunk from its owner.

    Returns:
        ``tensor``, now holding the mean.
    """
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size == 1:
        return tensor
    flat = tensor.detach().reshape(-1).clone()
    padded = -(-flat.numel() // world_size) * world_size
    work = torch.zeros(padded, dtype=flat.dtype, device=flat.device)
    work[: flat.numel()] = flat
    chunks = list(work.chunk(world_size))

    others = [r for r in range(world_size) if r != rank]
    received = {r: torch.empty_like(chunks[rank]) for r in others}
    sends = [dist.isend(chunks[r], dst=r) for r in others]
    recvs = [dist.irecv(received[r], src=r) for r in others]
    for request in recvs + sends:
        request.wait()

    mine = torch.stack([chunks[rank], *received.values()]).mean(dim=0)
    chunks[rank].copy_(mine)

    sends = [dist.isend(chunks[rank], dst=r) for r in others]
    recvs = [dist.irecv(chunks[r], src=r) for r in others]
    for request in recvs + sends:
        request.wait()

    with torch.no_grad():
        tensor.copy_(work[: flat.numel()].view_as(tensor))
    return tensor


def butterfly_average_gradients(model: nn.Module) -> None:
    """Average all gradients across ranks with one butterfly all-reduce over their concatenation."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    butterfly_all_reduce(flat)
    offset = 0
    for grad in grads:
        n = grad.numel()
        grad.copy_(flat[offset: offset + n].view_as(grad))
        offset += n
