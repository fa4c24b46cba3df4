"""Runs as the engine knows them: found by labels, described, stopped, removed.

The launcher keeps nothing a run needs: every node container carries the run's labels
(:func:`orchestrate.engine.labels.node_labels`), its exit code and its log, so ``ps``, ``logs``,
``attach``, ``stop``, ``down`` and ``prune`` work from any terminal, after the launcher that
started the run is gone. :func:`run_state` is the pure rule that names a run's state.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.config.link import LinkSpec, parse_link
from orchestrate.config.run_config import DEFAULT_HANG_DIAGNOSE_AFTER_S
from orchestrate.engine.labels import (
    COMMAND_LABEL,
    COMPOSE_PROJECT_LABEL,
    COMPOSE_SERVICE_LABEL,
    SERVICE_ROLES,
    CPUS_LABEL,
    CREATED_LABEL,
    DETACHED_LABEL,
    GPUS_LABEL,
    KEEP_LABEL,
    LAUNCHER_LABEL,
    LINK_LABEL,
    MAX_RESTARTS_LABEL,
    MIN_NODES_LABEL,
    NODE_RANK_LABEL,
    NODES_LABEL,
    NPROC_LABEL,
    RDZV_LABEL,
    RESTART_LABEL,
    ROLE_LABEL,
    RUN_DIR_LABEL,
    RUN_ID_LABEL,
    SCHEDULER_LABEL,
    STOP_GRACE_LABEL,
    STORE_HOST_LABEL,
    HANG_LABEL,
    WORKDIR_LABEL,
    find_store_container,
)
from orchestrate.engine.background import in_background
from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.processes import processes_at_once
from orchestrate.errors import EngineError, NodeLookupError, NoSuchRunError, UsageError
from orchestrate.node.main import EXIT_LAUNCHER_GONE
from orchestrate.plan.gpu_assignment import process_gpus
from orchestrate.plan.layout import STOP_REQUEST_FILE, WORKER_START
from orchestrate.plan.make import assign_uneven_ranks
from orchestrate.plan.model import NodePlan
from orchestrate.text import grace_ran_out, in_their_middle, no_run_named, runs_named, several_runs, short_duration

log = logging.getLogger(__name__)

# Container states in which a node still holds its GPUs and may still produce output.
LIVE_STATUSES = frozenset({"created", "running", "paused", "restarting"})
# An exit code of 128 + N: a signal N ended it (a node's main process, a launcher interrupted)
SIGNAL_EXIT_BASE = 128
# The exit code of a node whose main process a SIGKILL ended (128 + 9)
KILLED_EXIT_CODE = 137
# Exit codes of a node that was stopped (SIGTERM, then SIGKILL), not one that failed.
STOP_EXIT_CODES = frozenset({KILLED_EXIT_CODE, 143})
# A container that another command is removing (a second `down`, `prune`) is asked for again this
# often and this many times (30 s) before it counts as stuck
REMOVAL_POLL_S = 0.2
REMOVAL_POLLS = 150
# How long before the engine's SIGKILL at the end of a stop's grace `stop RUN` lists what still runs in
# the nodes it then names (a grace this short or shorter lists nothing)
LIST_BEFORE_KILL_S = 1.0
# A node counts as killed by its stop's SIGKILL when it ended no earlier than this before its grace
# ended (the engine's clock against this host's: the same machine, and the engine's own delay)
KILL_TIME_SLACK_S = 0.5
# Who stopped a run that `stop RUN` ended, as its summary says it.
STOPPED_BY = "python -m orchestrate stop"
REMOVED_BY = "python -m orchestrate down"  # a live run's nodes are stopped first, then removed


class RunState(str, Enum):
    """A run's state, as ``ps`` shows it."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    ORPHANED = "orphaned"  # a foreground run whose launcher is gone

    @property
    def ended(self) -> bool:
        return self is not RunState.RUNNING


