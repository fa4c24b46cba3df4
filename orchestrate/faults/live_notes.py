"""The faults ``fault RUN`` did from another terminal, noted in the run's directory
(:data:`~orchestrate.plan.layout.LIVE_FAULTS_FILE`, JSON lines) so that whoever follows a Compose
run (its launcher, ``attach``) says them as they happen and names them in the run's summary, as it
names the faults ``run --fault`` asked for.

One object per line: ``id`` (one fault's notes share it), ``time`` (Unix seconds), ``spec`` (as
``--fault`` writes it), ``node`` (where it lands; a rank fault's is the node that runs the rank),
and ``phase``:

- ``doing``: about to be done to a node (noted first, so that the node's death is never seen
  before its cause);
- ``done``: done (a rank fault has this note alone);
- ``failed``: refused (``error`` says why): it was not done;
- ``ended``: a fault with an end was undone, or its end came.

A storage fault's ``done`` note has its ``storage_key`` too: the key of the workers' events of it
(:mod:`~orchestrate.faults.storage`), by which a follower knows whether it met a write.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrate.config.fault_spec import FaultSpec, parse_fault
from orchestrate.errors import UsageError
from orchestrate.plan.layout import LIVE_FAULTS_FILE

log = logging.getLogger(__name__)

PHASES = ("doing", "done", "failed", "ended")


@dataclass(frozen=True)
class LiveFaultNote:
    """One line of the notes: a step of one fault done from another terminal."""

    id: str
    time: float
    spec: FaultSpec
    node: str
    phase: str
    error: str = ""
    storage_key: str = ""


def new_fault_id() -> str:
    """An id for one fault's notes."""
    return uuid.uuid4().hex[:12]


def note_live_fault(run_dir: Optional[Path], fault_id: str, spec: FaultSpec, node: str, phase: str,
                    error: str = "", storage_key: str = "") -> bool:
    """Append one note; False where the run's directory is gone or cannot be written here (the
    run is then judged by its exits alone)."""
    assert phase in PHASES, phase
    if run_dir is None or not run_dir.name or not run_dir.is_dir():
        return False
    entry: dict = {"id": fault_id, "time": time.time(), "spec": str(spec), "node": node, "phase": phase}
    if error:
        entry["error"] = error
    if storage_key:
        entry["storage_key"] = storage_key
    try:
        with open(run_dir / LIVE_FAULTS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    except OSError as exc:
        log.debug("live fault notes of run %s: %s", run_dir.name, exc)
        return False
    return True


class LiveFaultReader:
    """The notes of one run, read as they come: :meth:`take` returns those added since the last
    call (a line still being written waits for its end)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LIVE_FAULTS_FILE if run_dir.name else None
        self.offset = 0

    def take(self) -> list[LiveFaultNote]:
        if self.path is None:
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:  # none yet
            return []
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        notes = []
        for line in whole.decode("utf-8", errors="replace").splitlines():
            note = parse_note(line)
            if note is not None:
                notes.append(note)
        return notes


def parse_note(line: str) -> Optional[LiveFaultNote]:
    """One line of the notes; None for one that is not a note (logged)."""
    try:
        entry = json.loads(line)
        phase = str(entry["phase"])
        if phase not in PHASES:
            raise ValueError(f"no phase {phase!r}")
        return LiveFaultNote(str(entry["id"]), float(entry["time"]), parse_fault(str(entry["spec"])),
                             str(entry["node"]), phase, str(entry.get("error", "")),
                             str(entry.get("storage_key", "")))
    except (ValueError, KeyError, TypeError, AttributeError, UsageError) as exc:
        log.debug("a live fault note that is not one (%r): %s", line[:200], exc)
        return None
