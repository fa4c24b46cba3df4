"""The faults a run's nodes suffer now, read from the run's own record, for whoever looks at a run
it does not follow (``stacks RUN``): the launcher's events (``events.jsonl``: the faults it did,
and those it saw ``fault RUN`` do) and ``fault RUN``'s notes (``live-faults.jsonl``: read too,
for a run that no launcher follows). A fault is in effect from when it was done until it was
undone, or until its node's container started again (no pause or stopped process outlives that).
The same record names the nodes a ``lose`` fault took for good (the engine sees only a node
killed).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from orchestrate.config.fault_spec import FaultAction, FaultSpec, parse_fault
from orchestrate.engine.client import engine_time
from orchestrate.errors import UsageError
from orchestrate.faults.live_notes import LiveFaultReader
from orchestrate.outcome.events import read_events


@dataclass(frozen=True)
class FaultStep:
    """A fault done or undone, from either record (``fault_id``: ``fault RUN``'s, shared by both
    records; None for the launcher's own faults)."""

    time: float
    node: str
    spec: str
    ended: bool
    fault_id: Optional[str] = None


def fault_steps(run_dir: Path, events: Optional[list[dict[str, Any]]] = None) -> list[FaultStep]:
    """Every fault done or undone in the run, in time order (``events``: its events, where the
    caller read them already)."""
    steps = []
    for event in read_events(run_dir) if events is None else events:
        if event["event"] in ("fault", "fault-ended") and event.get("node") and event.get("spec"):
            steps.append(FaultStep(float(event["time"]), str(event["node"]), str(event["spec"]),
                                   event["event"] == "fault-ended", event.get("fault_id")))
    for note in LiveFaultReader(run_dir).take():
        if note.phase in ("done", "ended"):
            steps.append(FaultStep(note.time, note.node, str(note.spec), note.phase == "ended", note.id))
    return sorted(steps, key=lambda step: step.time)


def faults_in_effect(steps: list[FaultStep], started: dict[str, Optional[float]]) -> dict[str, list[FaultSpec]]:
    """The faults each node suffers now, oldest first: done and not undone since its container's
    latest start (``started``, Unix seconds; a node not in it, or None: every fault counts)."""
    held: dict[str, list[FaultStep]] = {}
    for step in steps:
        mine = held.setdefault(step.node, [])
        same = [s for s in mine
                if (s.fault_id == step.fault_id if step.fault_id else not s.fault_id and s.spec == step.spec)]
        if step.ended and same:
            mine.remove(same[0])
        elif not step.ended and not (step.fault_id and same):  # one fault RUN did is in both records
            mine.append(step)
    now: dict[str, list[FaultSpec]] = {}
    for node, mine in held.items():
        since = started.get(node)
        specs = [parsed for s in mine if since is None or s.time >= since
                 for parsed in [parsed_fault(s.spec)] if parsed is not None]
        if specs:
            now[node] = specs
    return now


def faults_now(run_dir: Path, containers: dict[str, Any]) -> dict[str, list[FaultSpec]]:
    """The faults each of these nodes (their containers, by node name) suffers now, from the run's
    record, each container's latest start as the engine says it ({} for a run with no directory)."""
    if not run_dir.name:
        return {}
    started = {name: engine_time(container.attrs.get("State", {}).get("StartedAt", ""))
               for name, container in containers.items()}
    return {name: specs for name, specs in faults_in_effect(fault_steps(run_dir), started).items()
            if name in containers}


def lost_nodes(run_dir: Path, events: Optional[list[dict[str, Any]]] = None) -> frozenset[str]:
    """The nodes a ``lose`` fault took for good, from the run's record (none for a run with no
    directory): the launcher's ``lose``, or ``fault RUN``'s (``events``: as for fault_steps)."""
    if not run_dir.name:
        return frozenset()
    return frozenset(step.node for step in fault_steps(run_dir, events) if not step.ended
                     for spec in [parsed_fault(step.spec)] if spec is not None and spec.action is FaultAction.LOSE)


def parsed_fault(text: str) -> Optional[FaultSpec]:
    """A fault as a record wrote it (None for one this version does not read)."""
    try:
        return parse_fault(text)
    except UsageError:  # a record written by another version
        return None
