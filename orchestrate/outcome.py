"""How a run ended: the pure ending logic and the summary printed at the end of every run."""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from orchestrate.output import RootCause, is_collateral
from orchestrate.plan import NodePlan, format_table
from orchestrate.states import NodePhase


@dataclass
class NodeResult:
    """The end of one node's torchrun.

    Attributes:
        node: The node's plan.
        state: Where it is; a final phase once it ended (CREATED: never started).
        exit_code: torchrun's exit status, the container's (None while it runs).
        wall_s: Seconds from its launch to its end.
        ended_at: Monotonic time it ended (orders failures).
        root_cause: What torchrun reported as its first failure (with its error file).
        last_lines: The last output lines of the failing worker (or of the node).
        fault: The fault injected into this node, if any.
        unresponsive: Why the node could not answer its peers when the job failed, if so.
        oom_kills: Processes the kernel OOM-killed in the node (its memory limit was reached).
        oom_reported: Whether the OOM kill was announced already.
        killed_by_launcher: The launcher ended it (after another node failed, or on Ctrl-C).
    """

    node: NodePlan
    state: NodePhase = NodePhase.CREATED
    exit_code: Optional[int] = None
    wall_s: float = 0.0
    ended_at: float = 0.0
    root_cause: Optional[RootCause] = None
    last_lines: list[str] = field(default_factory=list)
    fault: str = ""
    unresponsive: str = ""
    oom_kills: int = 0
    oom_reported: bool = False
    killed_by_launcher: bool = False


@dataclass(frozen=True)
class Failure:
    """The failure a run is reported for: the earliest one that was not a consequence."""

    node: str
    rank: Optional[int]
    exit_code: Optional[int]
    exception: str
    last_lines: tuple[str, ...]
    traceback: str = ""
    reason: str = ""

    def describe(self) -> str:
        """One line naming the node, the rank, the exit code and the exception (or why it hung)."""
        if self.reason:
            return f"{self.node} {self.reason}"
        rank = f" rank {self.rank}" if self.rank is not None else ""
        what = f": {self.exception}" if self.exception else ""
        return f"{self.node}{rank} failed (exit code {self.exit_code}){what}"


@dataclass
class Recovery:
    """One node that died and rejoined an elastic job.

    Attributes:
        node: The node.
        cause: What happened to it (the injected fault, or its exit).
        failed_at: Monotonic time the failure was detected.
        step_before: The highest training step the workers reported before the failure (as
            exact as their progress lines are frequent).
        resumed_from: The step the workers resumed from (from "resumed from ... step N").
        resumed_at: Monotonic time of the first training step after the resume.
    """

    node: str
    cause: str
    failed_at: float
    step_before: Optional[int] = None
    resumed_from: Optional[int] = None
    resumed_at: Optional[float] = None

    @property
    def recovery_s(self) -> Optional[float]:
        return None if self.resumed_at is None else self.resumed_at - self.failed_at

    @property
    def steps_lost(self) -> Optional[int]:
        if self.step_before is None or self.resumed_from is None:
            return None
        return max(0, self.step_before - self.resumed_from)

    def describe(self) -> str:
        took = "-" if self.recovery_s is None else f"{self.recovery_s:.1f} s"
        lost = "-" if self.steps_lost is None else str(self.steps_lost)
        return (f"{self.node} rejoined after {self.cause}: recovery (failure detected to first step"
                f" after resume) {took}; steps lost {lost} (last step {self.step_before},"
                f" resumed from {self.resumed_from})")


@dataclass
class Timings:
    """Seconds spent in each phase of a run."""

    bring_up_s: Optional[float] = None
    rendezvous_s: Optional[float] = None
    job_s: float = 0.0
    teardown_s: Optional[float] = None
    recoveries: list[Recovery] = field(default_factory=list)