@dataclass(frozen=True)
class NodeInfo:
    """One node container as the engine describes it."""

    name: str
    node_rank: int
    container: Any
    status: str
    exit_code: Optional[int]
    oom_killed: bool
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class RunInfo:
    """One run, rebuilt from its containers' labels and states."""

    run_id: str
    project: str
    nodes: tuple[NodeInfo, ...]
    labels: dict[str, str]
    launcher_alive: Optional[bool]
    # What the run's record says that the engine cannot, filled by whoever reads the record
    # (launch.recorded_runs): the nodes a ``lose`` fault took for good (the engine sees a node
    # killed), and the exit code its launcher ended with (the engine sees only its nodes')
    lost: frozenset[str] = field(default_factory=frozenset)
    launcher_exit: Optional[int] = None

    @property
    def detached(self) -> bool:
        return self.labels.get(DETACHED_LABEL) == "1"

    @property
    def kept(self) -> bool:
        """Whether its launcher leaves the nodes behind when it ends (--keep)."""
        return self.labels.get(KEEP_LABEL) == "1"

    @property
    def workdir(self) -> str:
        return self.labels.get(WORKDIR_LABEL, "")

    @property
    def run_dir(self) -> Path:
        return Path(self.labels.get(RUN_DIR_LABEL, ""))

    @property
    def command_line(self) -> str:
        return self.labels.get(COMMAND_LABEL, "")

    @property
    def planned_nodes(self) -> int:
        return int(self.labels.get(NODES_LABEL, len(self.nodes)) or len(self.nodes))

    @property
    def nproc_per_node(self) -> int:
        """The most workers on one of its nodes."""
        return max(self.node_nprocs)

    @property
    def node_nprocs(self) -> tuple[int, ...]:
        """Each node's workers, by node rank (one count for all when the nodes are even)."""
        text = self.labels.get(NPROC_LABEL, "1") or "1"
        try:
            counts = tuple(int(part) for part in text.split(","))
        except ValueError:
            return (1,)
        return counts

    def nprocs_of(self, node_rank: int) -> int:
        counts = self.node_nprocs
        return counts[node_rank] if len(counts) > 1 and node_rank < len(counts) else counts[0]

    @property
    def elastic(self) -> bool:
        return self.labels.get(RDZV_LABEL) == "c10d"

    @property
    def min_nodes(self) -> Optional[int]:
        """An elastic run's --nnodes MIN (its node count where no label says: a run started before
        the label); None for a static run."""
        if not self.elastic:
            return None
        text = self.labels.get(MIN_NODES_LABEL, "")
        return int(text) if text.isdigit() else self.planned_nodes

    @property
    def max_restarts(self) -> int:
        return int(self.labels.get(MAX_RESTARTS_LABEL, "0") or 0)

    @property
    def restart_scope(self) -> str:
        """What a node death restarts: "all" its nodes, or the dead "node" alone."""
        return self.labels.get(RESTART_LABEL, "all") or "all"

    @property
    def store_host(self) -> str:
        """Who holds the elastic rendezvous's store: node0, or the run's store container."""
        return self.labels.get(STORE_HOST_LABEL, "node0") or "node0"

    def store_container(self, client: Any) -> Optional[Any]:
        """Its own rendezvous store's container (None: it has none, node0's agent holds the store).

        Raises:
            UsageError: When it had one, and the engine has it no more.
        """
        if self.store_host == "node0":
            return None
        try:
            return find_store_container(client, self.run_id, self.store_host)
        except NodeLookupError:
            raise UsageError(f"run {self.run_id}'s rendezvous store (its container {self.store_host}) is gone from the"
                             " engine") from None
        except engine_errors() as exc:
            raise UsageError(f"run {self.run_id}'s rendezvous store cannot be looked at: {describe(exc)}") from None

    @property
    def scheduler(self) -> str:
        """What runs its job: ``compose`` (torchrun in every node) or ``slurm``."""
        return self.labels.get(SCHEDULER_LABEL, "compose") or "compose"

    @property
    def stop_grace_s(self) -> float:
        return float(self.labels.get(STOP_GRACE_LABEL, "10") or 10)

    @property
    def hang_limits(self) -> tuple[float, Optional[float]]:
        """Its hang watchdog's ``--hang-diagnose-after`` and ``--hang-timeout`` (None: never)."""
        diagnose, _, end = self.labels.get(HANG_LABEL, "").partition(",")
        try:
            return (float(diagnose) if diagnose else DEFAULT_HANG_DIAGNOSE_AFTER_S), (float(end) if end else None)
        except ValueError:
            return DEFAULT_HANG_DIAGNOSE_AFTER_S, None

    @property
    def collective_timeout_s(self) -> Optional[float]:
        """Its ``--collective-timeout`` (None: not set), as the workers' hook was given it in its
        nodes' command (not ``DDP_TIMEOUT``, which a user's ``--env`` may set for ``app/`` alone)."""
        for node in self.nodes:
            command = list(node.container.attrs.get("Config", {}).get("Cmd") or ())
            if WORKER_START not in command:
                continue
            flags = command[command.index(WORKER_START) + 1:]
            flags = flags[:flags.index("--")] if "--" in flags else flags  # the user's own target after it
            if "--collective-timeout" in flags[:-1]:
                try:
                    return float(flags[flags.index("--collective-timeout") + 1])
                except ValueError:
                    return None
            return None
        return None

    @property
    def cpus_per_node(self) -> Optional[float]:
        """The ``--cpus-per-node`` of its nodes (None: unlimited)."""
        text = self.labels.get(CPUS_LABEL, "")
        return float(text) if text else None

    @property
    def link(self) -> Optional[LinkSpec]:
        """The ``--link`` its nodes were shaped to (None: unshaped)."""
        text = self.labels.get(LINK_LABEL, "")
        return parse_link(text) if text else None

    @property
    def created(self) -> Optional[datetime]:
        try:
            return datetime.fromisoformat(self.labels.get(CREATED_LABEL, ""))
        except ValueError:
            return None

    @property
    def state(self) -> RunState:
        """Its state from its nodes' and its launcher's ending; a node lost for good (``lost``)
        does not count, as the job went on without it (unless every node was)."""
        return run_state(self.detached, self.launcher_alive,
                         [(n.status, n.exit_code) for n in self.nodes if n.name not in self.lost]
                         or [(n.status, n.exit_code) for n in self.nodes], self.launcher_exit)

    @property
    def live_nodes(self) -> list[NodeInfo]:
        """The nodes whose containers have not ended (created, running, paused, restarting)."""
        return [node for node in self.nodes if node.status in LIVE_STATUSES]

    def require_live_nodes(self, doing: str) -> None:
        """Refuse ``doing`` (``inject a fault into``) a run whose nodes have all ended, naming how
        it ended (an orphaned run's nodes may still run: the caller looks at them).

        Raises:
            UsageError: When every node has ended.
        """
        if self.nodes and not self.live_nodes:
            raise UsageError(f"run {self.run_id} has ended ({self.state.value}): no node to {doing}; its output:"
                             f" python -m orchestrate logs {self.run_id}")

    def require_run_dir(self, doing: str) -> None:
        """Refuse ``doing`` (``attach to``) a run that names no directory of its own (an empty
        run-dir label: started by another tool or version): what the command reads and writes
        there would be the working directory's.

        Raises:
            UsageError: When the run names none.
        """
        if not self.run_dir.name:
            raise UsageError(f"run {self.run_id} names no directory of its own (an empty {RUN_DIR_LABEL} label: started"
                             f" by another tool or version), which is needed to {doing} it; its output:"
                             f" python -m orchestrate logs {self.run_id}")


