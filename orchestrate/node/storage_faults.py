"""Storage faults, done inside a worker (standard library only): a save cut short, a full disk.

The launcher arms a fault by listing it in ``$DDP_PROGRESS_DIR/storage-faults.json``
(:mod:`orchestrate.faults.storage` writes it, whole, then renamed)::

    {"faults": [{"key": "s0", "kind": "torn-write", "node": "node1", "path": "ckpt/*"}]}

``path`` is a glob over paths relative to the work directory (``*`` matches ``/`` too, so
``*`` is any file under it). A worker on ``node`` (its host name) then meets the fault on a
file it opens for writing that matches:

- ``torn-write``: the first such file one worker of the node writes (a claim file makes it
  one) is cut short when it is closed, at a random byte of what this writer wrote (an appended
  file keeps what it held before), as a crash in the
  middle of the save leaves it; the worker records where (``storage-events.jsonl``) and stops
  writing anything: it waits for the launcher to kill its node, and exits by itself after
  :data:`DIE_AFTER_S`.
- ``disk-full``: every write of such a file to the system fails with ``ENOSPC`` while the
  fault is listed, as on a full disk: under Python's own buffers, so a small write is kept
  there and the error comes at a flush or close, and ``torch.save`` raises its own error around
  it; each file and rank that met it is recorded once.

Where it reaches: Python's ``open`` (``builtins.open``, ``io.open``, so ``pathlib.Path.open``,
``os.fdopen`` of a descriptor such as ``tempfile.mkstemp``'s, ``tempfile``'s own files, and
``torch.distributed.checkpoint``'s file system writer) and ``torch.save`` to a path (which
torch writes from C++: while a fault is armed it is given a file opened here instead). Not
reached: ``os.open``/``os.write``, memory maps, and native code that opens files itself
(safetensors, a C++ extension's own writer).
"""
from __future__ import annotations

import builtins
import errno
import fnmatch
import inspect
import io
import json
import os
import random
import socket
import sys
import time
from typing import Any, Optional

from orchestrate.node.shared_writes import under

FAULTS_FILE = "storage-faults.json"
EVENTS_FILE = "storage-events.jsonl"
WORKSPACE = "/workspace"  # the work directory, as every node mounts it
# A worker that tore a write waits this long for the launcher to kill its node, then exits.
DIE_AFTER_S = 60.0
TORN_EXIT_CODE = 137
_WRITING = set("wax+")
# On an error a fault raised as the system would (a full disk's ENOSPC): the script's traceback
# leaves the hook's frames out, as for an error of the builtin that the hook wraps.
AS_THE_SYSTEM = "ddp_compose_as_the_system"


