"""Locks between launchers on one host (a file lock: it is released if its holder dies)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold the host-wide lock ``name`` (shared by every user: GPUs are too)."""
    path = Path(tempfile.gettempdir()) / f"ddp-compose-{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            os.fchmod(fd, 0o666)
        except PermissionError:  # another user's lock file: usable as it is
            pass
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def try_lock(path: Path) -> Iterator[bool]:
    """Take the lock file ``path`` if it is free; yield whether we hold it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(fd)
