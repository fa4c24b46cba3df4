"""The supervisor's types: what it is told about a run, each node as it follows it, and the
messages its sources (log streams, engine events) put in its inbox."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from orchestrate.config.fault_spec import FaultAction, FaultSpec, parse_fault
from orchestrate.config.link import LinkSpec
from orchestrate.config.run_config import DEFAULT_HANG_DIAGNOSE_AFTER_S, DEFAULT_READY_TIMEOUT_S, DEFAULT_STOP_GRACE_S
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.states import NodePhase, advance
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.worker_lines import NodeOutput


@dataclass(frozen=True)
class RunSpec:
    """What a supervisor needs to know of a run (from its plan, or rebuilt from labels)."""

    run_id: str
    project: str
    run_dir: Path
    nodes: tuple[NodePlan, ...]
    elastic: bool = False
    max_restarts: int = 0
    memory_limited: bool = False
    faults: tuple[FaultSpec, ...] = ()
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    cpus_per_node: Optional[float] = None  # what a slow fault's end gives back
    link: Optional[LinkSpec] = None  # what a degrade fault's end gives back
    hang_diagnose_after_s: float = DEFAULT_HANG_DIAGNOSE_AFTER_S  # 0: never
    hang_timeout_s: Optional[float] = None  # end a run without progress for this long (None: never)
    collective_timeout_s: Optional[float] = None  # the workers' process group timeout (None: not set)
    workdir: Optional[Path] = None  # the work directory, whose writes are followed (None: not followed)
    restart_scope: str = "all"  # what an elastic job's node death restarts: "all" its nodes, or the dead "node"
    store_host: str = "node0"  # who holds the elastic rendezvous's store: a node, or the run's store container


# The faults a restart of a node's container leaves in place (see NodeTracker.restarted).
OUTLIVE_A_RESTART = (FaultAction.SLOW, FaultAction.DISCONNECT, FaultAction.DISK_FULL)


def action_of(spec: str) -> FaultAction:
    """The action of a fault the run itself fired (its own spec, so it parses)."""
    return parse_fault(spec).action


@dataclass(frozen=True)
class AttachedAt:
    """Where an ``attach`` found a running run, whose output it reads again from the start: what
    came before the attach is the run's history, no progress of its now, and its hang watchdog's
    quiet time counts from the run's last output (as ``ps`` counts QUIET), not from the attach."""

    engine_time: float  # the engine's clock as the attach began: lines stamped before it are history
    host_time: float  # the same moment by this host's clock, that of the workers' progress records
    quiet_s: Optional[float]  # how long no worker had printed then (None: the engine could not say)


@dataclass
class NodeTracker:
    """One node as the supervisor follows it.

    Attributes:
        plan: The node's plan.
        container: Its container (a docker SDK model).
        result: What will be reported of it; its ``state`` is the node's phase.
        output: Its lines: the node log, the last lines, its workers' pieces.
        stream: The number of its current log stream (a restart starts a new one).
        log_open: Whether that stream is still open.
        exited_at: Monotonic time the engine said its container died (None while it runs).
        exited_time: The engine's epoch time of that death, where the container had ended before
            the follow began (an ``attach`` after the end): what its end is recorded at.
        last_line_at: Monotonic time the latest line of its log was taken in (0: none yet).
        exit_code: That exit code.
        first_started: Engine time of the container's first start seen.
        latest_start: Engine time of its latest start taken in (its start as the follow began,
            then from its ``start`` event, the restart that made it, or an inspection): a ``start`` or ``die`` event from before
            it belongs to a run of the container that is over, however late the event stream
            brings it.
        last_log_stamps: For each stream (stdout, stderr), the engine time of the last log line
            read and how many lines of that time were read: a broken stream resumes there.
        holding: The run's own faults without an end that last (a pause, a disconnect, a hung
            rank) done to it and still holding it, oldest first: a later fault on it does not let
            them go (``result.fault`` is the latest one only); a restart of its container lets go
            those a restart ends (:meth:`restarted`), a killed rank its hung ranks.
    """

    plan: NodePlan
    container: Any
    result: NodeResult
    output: NodeOutput
    stream: int = 0
    log_open: bool = False
    exited_at: Optional[float] = None
    exited_time: Optional[float] = None  # the engine's time of an exit it had seen before the follow began
    last_line_at: float = 0.0
    exit_code: Optional[int] = None
    first_started: Optional[float] = None
    latest_start: Optional[float] = None
    last_log_stamps: dict[str, tuple[float, int]] = field(default_factory=dict)
    holding: list[str] = field(default_factory=list)

    def restarted(self) -> None:
        """Its container started again (a restart fault, an elastic restart): let go the faults
        held that a restart ends (a pause; a hung rank, whose worker is gone; a degrade, a lossy
        link or a split, rules of a network namespace the new start makes anew). A slow (the
        container's CPU quota), a disconnect (it stays off the run's network) and a full disk
        (armed in the run's directory) hold on, and are still said held at a stop."""
        self.holding[:] = [spec for spec in self.holding if action_of(spec) in OUTLIVE_A_RESTART]

    def rank_killed(self) -> None:
        """One of its ranks was killed: torchrun's agent ends its other workers too (to restart
        them, or as the job ends), so a hung rank of its no longer holds it."""
        self.holding[:] = [spec for spec in self.holding if not action_of(spec).on_rank]

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def phase(self) -> NodePhase:
        return self.result.state

    def move(self, phase: NodePhase) -> None:
        self.result.state = advance(self.result.state, phase)

    def predates_start(self, stamp: Optional[float], slack_s: float = 0.0) -> bool:
        """Whether engine time ``stamp`` is from before the latest start taken in (by more than
        ``slack_s``): what it tells of belongs to a run of the container that is over (a log line
        of the attempt before a restart, which the new stream reads again from where the lines
        taken in end, or which an attach reads from the log's start)."""
        return bool(self.latest_start and stamp and stamp < self.latest_start - slack_s)


@dataclass(frozen=True)
class LineArrived:
    """A raw line of a node's container log (``stamp``: the engine's time of it; ``source``:
    the container's stream it came from, stdout or stderr)."""

    node: str
    stream: int
    text: str
    stamp: float
    at: float
    source: str = "stdout"


@dataclass(frozen=True)
class LogEnded:
    """A node's log stream ended (its container stopped, or went away)."""

    node: str
    stream: int
    stamp: float
    at: float


@dataclass(frozen=True)
class EngineEvent:
    """An engine event of a node's container (``start``, ``die`` with ``exitCode``, ``oom``)."""

    node: str
    action: str
    attrs: dict = field(default_factory=dict)
    stamp: float = 0.0
    at: float = 0.0


@dataclass(frozen=True)
class EventsEnded:
    """The engine's event stream ended while the run goes on (``reason``: why, if it said)."""

    reason: str
    at: float = 0.0
    node: str = ""


Message = Union[LineArrived, LogEnded, EngineEvent, EventsEnded]
