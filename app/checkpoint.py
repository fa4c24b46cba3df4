"""Checkpoints that never corrupt: rank 0 writes, everybody waits, everybody loads.

A checkpoint is written to a temporary file, flushed and fsynced, then renamed into place;
the ``LATEST`` pointer is replaced the same way afterwards. A crash at any moment leaves
the previous checkpoint and pointer intact.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

LATEST = "LATEST"


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_checkpoint(directory: Path, name: str, state: dict[str, Any]) -> Optional[Path]:
    """Save ``state`` on global rank 0 as ``directory/name`` and point LATEST at it.

    Every rank must call this: a barrier after the write keeps the others from reading
    a checkpoint before it exists.

    Returns:
        The checkpoint path on rank 0, None elsewhere.
    """
    path = write_checkpoint(directory, name, state) if dist.get_rank() == 0 else None
    dist.barrier()
    return path


def write_checkpoint(directory: Path, name: str, state: dict[str, Any]) -> Path:
    """Write ``directory/name`` atomically, then point LATEST at it (one process, no barrier).

    One writer per directory: temporary files found here were left by a writer killed
    mid-save, and are removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    path = directory / name
    _atomic_write(path, lambda f: torch.save(state, f))
    _atomic_write(directory / LATEST, lambda f: f.write(name.encode()))
    return path


def latest_checkpoint(directory: Path) -> Optional[Path]:
    """The checkpoint LATEST points to, or None when there is none. Where LATEST names a file
    that is not there (removed by hand, or a copy of the directory without it), the newest
    ``step-*.pt`` by its step, said on stderr: starting from scratch would overwrite LATEST and
    lose the way to it."""
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    named = pointer.read_text().strip()
    path = directory / named
    if path.is_file():
        return path
    saved = sorted(directory.glob("step-*.pt"))  # (zero-padded step numbers: their names sort as the steps)
    if saved:
        print(f"{directory / LATEST} names {named!r}, which is not there: resuming from the newest, {saved[-1].name}",
              file=sys.stderr, flush=True)
        return saved[-1]
    return None


def remove_checkpoint(directory: Path, name: str) -> None:
    """Remove ``directory/name``, and LATEST where it points there (left so, it would send a
    later ``--resume`` to a file that is gone)."""
    (directory / name).unlink(missing_ok=True)
    pointer = directory / LATEST
    if pointer.is_file() and pointer.read_text().strip() == name:
        pointer.unlink(missing_ok=True)


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    """Load a checkpoint onto this rank's own device (never onto rank 0's)."""
    return torch.load(path, map_location=device, weights_only=True)