@dataclass
class JobOutcome:
    """The result of a whole run."""

    run_id: str
    run_dir: Path
    results: list[NodeResult]
    timings: Timings
    interrupted: bool = False
    signal_number: int = 2
    error: str = ""
    error_exit_code: int = 2
    teardown_error: str = ""
    image_torch: str = ""

    @property
    def succeeded(self) -> bool:
        """True only when every node's torchrun exited 0."""
        return (
            not self.interrupted
            and not self.error
            and bool(self.results)
            and all(r.state is NodePhase.SUCCEEDED for r in self.results)
        )

    def exit_code(self, interrupt_code: int = 130) -> int:
        """The CLI's exit code: 0 success, 1 the job failed, 2 the environment failed it (a
        bring-up or engine error, or a teardown that left something behind),
        ``interrupt_code`` when stopped by a signal."""
        if self.interrupted:
            return interrupt_code
        if self.error:
            return self.error_exit_code
        if not self.succeeded:
            return 1
        return 2 if self.teardown_error else 0

    @property
    def failure(self) -> Optional[Failure]:
        """The failure to report, chosen by :func:`find_failure`."""
        return find_failure(self.results)


def find_failure(results: list[NodeResult]) -> Optional[Failure]:
    """Choose the failure that explains a run.

    1. A node that was OOM-killed, stopped answering (paused, cut off, gone) or that a fault
       was injected into explains the failures of the others, which only waited for it or
       saw its connections close.
    2. Otherwise only nodes whose torchrun failed by itself count (not those the launcher
       stopped); a failure that is not a consequence of another (a peer's closed
       connection, a SIGTERM from torchrun) wins over one that is.
    3. Then the earliest failure by the workers' error files, then the node that ended first.

    Returns:
        The failure, or None when no node failed.
    """
    for result in results:
        if result.oom_kills:
            cause = result.root_cause
            rank = f" (rank {cause.rank} killed)" if cause and cause.exit_code == -9 else ""
            return Failure(result.node.name, cause.rank if cause else None, result.exit_code, "",
                           tuple(result.last_lines), traceback="",
                           reason=f"OOM-killed: the kernel killed {result.oom_kills} process(es) at the"
                                  f" node's memory limit{rank}; raise --memory-per-node or use less memory")
    for result in results:
        if result.unresponsive or (result.fault and result.state is not NodePhase.SUCCEEDED):
            reason = f"stopped answering: {result.unresponsive}" if result.unresponsive else "failed"
            if result.fault:
                reason += f" (injected fault {result.fault})"
            return Failure(result.node.name, None, result.exit_code, "", tuple(result.last_lines),
                           reason=reason)
    failed = [r for r in results if r.state is NodePhase.FAILED]
    if not failed:
        return None

    def order(result: NodeResult) -> tuple:
        cause = result.root_cause
        collateral = cause is not None and is_collateral(cause, result.last_lines)
        stamp = cause.timestamp if cause and cause.timestamp is not None else float("inf")
        return (collateral, stamp, result.ended_at)

    first = min(failed, key=order)
    cause = first.root_cause
    return Failure(
        node=first.node.name,
        rank=cause.rank if cause else None,
        exit_code=(cause.exit_code if cause and cause.exit_code is not None else first.exit_code),
        exception=cause.exception if cause else "",
        last_lines=tuple(first.last_lines),
        traceback=cause.traceback if cause else "",
    )


def died_at_exit(outcome: "JobOutcome") -> Optional[str]:
    """Explain a worker that died by a signal after its peers finished, or return None.

    Every other node exited 0 and the failing rank died by a signal with no Python error: the
    job's work was done, and the process crashed on its way out. SIGABRT there is the known
    gloo crash at interpreter exit of torch 2.10 and later.
    """
    failure = outcome.failure
    if failure is None or failure.reason or failure.exit_code is None or failure.exit_code >= 0:
        return None
    others = [r for r in outcome.results if r.node.name != failure.node]
    if not others or any(r.state is not NodePhase.SUCCEEDED for r in others):
        return None
    try:
        name = signal.Signals(-failure.exit_code).name
    except ValueError:
        name = f"signal {-failure.exit_code}"
    rank = f" rank {failure.rank}" if failure.rank is not None else ""
    lines = [f"{failure.node}{rank} died by {name} after its peers finished: the job's work was done,"
             " and the worker process crashed while exiting."]
    if name == "SIGABRT":
        torch = f" (this image has torch {outcome.image_torch})" if outcome.image_torch else ""
        lines.append("  cause: gloo's worker threads release tensors during Python's interpreter shutdown"
                     f" and abort (\"terminate called without an active exception\"); torch 2.10 to 2.15"
                     f" do this{torch}.")
        lines.append("  remedy: run on the default node image (torch 2.9.1, measured sound), or free"
                     " the DDP model (del model; gc.collect()) before destroy_process_group().")
    else:
        lines.append("  look for native extensions or atexit handlers that outlive destroy_process_group().")
    return "\n".join(lines)


