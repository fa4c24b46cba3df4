"""DDP's gradient all-reduces, in the collective record.

DDP's C++ reducer all-reduces the gradients during the backward pass, out of reach of the
Python collectives :mod:`orchestrate.node.collective_log` wraps. Unrecorded, a rank that waits
there looked like a rank in no collective at all, and a script whose ranks part (one rank in an
extra ``barrier()``, the other in its next ``loss.backward()``) was diagnosed as "rank 0 is not in
a collective".

So every backward pass (``torch.autograd.backward``, which ``loss.backward()`` calls) that runs
while a DDP model wants its gradients synchronized is recorded as one collective:
``all_reduce(gradients of DDP(Net))`` in the model's process group, at the user's line that
called it. It is one entry however many buckets the reducer all-reduces; every rank of a job
records the same, so the record's numbering still lines the ranks up. With NCCL the backward
pass returns once the all-reduces are queued on the GPU, so the entry is done before they are.

"Wants": a DDP model built in this process and still alive whose
``require_backward_grad_sync`` is set (``no_sync()`` clears it). A backward pass of another
model, while a DDP model that is not in it is alive, is recorded too: every rank does the same,
so it names where they are without shifting the numbering between ranks.

Installed by the workers' start-up hook when DDP's module is imported. Standard library only;
torch is reached through its own modules once they are loaded.
"""
from __future__ import annotations

import functools
import importlib
import sys
import weakref
from typing import Any, Callable, List

from orchestrate.node.collective_log import CollectiveLog, caller

OP = "all_reduce"
DESCRIBED = "gradients of DDP("  # how the record's entries start (what they all-reduce)


def described(models: List[Any]) -> str:
    """``gradients of DDP(Net)`` (every model named, in the order they were built)."""
    return "gradients of " + ", ".join(f"DDP({type(getattr(m, 'module', m)).__name__})" for m in models)


def install(log: CollectiveLog, name_group: Callable[[Any], str]) -> None:
    """Keep every DDP model this process builds (weakly), and record each backward pass that
    runs while one of them wants its gradients synchronized."""
    ddp = importlib.import_module("torch.nn.parallel.distributed").DistributedDataParallel
    autograd = importlib.import_module("torch.autograd")
    original_init, original_backward = ddp.__init__, autograd.backward
    if getattr(original_backward, "__ddp_compose_recorded__", False):
        return
    built: List["weakref.ReferenceType[Any]"] = []  # every DDP model built here, in order

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        built[:] = [ref for ref in built if ref() is not None] + [weakref.ref(self)]

    @functools.wraps(original_backward)
    def backward(*args: Any, **kwargs: Any) -> Any:
        models = [ref() for ref in built]
        syncing = [m for m in models if m is not None and getattr(m, "require_backward_grad_sync", False)]
        if not syncing or log.nested():
            return original_backward(*args, **kwargs)
        group = name_group(getattr(syncing[0], "process_group", None))
        return log.call(original_backward, args, kwargs, OP, group, described(syncing), caller(sys._getframe(1)))

    backward.__ddp_compose_recorded__ = True  # type: ignore[attr-defined]
    ddp.__init__ = init
    autograd.backward = backward
