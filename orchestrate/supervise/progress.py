"""The workers' training steps as the supervisor follows them."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from orchestrate.outcome.model import Recovery
from orchestrate.outcome.progress import ProgressReader


class ProgressWatch:
    """The workers' training steps as the supervisor sees them: the highest step reported, and
    the moment training resumed after an elastic recovery."""

    def __init__(self, directory: Path, record: Callable[..., None]) -> None:
        self.reader = ProgressReader(directory)
        self.record = record
        self.max_step: Optional[int] = None
        self.seen = False
        self.records = 0  # every record read so far: progress, to the hang watchdog

    def poll(self, now: float, recovery: Optional[Recovery]) -> None:
        """Read what the workers reported since the last poll; ``recovery``, the recovery still
        waiting for training to resume, learns the step it resumed from and when it did."""
        for record in self.reader.poll():
            self.seen = True
            self.records += 1
            if record.resumed is not None:
                if recovery is not None:
                    recovery.resumed_from = record.resumed
                continue
            if record.step is None:
                continue
            if recovery is not None and recovery.resumed_from is not None:
                recovery.resumed_at = now
                self.record("resumed", node=recovery.node, step=record.step, recovery_s=recovery.recovery_s,
                            steps_lost=recovery.steps_lost)
                self.max_step = record.step
                recovery = None
                continue
            self.max_step = max(self.max_step or 0, record.step)
