"""What every worker needs: the torchrun environment, a device, a backend, a process group.

These programs run the same under ``torchrun --standalone`` on a laptop, in ddp-compose's
nodes and on a real cluster: everything comes from the environment torchrun sets.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import torch
import torch.distributed as dist


class CannotRun(Exception):
    """What this worker was asked cannot be done here (too few GPUs, an option the CPU lacks)."""


def refuse(message: str) -> NoReturn:
    """Refuse to run, as a command refuses bad input: ``message`` on one line of stderr, exit
    code 2. The line also goes to torchrun's error file of this worker (where torchrun gives
    one), so that a launcher names it as the failure: torchrun still prints its own report of
    a worker that exits non-zero, and ddp-compose's summary gives this one line instead."""
    line = " ".join(message.split())
    print(line, file=sys.stderr, flush=True)
    try:
        raise CannotRun(line)
    except CannotRun as exc:
        from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

        ErrorHandler().record_exception(exc)
    raise SystemExit(2)


@dataclass(frozen=True)
class WorkerEnv:
    """The torchrun environment of one worker process."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: str
    host: str

    @classmethod
    def from_environ(cls) -> "WorkerEnv":
        """Read the variables torchrun sets; fail with a clear message outside torchrun."""
        missing = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if k not in os.environ]
        if missing:
            refuse(f"{', '.join(missing)} not set: run me with torchrun, e.g."
                   " torchrun --standalone --nproc-per-node 2 -m app.hello")
        return cls(
            rank=int(os.environ["RANK"]),
            local_rank=int(os.environ["LOCAL_RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            master_addr=os.environ["MASTER_ADDR"],
            master_port=os.environ["MASTER_PORT"],
            host=socket.gethostname(),
        )


def shares_gpus() -> bool:
    """Whether the launcher lets this node's processes share its GPUs (``DDP_SHARED_GPUS=1``,
    ddp-compose's ``--share-gpus``)."""
    return os.environ.get("DDP_SHARED_GPUS") == "1"


def select_device(local_rank: int) -> torch.device:
    """One process per accelerator: local rank ``l`` uses device ``l``; else the CPU. Where
    the launcher lets processes share GPUs (``DDP_SHARED_GPUS=1``, ddp-compose's
    ``--share-gpus``), local rank ``l`` uses device ``l mod count``."""
    if os.environ.get("DDP_FORCE_CPU") != "1" and torch.accelerator.is_available():
        accelerator = torch.accelerator.current_accelerator()
        count = torch.accelerator.device_count()
        if shares_gpus():
            local_rank %= count
        if local_rank >= count:
            refuse(f"local rank {local_rank} has no {accelerator.type} device of its own"
                   f" ({count} visible): use --nproc-per-node {count} or fewer")
        torch.accelerator.set_device_index(local_rank)
        return torch.device(accelerator.type, local_rank)
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    """The collective backend: ``$DDP_BACKEND`` when the launcher set one, else the
    device's default (nccl on CUDA, gloo on CPU)."""
    return os.environ.get("DDP_BACKEND") or dist.get_default_backend_for_device(device)


@contextlib.contextmanager
def process_group(device: torch.device, timeout_s: float = 300.0) -> Iterator[str]:
    """Initialise the default process group from the environment and always destroy it.

    Args:
        device: This worker's device; it picks the backend.
        timeout_s: Collective timeout; stragglers beyond it fail the job instead of hanging.

    Yields:
        The backend name.
    """
    backend = backend_for(device)
    kwargs = {"device_id": device} if device.type != "cpu" else {}
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s), **kwargs)
    try:
        yield backend
        # Leave together: gloo aborts a process that tears down while a peer still talks.
        dist.barrier()
    finally:
        dist.destroy_process_group()


try:  # the launcher's progress channel: exact @step faults, recovery figures, reports
    from orchestrate.node.progress import report as report_step
    from orchestrate.node.progress import report_resumed
except ImportError:  # plain torchrun elsewhere: nobody listens
    def report_step(step: int, **metrics: float) -> None:
        """Report a training step to ddp-compose (a no-op without it)."""

    def report_resumed(step: int) -> None:
        """Report a resume from a checkpoint to ddp-compose (a no-op without it)."""


