"""Which files in the directories every node shares a worker writes whole: a file opened to be
written from its start (``open(path, "w")``, ``"wb"``, ``"w+"``), or saved by ``torch.save`` to a
path. Each is reported once on the progress channel (:func:`orchestrate.node.progress.report_written`),
so that the launcher can name a file that several ranks write: the classic
``torch.save(model.state_dict(), "model.pt")`` without ``if rank == 0``, whose writers race in
one file on the shared file system of a cluster (and of these nodes). A ``torch.save`` is said as
such (a checkpoint by its kind; to a path, or to a file object opened to write a file whole),
and each file a worker reads back with ``torch.load`` (:func:`orchestrate.node.progress.report_loaded`),
so that the chaos check knows whether an attempt after a fault loaded what the job had saved. The
``torch.save`` and ``torch.load`` that ``torch.distributed.checkpoint`` makes of each tensor in its
files are not the script's: its save and load are said by the directory they name
(:mod:`orchestrate.node.dcp_files`).

Appending (``"a"``), creating exclusively (``"x"``) and updating in place (``"r+"``) are not
counted: ranks that append to one log, or take a file by creating it, mean to share it.

A file a worker writes anywhere else (in any mode) is on its node's own disk: ``/tmp``, the home
directory. The first :data:`LOCAL_FILES_NOTED` of them that torch's own code did not open (its
compiler's caches, the modules it generates) are reported too
(:func:`orchestrate.node.progress.report_written_locally`), so that a rank of another node that
cannot find one (``FileNotFoundError``) is told why: the classic ``if rank == 0:`` that prepares
a file in ``/tmp`` for every rank, which works on one machine and not on two. Standard library
only; wraps what :mod:`orchestrate.node.storage_faults` wrapped before it.
"""
from __future__ import annotations

import builtins
import functools
import io
import os
import sys
import threading
from typing import Any, Callable, Optional, Tuple

from orchestrate.node.checkpoint_collectives import DCP_FILES
from orchestrate.node.snapshot import HOOK_DIR

# The directories every node mounts (orchestrate.plan.layout's WORKSPACE_DIR and SHARED_DIR, which
# this package, run in the nodes by itself, cannot import; a unit test holds them equal).
SHARED_DIRS = ("/workspace", "/shared")
# The run's directory (orchestrate.plan.layout's RUN_DIR_MOUNT: every node mounts it) and the
# kernel's: no file of these is on a node's own disk.
NOT_NODE_LOCAL = ("/ddp-run", "/proc", "/sys", "/dev")
# How many files on its node's own disk one worker reports, at most (a compiler's cache writes
# hundreds): a rank that cannot find a file another node made is told so.
LOCAL_FILES_NOTED = 100