class StorageFaults:
    """The storage faults armed for this node, read from the launcher's file when it changes."""

    def __init__(self, directory: str, node: str, workspace: str = WORKSPACE) -> None:
        self.directory = directory
        self.node = node
        self.workspace = workspace
        self.stamp: Optional[tuple[int, int, int]] = None
        self.faults: list[dict[str, Any]] = []
        self.reported: set[tuple[str, ...]] = set()

    def armed(self) -> list[dict[str, Any]]:
        """The faults armed for this node now (the file is read again only when it changed)."""
        path = os.path.join(self.directory, FAULTS_FILE)
        try:
            status = os.stat(path)
        except OSError:
            self.stamp, self.faults = None, []
            return []
        stamp = (status.st_mtime_ns, status.st_size, status.st_ino)  # each write is a new file (renamed)
        if stamp != self.stamp:
            self.stamp = stamp
            try:
                with _original_open(path, encoding="utf-8") as file:
                    listed = json.load(file).get("faults", [])
            except (OSError, ValueError, AttributeError):
                listed = []
            self.faults = [f for f in listed if isinstance(f, dict) and f.get("node") == self.node]
        return self.faults

    def relative(self, file: Any) -> Optional[str]:
        """``file``'s path relative to the work directory, or None (not a path under it; a
        descriptor is resolved to its path by :func:`wrap_open` first)."""
        if isinstance(file, int):
            return None
        try:
            path = os.path.abspath(os.fsdecode(os.fspath(file)))
        except TypeError:
            return None
        return under(path, (self.workspace,))

    def matching(self, file: Any, kind: str) -> Optional[tuple[dict[str, Any], str]]:
        """The armed fault of ``kind`` whose glob ``file`` matches, with its relative path."""
        faults = [f for f in self.armed() if f.get("kind") == kind]
        if not faults:
            return None
        relative = self.relative(file)
        if relative is None:
            return None
        for fault in faults:
            if fnmatch.fnmatchcase(relative, str(fault.get("path") or "*")):
                return fault, relative
        return None

    def claim(self, key: str) -> bool:
        """Take fault ``key`` for this worker: only one worker of all tears a write."""
        try:
            descriptor = os.open(os.path.join(self.directory, f"storage-claim-{key}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except OSError:
            return False
        os.close(descriptor)
        return True

    def record(self, **fields: Any) -> None:
        """Append one event for the launcher (a line, written whole). One that cannot be written
        is said on the process's stderr: the script's own write or save must meet what the fault
        does, not an error of this record."""
        line = json.dumps({**fields, "node": self.node, "rank": _rank(), "attempt": _attempt(),
                           "time": time.time()}) + "\n"
        try:
            descriptor = os.open(os.path.join(self.directory, EVENTS_FILE), os.O_CREAT | os.O_APPEND | os.O_WRONLY,
                                 0o666)
            try:
                os.write(descriptor, line.encode())
            finally:
                os.close(descriptor)
        except OSError as exc:
            print(f"ddp-compose: the {fields.get('kind')} fault of {fields.get('file')} went unrecorded: {exc}",
                  file=sys.stderr, flush=True)

    def returned_quietly(self, file: Any) -> None:
        """A ``torch.save`` to ``file`` returned though a full disk failed its write (the script met
        no error), recorded once per file: the launcher says so."""
        found = self.matching(file, "disk-full")
        if found is None:
            return
        fault, relative = found
        if (fault["key"], relative, "returned") not in self.reported:
            self.reported.add((fault["key"], relative, "returned"))
            self.record(kind="disk-full", key=fault["key"], file=relative, returned=True)

    def disk_full(self, file: Any) -> Optional[OSError]:
        """The ENOSPC a write to ``file`` meets now, recorded once per file (None: the disk is not full)."""
        found = self.matching(file, "disk-full")
        if found is None:
            return None
        fault, relative = found
        if (fault["key"], relative) not in self.reported:
            self.reported.add((fault["key"], relative))
            self.record(kind="disk-full", key=fault["key"], file=relative)
        full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the system's: a write's error names no file
        setattr(full, AS_THE_SYSTEM, True)
        return full


def descriptor_path(descriptor: int) -> Optional[str]:
    """The path a descriptor of this process was opened at (None: not a file, or not known)."""
    try:
        path = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


class FullDiskFile(io.FileIO):
    """The raw file under Python's buffers of a file a disk-full fault reaches: each write the
    buffers pass down to the system fails with ENOSPC while the fault is listed. So a script
    meets what a full disk gives it: a small write kept in the buffer, the error at a flush or at
    close, and ``torch.save``'s own error around it (torch's ``RuntimeError``, the ENOSPC its
    context), not one raised at every write."""

    def __init__(self, descriptor: int, mode: str, name: Any, path: str, faults: StorageFaults,
                 closefd: bool = True) -> None:
        super().__init__(descriptor, mode.replace("x", "w").replace("b", "").replace("t", ""), closefd=closefd)
        # as open() names it: the path given (a str, for a path-like one), or the descriptor
        self.name = os.fspath(name) if isinstance(name, os.PathLike) else name
        self._path = path
        self._faults = faults

    def write(self, data: Any) -> int:
        full = self._faults.disk_full(self._path)
        if full is not None:
            raise full
        return super().write(data)


def _open_options(buffering: int = -1, encoding: Optional[str] = None, errors: Optional[str] = None,
                  newline: Optional[str] = None, closefd: bool = True, opener: Any = None) -> dict[str, Any]:
    """``open``'s arguments after the mode, by name."""
    return {"buffering": buffering, "encoding": encoding, "errors": errors, "newline": newline, "closefd": closefd,
            "opener": opener}


def on_a_full_disk(opened: Any, file: Any, path: str, mode: str, options: dict[str, Any],
                   faults: StorageFaults) -> Any:
    """``opened`` again, the same layers (buffer, text) over a :class:`FullDiskFile`: the file
    stays as ``open`` made it (created, truncated), its writes now meet the full disk. A
    descriptor the caller gave (``file``, an int: ``opened`` must not own it) is the raw file's
    own, closed by it where the caller's ``closefd`` says, so its number stays the caller's; a
    path's is a duplicate of ``opened``'s, which is closed."""
    if isinstance(file, int):
        raw = FullDiskFile(file, mode, file, path, faults, closefd=options["closefd"])
    else:
        raw = FullDiskFile(os.dup(opened.fileno()), mode, file, path, faults)
    opened.close()
    if options["buffering"] == 0:  # unbuffered binary: the raw file itself
        return raw
    size = options["buffering"] if options["buffering"] > 1 else max(os.fstat(raw.fileno()).st_blksize, 1)
    buffered = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw, buffer_size=size)
    if "b" in mode:
        return buffered
    text = io.TextIOWrapper(buffered, encoding=options["encoding"], errors=options["errors"],
                            newline=options["newline"], line_buffering=options["buffering"] == 1)
    text.mode = mode  # as open() gives it
    return text


class FaultyFile:
    """A file opened for writing that a torn write reaches: cut short when closed, and the
    worker stops there."""

    def __init__(self, inner: Any, faults: StorageFaults, torn: tuple[dict[str, Any], str]) -> None:
        self._inner = inner
        self._faults = faults
        self._torn = torn
        try:  # where this writer's bytes begin (an appended file's earlier bytes are not its to tear)
            self._start = inner.tell()
        except (OSError, ValueError):
            self._start = 0

    def close(self) -> None:
        if self._inner.closed:
            return
        self._inner.flush()
        size = os.fstat(self._inner.fileno()).st_size
        cut = random.randrange(self._start + 1, size) if size > self._start + 1 else self._start
        os.ftruncate(self._inner.fileno(), cut)
        os.fsync(self._inner.fileno())
        self._inner.close()
        fault, relative = self._torn
        self._faults.record(kind="torn-write", key=fault["key"], file=relative, byte=cut, size=size)
        die_torn()

    def __enter__(self) -> "FaultyFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> "FaultyFile":
        return self

    def __next__(self) -> Any:
        return next(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def die_torn() -> None:
    """A crash in the middle of a save: write nothing more; wait for the node to be killed."""
    deadline = time.monotonic() + DIE_AFTER_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
    os._exit(TORN_EXIT_CODE)


_original_open = builtins.open


def wrap_open(faults: StorageFaults, original: Any = None) -> Any:
    """``open`` that hands back a :class:`FaultyFile` for a file opened for writing that an
    armed fault matches; any other file as ``original`` opens it."""
    original = original or _original_open

    def faulty_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not _WRITING & set(str(mode)) or not faults.armed():
            return original(file, mode, *args, **kwargs)
        if isinstance(file, int):  # a descriptor (os.fdopen of mkstemp's): by the path it was opened at
            where = descriptor_path(file)
            if where is None or not (faults.matching(where, "torn-write") or faults.matching(where, "disk-full")):
                return original(file, mode, *args, **kwargs)
            opened = None
        else:
            opened = original(file, mode, *args, **kwargs)
            # the file opened, not the argument (tempfile opens a directory's name with an opener of its own)
            where = descriptor_path(opened.fileno()) or file
        torn = faults.matching(where, "torn-write")
        if torn is not None and faults.claim(torn[0]["key"]):
            return FaultyFile(opened or original(file, mode, *args, **kwargs), faults, torn)
        if faults.matching(where, "disk-full") is None:
            return opened or original(file, mode, *args, **kwargs)
        options = _open_options(*args, **kwargs)
        if opened is None:  # opened here without taking the caller's descriptor: the raw layer takes it
            opened = original(file, mode, options["buffering"], options["encoding"], options["errors"],
                              options["newline"], False, options["opener"])
        return on_a_full_disk(opened, file, os.fsdecode(os.fspath(where)), str(mode), options, faults)

    faulty_open.__wrapped__ = original  # type: ignore[attr-defined]
    return faulty_open


def writes_a_zipfile(save: Any, obj: Any, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``save`` (torch's) called so writes its zipfile format, not the legacy one
    (``_use_new_zipfile_serialization=False``, by keyword or by place)."""
    try:
        given = inspect.signature(save).bind_partial(obj, f, *args, **kwargs).arguments
    except (TypeError, ValueError):
        return True
    return given.get("_use_new_zipfile_serialization", True) is not False


def wrap_torch_save(faults: StorageFaults) -> None:
    """``torch.save`` to a path that an armed fault matches writes through a file opened here
    (torch writes a path from C++, out of Python's reach)."""
    import torch
    import torch.serialization as serialization

    original = serialization.save
    opener = wrap_open(faults)

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and faults.armed() and (
                faults.matching(f, "torn-write") or faults.matching(f, "disk-full")):
            # torch's zipfile writer of a path leaves its last flush unchecked; its legacy writer
            # writes and closes the file in Python, and raises the full disk's error as any write
            quiet = writes_a_zipfile(original, obj, f, args, kwargs)
            file = opener(f, "wb")
            try:
                saved = original(obj, file, *args, **kwargs)
            except BaseException as exc:
                try:
                    file.close()
                except OSError:  # the full disk's again: torch's own writer closes its file quietly after its error
                    pass
                if quiet and isinstance(exc, OSError) and getattr(exc, AS_THE_SYSTEM, False):
                    faults.returned_quietly(f)
                    return None  # met only at the flush of a save small enough for the buffer: torch's own writer
                    # of a path does not check that, and returns (its bytes are lost), as on /dev/full
                raise
            try:
                file.close()
            except OSError as exc:  # a save small enough to sit in the buffer: torch's own writer of a path does
                if not (quiet and getattr(exc, AS_THE_SYSTEM, False)):  # not check its close, and returns (its
                    raise  # bytes are lost)
                faults.returned_quietly(f)
            return saved
        return original(obj, f, *args, **kwargs)

    save.__wrapped__ = original  # type: ignore[attr-defined]
    serialization.save = save
    torch.save = save


def install(directory: str, node: Optional[str] = None) -> StorageFaults:
    """Let the launcher's storage faults reach this process: wrap ``open`` now (``torch.save``
    when torch is imported: :func:`wrap_torch_save`)."""
    faults = StorageFaults(directory, node or socket.gethostname())
    opener = wrap_open(faults)
    builtins.open = opener
    io.open = opener
    return faults


def _rank() -> Optional[int]:
    rank = os.environ.get("RANK")
    return int(rank) if rank and rank.isdigit() else None


def _attempt() -> Optional[int]:
    """Which attempt of its node's worker group this process is, counted from 0 by torchrun
    (a restart in place starts the next; a new torchrun, in a restarted container, starts at 0)."""
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return int(count) if count and count.isdigit() else None
