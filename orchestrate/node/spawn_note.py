"""A note, said once on each node, when a torchrun worker starts processes of its own with
``torch.multiprocessing`` (``spawn``, ``start_processes``): the single-machine tutorial's way of
starting ranks, which does not work under torchrun.

torchrun already starts one process per rank, and its workers' environment holds
``TORCHELASTIC_USE_AGENT_STORE=True``, which the spawned processes inherit: their
``init_process_group`` connects to the agent's store as a client, never starting the store
they name themselves (``MASTER_ADDR=localhost``, a port of their own), and waits for it until
the process group's timeout (30 minutes by default). The hang watchdog says the same after a
while; this says it when it starts.

Installed by the workers' start-up hook when the script imports torch (standard library only
until then).
"""
from __future__ import annotations

import functools
import os
import sys
from types import ModuleType
from typing import Any, Callable, Optional

NOTE = ("[ddp-compose] rank {rank} starts {count} of its own with torch.multiprocessing under torchrun, which already"
        " starts one process per rank ({world} in all): the processes it starts inherit torchrun's store"
        " (TORCHELASTIC_USE_AGENT_STORE), so an init_process_group in them would wait for a store no one serves;"
        " under torchrun call the worker function once, with RANK, LOCAL_RANK and WORLD_SIZE from the environment,"
        " and leave MASTER_ADDR and MASTER_PORT as torchrun sets them (docs/your-project.md#a-script-that-spawns-its-ranks)")


def note(environ: dict[str, str], nprocs: Optional[int]) -> str:
    """The note for a worker with this environment starting ``nprocs`` processes."""
    count = "processes" if nprocs is None else f"{nprocs} process{'es' * (nprocs != 1)}"
    return NOTE.format(rank=environ.get("RANK", "?"), count=count, world=environ.get("WORLD_SIZE", "?"))


def wrap(start_processes: Callable[..., Any], say: Callable[[str], None]) -> Callable[..., Any]:
    """``start_processes``, saying the note before its first call (on local rank 0 alone, so
    once a node); what it returns and raises is unchanged."""
    said = []

    @functools.wraps(start_processes)
    def noted(fn: Any, args: Any = (), nprocs: int = 1, *rest: Any, **kwargs: Any) -> Any:
        if not said and os.environ.get("LOCAL_RANK", "0") == "0":
            said.append(True)
            say(note(dict(os.environ), nprocs if isinstance(nprocs, int) else None))
        return start_processes(fn, args, nprocs, *rest, **kwargs)

    return noted


def install(spawn: Optional[ModuleType] = None, package: Optional[ModuleType] = None) -> None:
    """Wrap ``torch.multiprocessing.spawn.start_processes`` (which ``spawn`` calls) and the
    package's own name for it. Called as the module is imported, in the middle of ``import
    torch``: the package takes the wrapped name from the module once it goes on, and one already
    imported gets it here. A torch without it is left as it is."""
    if spawn is None:
        spawn, package = sys.modules.get("torch.multiprocessing.spawn"), sys.modules.get("torch.multiprocessing")
    original = getattr(spawn, "start_processes", None)
    if original is None:
        return
    noted = wrap(original, lambda text: print(text, file=sys.stderr, flush=True))
    spawn.start_processes = noted  # type: ignore[attr-defined]
    if package is not None and getattr(package, "start_processes", None) is original:
        package.start_processes = noted  # type: ignore[attr-defined]