def log0(*args: object) -> None:
    """Print on global rank 0 only."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, flush=True)


def accelerator_count() -> int:
    """How many accelerator devices this process can see (0 on CPU or with DDP_FORCE_CPU=1)."""
    if os.environ.get("DDP_FORCE_CPU") == "1" or not torch.accelerator.is_available():
        return 0
    return torch.accelerator.device_count()


def device_indices(local_rank: int, local_world_size: int, per_process: int, available: int,
                   shared: bool = False) -> list[int]:
    """The accelerator indices of one process that spans ``per_process`` devices.

    Local rank ``l`` gets ``[l * per_process, (l + 1) * per_process)``: with L = 2
    processes on a node with 8 GPUs and 4 per process, rank 0 has GPUs 0-3 and rank 1
    GPUs 4-7. Where the processes share the GPUs (``shared``), those indices wrap around
    the node's GPUs instead (two processes of 2 devices on one GPU: both have ``[0, 0]``).

    Raises:
        ValueError: With the arithmetic, when the node has too few devices (and may not share).
    """
    if shared:
        return [index % available for index in range(local_rank * per_process, (local_rank + 1) * per_process)]
    needed = local_world_size * per_process
    if needed > available:
        raise ValueError(
            f"{local_world_size} processes x {per_process} GPUs each need {needed} GPUs on this"
            f" node, but {available} are visible: use fewer processes per node or more GPUs"
        )
    return list(range(local_rank * per_process, (local_rank + 1) * per_process))


def span_per_process(available: int, local_world_size: int, shared: bool = False) -> int:
    """How many of a node's GPUs each of its L processes spans: G // L (at least 1 where
    they share the GPUs).

    Raises:
        ValueError: When G < L, so some process would have no GPU of its own (and may not share).
    """
    if shared:
        return max(1, available // local_world_size)
    if available < local_world_size:
        raise ValueError(
            f"{available} GPUs cannot be spanned by {local_world_size} processes per node: each"
            f" process needs at least one (use --nproc-per-node {available} or fewer)"
        )
    return available // local_world_size


def process_devices(local_rank: int, local_world_size: int, per_process: int) -> list[torch.device]:
    """The devices of a process spanning ``per_process`` of them; CPU stand-ins without GPUs.

    Raises:
        SystemExit: Exit code 2 (:func:`refuse`), with the arithmetic, when the node has too
            few accelerators.
    """
    count = accelerator_count()
    if count == 0:
        return [torch.device("cpu")] * per_process
    try:
        indices = device_indices(local_rank, local_world_size, per_process, count, shares_gpus())
    except ValueError as exc:
        refuse(str(exc))
    kind = torch.accelerator.current_accelerator().type
    torch.accelerator.set_device_index(indices[0])
    return [torch.device(kind, i) for i in indices]


def default_timeout_s(fallback: float = 300.0) -> float:
    """The process group timeout: ``$DDP_TIMEOUT`` (set by ``orchestrate --collective-timeout``) or ``fallback``."""
    try:
        return float(os.environ["DDP_TIMEOUT"])
    except (KeyError, ValueError):
        return fallback


def at_least(minimum: float, kind: type = int) -> Callable[[str], Any]:
    """An argparse ``type``: a number of ``kind`` of ``minimum`` or more, else argparse's one-line
    error and exit 2 (a batch of 0 ran to a loss of nan, a log interval of 0 divided by zero)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a{'n integer' if kind is int else ' number'} of"
                                             f" {minimum:g} or more, got {text!r}")
        return value
    return parse


def file_to_write(text: str) -> Path:
    """An argparse ``type``: a file path whose directory exists (found missing only as rank 0
    wrote the results, it lost every measurement made before)."""
    path = Path(text)
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"no directory {path.resolve().parent} to write {text} in")
    return path


positive_int = at_least(1)
non_negative_int = at_least(0)
non_negative_float = at_least(0.0, float)


def add_timeout_option(parser: argparse.ArgumentParser, fallback: float = 300.0) -> None:
    """The ``--timeout`` every worker takes: stragglers beyond it fail instead of hanging."""
    parser.add_argument("--timeout", type=at_least(0.001, float), default=default_timeout_s(fallback),
                        help=f"process group timeout in seconds (default: $DDP_TIMEOUT, else {fallback:g})")