def run_state(detached: bool, launcher_alive: Optional[bool],
              nodes: list[tuple[str, Optional[int]]], launcher_exit: Optional[int] = None) -> RunState:
    """Name a run's state from its nodes' container states and exit codes (pure).

    1. Some node still live: running, unless it is a foreground run whose launcher is known
       to be dead (orphaned: its nodes will stop themselves, ``prune`` removes them).
    2. Every node ended: orphaned if one stopped itself because the launcher vanished.
    3. Its launcher said how it ended (``launcher_exit``): its word, as its summary said it
       (0 succeeded; 128 + a signal stopped; else failed: a job whose nodes all exited 0 fails
       where a fault asked for never fired). A teardown that failed after it is not the job's.
    4. Else from the nodes: failed if one exited otherwise than 0 or by a stop signal; stopped if
       one was stopped; else succeeded.
    """
    if any(status in LIVE_STATUSES for status, _ in nodes):
        if not detached and launcher_alive is False:
            return RunState.ORPHANED
        return RunState.RUNNING
    codes = [code for _, code in nodes]
    if EXIT_LAUNCHER_GONE in codes:
        return RunState.ORPHANED
    if launcher_exit is not None:
        return (RunState.SUCCEEDED if launcher_exit == 0
                else RunState.STOPPED if launcher_exit >= SIGNAL_EXIT_BASE else RunState.FAILED)
    if any(code not in (0, *STOP_EXIT_CODES) for code in codes):
        return RunState.FAILED
    if any(code in STOP_EXIT_CODES for code in codes):
        return RunState.STOPPED
    return RunState.SUCCEEDED


