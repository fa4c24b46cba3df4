"""What a DataLoader worker process needs of the hook, however it was started. A forked worker
(Linux's default up to Python 3.13) inherits the hook with the rank's memory; one started by
spawn or forkserver (``multiprocessing_context=``, Python 3.14's default on Linux) is a fresh
interpreter without it. The rank starts every worker at :func:`start_loader_worker`, which a
spawned worker imports by its pickled name from the rank's ``sys.path`` and which puts the hook
in (its stack answers, :mod:`orchestrate.node.snapshot`; its crash dump,
:mod:`orchestrate.node.crash_stacks`) before it runs torch's own loop.

Standard library only.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from typing import Any, Dict, List, Tuple

from orchestrate.node import crash_stacks
from orchestrate.node.collective_log import guarded
from orchestrate.node.snapshot import DEBUG_DIR_ENV, answer_in_data_loader_workers

# torch's own _worker_loop, once the rank routes its workers through start_loader_worker (empty
# in a worker that a fresh interpreter runs: its torch is unpatched)
_TORCH_WORKER_LOOP: List[Any] = []
# the orchestrate package's __init__, as a fresh interpreter must find it by name
_OUR_PACKAGE = os.path.realpath(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                             "__init__.py"))


def route_data_loader_workers() -> None:
    """Start each DataLoader worker process at :func:`start_loader_worker` where a spawned one
    can import it. torch looks its workers' target up as it starts each, so the choice is made
    then, from ``sys.path`` as the worker gets it; a worker whose name for it would lead to no
    package, or to one of the user's named ``orchestrate``, gets torch's own loop (and does not
    answer). The target is served by the module's ``__getattr__``, so that torch's own loop
    still pickles by its name."""
    from torch.utils.data._utils import worker

    if "_worker_loop" not in vars(worker):
        return  # routed already
    torch_loop = vars(worker)["_worker_loop"]
    _TORCH_WORKER_LOOP[:] = [torch_loop]
    fallback = vars(worker).get("__getattr__")
    # one answer per sys.path: torch looks the target up to make the worker, pickle again to
    # check it is the same object, and a folder that appeared in between must not change it
    answered: Dict[Tuple[str, ...], Any] = {}

    def worker_target(name: str) -> Any:
        if name == "_worker_loop":
            path = tuple(sys.path)
            target = answered.get(path)
            if target is None:
                target = start_loader_worker if hook_importable() else torch_loop
                answered.clear()
                answered[path] = target
            return target
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {worker.__name__!r} has no attribute {name!r}")

    worker.__getattr__ = worker_target  # type: ignore[attr-defined]
    del worker._worker_loop  # served by __getattr__ from now on (never missing meanwhile)


def hook_importable() -> bool:
    """Whether an interpreter with this ``sys.path`` (a spawned worker's) imports this package,
    not another of that name."""
    found = importlib.machinery.PathFinder.find_spec("orchestrate", sys.path)
    return found is not None and found.origin is not None and os.path.realpath(found.origin) == _OUR_PACKAGE


def start_loader_worker(*args: Any, **kwargs: Any) -> Any:
    """A DataLoader worker process's start, in place of torch's ``_worker_loop``: a forked worker
    has the hook already; a spawned one puts it in (its debug directory and rank are in its
    environment; a failure says so and costs the worker nothing), then runs torch's loop."""
    if not _TORCH_WORKER_LOOP:
        from torch.utils.data._utils import worker

        _TORCH_WORKER_LOOP.append(worker._worker_loop)
        if os.path.isdir(os.environ.get(DEBUG_DIR_ENV, "")):
            guarded(answer_in_this_loader_worker)
            guarded(keep_crash_stacks_in_this_loader_worker)
    return _TORCH_WORKER_LOOP[0](*args, **kwargs)


def answer_in_this_loader_worker() -> None:
    answer_in_data_loader_workers(os.environ[DEBUG_DIR_ENV], int(os.environ.get("RANK", "0")))


def keep_crash_stacks_in_this_loader_worker() -> None:
    crash_stacks.keep_in_spawned_loader_worker(os.environ[DEBUG_DIR_ENV], int(os.environ.get("RANK", "0")))
