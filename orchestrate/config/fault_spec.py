"""Faults as a user asks for them (pure): kill, pause, cut off, restart or preempt a node, at a
time or at a training step.

A fault is written ``ACTION:NODE[@t=SECONDS|@step=N]``, e.g. ``kill:node1@step=20`` or
``pause:node1@t=15``; without a trigger it fires as soon as the job starts. Doing them is
:mod:`orchestrate.faults`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from orchestrate.errors import UsageError

USAGE = "usage: ACTION:NODE[@t=SECONDS|@step=N], e.g. kill:node1@step=20 or pause:node1@t=15"
_SPEC = re.compile(
    r"^(?P<action>[a-z]+):(?P<node>node\d+)"
    r"(?:@(?:t=(?P<seconds>\d+(?:\.\d+)?)s?|step=(?P<step>\d+)))?$"
)


class FaultAction(str, Enum):
    """What a fault does to a node's container."""

    KILL = "kill"  # SIGKILL every process: a node that dies
    PAUSE = "pause"  # freeze every process: a node that hangs
    DISCONNECT = "disconnect"  # take it off the project network: a node that is cut off
    RESTART = "restart"  # kill and start the container again: a node that reboots
    PREEMPT = "preempt"  # SIGTERM, then SIGKILL after the stop grace: a node its cluster takes back


@dataclass(frozen=True)
class FaultSpec:
    """One fault to inject."""

    action: FaultAction
    node: str
    at_seconds: Optional[float] = None
    at_step: Optional[int] = None

    def __str__(self) -> str:
        if self.at_step is not None:
            trigger = f"@step={self.at_step}"
        elif self.at_seconds:
            trigger = f"@t={self.at_seconds:g}"
        else:
            trigger = ""
        return f"{self.action.value}:{self.node}{trigger}"

    def due(self, elapsed_s: float, step: Optional[int]) -> bool:
        """Whether the fault should fire, ``elapsed_s`` into the job at training ``step``."""
        if self.at_step is not None:
            return step is not None and step >= self.at_step
        return elapsed_s >= (self.at_seconds or 0.0)


def parse_fault(text: str) -> FaultSpec:
    """Parse one ``--fault`` value.

    Raises:
        UsageError: Quoting the value and the usage.
    """
    match = _SPEC.match(text.strip())
    if not match:
        raise UsageError(f"invalid --fault {text!r}: {USAGE}")
    try:
        action = FaultAction(match.group("action"))
    except ValueError:
        choices = ", ".join(a.value for a in FaultAction)
        raise UsageError(f"invalid --fault {text!r}: action must be one of {choices}") from None
    seconds, step = match.group("seconds"), match.group("step")
    return FaultSpec(action, match.group("node"),
                     float(seconds) if seconds is not None else None,
                     int(step) if step is not None else None)


def check_fault_nodes(faults: list[FaultSpec], node_names: list[str]) -> None:
    """Refuse faults aimed at nodes the run does not have."""
    for fault in faults:
        if fault.node not in node_names:
            raise UsageError(f"--fault {fault}: no {fault.node} in this run (nodes: {', '.join(node_names)})")


