"""A run's directory on the host, found again after the run: by its id, or a unique part of it.

What a run leaves there outlives its containers (``run.json``, the nodes' logs, ``outcome.json``,
the report page), so the commands that read an ended run (``report``, ``logs``) find it here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from orchestrate.errors import NoSuchRunError, UsageError
from orchestrate.text import in_their_middle, no_run_named, node_conditions, runs_named, several_runs

PLAN_FILE = "run.json"  # written as the run's directory is made (launch.run_dir)


def find_run_dir(runs_dir: Path, run: str) -> Path:
    """A run's directory from its id (or a unique start or end of it) in ``runs_dir``, or a path to it.

    Raises:
        NoSuchRunError: Where ``runs_dir`` holds no run by that name.
        UsageError: Where it names several.
    """
    given = Path(run)
    if (given / PLAN_FILE).is_file():
        return given
    recorded = [p.name for p in runs_dir.iterdir() if (p / PLAN_FILE).is_file()] if runs_dir.is_dir() else []
    matches = runs_named(run, recorded)
    if len(matches) == 1:
        return runs_dir / matches[0]
    if not matches:
        middle = tuple(in_their_middle(run, recorded))
        raise NoSuchRunError(no_run_named(run, f"in {runs_dir}", "give the run id, or --runs-dir", middle), middle)
    raise UsageError(several_runs(run, matches, f"in {runs_dir}"))


def recorded_nodes(run_dir: Path) -> list[tuple[str, tuple[int, ...]]]:
    """Each node of the run as its plan recorded it: its name and the global ranks it was given
    (none for an elastic run's, whose rendezvous gave them out).

    Raises:
        UsageError: Where the run's plan file cannot be read.
    """
    try:
        plan = json.loads((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
        nodes = [(node["name"], tuple(node.get("global_ranks", ()))) for node in plan["nodes"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read the plan of run {run_dir.name} ({run_dir / PLAN_FILE}): {exc}") from exc
    if not nodes:
        raise UsageError(f"the plan of run {run_dir.name} ({run_dir / PLAN_FILE}) names no node")
    return nodes


def recorded_conditions(plan: dict) -> str:
    """The link and node sizes a run's plan (``run.json``, read) recorded, as the summary says
    them (:func:`~orchestrate.text.node_conditions`); "" where it recorded none (a plan written
    before they were recorded too)."""
    return node_conditions(plan.get("link") or "", plan.get("cpus_per_node"), plan.get("memory_per_node"))


def read_conditions(run_dir: Path) -> str:
    """:func:`recorded_conditions` of the plan in ``run_dir``; "" where it cannot be read."""
    try:
        plan = json.loads((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return recorded_conditions(plan) if isinstance(plan, dict) else ""


def recorded_faults(run_dir: Path) -> Optional[tuple[str, ...]]:
    """The faults a run's plan (``run.json``) asked for; None where it cannot be read, or does not
    say (a plan written before they were recorded)."""
    try:
        plan = json.loads((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    faults = plan.get("faults") if isinstance(plan, dict) else None
    return tuple(str(f) for f in faults) if isinstance(faults, list) else None