def launcher_identity() -> str:
    """``host:pid:start`` of this process; the start time (Linux) tells a reused pid apart."""
    return f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}"


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), "" elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def launcher_alive(identity: str) -> Optional[bool]:
    """Whether the launcher ``host:pid:start`` still runs; None when it ran on another host."""
    host, _, rest = identity.partition(":")
    pid_text, _, start = rest.partition(":")
    if not identity or host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return not start or process_start(pid) in ("", start)


def _node_info(container: Any) -> NodeInfo:
    state = container.attrs.get("State", {})
    labels = container.labels
    exit_code = state.get("ExitCode") if container.status not in LIVE_STATUSES else None
    return NodeInfo(
        name=labels.get(COMPOSE_SERVICE_LABEL, container.name),
        node_rank=int(labels.get(NODE_RANK_LABEL, "0") or 0),
        container=container,
        status=container.status,
        exit_code=exit_code,
        oom_killed=bool(state.get("OOMKilled")),
        gpus=tuple(g for g in labels.get(GPUS_LABEL, "").split(",") if g),
    )


def list_runs(client: Any, run_id: Optional[str] = None) -> list[RunInfo]:
    """Every run the engine has containers of (or just ``run_id``), newest first (runs asked for in
    the same second, by their ids: the newer id first, as ids start with the time)."""
    import docker.errors

    wanted = f"{RUN_ID_LABEL}={run_id}" if run_id else RUN_ID_LABEL
    try:
        containers = client.containers.list(all=True, ignore_removed=True, filters={"label": wanted})
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot list runs: {exc.explanation or exc}") from None
    by_run: dict[str, list[Any]] = {}
    for container in containers:
        if container.labels.get(ROLE_LABEL) in SERVICE_ROLES:
            continue  # a Slurm controller, a rendezvous store: part of the run, not one of its nodes
        by_run.setdefault(container.labels[RUN_ID_LABEL], []).append(container)
    runs = []
    for rid, members in by_run.items():
        labels = dict(members[0].labels)
        nodes = tuple(sorted((_node_info(c) for c in members), key=lambda n: n.node_rank))
        runs.append(RunInfo(rid, labels.get(COMPOSE_PROJECT_LABEL, f"ddp-{rid}"), nodes, labels,
                            launcher_alive(labels.get(LAUNCHER_LABEL, ""))))
    return sorted(runs, key=lambda r: (r.labels.get(CREATED_LABEL, ""), r.run_id), reverse=True)


