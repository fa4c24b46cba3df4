"""Locks between the launches of one user: a file lock (released if its holder dies), with a
deadline and a word on who holds it.

They live in a directory of the user's own (``$XDG_RUNTIME_DIR/ddp-compose``, else
``~/.cache/ddp-compose/locks``, mode 0700): no other user can take, replace or point them
elsewhere. A holder leaves its name beside the lock, so that a launch that waits says for
whom (``waiting for run 20261121-... (gpu-lease)``), and gives up after ``timeout_s`` with one
line naming the holder.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator, Optional

import filelock

from orchestrate.errors import LockTimeoutError

# Seconds a launch waits for a host lock by default: the GPU lease is held for a bring-up.
HOST_LOCK_TIMEOUT_S = 120.0


def lock_dir() -> Path:
    """The user's own directory of locks (made 0700 when missing)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "ddp-compose" if runtime else Path.home() / ".cache" / "ddp-compose" / "locks"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


@contextlib.contextmanager
def host_lock(name: str, holder: str, *, timeout_s: float = HOST_LOCK_TIMEOUT_S,
              say: Optional[Callable[[str], None]] = None, directory: Optional[Path] = None) -> Iterator[None]:
    """Hold the lock ``name`` as ``holder`` (a run id, a build); wait for it at most ``timeout_s``.

    Raises:
        LockTimeoutError: Naming the holder, when it is not free in time.
    """
    base = directory or lock_dir()
    lock = filelock.FileLock(str(base / f"{name}.lock"))
    holder_file = base / f"{name}.holder"
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        if say is not None:
            say(f"waiting for {read_holder(holder_file)} ({name}), at most {timeout_s:.0f} s")
        try:
            lock.acquire(timeout=timeout_s)
        except filelock.Timeout:
            raise LockTimeoutError(f"{read_holder(holder_file)} has held the {name} lock for over {timeout_s:.0f} s"
                                   f" ({base / name}.lock); wait for it, or stop it") from None
    try:
        holder_file.write_text(holder + "\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            holder_file.unlink()
        lock.release()


def read_holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "another launch"
    except OSError:
        return "another launch"


@contextlib.contextmanager
def try_lock(path: Path) -> Iterator[bool]:
    """Take the lock file ``path`` if it is free; yield whether we hold it."""
    lock = filelock.FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except (filelock.Timeout, OSError):
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
