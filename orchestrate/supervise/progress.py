"""The launcher's half of the progress channel: reading the workers' steps, releasing step faults."""
from __future__ import annotations
from typing import Optional
from pathlib import Path
from orchestrate.node.progress import TRIGGERS_FILE
from dataclasses import dataclass
from dataclasses import field
import json

def write_triggers(directory: Path, steps: list[int]) -> None:
    """List the steps at which ranks wait for a fault (before the job starts)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / TRIGGERS_FILE).write_text(json.dumps({"steps": sorted(set(steps))}))


def mark_fired(directory: Path, step: int) -> None:
    """Let the ranks waiting at ``step`` go on: its fault has been injected."""
    (directory / f"fired-{step}").touch()


@dataclass
class ProgressRecord:
    """One line of the channel."""

    rank: int
    time: float
    step: Optional[int] = None
    resumed: Optional[int] = None
    metrics: dict[str, float] = field(default_factory=dict)


def parse_record(line: str) -> Optional[ProgressRecord]:
    """Parse one JSON line; None for a torn or foreign line."""
    try:
        data = json.loads(line)
        record = ProgressRecord(int(data.pop("rank")), float(data.pop("time")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if "step" in data:
        record.step = int(data.pop("step"))
    if "resumed" in data:
        record.resumed = int(data.pop("resumed"))
    record.metrics = {k: v for k, v in data.items() if isinstance(v, (int, float))}
    return record


class ProgressReader:
    """Reads the new lines of every rank's file since the last call (the launcher polls it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}

    def poll(self) -> list[ProgressRecord]:
        records: list[ProgressRecord] = []
        for path in sorted(self.directory.glob("rank*.jsonl")):
            try:
                with open(path, encoding="utf-8") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
                    self.offsets[path] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(path, "") + chunk
            *lines, rest = text.split("\n")
            if rest:
                self.partial[path] = rest
            records += [r for r in map(parse_record, lines) if r is not None]
        return records