def find_run(client: Any, run_id: str) -> RunInfo:
    """The run ``run_id``, or the one run it names by a unique part of its id (its start, or its
    random end: see :func:`~orchestrate.text.runs_named`).

    Raises:
        NoSuchRunError: When the engine has no container of it.
        UsageError: When it names several runs, or is empty.
    """
    require_run_id(run_id)  # (the label filter with no value would list every run)
    found = list_runs(client, run_id)
    return found[0] if found else run_named(run_id, list_runs(client), "in the engine")


def require_run_id(run_id: str) -> None:
    """Refuse an empty run id (``down ""``, a script's unset variable): it names no run.

    Raises:
        UsageError: When it is empty.
    """
    if not run_id:
        raise UsageError("no run id given (see `python -m orchestrate ps`)")


def run_named(run_id: str, runs: list[RunInfo], where: str) -> RunInfo:
    """The one run of ``runs`` (those ``where``: "in the engine") that ``run_id`` names: its
    whole id, or a unique start or end of it (see :func:`~orchestrate.text.runs_named`).

    Raises:
        NoSuchRunError: When it names none of them.
        UsageError: When it names several.
    """
    by_id = {run.run_id: run for run in runs}
    matches = runs_named(run_id, by_id)
    if len(matches) > 1:
        raise UsageError(several_runs(run_id, matches, where))
    if not matches:
        middle = tuple(in_their_middle(run_id, by_id))
        raise NoSuchRunError(no_run_named(run_id, where, "see `python -m orchestrate ps`", middle), middle)
    return by_id[matches[0]]


def gpus_in_use(runs: list[RunInfo]) -> dict[str, str]:
    """GPU id -> the run holding it: the GPUs of every live node container."""
    held: dict[str, str] = {}
    for run in runs:
        for node in run.nodes:
            if node.status in LIVE_STATUSES:
                for gpu in node.gpus:
                    held[gpu] = run.run_id
    return held


def stop_run(run: RunInfo, timeout_s: int = 10, by: str = STOPPED_BY, say: Callable[[str], None] = log.info,
             before_stop: Callable[[NodeInfo], None] = lambda node: None, look: Optional[dict] = None) -> list[str]:
    """Stop every live node with the engine's stop (SIGTERM, then SIGKILL after ``timeout_s``,
    which the engine sends even if this process is interrupted or dies); keep containers, logs
    and state. Returns the nodes stopped.

    Every node gets its SIGTERM at once, as a cluster stops a job: one node stopped after
    another leaves the later ones' ranks failing on their departed peers (and writing no
    checkpoint) before their own signal comes. ``before_stop`` is done to each node first, in
    its own thread (once a paused node is unpaused); ``look``, where the ranks were at a look taken
    first, goes into the stop request for the run's launcher. A node the engine had to SIGKILL is named
    (``say``) with what still ran in it a moment before (listed ``LIST_BEFORE_KILL_S`` before
    the grace ends), as its launcher names one; with no grace (``timeout_s`` 0) the SIGKILL comes
    with the SIGTERM, so every node that ends by it is named, with what ran in it as the stop began.
    An interrupt is not held until the stops end: the engine finishes them.

    Raises:
        EngineError: When the engine refused to stop nodes (once every node's stop has ended).
    """
    live = run.live_nodes
    if not live:
        return []
    # no grace: what runs now is what the SIGKILL ends, and no later moment comes to list it
    listed = (processes_at_once({node.name: node.container for node in live}, limit_s=LIST_BEFORE_KILL_S * 0.8)
              if timeout_s <= 0 else {})
    mark_stop_requested(run.run_dir, [node.name for node in live], by, grace_s=timeout_s, look=look)
    if listed:
        note_still_running(run.run_dir, listed)
    sent = time.time()  # the engine's stop starts its grace about now
    stops = [(node, in_background(stop_node, run, node, timeout_s, before_stop, name=f"ddp-stop-{node.name}"))
             for node in live]
    try:
        if timeout_s > LIST_BEFORE_KILL_S:
            concurrent.futures.wait([stop for _, stop in stops], timeout=timeout_s - LIST_BEFORE_KILL_S)
        still = [node for node, stop in stops if not stop.done()] if timeout_s > 0 else list(live)
        if still and timeout_s > LIST_BEFORE_KILL_S:
            listed = processes_at_once({node.name: node.container for node in still}, limit_s=LIST_BEFORE_KILL_S * 0.8)
            note_still_running(run.run_dir, listed)  # before the SIGKILL: the run's launcher reads it at the node's end
        concurrent.futures.wait([stop for _, stop in stops])
    except KeyboardInterrupt:
        say(f"interrupted: the engine still sends SIGKILL to the nodes of run {run.run_id} that have not stopped"
            f" when their {timeout_s} s of grace end")
        raise
    for node, stop in stops:
        if node in still and stop.exception() is None and killed_by_engine(
                stop.result(), not_before=sent + timeout_s - KILL_TIME_SLACK_S):
            say(grace_ran_out(node.name, listed.get(node.name, []), no_grace=timeout_s <= 0))
    refused = [(node, stop.exception()) for node, stop in stops if stop.exception() is not None]
    if refused:
        errors = [error for _, error in refused if not isinstance(error, EngineError)]
        if errors:
            raise errors[0]
        raise EngineError("; ".join(f"{error}; what still ran: {'; '.join(listed[node.name])}"
                                    if listed.get(node.name) else str(error) for node, error in refused))
    return [node.name for node in live]