def shared_path(file: Any, shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Optional[str]:
    """``file``'s path relative to the work directory (one under ``/shared`` keeps its full path),
    or None: not a path, or not under a shared directory (links followed)."""
    path = real_path(file)
    return None if path is None else under(path, shared_dirs)


def real_path(file: Any) -> Optional[str]:
    """``file``'s absolute path, links followed (None: not a path)."""
    if not isinstance(file, (str, bytes, os.PathLike)):
        return None
    try:
        return os.path.realpath(os.fsdecode(file))
    except (TypeError, ValueError, OSError):
        return None


def node_local(path: str, shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> bool:
    """Whether an absolute ``path`` is on its node's own disk: under no directory every node
    mounts, and not the kernel's (pure)."""
    return under(path, shared_dirs + NOT_NODE_LOCAL) is None and path not in shared_dirs + NOT_NODE_LOCAL


def under(path: str, directories: Tuple[str, ...]) -> Optional[str]:
    """An absolute ``path`` relative to the first of ``directories`` where it is under that one,
    whole where it is under another, None where it is under none (pure: read as written)."""
    for directory in directories:
        if path.startswith(directory.rstrip("/") + "/"):
            return os.path.relpath(path, directory) if directory == directories[0] else path
    return None


def truncates(mode: Any) -> bool:
    return "w" in str(mode)


def writes(mode: Any) -> bool:
    return any(letter in str(mode) for letter in "wax+")


_TORCH_DIR = os.sep + "torch" + os.sep


def opened_by_torch(frame: Any) -> bool:
    """Whether the code that opened a file (``frame``, and outward past this package's wrappers)
    is torch's own: its caches and generated modules in ``/tmp``, each rank's own, are no file of
    the script's."""
    while frame is not None and frame.f_code.co_filename.startswith(HOOK_DIR):
        frame = frame.f_back
    return frame is not None and _TORCH_DIR in frame.f_code.co_filename


_reporting = threading.local()  # a report under way in this thread: the files it opens are not reported


def note_write(file: Any, whole: bool, report: Callable[[str], None], report_local: Optional[Callable[[str], None]],
               shared_dirs: Tuple[str, ...]) -> None:
    """Report a file just written: one in a shared directory written ``whole`` by ``report``
    (relative to the work directory), one on the node's own disk by ``report_local`` (absolute).
    Not a file the report itself opens (the progress channel's own)."""
    if getattr(_reporting, "active", False):
        return
    path = real_path(file)
    if path is None:
        return
    _reporting.active = True
    try:
        shared = under(path, shared_dirs)
        if shared is not None:
            if whole:
                report(shared)
        elif report_local is not None and node_local(path, shared_dirs) and not opened_by_torch(sys._getframe(2)):
            report_local(path)
    finally:
        _reporting.active = False


def watching_open(original: Callable[..., Any], report: Callable[[str], None],
                  shared_dirs: Tuple[str, ...] = SHARED_DIRS,
                  report_local: Optional[Callable[[str], None]] = None) -> Callable[..., Any]:
    """``open`` that reports each shared file it opens to be written whole, and each file on the
    node's own disk it opens to be written at all, once it opened."""

    @functools.wraps(original)
    def open_and_report(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = original(file, mode, *args, **kwargs)
        if writes(mode):
            note_write(file, truncates(mode), report, report_local, shared_dirs)
        return opened

    return open_and_report


def watching_save(original: Callable[..., Any], report: Callable[[str], None],
                  shared_dirs: Tuple[str, ...] = SHARED_DIRS,
                  report_local: Optional[Callable[[str], None]] = None) -> Callable[..., Any]:
    """``torch.save`` that reports the path it saves to, once it saved, as ``open`` does (torch
    writes a path from C++, out of ``open``'s reach)."""

    @functools.wraps(original)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(obj, f, *args, **kwargs)
        if not called_by_dcp(sys._getframe(1)):
            note_write(saved_file(f), True, report, report_local, shared_dirs)
        return result

    return save


def saved_file(f: Any) -> Any:
    """What a ``torch.save`` to ``f`` saved: a path as given, a file object opened to write a
    file whole by the path it was opened at (``with open(p, "wb") as f: torch.save(x, f)``);
    None for a stream with no path, or a file it added to (appended, updated in place)."""
    if isinstance(f, (str, bytes, os.PathLike)):
        return f
    return opened_path(f) if truncates(getattr(f, "mode", "")) else None


def opened_path(file: Any) -> Any:
    """A file object's path, as it was opened (None: a stream with no path, or a descriptor's
    number, which is its name)."""
    name = getattr(file, "name", None)
    return None if isinstance(name, int) else name


def called_by_dcp(frame: Any) -> bool:
    """Whether ``torch.distributed.checkpoint``'s own code made the call whose caller is ``frame``:
    its save writes each tensor with ``torch.save`` into its files, its load reads them back with
    ``torch.load``; the checkpoint is the directory its save or load names."""
    return frame is not None and DCP_FILES in frame.f_code.co_filename


def loaded_path(file: Any, shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Optional[str]:
    """What a ``torch.load`` of ``file`` read, as the progress channel names it: a path under a
    shared directory relative to the work directory, any other path whole (links followed), a
    file object by the path it was opened at; "" for a stream with no path (``io.BytesIO``)."""
    name = file if isinstance(file, (str, bytes, os.PathLike)) else opened_path(file)
    path = real_path(name)
    if path is None:
        return ""
    shared = under(path, shared_dirs)
    return path if shared is None else shared


def watching_load(original: Callable[..., Any], report: Callable[[str], None],
                  shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Callable[..., Any]:
    """``torch.load`` that reports the file it loaded (:func:`loaded_path`), once it loaded: what
    it returns and raises are torch's own, and a report that fails is left unsaid."""

    @functools.wraps(original)
    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(f, *args, **kwargs)
        if not getattr(_reporting, "active", False) and not called_by_dcp(sys._getframe(1)):
            try:
                report(loaded_path(f, shared_dirs))
            except Exception:  # the record is a help: never let it fail the script's load
                pass
        return result

    return load


def install(report: Callable[[str], None], report_local: Optional[Callable[[str], None]] = None) -> None:
    """Watch ``open`` now (``torch.save`` when torch is imported: :func:`watch_torch_save`)."""
    opener = watching_open(builtins.open, report, report_local=report_local)
    builtins.open = opener
    io.open = opener


def watch_torch_save(report: Callable[[str], None], report_local: Optional[Callable[[str], None]] = None) -> None:
    import torch
    import torch.serialization as serialization

    save = watching_save(serialization.save, report, report_local=report_local)
    serialization.save = save
    torch.save = save


def watch_torch_load(report: Callable[[str], None]) -> None:
    """Report each file ``torch.load`` loads (:func:`watching_load`), wherever the script finds it."""
    import torch
    import torch.serialization as serialization

    load = watching_load(serialization.load, report)
    serialization.load = load
    torch.load = load
