"""The faults ``fault RUN`` did from another terminal, noted in the run's directory
(:data:`~orchestrate.plan.layout.LIVE_FAULTS_FILE`, JSON lines) so that whoever follows the run
(its launcher, ``attach``) says them as they happen and names them in the run's summary, as it
names the faults ``run --fault`` asked for.

One object per line: ``time`` (Unix seconds), ``spec`` (as ``--fault`` writes it), ``node`` (where
it landed; a rank fault's is the node that ran the rank), and one of ``ended`` (a fault with an
end was undone) or ``failed`` (the engine refused it: why).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrate.config.fault_spec import FaultSpec, parse_fault
from orchestrate.errors import UsageError
from orchestrate.plan.layout import LIVE_FAULTS_FILE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveFaultNote:
    """One line of the notes: a fault done (or undone, or refused) from another terminal."""

    time: float
    spec: FaultSpec
    node: str
    ended: bool = False
    failed: str = ""


def note_live_fault(run_dir: Optional[Path], spec: FaultSpec, node: str, *, ended: bool = False,
                    failed: str = "") -> bool:
    """Append one note; False where the run's directory is gone or cannot be written here (the
    run is then judged by its exits alone)."""
    if run_dir is None or not run_dir.name or not run_dir.is_dir():
        return False
    entry: dict = {"time": time.time(), "spec": str(spec), "node": node}
    if ended:
        entry["ended"] = True
    if failed:
        entry["failed"] = failed
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
        return LiveFaultNote(float(entry["time"]), parse_fault(str(entry["spec"])), str(entry["node"]),
                             ended=bool(entry.get("ended", False)), failed=str(entry.get("failed", "")))
    except (ValueError, KeyError, TypeError, AttributeError, UsageError) as exc:
        log.debug("a live fault note that is not one (%r): %s", line[:200], exc)
        return None