def stop_node(run: RunInfo, node: NodeInfo, timeout_s: int,
              before_stop: Callable[[NodeInfo], None] = lambda node: None) -> dict[str, Any]:
    """The engine's stop of one node (a paused one unpaused first, so that its processes get
    the SIGTERM now; then ``before_stop``); one removed meanwhile counts as stopped.

    Returns:
        The container's state as the stop left it (its exit code, when it finished), read at
        once: the run's launcher removes the node soon after it ended. Empty where the engine
        could not tell it.

    Raises:
        EngineError: The engine's refusal, naming the node and the run.
    """
    import docker.errors

    try:
        if node.status == "paused":
            unpause_if_paused(node.container)
        before_stop(node)
        node.container.stop(timeout=timeout_s)
    except docker.errors.NotFound:  # removed meanwhile (a `down` beside this stop): stopped all the same
        return {}
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot stop {node.name} of run {run.run_id}: {exc.explanation or exc}") from None
    except engine_errors() as exc:  # the engine stopped answering
        raise EngineError(f"cannot stop {node.name} of run {run.run_id}: {describe(exc)}") from None
    try:
        node.container.reload()
    except engine_errors():  # removed meanwhile, or the engine does not answer: it cannot tell
        return {}
    return node.container.attrs.get("State", {})


def killed_by_engine(state: dict[str, Any], not_before: float) -> bool:
    """Whether a container in this state (the engine's) ended by a SIGKILL (137) at
    ``not_before`` (Unix seconds) or later: its stop's, at the end of its grace, not an earlier
    kill (a fault's, the kernel's OOM kill); False where the state does not say."""
    finished = engine_time(state.get("FinishedAt", ""))
    return state.get("Status") == "exited" and state.get("ExitCode") == KILLED_EXIT_CODE and (finished or 0.0) >= not_before


def unpause_if_paused(container: Any) -> None:
    """Unpause a container listed as paused; one unpaused meanwhile (another ``stop`` or ``down``
    of the run came first: the engine answers 409, not paused) is left as it is."""
    import docker.errors

    try:
        container.unpause()
    except docker.errors.APIError as exc:
        if classify(exc) is not EngineFault.CONFLICT:
            raise


