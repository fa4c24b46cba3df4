"""Which files in the directories every node shares a worker writes whole: a file opened to be
written from its start (``open(path, "w")``, ``"wb"``, ``"w+"``), or saved by ``torch.save`` to a
path. Each is reported once on the progress channel (:func:`orchestrate.node.progress.report_written`),
so that the launcher can name a file that several ranks write: the classic
``torch.save(model.state_dict(), "model.pt")`` without ``if rank == 0``, whose writers race in
one file on the shared file system of a cluster (and of these nodes).

Appending (``"a"``), creating exclusively (``"x"``) and updating in place (``"r+"``) are not
counted: ranks that append to one log, or take a file by creating it, mean to share it. Standard
library only; wraps what :mod:`orchestrate.node.storage_faults` wrapped before it.
"""
from __future__ import annotations

import builtins
import functools
import io
import os
from typing import Any, Callable, Optional, Tuple

# The directories every node mounts (orchestrate.plan.layout's WORKSPACE_DIR and SHARED_DIR, which
# this package, run in the nodes by itself, cannot import; a unit test holds them equal).
SHARED_DIRS = ("/workspace", "/shared")


def shared_path(file: Any, shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Optional[str]:
    """``file``'s path relative to the work directory (one under ``/shared`` keeps its full path),
    or None: not a path, or not under a shared directory (links followed)."""
    if not isinstance(file, (str, bytes, os.PathLike)):
        return None
    try:
        return under(os.path.realpath(os.fsdecode(file)), shared_dirs)
    except (TypeError, ValueError, OSError):
        return None


def under(path: str, directories: Tuple[str, ...]) -> Optional[str]:
    """An absolute ``path`` relative to the first of ``directories`` where it is under that one,
    whole where it is under another, None where it is under none (pure: read as written)."""
    for directory in directories:
        if path.startswith(directory.rstrip("/") + "/"):
            return os.path.relpath(path, directory) if directory == directories[0] else path
    return None


def truncates(mode: Any) -> bool:
    return "w" in str(mode)


def watching_open(original: Callable[..., Any], report: Callable[[str], None],
                  shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Callable[..., Any]:
    """``open`` that reports each shared file it opens to be written whole, once it opened."""

    @functools.wraps(original)
    def open_and_report(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = original(file, mode, *args, **kwargs)
        if truncates(mode):
            path = shared_path(file, shared_dirs)
            if path is not None:
                report(path)
        return opened

    return open_and_report


def watching_save(original: Callable[..., Any], report: Callable[[str], None],
                  shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Callable[..., Any]:
    """``torch.save`` that reports the shared path it saves to, once it saved (torch writes a
    path from C++, out of ``open``'s reach)."""

    @functools.wraps(original)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(obj, f, *args, **kwargs)
        path = shared_path(f, shared_dirs)
        if path is not None:
            report(path)
        return result

    return save


def install(report: Callable[[str], None]) -> None:
    """Watch ``open`` now (``torch.save`` when torch is imported: :func:`watch_torch_save`)."""
    opener = watching_open(builtins.open, report)
    builtins.open = opener
    io.open = opener


def watch_torch_save(report: Callable[[str], None]) -> None:
    import torch
    import torch.serialization as serialization

    save = watching_save(serialization.save, report)
    serialization.save = save
    torch.save = save
