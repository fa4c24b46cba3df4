"""How long a running job's workers have printed nothing that shows progress, read from the
engine's log timestamps: what ``stop RUN`` waits for before it looks where every rank waits, and
what ``ps`` lists of a running run, so that a hung job nobody follows shows in the listing, and
what ``logs -f`` says of a run that went quiet while it follows it."""
from __future__ import annotations

import time
from typing import Callable, Optional

from orchestrate.engine.client import engine_time
from orchestrate.engine.container_log import parse_log_line
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.hangs.watchdog import is_progress_line
from orchestrate.supervise.worker_lines import parse_line
from orchestrate.text import short_duration

# The lines of each node's log read for its workers' latest: a hung job's torch warnings may
# follow it, and a chatty one's latest line is near the end.
LOG_TAIL_LINES = 500


def seconds_quiet(run: RunInfo, now: float) -> Optional[float]:
    """Seconds since the latest line a worker of the run's live nodes printed that shows progress
    (see :func:`last_progress_at`), by the engine's clock ``now``; None where the engine cannot say
    (a node ended or went meanwhile, or none is live)."""
    latest = last_progress_at(run)
    return max(0.0, now - latest) if latest is not None else None


def last_progress_at(run: RunInfo) -> Optional[float]:
    """When a worker of the run's live nodes last printed a line that shows progress (torch's own
    log lines do not), by the engine's timestamps; where none is among a node's last
    ``LOG_TAIL_LINES``, the oldest of them or the node's start. None where the engine cannot say (a
    node ended or went meanwhile, or none is live)."""
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
    return latest or None


def quiet_note(run: RunInfo, seconds: Optional[float]) -> str:
    """What ``ps`` and ``logs -f`` say of a running run whose workers have printed nothing for
    ``seconds``: the command that shows where every rank is, once that is the run's
    ``--hang-diagnose-after`` or longer (never where it is 0) and the run has a directory for
    ``stacks`` to ask in; "" otherwise."""
    diagnose_after = run.hang_limits[0]
    if seconds is None or not diagnose_after or seconds < diagnose_after or not run.run_dir.name:
        return ""
    return (f"run {run.run_id}: no worker has printed for {short_duration(seconds)}; where every rank is (waiting"
            f" or computing): python -m orchestrate stacks {run.run_id}")


# The least time between two looks of a followed run's quiet time (each reads every node's log tail).
QUIET_LOOK_MIN_S = 1.0


class QuietNotice:
    """For ``logs -f``, which follows a run nobody else may watch: says :func:`quiet_note` once
    per quiet spell (a worker's line that shows progress ends one), looking at the run's quiet time
    only as often as it could first reach the run's ``--hang-diagnose-after``. Call it often;
    ``engine_now`` gives the clock of the engine's log stamps, ``clock`` this process's."""

    def __init__(self, run: RunInfo, engine_now: Callable[[], float], say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self.run, self.engine_now, self.say, self.clock = run, engine_now, say, clock
        self.next_look = clock()
        self.said_of: Optional[float] = None  # the last line before the spell said

    def __call__(self) -> None:
        diagnose_after = self.run.hang_limits[0]
        if not diagnose_after or self.clock() < self.next_look:
            return
        latest, now = last_progress_at(self.run), self.engine_now()
        seconds = None if latest is None else max(0.0, now - latest)
        note = quiet_note(self.run, seconds)
        if note and latest != self.said_of:
            self.say(note)
            self.said_of = latest
        wait = diagnose_after - seconds if seconds is not None and seconds < diagnose_after else diagnose_after
        self.next_look = self.clock() + max(QUIET_LOOK_MIN_S, wait)
