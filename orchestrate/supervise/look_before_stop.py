"""``stop RUN`` of a quiet job: where every rank waits, looked at before the nodes get SIGTERM,
as Ctrl-C in the launcher does. A hung job stopped from another terminal (a detached run that
nobody follows, or a foreground one whose watchdog has not looked yet) then ends saying where it
hung, in the terminal that stopped it and in the run's summary, instead of only that it stopped."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from orchestrate.engine.client import engine_now
from orchestrate.engine.runs import RunInfo, read_stop_request
from orchestrate.hangs.crash_dump import hooked_workers_began
from orchestrate.hangs.diagnosis import SILENT_STATES, HangDiagnosis
from orchestrate.hangs.snapshots import ANSWER_TIMEOUT_S
from orchestrate.hangs.watchdog import ANSWER_WINDOW_S, RECHECK_S
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.supervise.rank_probe import rank_hosts, where_ranks_are
from orchestrate.supervise.worker_quiet import seconds_quiet
from orchestrate.text import ranks_text

# A job none of whose workers printed for this long is looked at before it is stopped (the
# launcher's Ctrl-C waits as long); one that prints is stopped at once.
QUIET_BEFORE_LOOK_S = RECHECK_S
def look_before_stop(client: Any, run: RunInfo, say: Callable[[str], None], interval_s: float = ANSWER_WINDOW_S,
                     now: Optional[Callable[[], float]] = None, answer_timeout_s: float = ANSWER_TIMEOUT_S,
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
    seconds by the clock of the engine's log stamps (the engine's own, asked, where not given); ``sleep``
    and ``clock`` are the looks' (:func:`where_ranks_are`)."""
    if run.scheduler != "compose" or not run.live_nodes or not run.run_dir.name or not run.run_dir.is_dir():
        return None
    if read_stop_request(run.run_dir).nodes:
        return None
    if not (hooked_workers_began(run.run_dir) or any((run.run_dir / PROGRESS_SUBDIR).glob("rank*.jsonl"))):
        return None
    quiet = seconds_quiet(run, now() if now is not None else engine_now(client))
    if quiet is None or quiet < QUIET_BEFORE_LOOK_S:
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
