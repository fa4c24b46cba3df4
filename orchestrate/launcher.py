"""The apply step: carry out a :class:`JobPlan` on a Docker engine.

Bring the Compose project up, wait until every node resolves every other node, run
torchrun in every node concurrently with ``docker exec``, stream and save their output,
stop the others on the first failure, and tear everything down, whatever happens.
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from orchestrate.compose import (COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, NETWORK, NODE_RANK_LABEL,
                                 ComposeProject, project_network, write_compose_file)
from orchestrate.errors import NodeLookupError, NodesNotReadyError, OrchestrateError
from orchestrate.image import TORCH_LABEL
from orchestrate.faults import (OOM_COUNTER_ARGV, RESUMED_LINE, STEP_LINE, FaultAction, FaultSpec, apply_fault,
                                oom_kills, probe_node)
from orchestrate.outcome import JobOutcome, NodeResult, NodeState, Recovery, Timings
from orchestrate.output import NodeOutput, OutputLine, open_node_log
from orchestrate.plan import WORKSPACE_DIR, JobPlan, NodePlan

log = logging.getLogger(__name__)

# After the first failure, the other nodes get this long to end by themselves (so that
# their own torchrun reports are not lost) before they are killed.
FAILURE_GRACE_S = 3.0


def find_node_container(client: Any, project_name: str, node: NodePlan) -> Any:
    """Find a node's container by its Compose labels.

    Raises:
        NodeLookupError: When zero or several containers carry those labels.
    """
    labels = [
        f"{COMPOSE_PROJECT_LABEL}={project_name}",
        f"{COMPOSE_SERVICE_LABEL}={node.name}",
        f"{NODE_RANK_LABEL}={node.node_rank}",
    ]
    found = client.containers.list(all=True, filters={"label": labels})
    if len(found) != 1:
        raise NodeLookupError(
            f"expected one container labelled {', '.join(labels)}; found {len(found)}"
        )
    return found[0]


def exec_output(client: Any, container: Any, argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` in ``container`` to completion; return its exit code and output."""
    exec_id = client.api.exec_create(container.id, argv, stdout=True, stderr=True)["Id"]
    output = client.api.exec_start(exec_id, stream=False)
    code = client.api.exec_inspect(exec_id).get("ExitCode")
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    return (code if code is not None else -1), text


def wait_until_nodes_resolve(
    client: Any, containers: dict[str, Any], plan: JobPlan, timeout_s: float
) -> None:
    """Poll until every node resolves every node's name, or the deadline passes.

    Raises:
        NodesNotReadyError: Naming a node that still cannot resolve its peers.
    """
    names = [n.name for n in plan.nodes]
    pending = dict(containers)

    def check_all() -> bool:
        for name, container in list(pending.items()):
            code, _ = exec_output(client, container, ["getent", "hosts", *names])
            if code == 0:
                del pending[name]
        return not pending

    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_result(lambda ready: not ready),
    )
    try:
        retrying(check_all)
    except RetryError:
        raise NodesNotReadyError(
            f"nodes not ready after {timeout_s:.0f} s: {', '.join(sorted(pending))} cannot"
            f" resolve {', '.join(names)}"
        ) from None


def gpu_topology(client: Any, plan: JobPlan, container: Any = None) -> str:
    """``nvidia-smi topo -m`` as node0 sees its GPUs: in its container, or a throwaway one."""
    argv = ["nvidia-smi", "topo", "-m"]
    try:
        if container is not None:
            _, text = exec_output(client, container, argv)
            return text.rstrip()
        import docker.types

        request = docker.types.DeviceRequest(
            driver="nvidia", device_ids=list(plan.nodes[0].gpu_ids), capabilities=[["gpu"]]
        )
        output = client.containers.run(plan.config.image, argv, device_requests=[request], remove=True)
        return output.decode("utf-8", "replace").rstrip()
    except Exception as exc:  # the topology is information, never a reason to fail a run
        return f"(nvidia-smi topo -m unavailable: {str(exc).splitlines()[0][:200]})"


@dataclass
class _Event:
    node: str
    at: float
    line: Optional[str] = None
    exit_code: Optional[int] = None
    done: bool = False
    generation: int = 0


