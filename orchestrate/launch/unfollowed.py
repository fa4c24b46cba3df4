"""A run nobody followed to its end has its lines in the engine alone: a detached run that no
``attach`` followed has no node logs in its directory, nor a summary or a finished report page,
and an orphaned run's node logs stop where its launcher died. Before ``down`` or ``prune``
removes such a run, it is followed once, quietly, as the first ``attach`` after its end would
(:meth:`~orchestrate.launch.run.Run.attach`): its node logs (and, for a detached run or an orphaned
one that asked for no fault, its summary and report page) stay in its directory, as the commands
say."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.engine.locks import try_lock
from orchestrate.engine.runs import RunInfo, RunState, find_run
from orchestrate.errors import NoSuchRunError
from orchestrate.launch.compose_backend import SUPERVISOR_LOCK
from orchestrate.launch.recorded_runs import run_as_recorded
from orchestrate.outcome.events import launcher_exit_code, read_events, record_event
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.record import OUTCOME_FILE
from orchestrate.outcome.run_dirs import recorded_faults
from orchestrate.report.model import ENDED_AS, GONE, ORPHANED

# How long a removal waits for whoever follows the run now (an `attach`, another `down`) to finish
# its record once the nodes are down: 120 looks, 0.5 s apart, as `down` waits for a launcher.
FOLLOWER_POLL_S = 0.5
FOLLOWER_POLLS = 120
LINES_KEPT = "lines-kept"  # the event a quiet follow leaves: a second removal then follows no more


def unrecorded(run: RunInfo) -> bool:
    """Whether removing the run would take lines its directory does not keep: a Compose run with a
    directory this user may write, and no node left running (a follow of a live one would wait for
    its end); detached, or foreground with its launcher gone (not one on another host, which may
    still run); whose record no launcher, ``attach`` or earlier removal finished."""
    if run.live_nodes or run.scheduler != "compose" or not run.run_dir.name:
        return False
    if not (os.path.isdir(run.run_dir) and os.access(run.run_dir, os.W_OK | os.X_OK)):
        return False  # (another user's run, which prune may remove: its directory is theirs)
    if not (run.detached or run.launcher_alive is False):
        return False
    events = read_events(run.run_dir)
    return launcher_exit_code(events) is None and not any(e["event"] == LINES_KEPT for e in events)


def followed_now(run: RunInfo) -> bool:
    """Whether a follower (an ``attach``, another ``down``) holds the run's record now."""
    with try_lock(run.run_dir / SUPERVISOR_LOCK) as free:
        return not free


def record_before_removal(client: Any, run: RunInfo, say: Callable[[str], None],
                          sleep: Callable[[float], None] = time.sleep) -> Optional[RunResult]:
    """Follow the ``run`` once, printing nothing of its lines, so that its directory keeps what a
    follower writes (``say`` tells what it waits for and does); its result, or None where nothing
    needed it (:func:`unrecorded`), or whoever followed it meanwhile recorded it (waited for, up to
    ``FOLLOWER_POLLS`` looks)."""
    from orchestrate.launch.run import Run

    if not unrecorded(run):
        return None
    for look in range(FOLLOWER_POLLS):
        if not followed_now(run):
            break
        if look == 0:
            say(f"run {run.run_id}: another command follows it; waiting for it to keep its lines")
        sleep(FOLLOWER_POLL_S)
    else:
        return None  # still followed: that follower keeps what it reads
    if not unrecorded(run):
        return None  # the follower waited for judged it
    # (an orphaned run's summary is written too where it asked for no fault: see Run._follow_attached)
    judged = run.detached or recorded_faults(run.run_dir) == ()
    what = "node logs, summary and report page" if judged else "node logs"
    say(f"run {run.run_id}: no one followed it to its end; writing its {what} from the engine first")
    with open(os.devnull, "w", encoding="utf-8") as nowhere:
        result = Run.attach(run.run_id, out=nowhere, client=client).follow()
    record_event(run.run_dir, LINES_KEPT)
    return result


def ending_for_report(client: Any, run_dir: Path, say: Callable[[str], None]) -> str:
    """What the engine says of a run whose outcome is not recorded, for its report page: an ended
    run nobody followed has its lines kept first, as ``down`` keeps them (which finishes a detached
    run's record); then "orphaned" where its launcher died, "gone" where the engine no longer has
    it, ``ended:<state>`` where its nodes ended and no one recorded it (a launcher killed after),
    "" where it runs (or its record is now whole)."""
    if (run_dir / OUTCOME_FILE).is_file():
        return ""
    try:
        run = find_run(client, run_dir.name)
    except NoSuchRunError:
        return GONE
    if os.path.realpath(run.run_dir) != os.path.realpath(run_dir):
        return ""  # the engine's run of that id keeps another directory: nothing said of this one
    record_before_removal(client, run, say)
    if (run_dir / OUTCOME_FILE).is_file():
        return ""
    try:
        now = run_as_recorded(find_run(client, run.run_id))
    except NoSuchRunError:
        return GONE
    if now.state is RunState.ORPHANED:
        return ORPHANED
    if not now.state.ended or not (now.detached or now.launcher_alive is False):
        return ""  # it runs, or its launcher (alive, or on another host) is about to record how it ended
    return f"{ENDED_AS}{now.state.value}"
