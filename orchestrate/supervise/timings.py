"""A run's timings as the engine measured them: its containers' creation, start and finish
times and the log lines' own timestamps, so that ``attach`` after the end reports what
``run`` did."""
from __future__ import annotations

import logging

from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import engine_errors
from orchestrate.outcome.model import Recovery, Timings
from orchestrate.supervise.api import NodeTracker

log = logging.getLogger(__name__)


def run_timings(trackers: list[NodeTracker], job_s: float, recoveries: list[Recovery]) -> Timings:
    """Bring-up, rendezvous and job time from the engine; ``job_s`` (the supervisor's own
    clock) stands where a container cannot say. Sets each node's wall time too."""
    timings = Timings(job_s=job_s, recoveries=list(recoveries))
    starts, ends, created = [], [], []
    for tracker in trackers:
        try:
            tracker.container.reload()
            state = tracker.container.attrs.get("State", {})
        except engine_errors() as exc:  # removed meanwhile: the supervisor's own clock must do
            log.debug("timing %s: %s", tracker.name, exc)
            continue
        started = tracker.first_started or engine_time(state.get("StartedAt", ""))
        finished = engine_time(state.get("FinishedAt", ""))
        made = engine_time(tracker.container.attrs.get("Created", ""))
        if made and started:
            created.append(made)
        if started and finished and finished >= started:
            tracker.result.wall_s = finished - started
            starts.append(started)
            ends.append(finished)
    if starts and len(ends) == len(trackers):
        timings.job_s = max(ends) - min(starts)
    if created and len(created) == len(starts):
        timings.bring_up_s = max(0.0, max(starts) - min(created))
    firsts = [t.output.first_worker_line_at for t in trackers if t.output.first_worker_line_at]
    if firsts and starts:
        timings.rendezvous_s = max(0.0, min(firsts) - min(starts))
    return timings
