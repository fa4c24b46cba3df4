"""Why nodes failed or stopped answering: torchrun's report and its workers' error files, the
kernel's OOM kills, a paused or cut-off container."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import engine_errors
from orchestrate.faults.inject import OOM_COUNTER_ARGV, oom_kills, probe_node
from orchestrate.faults.ranks import stopped_ranks
from orchestrate.hangs.crash_dump import where_it_crashed
from orchestrate.outcome.root_cause import (
    CRASH_EXIT_CODES,
    RootCause,
    error_file_on_host,
    exception_in_lines,
    latest_error_files,
    native_exception,
    short_mismatch,
)
from orchestrate.plan.layout import NETWORK, NODE_MAIN, RUN_DIR_MOUNT, WORKER_START
from orchestrate.supervise.api import NodeTracker
from orchestrate.supervise.worker_lines import LAST_LINES

log = logging.getLogger(__name__)

# What ps's STAT letter says of a process
PROCESS_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep", "T": "stopped",
                  "t": "stopped by a tracer", "Z": "a zombie", "I": "idle"}
# How long the engine is given to list what stop graces left running, all nodes at once: their
# SIGKILLs wait for it (ps can hang on a process stuck in the kernel)
LISTING_LIMIT_S = 2.0


def node_processes(container: Any, width: int = 100) -> list[str]:
    """The job's processes still alive in a node, each its command line as the user wrote it
    (cut to ``width``) and its state, as ``docker top`` lists them; empty when the engine cannot
    say (it ended meanwhile)."""
    try:
        listing = container.top(ps_args="-o pid,stat,args")  # the engine needs the PID column
    except engine_errors() as exc:
        log.debug("processes of %s: %s", getattr(container, "name", container), exc)
        return []
    titles = listing.get("Titles") or []
    if "STAT" not in titles or "COMMAND" not in titles:
        return []
    stat, command = titles.index("STAT"), titles.index("COMMAND")
    paused = getattr(container, "status", "") == "paused"  # its processes frozen: ps says D
    found = []
    for row in listing.get("Processes") or []:
        words = str(row[command]).split() if len(row) > max(stat, command) else []
        if not words or words[0].rsplit("/", 1)[-1] == "docker-init" or NODE_MAIN in words[:3]:
            continue  # the node's own init and supervisor: not the job's
        args = readable_command(words)
        shown = args if len(args) <= width else args[:width - 3] + "..."
        state = "paused" if paused else PROCESS_STATES.get(str(row[stat])[:1], str(row[stat]))
        found.append(f"{shown} ({state})")
    return found


def readable_command(words: list[str]) -> str:
    """A node's process as the user started it: torch's launcher as ``torchrun ... SCRIPT ARGS``
    (its own options are the plan's), and a worker as ``python SCRIPT ARGS`` where it runs under
    the workers' start-up hook."""
    for at, word in enumerate(words[:3]):
        if word.rsplit("/", 1)[-1] == "torchrun":
            return " ".join(["torchrun", "...", *job_of(words)]) if WORKER_START in words else " ".join(
                ["torchrun", *words[at + 1:]])
        if word == WORKER_START:
            return " ".join(["python", *job_of(words)])
    return " ".join(words)


def job_of(words: list[str]) -> list[str]:
    """The job's own script and arguments in a command line that runs it under the workers'
    start-up hook (``WORKER_START [its options] -- SCRIPT ARGS``)."""
    rest = words[words.index(WORKER_START) + 1:]
    return rest[rest.index("--") + 1:] if "--" in rest else rest


class Diagnosis:
    """Reads what explains a node's end, from the run directory and the engine."""

    def __init__(self, client: Any, run_dir: Path, say: Callable[[str], None], record: Callable[..., None]) -> None:
        self.client = client
        self.run_dir = run_dir
        self.say = say
        self.record = record

    def explain_failure(self, tracker: NodeTracker) -> None:
        """Fill a failed node's root cause and last lines: torchrun's report in its output,
        completed from the worker's structured error file on the host mount (or, without a
        report, from the error file of its lowest local rank)."""
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
        if cause is not None and path is not None and path.exists():
            cause.add_error_file(path.read_text(errors="replace"))
        if cause is not None and not cause.exception:  # no error file: the traceback the worker printed
            last = tracker.output.last_lines(cause.rank, count=LAST_LINES)
            cause.exception = exception_in_lines(last) or native_exception(last)
        if cause is not None:
            cause.exception = short_mismatch(cause.exception)
            cause.crashed = where_it_crashed(self.run_dir, cause.rank, cause.exit_code in CRASH_EXIT_CODES)

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

    def left_running(self, trackers: list[NodeTracker], limit_s: float = LISTING_LIMIT_S) -> dict[str, list[str]]:
        """What still runs in nodes whose stop grace ran out (a job's SIGTERM handler that never
        returns, a process stuck in the kernel), by node: asked of every node at once, for at
        most ``limit_s``; a node the engine did not answer for in time has no entry."""
        pool = ThreadPoolExecutor(max_workers=min(8, len(trackers)), thread_name_prefix="docker-top")
        asked = {pool.submit(node_processes, tracker.container): tracker.name for tracker in trackers}
        done, _ = wait(asked, timeout=limit_s)
        pool.shutdown(wait=False, cancel_futures=True)  # one still waiting on the engine is left to it
        return {asked[future]: future.result() for future in done if future.exception() is None}

    def find_oom_kills(self, trackers: list[NodeTracker]) -> None:
        """Find nodes the kernel OOM-killed processes in (they explain their peers' failures)."""
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
                self.say(f"{tracker.name} was OOM-killed: the kernel killed {kills} process(es) at its memory limit")
