"""``stop RUN`` of a quiet job: where every rank waits, looked at before the nodes get SIGTERM,
as Ctrl-C in the launcher does. A hung job stopped from another terminal (a detached run that
nobody follows, or a foreground one whose watchdog has not looked yet) then ends saying where it
hung, in the terminal that stopped it and in the run's summary, instead of only that it stopped."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from orchestrate.engine.container_log import parse_log_line
from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.runs import RunInfo, node_plans, read_stop_request
from orchestrate.hangs.crash_dump import hooked_workers_began
from orchestrate.hangs.diagnosis import SILENT_STATES, HangDiagnosis
from orchestrate.hangs.snapshots import ANSWER_TIMEOUT_S
from orchestrate.hangs.watchdog import ANSWER_WINDOW_S, RECHECK_S, is_progress_line
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.supervise.rank_probe import rank_hosts, where_ranks_are
from orchestrate.supervise.worker_lines import parse_line
from orchestrate.text import ranks_text

# A job none of whose workers printed for this long is looked at before it is stopped (the
# launcher's Ctrl-C waits as long); one that prints is stopped at once.
QUIET_BEFORE_LOOK_S = RECHECK_S
# The lines of each node's log read for its workers' latest: a hung job's torch warnings may
# follow it, and a chatty one's latest line is near the end.
LOG_TAIL_LINES = 500


def seconds_quiet(run: RunInfo, now: float) -> float:
    """Seconds since the latest line a worker of the run's live nodes printed that shows progress
    (torch's own log lines do not), by the engine's timestamps; where none is among a node's last
    ``LOG_TAIL_LINES``, since the oldest of them or the node's start. 0 where the engine cannot
    say (a node ended meanwhile): no look then."""
    plans = {plan.name: plan for plan in node_plans(run)}
    latest = 0.0
    for node in run.live_nodes:
        try:
            raw = node.container.logs(stdout=True, stderr=True, timestamps=True, tail=LOG_TAIL_LINES)
        except engine_errors():
            return 0.0
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
    return max(0.0, now - latest) if latest else 0.0


def look_before_stop(client: Any, run: RunInfo, say: Callable[[str], None], interval_s: float = ANSWER_WINDOW_S,
                     now: Callable[[], float] = time.time, answer_timeout_s: float = ANSWER_TIMEOUT_S,
                     sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
                     ) -> Optional[HangDiagnosis]:
    """Where every rank of a quiet Compose job waits (:func:`seconds_quiet` at least
    ``QUIET_BEFORE_LOOK_S``), looked at twice ``interval_s`` apart, said and returned, so that
    ``stop`` records it for the run's summary; None, and nothing looked at, where the job printed a
    moment ago, is a Slurm job's (its workers' lines are Slurm's), has no directory to answer in or
    no worker that began under the workers' hook (a script of the user's own that starts its own
    workers, or none yet), or that a stop has already come to (its grace runs: no rank would
    answer); and None where a rank did not answer and nothing says why (busy, or the launcher's own
    watchdog asked meanwhile: the ranks answer the latest request), said: no verdict. ``now``: Unix
    seconds (the engine's log stamps); ``sleep`` and ``clock`` are the looks' (:func:`where_ranks_are`)."""
    if run.scheduler != "compose" or not run.live_nodes or not run.run_dir.name or not run.run_dir.is_dir():
        return None
    if read_stop_request(run.run_dir).nodes:
        return None
    if not (hooked_workers_began(run.run_dir) or any((run.run_dir / PROGRESS_SUBDIR).glob("rank*.jsonl"))):
        return None
    quiet = seconds_quiet(run, now())
    if quiet < QUIET_BEFORE_LOOK_S:
        return None
    say(f"no output for {quiet:.0f} s: looking where every rank waits before they stop (a few seconds; up to"
        f" {interval_s + 2 * answer_timeout_s:g} s where a rank does not answer)")
    found = where_ranks_are(client, run.run_dir, rank_hosts(run), interval_s, sleep, clock, answer_timeout_s)
    if not any(activity.state not in SILENT_STATES for activity in found.activities):
        say("no rank answered the look (stopped, paused, or started without the workers' hook): no verdict")
        return None
    unknown = [activity.rank for activity in found.activities if activity.state == "absent"]
    if unknown or found.unheard_nodes:
        said = f"{ranks_text(unknown)} did not answer the look" if unknown else found.unheard_nodes[0]
        say(f"{said} (busy, perhaps): no verdict")
        return None
    found.quiet_s, found.cause, found.run_id = quiet, "", run.run_id
    say(f"at the stop, {'hung' if found.hung else 'working'}: {found.headline}")
    for line in found.lines()[1:]:
        say(line)
    return found


def recorded_look(found: Optional[HangDiagnosis]) -> Optional[dict]:
    """What the stop request keeps of a look (see :func:`look_before_stop`) for the run's
    launcher: whether it found the job hung, and its lines, the headline first."""
    return None if found is None else {"hung": found.hung, "lines": found.lines()}
