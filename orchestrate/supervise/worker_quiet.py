"""How long a running job's workers have printed nothing that shows progress, read from the
engine's log timestamps: what ``stop RUN`` waits for before it looks where every rank waits, and
what ``ps`` lists of a running run, so that a hung job nobody follows shows in the listing."""
from __future__ import annotations

from typing import Optional

from orchestrate.engine.client import engine_time
from orchestrate.engine.container_log import parse_log_line
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.hangs.watchdog import is_progress_line
from orchestrate.supervise.worker_lines import parse_line

# The lines of each node's log read for its workers' latest: a hung job's torch warnings may
# follow it, and a chatty one's latest line is near the end.
LOG_TAIL_LINES = 500


def seconds_quiet(run: RunInfo, now: float) -> Optional[float]:
    """Seconds since the latest line a worker of the run's live nodes printed that shows progress
    (torch's own log lines do not), by the engine's timestamps; where none is among a node's last
    ``LOG_TAIL_LINES``, since the oldest of them or the node's start. None where the engine cannot
    say (a node ended or went meanwhile, or none is live)."""
    plans = {plan.name: plan for plan in node_plans(run)}
    latest = 0.0
    for node in run.live_nodes:
        try:
            raw = node.container.logs(stdout=True, stderr=True, timestamps=True, tail=LOG_TAIL_LINES)
        except engine_errors():
            return None
        lines = [parse_log_line(line, "stdout") for line in raw.split(b"\n") if line]
        moved = [line.stamp for line in lines if line.stamp is not None
                 and (worker := parse_line(plans[node.name], line.text)).local_rank is not None
                 and is_progress_line(worker.text)]
        if moved:
            latest = max(latest, max(moved))
            continue
        started = engine_time(node.container.attrs.get("State", {}).get("StartedAt", "")) or 0.0
        oldest = min((line.stamp for line in lines if line.stamp is not None), default=0.0)
        latest = max(latest, started, oldest if len(lines) >= LOG_TAIL_LINES else 0.0)
    return max(0.0, now - latest) if latest else None
