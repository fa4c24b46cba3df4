"""Storage faults, the launcher's side: arming them for the workers and reading back what they
did (the workers' side is :mod:`orchestrate.node.storage_faults`, which says what they reach).

A fault is armed by listing it in the run's progress directory, which every node mounts; a
worker that meets it records the file, the byte and its rank there, and the launcher reads it
back (:class:`StorageEvents`): a torn write's node is then killed, as a crash mid-save.
"""
from __future__ import annotations

import fcntl
import json
import os
import posixpath
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.node.storage_faults import EVENTS_FILE, FAULTS_FILE

ANY_FILE = "*"
# What the workers' hook reaches, said where a storage fault met no write (:mod:`orchestrate.node.storage_faults`).
STORAGE_REACH = ("storage faults reach the writes of Python's open() and torch.save, not os.open() and os.write(),"
                 " memory maps, or a native library's own files")


def default_glob(last_saved: Optional[str]) -> str:
    """The files a storage fault without ``path=`` reaches (pure): every file in the directory
    of what the job saved last (``last_saved``: its work-directory path), so that a save through
    a temporary file beside it is reached too; any file when nothing was saved."""
    directory = posixpath.dirname(last_saved) if last_saved else ""
    return f"{directory}/*" if directory else ANY_FILE


def arm(directory: Path, fault: FaultSpec, node: str, glob: str) -> str:
    """List ``fault`` for ``node``'s workers; return its key (for :func:`disarm` and the events)."""
    key = f"s{time.time_ns():x}"
    with _listing(directory):
        faults = [*armed(directory), {"key": key, "kind": fault.action.value, "node": node, "path": glob,
                                      "spec": str(fault)}]
        _write(directory, faults)
    return key


def disarm(directory: Path, key: str) -> None:
    """Take fault ``key`` off the list: no worker meets it any more."""
    with _listing(directory):
        _write(directory, [f for f in armed(directory) if f.get("key") != key])


def armed(directory: Path) -> list[dict[str, Any]]:
    """The storage faults listed now."""
    try:
        return list(json.loads((directory / FAULTS_FILE).read_text()).get("faults", []))
    except (OSError, ValueError, AttributeError):
        return []


@contextmanager
def _listing(directory: Path) -> Iterator[None]:
    """Hold the list's lock while it is read and rewritten: the run's launcher and a
    ``fault RUN`` beside it may change it at once, and neither may lose the other's change."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{FAULTS_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write(directory: Path, faults: list[dict[str, Any]]) -> None:
    """Write the list whole, then rename: a worker never reads half of it (under :func:`_listing`,
    which made the directory)."""
    temporary = directory / f"{FAULTS_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps({"faults": faults}))
    temporary.replace(directory / FAULTS_FILE)


def whole_number(value: Any) -> Optional[int]:
    """A record's whole number, or None (absent, or written by another version)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> Optional[float]:
    """A record's number, or None (absent, or written by another version)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StorageEvent:
    """What a worker met: a torn write (``byte`` of ``size`` written) or a full disk; of a full
    disk, also a ``torch.save`` to a path that returned all the same (``returned``: its failed
    write sat in the buffer, and torch's writer of a path checks no flush or close)."""

    kind: str
    key: str
    node: str
    file: str
    rank: Optional[int] = None
    byte: Optional[int] = None
    size: Optional[int] = None
    returned: bool = False
    attempt: Optional[int] = None  # torchrun's count of the worker group's restarts in place when it came
    time: Optional[float] = None  # Unix seconds, on the worker's clock

    @property
    def torn(self) -> bool:
        return self.kind == FaultAction.TORN_WRITE.value

    def describe(self) -> str:
        by = f"rank {self.rank}" if self.rank is not None else f"a worker of {self.node}"
        if self.torn:
            return f"{by}'s write of {self.file} was cut at byte {self.byte} of {self.size}"
        if self.returned:
            return (f"{by}'s torch.save to {self.file} returned with no error all the same, as torch's writer of a"
                    " path does on a full disk: the file lacks the bytes lost, and the script went on")
        return f"{by}'s write to {self.file} failed: no space left on device (ENOSPC)"


class StorageEvents:
    """The workers' storage events, read as they come: those recorded from now on (an earlier
    follower's, already acted on, are not read again), or every one from the first
    (``from_start``: what a fault did, whoever followed the run then)."""

    def __init__(self, directory: Path, from_start: bool = False) -> None:
        self.path = directory / EVENTS_FILE
        self.offset = 0
        if not from_start:
            try:
                self.offset = self.path.stat().st_size
            except OSError:
                pass

    def poll(self) -> list[StorageEvent]:
        """The events recorded since the last poll (whole lines only)."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                data = file.read()
        except OSError:
            return []
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        events = []
        for line in complete.splitlines():
            try:
                fields = json.loads(line)
                events.append(StorageEvent(str(fields["kind"]), str(fields["key"]), str(fields["node"]),
                                           str(fields["file"]), fields.get("rank"), fields.get("byte"),
                                           fields.get("size"), fields.get("returned") is True,
                                           whole_number(fields.get("attempt")), number(fields.get("time"))))
            except (ValueError, KeyError, TypeError):
                continue
        return events


class ArmedFault(NamedTuple):
    """One storage fault as armed: its key (in the workers' events) and the files it reaches."""

    key: str
    glob: str


class ArmedStorageFaults:
    """The storage faults one launcher armed in a run: arming, ending, and what the workers met."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.keys: dict[str, FaultSpec] = {}
        self.events = StorageEvents(directory)

    def arm(self, fault: FaultSpec, last_saved: Optional[str] = None) -> ArmedFault:
        """Arm ``fault`` on its node, over its ``path=`` or :func:`default_glob` of
        ``last_saved``."""
        glob = fault.path or default_glob(last_saved)
        key = arm(self.directory, fault, fault.node, glob)
        self.keys[key] = fault
        return ArmedFault(key, glob)

    def end(self, fault: FaultSpec) -> None:
        """Disarm ``fault`` (its end came, or its write was torn)."""
        for key in [k for k, f in self.keys.items() if f == fault]:
            disarm(self.directory, key)

    def armed_key(self, spec: str, node: str) -> str:
        """The key of the latest storage fault ``spec`` armed on ``node`` now, by this launcher or
        by ``fault RUN`` ("": none is armed: it ended, or was never armed)."""
        keys = [f.get("key", "") for f in armed(self.directory) if f.get("spec") == spec and f.get("node") == node]
        return keys[-1] if keys else ""

    def still_armed(self, key: str) -> bool:
        """Whether the storage fault armed as ``key`` is armed still."""
        return any(f.get("key") == key for f in armed(self.directory))

    def poll(self) -> list[tuple[Optional[FaultSpec], StorageEvent]]:
        """What the workers met since the last poll, each with the fault it met (None: a fault
        armed by another command, ``fault RUN``)."""
        return [(self.keys.get(event.key), event) for event in self.events.poll()]
