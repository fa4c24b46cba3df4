"""The Compose backend: every node is a container whose main process is torchrun.

The run itself (its directory, the heartbeat, ``docker compose up`` and ``down``, its record)
is :class:`orchestrate.launch.run.Run`'s; this backend renders the project, waits until every
node has started, and follows the run with a :class:`~orchestrate.supervise.supervisor.Supervisor`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Callable, Optional

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from orchestrate.engine.compose_file import write_compose_file
from orchestrate.engine.gpus import gpu_topology
from orchestrate.engine.labels import find_node_container
from orchestrate.errors import NodesNotReadyError
from orchestrate.outcome.events import NODE_ADDRESSES, record_event
from orchestrate.outcome.model import RunResult, Timings
from orchestrate.plan.model import JobPlan
from orchestrate.supervise.api import AttachedAt, RunSpec
from orchestrate.supervise.supervisor import Supervisor, addresses_with
from orchestrate.text import counted

SUPERVISOR_LOCK = "supervisor.lock"  # in the run directory: who holds it acts, others only watch


def spec_for(plan: JobPlan) -> RunSpec:
    """What the supervisor needs of a planned run."""
    cfg = plan.config
    return RunSpec(plan.run_id, plan.project_name, plan.run_dir, plan.nodes, elastic=cfg.elastic,
                   max_restarts=cfg.max_restarts, memory_limited=cfg.memory_per_node is not None,
                   faults=cfg.faults, ready_timeout_s=cfg.ready_timeout_s, stop_grace_s=cfg.stop_grace_s,
                   cpus_per_node=cfg.cpus_per_node, link=cfg.link,
                   hang_diagnose_after_s=cfg.hang_diagnose_after_s, hang_timeout_s=cfg.hang_timeout_s,
                   collective_timeout_s=cfg.collective_timeout_s,
                   workdir=Path(cfg.workdir), restart_scope=cfg.restart, store_host=cfg.store_host)


def wait_until_started(containers: dict[str, Any], timeout_s: float) -> None:
    """Poll until every node container has started (it may have ended already).

    Raises:
        NodesNotReadyError: Naming the nodes still not started at the deadline.
    """
    def not_started() -> list[str]:
        for container in containers.values():
            container.reload()
        return sorted(name for name, container in containers.items() if container.status == "created")

    try:
        Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.2),
                 retry=retry_if_result(bool))(not_started)
    except RetryError as exc:
        pending = exc.last_attempt.result()
        raise NodesNotReadyError(f"nodes not started after {timeout_s:.0f} s: {', '.join(pending)}") from None


class ComposeBackend:
    """Follows a run whose nodes are torchrun containers (a new one, or one attached to)."""

    def __init__(self, spec: RunSpec, client: Any, out: IO[str], *, active: bool = True,
                 containers: Optional[dict[str, Any]] = None, plan: Optional[JobPlan] = None,
                 clock: Callable[[], float] = time.monotonic, verbose: bool = False,
                 records: Optional[bool] = None, job_began: Optional[float] = None,
                 attached_at: Optional[AttachedAt] = None) -> None:
        self.spec = spec
        self.client = client
        self.out = out
        self.active = active
        self.records = records  # whether the run's events are its to write (None: the Supervisor's default, active)
        self.job_began = job_began  # an attach's: the epoch time the run's nodes came up (None: as it follows)
        self.attached_at = attached_at  # an attach's: where it found the run (None: as it follows)
        self.containers = dict(containers or {})
        self.plan = plan
        self.clock = clock
        self.verbose = verbose
        self.supervisor: Optional[Supervisor] = None

    @classmethod
    def for_plan(cls, plan: JobPlan, client: Any, out: IO[str], clock: Callable[[], float],
                 verbose: bool = False) -> "ComposeBackend":
        return cls(spec_for(plan), client, out, plan=plan, clock=clock, verbose=verbose)

    def say(self, text: str) -> None:
        self.out.write(f"[orchestrate] {text}\n")
        self.out.flush()

    def bring_up_line(self) -> str:
        nodes = counted(len(self.spec.nodes), "node")
        return f"run {self.spec.run_id}: bringing up {nodes} (project {self.spec.project})"

    def render(self, run_dir: Path) -> Path:
        assert self.plan is not None
        return write_compose_file(self.plan, run_dir / "compose.json")

    def wait_ready(self) -> None:
        """Find every node's container by its labels and wait until it has started; record the
        nodes' addresses on the run's network, which a follower that attaches once a node is down
        could no longer ask the engine for (a peer an error names by address is named by node)."""
        self.containers = {n.name: find_node_container(self.client, self.spec.project, n) for n in self.spec.nodes}
        wait_until_started(self.containers, self.spec.ready_timeout_s)
        addresses: dict[str, str] = {}
        for name, container in self.containers.items():  # (each reloaded as it was waited for)
            addresses = addresses_with(addresses, name, container.attrs)
        record_event(self.spec.run_dir, NODE_ADDRESSES, addresses=addresses)

    def ready_lines(self, bring_up_s: float) -> list[str]:
        lines = []
        if self.plan is not None and self.plan.config.gpus_per_node:
            topology = gpu_topology(self.client, self.plan, self.containers[self.plan.nodes[0].name])
            lines.append(f"GPU topology seen from node0 (nvidia-smi topo -m):\n{topology}")
        return lines + [f"nodes up in {bring_up_s:.1f} s; torchrun runs on every node"]

    def follow(self, timeout_s: Optional[float] = None) -> RunResult:
        """Supervise the run to its end (or ``timeout_s``)."""
        self.supervisor = Supervisor(self.spec, self.client, self.out, active=self.active,
                                     containers=self.containers, clock=self.clock, verbose=self.verbose,
                                     records=self.records, job_began=self.job_began, attached_at=self.attached_at)
        return self.supervisor.follow(timeout_s)

    def wind_down(self, grace_s: float, stopped_by: str = "") -> RunResult:
        """After an interrupt: stop every node (SIGTERM, SIGKILL after ``grace_s``; a second
        interrupt kills at once) and follow them to their end; ``stopped_by``: who stopped them,
        left in the run's stop request for an attach that watches it."""
        if self.supervisor is None:
            return self.partial_result()
        return self.supervisor.wind_down(grace_s, stopped_by=stopped_by)

    def detach(self) -> None:
        """Stop following; the run goes on (``attach`` interrupted)."""
        if self.supervisor is not None:
            self.supervisor.close()

    def partial_result(self) -> RunResult:
        """What is known of a run that an error ended early (the teardown stops its nodes)."""
        if self.supervisor is None:
            return RunResult(self.spec.run_id, self.spec.run_dir, [], Timings())
        self.supervisor.close()
        results = [t.result for t in self.supervisor.trackers.values()]
        return RunResult(self.spec.run_id, self.spec.run_dir, results, Timings(),
                         faults=self.supervisor.fault_records())
