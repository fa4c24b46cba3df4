"""How a worker's script called ``init_process_group``, beside what torchrun gave the worker:
the rank, world size and store the script asked for, and torchrun's own. A job whose ranks wait
in ``init_process_group`` is told why from them (:mod:`orchestrate.hangs.init_calls`): a script
written for one machine sets ``MASTER_ADDR=localhost`` itself, passes ``LOCAL_RANK`` as its
rank, or a world size of its own, and torch then waits for a store or for ranks that never come.

The call is recorded as it is made, before torch looks for the store, and answered in the
worker's snapshots (:mod:`orchestrate.node.snapshot`); a call that fails (its timeout) writes
the record at once, as a failed collective does, so that it outlives the process. Standard
library only.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Dict, Mapping, Optional
from urllib.parse import parse_qs, urlparse

# How the script named its store: torchrun's environment (env://, the default), an address of
# its own (tcp://), a file (file://), or a store object it made itself (store=).
VIA_ENV, VIA_TCP, VIA_FILE, VIA_OBJECT = "env", "tcp", "file", "store"


def as_int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def env_store(environ: Mapping[str, str]) -> str:
    """The store address an env:// rendezvous reads (``MASTER_ADDR:MASTER_PORT``; "" without them)."""
    address, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    return f"{address}:{port}" if address and port else ""


def torchrun_gave(environ: Mapping[str, str]) -> Dict[str, Any]:
    """What torchrun gave the worker, read before the script runs (and may change it)."""
    return {"rank": as_int(environ.get("RANK")), "local_rank": as_int(environ.get("LOCAL_RANK")),
            "world_size": as_int(environ.get("WORLD_SIZE")), "store": env_store(environ)}


def asked_for(init_method: Optional[str], rank: Any, world_size: Any, store: Any,
              environ: Mapping[str, str]) -> Dict[str, Any]:
    """What one ``init_process_group`` call asks for, as torch resolves it: the rank and world
    size (the arguments, else ``init_method``'s query, else RANK and WORLD_SIZE), and where its
    store is (``via`` says how the script named it)."""
    given_rank, given_size = as_int(rank), as_int(world_size)
    if store is not None:
        return {"rank": given_rank, "world_size": given_size, "store": "", "via": VIA_OBJECT}
    url = urlparse(init_method or "env://")
    query = {key: values[-1] for key, values in parse_qs(url.query).items()}

    def resolved(given: Optional[int], key: str, variable: str) -> Optional[int]:
        if given is not None and given >= 0:
            return given
        return as_int(query.get(key)) if key in query else as_int(environ.get(variable))

    asked = {"rank": resolved(given_rank, "rank", "RANK"), "world_size": resolved(given_size, "world_size", "WORLD_SIZE")}
    if url.scheme == "tcp":
        return {**asked, "store": f"{url.hostname}:{url.port}", "via": VIA_TCP}
    if url.scheme == "file":
        return {**asked, "store": url.path, "via": VIA_FILE}
    return {**asked, "store": env_store(environ), "via": VIA_ENV}


def recording(original: Callable[..., Any], gave: Dict[str, Any], keep: Callable[[Dict[str, Any]], None],
              failed: Callable[[], None], environ: Mapping[str, str] = os.environ,
              made: Callable[[Dict[str, Any]], None] = lambda call: None) -> Callable[..., Any]:
    """``original`` (``init_process_group``), keeping what each call asks for beside what
    torchrun ``gave`` before it calls it, calling ``failed`` where it raises (its timeout: the
    record is then written before the process dies of it), and ``made`` with the call once it
    returned (a group torch made: not one it refused); a call the recorder cannot read runs as
    it is."""
    import inspect

    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        call = None
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
            call = {**asked_for(bound.get("init_method"), bound.get("rank", -1), bound.get("world_size", -1),
                                bound.get("store"), environ), "torchrun": gave}
            keep(call)
        except (TypeError, ValueError):
            pass  # arguments torch itself will refuse, with its own words
        try:
            group = original(*args, **kwargs)
        except Exception:
            failed()
            raise
        if call is not None:
            made(call)
        return group

    init_process_group.__ddp_compose_init_recorded__ = True  # type: ignore[attr-defined]
    return init_process_group


def install(gave: Dict[str, Any], keep: Callable[[Dict[str, Any]], None], failed: Callable[[], None],
            made: Callable[[Dict[str, Any]], None] = lambda call: None) -> None:
    """Record ``init_process_group`` where scripts find it (the package and ``distributed_c10d``)."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    dist = sys.modules["torch.distributed"]
    original = c10d.init_process_group
    if getattr(original, "__ddp_compose_init_recorded__", False):
        return
    wrapped = recording(original, gave, keep, failed, made=made)
    c10d.init_process_group = wrapped
    if getattr(dist, "init_process_group", None) is original:
        dist.init_process_group = wrapped
