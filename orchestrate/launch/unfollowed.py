"""A run nobody followed to its end has its lines in the engine alone: a detached run that no
``attach`` followed has no node logs in its directory, nor a summary or a finished report page,
and an orphaned run's node logs stop where its launcher died. Before ``down`` or ``prune``
removes such a run, it is followed once, quietly, as the first ``attach`` after its end would
(:meth:`~orchestrate.launch.run.Run.attach`): its node logs (and, for a detached run, its summary
and report page) stay in its directory, as the commands say."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

from orchestrate.engine.locks import try_lock
from orchestrate.engine.runs import RunInfo
from orchestrate.launch.compose_backend import SUPERVISOR_LOCK
from orchestrate.outcome.events import launcher_exit_code, read_events
from orchestrate.outcome.model import RunResult

# How long a removal waits for whoever follows the run now (an `attach`, another `down`) to finish
# its record once the nodes are down: 120 looks, 0.5 s apart, as `down` waits for a launcher.
FOLLOWER_POLL_S = 0.5
FOLLOWER_POLLS = 120


def unrecorded(run: RunInfo) -> bool:
    """Whether removing the run would take lines its directory does not keep: a Compose run with a
    directory and no node left running (a follow of a live one would wait for its end), whose
    launcher is not alive (detached, or gone), and whose record no launcher or ``attach`` finished."""
    if run.live_nodes or run.scheduler != "compose" or not run.run_dir.name or not run.run_dir.is_dir():
        return False
    return not run.launcher_alive and launcher_exit_code(read_events(run.run_dir)) is None


def followed_now(run: RunInfo) -> bool:
    """Whether a follower (an ``attach``, another ``down``) holds the run's record now."""
    with try_lock(run.run_dir / SUPERVISOR_LOCK) as free:
        return not free


def record_before_removal(client: Any, run: RunInfo,
                          sleep: Callable[[float], None] = time.sleep) -> Optional[RunResult]:
    """Follow the ``run`` once, printing nothing, so that its directory keeps what a follower
    writes; its result, or None where nothing needed it (:func:`unrecorded`), or whoever followed
    it meanwhile recorded it (waited for, up to ``FOLLOWER_POLLS`` looks)."""
    from orchestrate.launch.run import Run

    if not unrecorded(run):
        return None
    for _ in range(FOLLOWER_POLLS):
        if not followed_now(run):
            break
        sleep(FOLLOWER_POLL_S)
    else:
        return None  # still followed: that follower keeps what it reads
    if not unrecorded(run):
        return None  # the follower waited for judged it
    with open(os.devnull, "w", encoding="utf-8") as nowhere:
        return Run.attach(run.run_id, out=nowhere, client=client).follow()
