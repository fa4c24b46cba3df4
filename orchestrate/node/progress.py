"""The progress channel: workers report their training step; the launcher reads it.

Worker side (standard library only; a no-op outside ddp-compose, so a script that calls it
runs unchanged under plain torchrun or on a cluster)::

    try:
        from orchestrate.node.progress import report
    except ImportError:
        def report(step, **metrics): pass
    ...
    report(step, loss=loss.item())

Each rank appends JSON lines to ``$DDP_PROGRESS_DIR/rank<RANK>.jsonl`` (the run directory,
mounted in every node). ``@step=N`` faults are exact: the launcher lists their steps in
``triggers.json`` before the job starts, and a rank that reports step N waits until the
launcher has injected the fault (``fired-N``), so no rank gets past step N first.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any, Optional

PROGRESS_DIR_ENV = "DDP_PROGRESS_DIR"
TRIGGERS_FILE = "triggers.json"
# How long a rank at a fault's step waits for the launcher, at most: never a deadlock.
TRIGGER_WAIT_S = 60.0


class _Channel:
    """This process's progress file and the fault steps to stop at."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.directory = directory
        self.rank = rank
        self.file: IO[str] = open(directory / f"rank{rank}.jsonl", "a", encoding="utf-8")
        try:
            self.triggers = set(json.loads((directory / TRIGGERS_FILE).read_text())["steps"])
        except (OSError, ValueError, KeyError, TypeError):
            self.triggers = set()

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def wait_for_fault(self, step: int) -> None:
        fired = self.directory / f"fired-{step}"
        deadline = time.monotonic() + TRIGGER_WAIT_S
        while not fired.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


_channel: Optional[_Channel] = None


def _get_channel() -> Optional[_Channel]:
    global _channel
    if _channel is None:
        directory = os.environ.get(PROGRESS_DIR_ENV)
        if not directory or not Path(directory).is_dir():
            return None
        _channel = _Channel(Path(directory), int(os.environ.get("RANK", "0")))
    return _channel


# Whether the script reports its own steps: then the optimizer's count (:func:`report_counted`)
# stays out of the channel, and the script's own numbering stands.
_reported_by_script = False


def report(step: int, **metrics: float) -> None:
    """Report that this rank finished training step ``step`` (with metrics such as loss)."""
    global _reported_by_script
    _reported_by_script = True
    _write_step(step, metrics)


def script_reports() -> bool:
    """Whether the script has reported a step of its own."""
    return _reported_by_script


def report_counted(step: int) -> None:
    """Report a step counted by the workers' start-up hook (the optimizer's steps)."""
    _write_step(step, {}, counted=True)


def _write_step(step: int, metrics: dict, counted: bool = False) -> None:
    channel = _get_channel()
    if channel is None:
        return
    record = {"rank": channel.rank, "step": int(step), "time": time.time(), **{k: float(v) for k, v in metrics.items()}}
    if counted:
        record["counted"] = "optimizer"
    channel.write(record)
    if step in channel.triggers:
        channel.wait_for_fault(step)


def report_resumed(step: int) -> None:
    """Report that this rank resumed from a checkpoint taken at ``step``."""
    channel = _get_channel()
    if channel is not None:
        channel.write({"rank": channel.rank, "resumed": int(step), "time": time.time()})


# Launcher side ---------------------------------------------------------------------------