def mark_stop_requested(run_dir: Path, nodes: list[str], by: str = STOPPED_BY,
                        grace_s: Optional[float] = None, look: Optional[dict] = None) -> None:
    """Say in the run's directory which of its nodes are stopped on request, when, by which
    command and with how long a grace between SIGTERM and SIGKILL (see STOP_REQUEST_FILE), and
    where the ranks were at a look taken first (``look``: ``hung`` and ``lines``); a directory
    that is gone or not writable here leaves the run to be judged by its exits. A later request
    (``stop --timeout 1`` or ``down`` while the first one's grace runs) keeps the first one's
    look and ``by``: that command stopped the job, and the look was its own."""
    first = stop_request_data(run_dir)
    if look is None:  # a later stop (its grace runs) keeps the first one's look
        look = first.get("look")
    if first.get("nodes") and in_its_grace(first):  # ... and says who stopped the job first
        by = first.get("by") if isinstance(first.get("by"), str) and first.get("by") else by
    write_stop_request(run_dir, {"time": time.time(), "nodes": nodes, "by": by, "grace_s": grace_s,
                             **({"look": look} if look else {})})


def in_its_grace(request: dict) -> bool:
    """Whether a stop request's grace (its SIGTERM's, before the SIGKILL) may still run, a minute
    of slack after it: a request left from a stop that failed long ago is not the stop of now."""
    started, grace = request.get("time"), request.get("grace_s")
    if not isinstance(started, (int, float)):
        return False
    grace = grace if isinstance(grace, (int, float)) else 0.0
    return time.time() <= started + grace + 60


def note_still_running(run_dir: Path, listed: dict[str, list[str]]) -> None:
    """Add to the run's stop request what still ran in each node a moment before its grace ran
    out, so that whoever follows the run names it with the node the SIGKILL ended."""
    request = stop_request_data(run_dir)
    if request:
        write_stop_request(run_dir, {**request, "still_running": listed})


