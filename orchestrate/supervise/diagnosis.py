"""Why nodes failed or stopped answering: torchrun's report and its workers' error files, the
kernel's OOM kills, a paused or cut-off container."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import engine_errors
from orchestrate.faults.inject import OOM_COUNTER_ARGV, oom_kills, probe_node
from orchestrate.faults.ranks import stopped_ranks
from orchestrate.hangs.crash_dump import where_it_crashed
from orchestrate.hangs.snapshots import debug_dir, failed_collective
from orchestrate.outcome.root_cause import (
    CRASH_EXIT_CODES,
    RootCause,
    attempt_errors,
    error_file_on_host,
    exception_chain,
    exception_in_lines,
    is_collateral,
    is_compile_error,
    latest_error_files,
    latest_worker_logs,
    native_exception,
    newest_own,
    short_mismatch,
    users_frame_in,
)
from orchestrate.plan.layout import NETWORK, RUN_DIR_MOUNT
from orchestrate.supervise.api import NodeTracker
from orchestrate.supervise.worker_lines import LAST_LINES

# How long before a worker's failure (its error file's time) its record of the collective that
# failed may have been written: it writes it as the collective fails, and exits soon after.
RECORD_BEFORE_FAILURE_S = 30.0

log = logging.getLogger(__name__)


def own_failure_beside(tracker: NodeTracker, cause: RootCause) -> Optional[RootCause]:
    """Another worker of the node whose traceback ends in an error of its own, where torchrun
    named one that failed for want of a peer (torchrun names the first failure it observes, in
    the order of the local ranks, not the first to happen; without ``@record`` there is no error
    file to tell the times): None if there is none."""
    for local, rank in enumerate(tracker.plan.global_ranks):
        if local == cause.local_rank:
            continue
        last = tracker.output.last_lines(rank, count=LAST_LINES)
        if not any("Traceback (most recent call last):" in line for line in last):
            continue
        exception = exception_in_lines(last)
        own = RootCause(rank, local, cause.exit_code, exception)
        if exception and not is_collateral(own, last):
            return own
    return None


def latest_attempts_own_error(run_dir: Path, tracker: NodeTracker) -> Optional[RootCause]:
    """The error the lowest local rank of a node's latest attempt ended in, by its log (torchrun's
    ``stderr.log`` of it), for a node the launcher stopped in the middle of an attempt: torchrun
    printed no report of it. None where no worker's log ends in an error."""
    ranks = tracker.plan.global_ranks
    for local, log in sorted(latest_worker_logs(run_dir, tracker.name).items()):
        cause = RootCause(ranks[local] if local < len(ranks) else local, local)
        cause.add_worker_log(log)
        if cause.exception:
            return cause
    return None


