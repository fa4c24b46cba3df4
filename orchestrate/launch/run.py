"""The apply step: carry out a :class:`JobPlan` on a Docker engine.

Bring the Compose project up (every node's main process is torchrun, under the node
supervisor), then either return (``--detach``: the engine holds the run) or follow it with a
:class:`~orchestrate.supervise.Supervisor` to its end and tear everything down, whatever
happens. A foreground launcher keeps a heartbeat in the run directory; if the launcher dies,
the nodes notice within ``LEASE_TIMEOUT_S`` and stop themselves.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional

from orchestrate.engine.client import docker_errors
from orchestrate.engine.compose_cli import ComposeProject
from orchestrate.engine.compose_file import write_compose_file
from orchestrate.engine.gpus import gpu_topology
from orchestrate.engine.images import TORCH_LABEL, image_label
from orchestrate.engine.labels import find_node_container
from orchestrate.engine.locks import try_lock
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.errors import NodesNotReadyError, OrchestrateError
from orchestrate.launch.heartbeat import Heartbeat
from orchestrate.launch.run_dir import prepare_run_dir
from orchestrate.outcome.events import record_event
from orchestrate.outcome.model import RunResult, Timings
from orchestrate.outcome.record import write_outcome
from orchestrate.plan.layout import HEARTBEAT_FILE
from orchestrate.plan.model import JobPlan
from orchestrate.report.helper import ReportHelper
from orchestrate.supervise.supervisor import RunSpec, Supervisor

log = logging.getLogger(__name__)


def wait_until_started(containers: dict[str, Any], timeout_s: float, clock: Callable[[], float]) -> None:
    """Poll until every node container has started (it may have ended already).

    Raises:
        NodesNotReadyError: Naming the nodes still not started at the deadline.
    """
    deadline = clock() + timeout_s
    pending = dict(containers)
    while pending:
        for name, container in list(pending.items()):
            container.reload()
            if container.status != "created":
                del pending[name]
        if not pending:
            return
        if clock() >= deadline:
            raise NodesNotReadyError(f"nodes not started after {timeout_s:.0f} s: {', '.join(sorted(pending))}")
        time.sleep(0.2)


def spec_for(plan: JobPlan) -> RunSpec:
    """What the supervisor needs of a planned run."""
    cfg = plan.config
    return RunSpec(plan.run_id, plan.project_name, plan.run_dir, plan.nodes, elastic=cfg.elastic,
                   max_restarts=cfg.max_restarts, memory_limited=cfg.memory_per_node is not None,
                   faults=cfg.faults, ready_timeout_s=cfg.ready_timeout_s)


@dataclass
class StartedRun:
    """A run whose nodes are up."""

    plan: JobPlan
    compose: ComposeProject
    containers: dict[str, Any]
    bring_up_s: float
    heartbeat: Optional[Heartbeat]


def start_run(plan: JobPlan, client: Any, *, say: Callable[[str], None],
              compose_factory: Callable[[str, Path], ComposeProject] = ComposeProject,
              clock: Callable[[], float] = time.monotonic) -> StartedRun:
    """Bring the run's nodes up; they start torchrun by themselves.

    Raises:
        OrchestrateError: When bring-up fails; whatever was created is removed first.
    """
    run_dir = prepare_run_dir(plan)
    compose = compose_factory(plan.project_name, write_compose_file(plan, run_dir / "compose.json"))
    heartbeat = None if plan.detached else Heartbeat(run_dir / HEARTBEAT_FILE).start()
    t0 = clock()
    try:
        say(f"run {plan.run_id}: bringing up {len(plan.nodes)} nodes (project {plan.project_name})")
        record_event(run_dir, "bring-up", nodes=[n.name for n in plan.nodes])
        compose.up()
        containers = {n.name: find_node_container(client, plan.project_name, n) for n in plan.nodes}
        wait_until_started(containers, plan.config.ready_timeout_s, clock)
        record_event(run_dir, "nodes-up")
    except BaseException:
        if heartbeat is not None:
            heartbeat.stop()
        teardown(compose, say)
        raise
    return StartedRun(plan, compose, containers, clock() - t0, heartbeat)


def launch(
    plan: JobPlan,
    client: Any,
    *,
    out: IO[str] = sys.stdout,
    compose_factory: Callable[[str, Path], ComposeProject] = ComposeProject,
    clock: Callable[[], float] = time.monotonic,
    report_helper: Optional[ReportHelper] = None,
) -> RunResult:
    """Carry out ``plan`` in the foreground: bring up, follow, report, tear down.

    Args:
        plan: What to run (from :func:`orchestrate.plan.make_plan`).
        client: A Docker SDK client.
        out: Where worker output and progress go.
        compose_factory: Makes the Compose project driver (a fake one in tests).
        clock: Monotonic clock.
        report_helper: Draws the report page in its own process while the nodes are removed
            (without it, this process draws it after).

    Returns:
        The outcome; it is a failure, not an exception, when a node fails. Ctrl-C (or a
        teardown signal raised as KeyboardInterrupt) stops every node and tears down; the
        outcome then says it was interrupted. A failed bring-up is reported in it too.
    """
    def say(text: str) -> None:
        out.write(f"[orchestrate] {text}\n")
        out.flush()

    timings = Timings()
    outcome = RunResult(plan.run_id, plan.run_dir, [], timings)
    outcome.image_torch = image_label(client, plan.image, TORCH_LABEL)
    started: Optional[StartedRun] = None
    supervisor: Optional[Supervisor] = None
    try:
        started = start_run(plan, client, say=say, compose_factory=compose_factory, clock=clock)
        timings.bring_up_s = started.bring_up_s
        if plan.config.gpus_per_node:
            say("GPU topology seen from node0 (nvidia-smi topo -m):\n"
                + gpu_topology(client, plan, started.containers[plan.nodes[0].name]))
        say(f"nodes up in {started.bring_up_s:.1f} s; torchrun runs on every node")
        supervisor = Supervisor(spec_for(plan), client, out, active=True, containers=started.containers,
                                clock=clock)
        with try_lock(plan.run_dir / "supervisor.lock"):  # attach then only watches
            followed = supervisor.follow()
        outcome.results, outcome.timings, outcome.fired_faults = followed.results, followed.timings, followed.fired_faults
        outcome.timings.bring_up_s = started.bring_up_s
    except KeyboardInterrupt as exc:
        outcome.interrupted = True
        outcome.signal_number = int(getattr(exc, "signum", 2))
        say("interrupted: stopping every node")
        if supervisor is not None:
            supervisor.stop_all()
            outcome.results = [t.result for t in supervisor.trackers.values()]
    except OrchestrateError as exc:
        outcome.error, outcome.error_exit_code = str(exc), exc.exit_code
    except docker_errors() as exc:  # the engine refused something: an environment problem
        outcome.error = f"engine error: {str(exc).splitlines()[0][:300]}"
    finally:
        if started is not None:
            if started.heartbeat is not None:
                started.heartbeat.stop()
            if plan.config.keep:
                say(f"--keep: leaving run {plan.run_id} in the engine; remove it with:"
                    f" python -m orchestrate down {plan.run_id}")
            finish_while_tearing_down(outcome, None if plan.config.keep else started.compose, say, clock,
                                      report_helper)
    return outcome


def finish_while_tearing_down(outcome: RunResult, compose: Optional[ComposeProject], say: Callable[[str], Any],
                              clock: Callable[[], float], report_helper: Optional[ReportHelper] = None) -> None:
    """Remove the nodes (unless ``compose`` is None: ``--keep``) while the run's record is finished.

    The record (``outcome.json``, the ``run-ended`` event, the report page) needs no node, and
    drawing the report is CPU work while the removal is the engine's: the report helper draws
    it meanwhile, which keeps it off the run's wall time. Without a helper, or when it fails,
    this process draws it after the teardown. ``outcome.json`` is written again with the
    teardown's time; a teardown that fails changes the exit code, and the record then says so.
    """
    from orchestrate.report.page import write_report_quietly

    write_outcome(outcome)
    record_event(outcome.run_dir, "run-ended", **end_fields(outcome))
    helped = report_helper is not None and report_helper.request(outcome.run_dir)
    t1 = clock()
    if compose is not None:
        outcome.teardown_error = teardown(compose, say)
    outcome.timings.teardown_s = clock() - t1
    drawn = helped and report_helper.wait()  # type: ignore[union-attr]
    write_outcome(outcome)  # only now: the helper read the first one
    if outcome.teardown_error:
        record_event(outcome.run_dir, "teardown-failed", error=outcome.teardown_error,
                     exit_code=outcome.exit_code)
    if not drawn or outcome.teardown_error:
        write_report_quietly(outcome.run_dir)


def end_fields(outcome: RunResult) -> dict[str, Any]:
    """The ``run-ended`` event's fields."""
    return {"exit_code": outcome.exit_code, "succeeded": outcome.succeeded,
            "interrupted": outcome.interrupted, "error": outcome.error}


def finish_record(outcome: RunResult) -> None:
    """The run's last event, then its report page (neither may fail the run)."""
    from orchestrate.report.page import end_record

    end_record(outcome.run_dir, **end_fields(outcome))


def teardown(compose: ComposeProject, say: Callable[[str], Any]) -> str:
    """Remove the project; a second Ctrl-C during teardown does not stop it.

    Returns:
        "" when it was removed, else what went wrong and how to remove it by hand.
    """
    for attempt in range(3):
        try:
            compose.down()
            return ""
        except KeyboardInterrupt:
            say("teardown in progress; please wait")
        except OrchestrateError as exc:
            say(f"teardown attempt {attempt + 1} failed: {exc}")
    return (f"could not remove project {compose.project_name}; run:"
            f" docker compose -p {compose.project_name} down -v")


def spec_for_run(run: RunInfo) -> RunSpec:
    """What a supervisor needs of a run found in the engine (no faults: those are the
    foreground launcher's, or the `fault` command's)."""
    return RunSpec(run.run_id, run.project, run.run_dir, node_plans(run), elastic=run.elastic,
                   max_restarts=run.max_restarts,
                   memory_limited=any(n.container.attrs.get("HostConfig", {}).get("Memory") for n in run.nodes))
