"""Where every rank of a running run is now: the workers' snapshots, with the engine's word on
the ranks that cannot answer (a paused node, a stopped process). Used by the hang watchdog and
by ``stacks RUN``."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.engine.errors import engine_errors
from orchestrate.faults.ranks import stopped_ranks
from orchestrate.hangs.diagnosis import DEBUG_HINT, HangDiagnosis, diagnose
from orchestrate.hangs.snapshots import debug_dir, request_snapshots

STACKS_FILE = "stacks.json"


@dataclass(frozen=True)
class RankHost:
    """A node as the probe needs it: its container, its ranks (empty when the rendezvous
    assigns them), the fault it suffers."""

    name: str
    container: Any
    ranks: tuple[int, ...]
    fault: str = ""


def absent_reasons(client: Any, hosts: list[RankHost], ranks: set[int]) -> dict[int, str]:
    """Why ``ranks`` (which did not answer) cannot: their node's container is paused, or their
    process is stopped, with the fault that did it; the others are left out."""
    why: dict[int, str] = {}
    for host in hosts:
        mine = set(host.ranks) & ranks if host.ranks else set(ranks)
        if not mine:
            continue
        fault = f" (injected fault {host.fault})" if host.fault else ""
        try:
            host.container.reload()
            paused = host.container.status == "paused"
        except engine_errors():
            continue
        if paused:
            why.update({rank: f"is on {host.name}, whose container is paused{fault}" for rank in mine})
            continue
        for rank in stopped_ranks(client, host.container):
            if rank in ranks:
                why[rank] = f"is stopped: its process on {host.name} got SIGSTOP{fault}"
    return why


def where_ranks_are(client: Any, run_dir: Path, hosts: list[RankHost], interval_s: float = 2.0,
                    sleep: Callable[[float], None] = time.sleep) -> HangDiagnosis:
    """Ask every rank twice, ``interval_s`` apart (to tell computing from waiting), and
    describe where each is; the result is also written to the run's ``stacks.json``."""
    expected = {rank for host in hosts for rank in host.ranks}
    first = request_snapshots(debug_dir(run_dir), expected)
    sleep(interval_s)
    second = request_snapshots(debug_dir(run_dir), expected or set(first.snapshots))
    expected = expected or set(first.snapshots) | set(second.snapshots)
    found = diagnose(second, first, expected, absent_reasons(client, hosts, expected - set(second.snapshots)), 0.0)
    try:
        (Path(run_dir) / STACKS_FILE).write_text(json.dumps({"time": time.time(), **found.to_json()}, indent=1))
    except OSError:
        pass  # the run directory went away: the screen still has it
    return found


def stack_lines(found: HangDiagnosis) -> list[str]:
    """What ``stacks`` prints: the groups (odd ones out first), the ranks that cannot answer or
    are computing, and the first divergence of their collectives."""
    lines = found.lines()[1:]
    divergence = found.divergence
    if divergence is not None and not any(divergence.text in line for line in lines):
        # said only in the headline, which this leaves out (ranks missing: said nowhere else)
        hint = next((i for i, line in enumerate(lines) if line == f"  {DEBUG_HINT}"), len(lines))
        lines.insert(hint, f"  {divergence.text}")
    return [line[2:] if line.startswith("  ") else line for line in lines]


def latest_stacks(run_dir: Path) -> Optional[dict]:
    """The last ``stacks`` taken of a run (for its report), if any."""
    try:
        return json.loads((Path(run_dir) / STACKS_FILE).read_text())
    except (OSError, ValueError):
        return None