class Diagnosis:
    """Reads what explains a node's end, from the run directory and the engine."""

    def __init__(self, client: Any, run_dir: Path, say: Callable[[str], None], record: Callable[..., None]) -> None:
        self.client = client
        self.run_dir = run_dir
        self.say = say
        self.record = record

    def explain_failure(self, tracker: NodeTracker, stopped_in_an_attempt: bool = False) -> None:
        """Fill a failed node's root cause and last lines: torchrun's report in its output,
        completed from the worker's structured error file on the host mount (or, without a
        report, from the error file of its lowest local rank; for a node the launcher stopped
        in the middle of an attempt, ``stopped_in_an_attempt``, from that attempt's worker logs)."""
        result = tracker.result
        cause = result.root_cause = tracker.output.root_cause()
        result.last_lines = tracker.output.last_lines(cause.rank if cause else None)
        files = latest_error_files(self.run_dir, tracker.name)
        path: Optional[Path] = None
        if cause is not None and cause.error_file.startswith(RUN_DIR_MOUNT):
            path = error_file_on_host(self.run_dir, cause.error_file)
        elif cause is not None:
            path = files.get(cause.local_rank)
        elif files:
            local, path = min(files.items())
            ranks = tracker.plan.global_ranks
            cause = result.root_cause = RootCause(ranks[local] if local < len(ranks) else local, local,
                                                  result.exit_code)
        elif stopped_in_an_attempt:
            cause = result.root_cause = latest_attempts_own_error(self.run_dir, tracker)
        if cause is not None and path is not None and path.exists():
            cause.add_error_file(path.read_text(errors="replace"))
        if cause is not None and not cause.exception:  # no error file: the traceback the worker printed
            last = tracker.output.last_lines(cause.rank, count=LAST_LINES)
            cause.exception = exception_in_lines(last) or native_exception(last)
        if cause is not None and cause.timestamp is None and is_collateral(cause, result.last_lines):
            own = own_failure_beside(tracker, cause)
            if own is not None:
                cause = result.root_cause = own
                result.last_lines = tracker.output.last_lines(own.rank)
        result.attempts = attempt_errors(self.run_dir, tracker.name)
        if cause is None or is_collateral(cause, result.last_lines):
            # a lost peer, or torchrun's own end: what made the workers restart may be in an
            # earlier attempt's logs only
            result.earlier = newest_own(result.attempts)
        if cause is not None:
            # (a script Python could not compile printed no traceback: its last lines hold the frame)
            cause.users_frame = (users_frame_in(cause.traceback.splitlines()) if cause.traceback
                                 else tracker.output.users_frame(cause.rank, cause.exception)
                                 or (users_frame_in(result.last_lines) if is_compile_error(cause.exception)
                                     else ""))
            cause.chain = (exception_chain(cause.traceback.splitlines()) if cause.traceback
                           else tracker.output.exception_chain(cause.rank, cause.exception))
            cause.exception = short_mismatch(cause.exception)
            cause.crashed = where_it_crashed(self.run_dir, cause.rank, cause.exit_code in CRASH_EXIT_CODES)
            # this attempt's record: written since the node's start, and near the failure where
            # torchrun said when that was (its own restarts of the workers leave earlier ones)
            since = max(tracker.latest_start or tracker.first_started or 0.0,
                        cause.timestamp - RECORD_BEFORE_FAILURE_S if cause.timestamp is not None else 0.0)
            cause.collective, cause.training_pass = failed_collective(debug_dir(self.run_dir), cause.rank, since)

    def unresponsive(self, tracker: NodeTracker) -> str:
        """Why the node cannot answer its peers (paused, gone, cut off, a worker of it stopped),
        said and recorded; "" if it can."""
        reason = probe_node(tracker.container, NETWORK) or ""
        if not reason:
            stopped = stopped_ranks(self.client, tracker.container)
            if stopped:
                tracker.result.culprit_rank = stopped[0]
                others = f"; ranks {', '.join(map(str, stopped[1:]))} too" if stopped[1:] else ""
                reason = f"its worker process is stopped (hung){others}"
        if reason:
            tracker.result.unresponsive = reason
            rank = f" rank {tracker.result.culprit_rank}" if tracker.result.culprit_rank is not None else ""
            self.say(f"{tracker.name}{rank} stopped answering: {reason}")
            self.record("node-unresponsive", node=tracker.name, reason=reason)
        return reason

    def find_oom_kills(self, trackers: list[NodeTracker]) -> None:
        """Find nodes the kernel OOM-killed processes in (they explain their peers' failures), and say
        each once, after the step its ranks had reached where the caller filled their steps in."""
        for tracker in trackers:
            try:
                tracker.container.reload()
                state = tracker.container.attrs.get("State", {})
                counter = exec_output(self.client, tracker.container, OOM_COUNTER_ARGV)[1] \
                    if state.get("Running") else None
            except engine_errors() as exc:  # gone, or the engine cannot say: nothing to learn from it
                log.debug("OOM probe of %s: %s", tracker.name, exc)
                continue
            tracker.result.note_oom(counted=oom_kills(state, counter))
            kills = tracker.result.oom_kills
            if kills and not tracker.result.oom_reported:
                tracker.result.oom_reported = True
                self.say(f"{tracker.name} was OOM-killed: the kernel killed {kills} process(es) at its memory limit"
                         f"{tracker.result.after_step_of_oom()}")