def _stream_node(
    client: Any, container: Any, node: NodePlan, events: "queue.Queue[_Event]",
    clock: Callable[[], float], generation: int = 0,
) -> None:
    """Run torchrun in one node and turn its output and exit into events (a thread).

    ``generation`` counts the launches on this node, so that the events of a superseded
    launch are recognised.
    """
    exit_code: Optional[int] = None
    try:
        exec_id = client.api.exec_create(
            container.id, list(node.torchrun_argv), stdout=True, stderr=True,
            environment=node.env, workdir=WORKSPACE_DIR,
        )["Id"]
        pending = b""
        for chunk in client.api.exec_start(exec_id, stream=True):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                events.put(_Event(node.name, clock(), line=raw.decode("utf-8", "replace"),
                                  generation=generation))
        if pending:
            events.put(_Event(node.name, clock(), line=pending.decode("utf-8", "replace"),
                              generation=generation))
        exit_code = client.api.exec_inspect(exec_id).get("ExitCode")
    except Exception as exc:  # the container was killed, or the engine went away
        log.debug("stream of %s ended: %s", node.name, exc)
    events.put(_Event(node.name, clock(), exit_code=exit_code, done=True, generation=generation))


class JobRunner:
    """Runs one planned job; see :func:`launch` for the whole sequence."""

    def __init__(
        self, plan: JobPlan, client: Any, out: IO[str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.plan = plan
        self.client = client
        self.out = out
        self.clock = clock
        self.containers: dict[str, Any] = {}
        self.killed: set[str] = set()
        self.results = {n.name: NodeResult(n) for n in plan.nodes}
        self.width = max(len(f"{n.name}/rank{max(n.global_ranks, default=0)}") for n in plan.nodes) + 1
        self.pending_faults: list[FaultSpec] = list(plan.config.faults)
        self.max_step: Optional[int] = None
        self.generation = {n.name: 0 for n in plan.nodes}
        self.job_restarts = 0
        self.recoveries: list[Recovery] = []

    def say(self, text: str) -> None:
        self.out.write(f"[orchestrate] {text}\n")
        self.out.flush()

    def fire_due_faults(self, elapsed_s: float) -> None:
        """Inject every fault whose time or training step has come."""
        for fault in [f for f in self.pending_faults if f.due(elapsed_s, self.max_step)]:
            self.pending_faults.remove(fault)
            network = None
            if fault.action is FaultAction.DISCONNECT:
                network = project_network(self.client, self.plan.project_name)
            try:
                apply_fault(self.client, self.containers[fault.node], fault.action, network)
            except Exception as exc:  # a node that already ended cannot be faulted
                self.say(f"fault {fault} could not be injected: {str(exc).splitlines()[0][:160]}")
                continue
            self.results[fault.node].fault = str(fault)
            step = "-" if self.max_step is None else self.max_step
            self.say(f"fault injected: {fault} ({elapsed_s:.1f} s into the job, at step {step})")

    def note_progress(self, line: OutputLine, at: float) -> None:
        """Follow the training step the workers report (for @step= faults and recoveries)."""
        if line.local_rank is None:
            return
        open_recovery = next((r for r in self.recoveries if r.resumed_at is None), None)
        resumed = RESUMED_LINE.search(line.text)
        if resumed and open_recovery is not None:
            open_recovery.resumed_from = int(resumed.group(1))
            return
        match = STEP_LINE.search(line.text)
        if not match:
            return
        step = int(match.group(1))
        if open_recovery is not None and open_recovery.resumed_from is not None:
            open_recovery.resumed_at = at
            self.max_step = step
            return
        self.max_step = max(self.max_step or 0, step)

    def node_died(self, name: str, exit_code: Optional[int]) -> bool:
        """Whether a node's torchrun ended because the node itself died (killed, restarted)."""
        if exit_code in (None, 137, 143) or self.results[name].fault:
            return True
        try:
            self.containers[name].reload()
            return self.containers[name].status != "running"
        except Exception:  # gone altogether
            return True

    def launch_node(self, node: NodePlan, events: "queue.Queue[_Event]") -> None:
        """Start torchrun on ``node`` (again); what earlier launches still report is stale."""
        self.generation[node.name] += 1
        threading.Thread(
            target=_stream_node,
            args=(self.client, self.containers[node.name], node, events, self.clock,
                  self.generation[node.name]),
            name=f"exec-{node.name}-{self.generation[node.name]}", daemon=True,
        ).start()

    def restart_job(self, dead: str, events: "queue.Queue[_Event]", at: float) -> None:
        """Bring a dead node back and relaunch torchrun on every node (elastic recovery).

        Every node restarts, not only the dead one: torch's c10d rendezvous lets a freshly
        started agent join only if rank 0's agent is fresh too (an agent that stays rank 0
        keeps its cached bootstrap address and never publishes it for the new round, so
        the newcomer waits forever). Fresh agents everywhere form a fresh rendezvous, and
        the workers resume from the latest checkpoint.
        """
        self.job_restarts += 1
        result = self.results[dead]
        cause = f"injected fault {result.fault}" if result.fault else "its death"
        self.recoveries.append(Recovery(dead, cause, at, step_before=self.max_step))
        self.say(f"{dead} died ({cause}); restarting every node so that it rejoins"
                 f" ({self.job_restarts}/{self.plan.config.max_restarts})")
        result.fault = ""
        for node in self.plan.nodes:
            self.containers[node.name].restart(timeout=0)
        wait_until_nodes_resolve(self.client, self.containers, self.plan, self.plan.config.ready_timeout_s)
        for node in self.plan.nodes:
            self.launch_node(node, events)

    def read_error_file(self, name: str, result: NodeResult) -> None:
        """Complete a failed node's root cause from its worker's structured error file."""
        cause = result.root_cause
        if cause is None or not cause.error_file or name in self.killed:
            return
        try:
            code, text = exec_output(self.client, self.containers[name], ["cat", cause.error_file])
        except Exception as exc:  # the node is gone: torchrun's own report has to do
            log.debug("reading %s on %s: %s", cause.error_file, name, exc)
            return
        if code == 0:
            cause.add_error_file(text)

    def probe_unresponsive(self, names: set[str]) -> None:
        """Find the nodes among ``names`` that cannot answer their peers, and say why."""
        for name in sorted(names):
            reason = probe_node(self.containers[name], NETWORK)
            if reason:
                self.results[name].unresponsive = reason
                self.say(f"{name} stopped answering: {reason}")

    def probe_oom(self) -> None:
        """Find the nodes whose processes the kernel OOM-killed (they explain their peers' failures)."""
        for name, container in self.containers.items():
            try:
                container.reload()
                state = container.attrs.get("State", {})
                counter = exec_output(self.client, container, OOM_COUNTER_ARGV)[1] if state.get("Running") else None
            except Exception as exc:  # gone: nothing more to learn from it
                log.debug("OOM probe of %s: %s", name, exc)
                continue
            kills = oom_kills(state, counter)
            if kills and not self.results[name].oom_kills:
                self.results[name].oom_kills = kills
                self.say(f"{name} was OOM-killed: the kernel killed {kills} process(es) at its memory limit")

    def find_containers(self) -> None:
        """Look up every node's container."""
        for node in self.plan.nodes:
            self.containers[node.name] = find_node_container(
                self.client, self.plan.project_name, node
            )

    def kill(self, names: list[str]) -> None:
        """Kill the named nodes' containers, ignoring those already gone."""
        for name in names:
            self.killed.add(name)
            container = self.containers.get(name)
            if container is None:
                continue
            try:
                container.kill()
            except Exception as exc:  # already stopped or removed
                log.debug("kill %s: %s", name, exc)

    def end_node(self, event: _Event, output: NodeOutput, started: float) -> bool:
        """Record how a node's torchrun ended; return whether it failed by itself."""
        result = self.results[event.node]
        result.wall_s = event.at - started
        result.ended_at = event.at
        if event.exit_code == 0:
            result.state, result.exit_code = NodeState.SUCCEEDED, 0
            return False
        if event.node in self.killed:
            result.state, result.exit_code = NodeState.STOPPED, event.exit_code
            return False
        result.state, result.exit_code = NodeState.FAILED, event.exit_code
        result.root_cause = output.root_cause()
        result.last_lines = output.last_lines(result.root_cause.rank if result.root_cause else None)
        self.read_error_file(event.node, result)
        return True

    def stop_others_after(self, failed: str, running: set[str], at: float) -> float:
        """After the first failure: name and stop hung nodes now, the others after a grace.

        Returns:
            When the nodes still running are to be killed.
        """
        if self.plan.config.memory_per_node:
            self.probe_oom()
        self.probe_unresponsive(running)
        # A hung or cut-off node has no report to finish: stop it now.
        self.kill([n for n in running if self.results[n].unresponsive])
        if not [n for n in running if n not in self.killed]:
            return at
        self.say(f"{failed} failed; stopping the other nodes in {FAILURE_GRACE_S:.0f} s")
        return at + FAILURE_GRACE_S

    def run_nodes(self, run_dir: Path, timings: Timings) -> None:
        """Run torchrun on every node at once; return when every node has ended."""
        events: "queue.Queue[_Event]" = queue.Queue()
        outputs = {n.name: NodeOutput(n, open_node_log(run_dir, n)) for n in self.plan.nodes}
        started = self.clock()
        for node in self.plan.nodes:
            self.results[node.name].state = NodeState.STOPPED
            self.launch_node(node, events)
        running = {n.name for n in self.plan.nodes}
        kill_at: Optional[float] = None
        try:
            while running:
                if self.pending_faults:
                    self.fire_due_faults(self.clock() - started)
                if kill_at is not None and self.clock() >= kill_at:
                    self.kill(sorted(running))
                    kill_at = float("inf")
                try:
                    event = events.get(timeout=0.2)
                except queue.Empty:
                    continue
                output = outputs[event.node]
                if event.line is not None:
                    line = output.add(event.line, event.at)
                    self.note_progress(line, event.at)
                    self.out.write(line.render(self.width) + "\n")
                    self.out.flush()
                    continue
                if event.generation != self.generation[event.node]:
                    continue  # a launch that a restart superseded
                if (self.plan.config.elastic and event.exit_code != 0 and kill_at is None
                        and self.job_restarts < self.plan.config.max_restarts
                        and self.node_died(event.node, event.exit_code)):
                    self.restart_job(event.node, events, event.at)
                    continue
                running.discard(event.node)
                failed = self.end_node(event, output, started)
                if failed and kill_at is None:
                    kill_at = self.stop_others_after(event.node, running, event.at)
        finally:
            for output in outputs.values():
                output.log_file.close()
            timings.job_s = self.clock() - started
            timings.recoveries = list(self.recoveries)
            # torchrun starts workers only once every node joined: the first worker line
            # anywhere marks the end of the rendezvous (plus the workers' start-up).
            firsts = [o.first_worker_line_at for o in outputs.values() if o.first_worker_line_at]
            if firsts:
                timings.rendezvous_s = min(firsts) - started


def new_run_dir(plan: JobPlan) -> Path:
    """Create and return the directory that holds the run's logs and Compose file."""
    run_dir = plan.config.runs_dir / plan.run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def launch(
    plan: JobPlan,
    client: Any,
    *,
    out: IO[str] = sys.stdout,
    compose_factory: Callable[[str, Path], ComposeProject] = ComposeProject,
    clock: Callable[[], float] = time.monotonic,
) -> JobOutcome:
    """Carry out ``plan``: bring up, run, report, tear down.

    Args:
        plan: What to run (from :func:`orchestrate.plan.make_plan`).
        client: A Docker SDK client.
        out: Where worker output and progress go.
        compose_factory: Makes the Compose project driver (a fake one in tests).
        clock: Monotonic clock.

    Returns:
        The outcome; it is a failure, not an exception, when a node fails.

    Ctrl-C (KeyboardInterrupt) stops every node and tears down; the outcome then says it
    was interrupted. A failure to bring the nodes up is reported in the outcome too.
    """
    run_dir = new_run_dir(plan)
    compose = compose_factory(plan.project_name, write_compose_file(plan, run_dir / "compose.json"))
    runner = JobRunner(plan, client, out, clock)
    timings = Timings()
    outcome = JobOutcome(plan.run_id, run_dir, list(runner.results.values()), timings)
    say = runner.say
    outcome.image_torch = image_label(client, plan.image, TORCH_LABEL)
    t0 = clock()
    try:
        say(f"run {plan.run_id}: bringing up {len(plan.nodes)} nodes (project {plan.project_name})")
        compose.up()
        runner.find_containers()
        wait_until_nodes_resolve(client, runner.containers, plan, plan.config.ready_timeout_s)
        timings.bring_up_s = clock() - t0
        if plan.config.gpus_per_node:
            say("GPU topology seen from node0 (nvidia-smi topo -m):\n"
                + gpu_topology(client, plan, runner.containers[plan.nodes[0].name]))
        say(f"nodes up in {timings.bring_up_s:.1f} s; starting torchrun on every node")
        runner.run_nodes(run_dir, timings)
    except KeyboardInterrupt as exc:
        outcome.interrupted = True
        outcome.signal_number = int(getattr(exc, "signum", 2))
        say("interrupted: stopping every node")
        runner.kill(list(runner.containers))
    except OrchestrateError as exc:
        outcome.error, outcome.error_exit_code = str(exc), exc.exit_code
    except docker_errors() as exc:  # the engine refused something: an environment problem
        outcome.error = f"engine error: {str(exc).splitlines()[0][:300]}"
    finally:
        t1 = clock()
        if plan.config.keep:
            say(f"--keep: leaving project {plan.project_name} running;"
                f" remove it with: docker compose -p {plan.project_name} down -v")
        else:
            outcome.teardown_error = teardown(compose, say)
        timings.teardown_s = clock() - t1
    return outcome


def image_label(client: Any, image: str, label: str) -> str:
    """One label of an image, "" when it has none or the engine cannot say."""
    try:
        return client.images.get(image).labels.get(label, "")
    except docker_errors() as exc:
        log.debug("labels of %s: %s", image, exc)
        return ""


def docker_errors() -> tuple[type[BaseException], ...]:
    """The docker SDK's exception types (imported late: the launcher takes the client given)."""
    import docker.errors

    return (docker.errors.DockerException,)


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