def stop_request_data(run_dir: Path) -> dict:
    """The run's stop request as written ({} where none came, it cannot be read, or the run names
    no directory: not the current directory's file)."""
    if not run_dir.name:
        return {}
    try:
        request = json.loads((run_dir / STOP_REQUEST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return request if isinstance(request, dict) else {}


def write_stop_request(run_dir: Path, request: dict) -> None:
    """Write the stop request whole (a new file moved into place: a reader never sees half),
    readable by all: the run's launcher may be another user's."""
    if not run_dir.name:
        return
    written = run_dir / f".{STOP_REQUEST_FILE}.{os.getpid()}"
    try:
        if run_dir.is_dir():
            written.write_text(json.dumps(request) + "\n")
            written.chmod(0o644)
            os.replace(written, run_dir / STOP_REQUEST_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            written.unlink(missing_ok=True)  # half written, or not moved into place
    except BaseException:  # an interrupt (a second Ctrl-C): nothing half written is left either
        with contextlib.suppress(OSError):
            written.unlink(missing_ok=True)
        raise


def forget_stop_request(run_dir: Path) -> None:
    """Take back the stop request: nothing was stopped (Slurm refused), so the run's own end stands."""
    try:
        if run_dir.name:
            (run_dir / STOP_REQUEST_FILE).unlink(missing_ok=True)
    except OSError:
        pass


@dataclass(frozen=True)
class StopRequest:
    """What ``stop RUN`` (or ``down RUN`` of a live run) left in the run's directory: the nodes it
    stops, those live when it came, and the command that asked. No nodes where none came."""

    nodes: frozenset[str] = frozenset()
    by: str = STOPPED_BY
    time: Optional[float] = None
    grace_s: Optional[float] = None
    still_running: tuple[tuple[str, tuple[str, ...]], ...] = ()
    look: tuple[str, ...] = ()  # where the ranks were as it came (a quiet job's, looked at first): headline first
    look_hung: bool = False  # whether that look found the job hung (else quiet and working)

    def left_running(self, node: str) -> list[str]:
        """What still ran in ``node`` a moment before its grace ran out, where the stop listed it."""
        return next((list(processes) for name, processes in self.still_running if name == node), [])


def read_stop_request(run_dir: Path) -> StopRequest:
    """The run's stop request (see :func:`mark_stop_requested`); an empty one where none came."""
    request = stop_request_data(run_dir)
    try:
        nodes = frozenset(str(node) for node in request.get("nodes", []))
    except TypeError:  # not a list
        return StopRequest()
    by = request.get("by")
    listed = request.get("still_running")
    still = tuple((str(node), tuple(str(p) for p in processes)) for node, processes in listed.items()
                  if isinstance(processes, list)) if isinstance(listed, dict) else ()
    look = request.get("look")
    lines = look.get("lines") if isinstance(look, dict) else None
    lines = tuple(str(line) for line in lines) if isinstance(lines, list) else ()
    return StopRequest(nodes, by if isinstance(by, str) and by else STOPPED_BY, a_number(request.get("time")),
                       a_number(request.get("grace_s")), still, lines, bool(lines) and look.get("hung") is True)


def a_number(value: Any) -> Optional[float]:
    """A number read from JSON, else None (a bool is not one)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def remove_run(client: Any, run: RunInfo) -> list[str]:
    """Remove the run's containers, network and volume (found by its Compose project label).

    Returns:
        What was removed, one line each.
    """
    import docker.errors

    removed = []
    label = {"label": f"{COMPOSE_PROJECT_LABEL}={run.project}"}
    try:
        for container in client.containers.list(all=True, ignore_removed=True, filters=label):
            if remove_container(container):
                removed.append(f"container {container.name}")
        for network in client.networks.list(filters=label):
            try:
                network.remove()
            except docker.errors.NotFound:  # as a container: another `down` of the run came first
                continue
            removed.append(f"network {network.name}")
        for volume in client.volumes.list(filters=label):
            try:
                volume.remove(force=True)
            except docker.errors.NotFound:
                continue
            removed.append(f"volume {volume.name}")
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot remove run {run.run_id}: {exc.explanation or exc}") from None
    return removed


def remove_container(container: Any) -> bool:
    """Remove one of a run's containers, running or not; True if this call removed it.

    Another command may be removing the same run (a second ``down``, ``prune``, a launcher's
    teardown): a container it removed first is gone all the same, and one it is removing now
    (the engine answers 409) is asked for again until it is gone, since the run's network can
    only go after it; where that other removal failed, this one removes it.

    Raises:
        EngineError: When the engine still answers 409 after ``REMOVAL_POLLS`` asks.
    """
    import docker.errors

    for _ in range(REMOVAL_POLLS):  # a count, not a clock: the caller's clock may be frozen
        try:
            container.remove(force=True)
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if classify(exc) is not EngineFault.CONFLICT:  # with force, 409 is "removal already in progress"
                raise
        time.sleep(REMOVAL_POLL_S)
    raise EngineError(f"container {container.name} is being removed by another command, and is not gone after"
                      f" {REMOVAL_POLLS * REMOVAL_POLL_S:.0f} s")


def age(created: Optional[datetime], now: Optional[datetime] = None) -> str:
    """``42s``, ``5m``, ``3h``, ``2d`` since ``created`` (``-`` when unknown)."""
    if created is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return short_duration((now - created).total_seconds())


def node_plans(run: RunInfo) -> tuple[NodePlan, ...]:
    """The run's nodes as plans, from labels: names, node ranks, static global ranks, GPUs."""
    last_rank = max((node.node_rank for node in run.nodes), default=-1)
    global_ranks = assign_uneven_ranks([run.nprocs_of(i) for i in range(last_rank + 1)])
    plans = []
    for node in run.nodes:
        ranks = () if run.elastic else global_ranks[node.node_rank]
        plans.append(NodePlan(node.name, node.node_rank, ranks, node.gpus,
                              process_gpus(node.gpus, run.nprocs_of(node.node_rank)), (), {}))
    return tuple(plans)