def format_summary(outcome: JobOutcome) -> str:
    """Render the table printed at the end of every run, followed by its verdict."""
    header = ("node", "ranks", "state", "exit code", "wall time")
    rows = [
        (
            r.node.name,
            ",".join(str(g) for g in r.node.global_ranks) or "elastic",
            r.state.value,
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.wall_s:.1f} s",
        )
        for r in outcome.results
    ]
    t = outcome.timings
    def seconds(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.1f} s"

    lines = ["", f"=== run {outcome.run_id} summary ===", *format_table(header, rows)]
    lines.append(
        f"bring-up {seconds(t.bring_up_s)} | rendezvous {seconds(t.rendezvous_s)} | job {t.job_s:.1f} s"
        f" | teardown {seconds(t.teardown_s)}"
    )
    for recovery in t.recoveries:
        lines.append(f"recovery: {recovery.describe()}")
    lines.append(f"logs: {outcome.run_dir}")
    if outcome.teardown_error:
        lines.append(f"TEARDOWN FAILED: {outcome.teardown_error}")
    if outcome.succeeded:
        lines.append(f"SUCCEEDED: all {len(outcome.results)} nodes exited 0")
        return "\n".join(lines)
    if outcome.interrupted:
        lines.append(f"INTERRUPTED by {signal.Signals(outcome.signal_number).name}: every node was stopped")
    elif outcome.error:
        lines.append(f"FAILED: {outcome.error}")
    failure = outcome.failure
    if failure is not None:
        lines.append(f"FAILED: {failure.describe()}")
        others = [r for r in outcome.results
                  if r.state is NodePhase.FAILED and r.node.name != failure.node and r.root_cause]
        for other in others:
            lines.append(f"  then {other.node.name} rank {other.root_cause.rank}:"
                         f" {other.root_cause.exception or 'exit code ' + str(other.exit_code)}")
        advice = died_at_exit(outcome)
        if advice:
            lines.append(advice)
        if failure.traceback:
            lines.append(f"traceback from the error file of {failure.node}/rank{failure.rank}:")
            lines += [f"  | {ln}" for ln in failure.traceback.rstrip().splitlines()[-15:]]
        elif failure.last_lines:
            lines.append(f"last lines of {failure.node}" + (
                f"/rank{failure.rank}:" if failure.rank is not None else ":"))
            lines += [f"  | {ln}" for ln in failure.last_lines]
    elif not outcome.interrupted and not outcome.error:
        lines.append("FAILED: not every node exited 0")
    return "\n".join(lines)


def outcome_record(outcome: JobOutcome) -> dict:
    """The outcome as JSON-ready data (``runs/<id>/outcome.json``): for reports and benchmarks."""
    t = outcome.timings
    failure = outcome.failure
    return {
        "run_id": outcome.run_id,
        "succeeded": outcome.succeeded,
        "exit_code": outcome.exit_code(128 + outcome.signal_number),
        "interrupted": outcome.interrupted,
        "error": outcome.error,
        "teardown_error": outcome.teardown_error,
        "image_torch": outcome.image_torch,
        "timings": {"bring_up_s": t.bring_up_s, "rendezvous_s": t.rendezvous_s, "job_s": t.job_s,
                    "teardown_s": t.teardown_s},
        "recoveries": [{"node": r.node, "cause": r.cause, "recovery_s": r.recovery_s, "steps_lost": r.steps_lost,
                        "step_before": r.step_before, "resumed_from": r.resumed_from} for r in t.recoveries],
        "nodes": [{"name": r.node.name, "ranks": list(r.node.global_ranks), "state": r.state.value,
                   "exit_code": r.exit_code, "wall_s": r.wall_s, "fault": r.fault, "unresponsive": r.unresponsive,
                   "oom_kills": r.oom_kills} for r in outcome.results],
        "failure": None if failure is None else {
            "node": failure.node, "rank": failure.rank, "exit_code": failure.exit_code,
            "exception": failure.exception, "reason": failure.reason, "describe": failure.describe(),
            "traceback": failure.traceback, "last_lines": list(failure.last_lines),
            "then": [{"node": r.node.name, "rank": r.root_cause.rank, "exception": r.root_cause.exception}
                     for r in outcome.results if r.state is NodePhase.FAILED and r.node.name != failure.node
                     and r.root_cause],
        },
    }
