"""Follow a run through the engine: stream its nodes, drive their states, report the ending.

The nodes run by themselves (their main process is torchrun, see ``orchestrate/node/main.py``); the
:class:`Supervisor` is a client that may come and go. It reads:

- every node's container log (``docker logs -f``), rank-prefixed by torchrun;
- engine events for the run's containers, by label (``die`` with the exit code, ``start``,
  ``oom``);
- the run directory on the host: torchrun's per-worker error files (``--log-dir``) and the
  workers' progress channel (``orchestrate.progress``).

Each node moves through :class:`~orchestrate.states.NodePhase`. An *active* supervisor (the
foreground launcher, or ``attach`` of a detached run) also acts: it injects faults when their
time or step comes, ends the job on the first failure (the others get a grace period,
hung nodes are killed at once) and restarts the nodes of an elastic job. A *passive* one
(a second ``attach``) only watches.
"""
from __future__ import annotations
from orchestrate.engine.client import engine_time
from orchestrate.outcome.root_cause import error_file_on_host
from orchestrate.outcome.root_cause import latest_error_files

import logging
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional

from orchestrate.engine.labels import COMPOSE_SERVICE_LABEL, RUN_ID_LABEL, project_network
from orchestrate.plan.layout import NETWORK
from orchestrate.engine.client import exec_output, stream_lines
from orchestrate.outcome.events import record_event
from orchestrate.faults.inject import OOM_COUNTER_ARGV, apply_fault, oom_kills, probe_node
from orchestrate.faults.spec import FaultAction, FaultSpec
from orchestrate.outcome.model import JobOutcome, NodeResult, Recovery, Timings
from orchestrate.supervise.worker_lines import NodeOutput, OutputLine
from orchestrate.outcome.root_cause import RootCause
from orchestrate.plan.layout import PROGRESS_SUBDIR, RUN_DIR_MOUNT
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.progress import ProgressReader, mark_fired
from orchestrate.outcome.states import NodePhase, advance

log = logging.getLogger(__name__)

# After the first failure, the other nodes get this long to end by themselves (so that
# their own torchrun reports are not lost) before they are killed.
FAILURE_GRACE_S = 3.0
# A node's exit is final once its log stream has ended too, or this long after its exit.
LOG_DRAIN_S = 3.0
# How long a run with @step faults may run with no progress reported before we say so.
NO_PROGRESS_WARNING_S = 30.0
_TIMESTAMPED = re.compile(rb"^(\d{4}-\d\d-\d\dT[\d:.]+Z) ?(.*)$", re.S)


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
    ready_timeout_s: float = 60.0


@dataclass
class _Event:
    kind: str  # "line", "log-end" or "engine"
    node: str
    at: float
    line: str = ""
    stream: int = 0
    action: str = ""
    attrs: dict = field(default_factory=dict)
    time: float = 0.0


@dataclass
class NodeTracker:
    """One node as the supervisor follows it."""

    plan: NodePlan
    container: Any
    result: NodeResult
    output: NodeOutput
    stream: int = 0
    log_open: bool = False
    exited_at: Optional[float] = None
    exit_code: Optional[int] = None
    first_started: Optional[float] = None  # engine time of the container's first start we saw

    @property
    def phase(self) -> NodePhase:
        return self.result.state

    def move(self, phase: NodePhase) -> None:
        self.result.state = advance(self.result.state, phase)


class Supervisor:
    """Follows one run to its end; see the module docstring."""

    def __init__(self, spec: RunSpec, client: Any, out: IO[str], *, active: bool,
                 containers: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.client = client
        self.out = out
        self.active = active
        self.clock = clock
        self.events: "queue.Queue[_Event]" = queue.Queue()
        self.width = max(len(f"{n.name}/rank{max(n.global_ranks, default=9)}") for n in spec.nodes) + 1
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        self.trackers = {
            n.name: NodeTracker(n, containers[n.name], NodeResult(n),
                                NodeOutput(n, open(spec.run_dir / f"{n.name}.log", "w", encoding="utf-8")))
            for n in spec.nodes
        }
        self.pending_faults = list(spec.faults) if active else []
        self.progress = ProgressReader(spec.run_dir / PROGRESS_SUBDIR)
        self.max_step: Optional[int] = None
        self.progress_seen = False
        self.warned_no_progress = False
        self.recoveries: list[Recovery] = []
        self.job_restarts = 0
        self.kill_at: Optional[float] = None
        self.first_failure_seen = False
        self.started_at = clock()
        self.first_worker_at: Optional[float] = None
        self.ranks_seen: set[int] = set()  # ranks whose first line was recorded (since the last restart)
        self.event_stream: Any = None
        self.stop = threading.Event()

    # Output ------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.out.write(f"[orchestrate] {text}\n")
        self.out.flush()

    def record(self, kind: str, **fields: Any) -> None:
        """Append one event to the run's event file (events.jsonl)."""
        record_event(self.spec.run_dir, kind, **fields)

    # Sources -----------------------------------------------------------------------------

    def watch_engine(self) -> None:
        """Engine events of this run's containers, by label, into the queue (a thread)."""
        try:
            self.event_stream = self.client.events(
                decode=True, since=int(time.time()) - 1,
                filters={"type": "container", "label": f"{RUN_ID_LABEL}={self.spec.run_id}"})
            for event in self.event_stream:
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                node = attrs.get(COMPOSE_SERVICE_LABEL, "")
                if node in self.trackers:
                    self.events.put(_Event("engine", node, self.clock(), action=event.get("Action", ""),
                                           attrs=attrs, time=float(event.get("time", 0))))
        except Exception as exc:  # the stream was closed, or the engine went away
            if not self.stop.is_set():
                log.debug("engine events ended: %s", exc)

    def stream_logs(self, tracker: NodeTracker, since: Optional[float] = None) -> None:
        """Follow a node's container log (from the start, or since a restart) in a thread."""
        self.show(tracker, tracker.output.end(time.time()), self.clock())  # what the last stream left unfinished
        tracker.stream += 1
        tracker.log_open = True
        threading.Thread(target=self._read_log, args=(tracker.container, tracker.plan.name, tracker.stream, since),
                         name=f"log-{tracker.plan.name}-{tracker.stream}", daemon=True).start()

    def _read_log(self, container: Any, node: str, stream: int, since: Optional[float]) -> None:
        kwargs: dict[str, Any] = {"stream": True, "follow": True, "timestamps": True}
        if since is not None:
            kwargs["since"] = since
        try:
            for raw in stream_lines(container.logs(**kwargs)):
                self._put_line(node, stream, raw)
        except Exception as exc:  # the container went away before its log could be asked for
            log.debug("log stream of %s ended: %s", node, exc)
        self.events.put(_Event("log-end", node, self.clock(), stream=stream))

    def _put_line(self, node: str, stream: int, raw: bytes) -> None:
        match = _TIMESTAMPED.match(raw)
        text = (match.group(2) if match else raw).decode("utf-8", "replace").rstrip("\r")
        stamp = engine_time(match.group(1).decode()) if match else None
        self.events.put(_Event("line", node, self.clock(), line=text, stream=stream, time=stamp or time.time()))

    # The loop ----------------------------------------------------------------------------

    def follow(self) -> JobOutcome:
        """Follow the run until every node has ended; return how it ended.

        KeyboardInterrupt propagates: the caller decides whether that stops the run (the
        foreground launcher) or only detaches (``attach``).
        """
        threading.Thread(target=self.watch_engine, name="engine-events", daemon=True).start()
        for tracker in self.trackers.values():
            self.sync(tracker)
            self.stream_logs(tracker)
        self.announce_step_faults()
        try:
            while not all(t.phase.final for t in self.trackers.values()):
                self.tick()
                try:
                    event = self.events.get(timeout=0.2)
                except queue.Empty:
                    continue
                self.handle(event)
        finally:
            self.stop.set()
            if self.event_stream is not None:
                try:
                    self.event_stream.close()
                except Exception:  # already closed
                    pass
            for tracker in self.trackers.values():
                tracker.output.log_file.close()
        return self.outcome()

    def sync(self, tracker: NodeTracker) -> None:
        """Take a node's phase from its container as the supervisor starts following it."""
        tracker.container.reload()
        state = tracker.container.attrs.get("State", {})
        tracker.first_started = engine_time(state.get("StartedAt", ""))
        if tracker.container.status in ("running", "paused", "restarting"):
            tracker.move(NodePhase.STARTING)
        elif tracker.container.status in ("exited", "dead"):
            tracker.move(NodePhase.STARTING)
            tracker.exit_code = state.get("ExitCode")
            tracker.exited_at = self.clock()
            if state.get("OOMKilled"):
                tracker.result.oom_kills = max(tracker.result.oom_kills, 1)

    def tick(self) -> None:
        now = self.clock()
        self.read_progress(now)
        if self.pending_faults:
            self.fire_due_faults(now - self.started_at)
        if self.kill_at is not None and now >= self.kill_at:
            self.kill([t.plan.name for t in self.trackers.values() if not t.phase.final])
            self.kill_at = None
        for tracker in self.trackers.values():
            if (tracker.exited_at is not None and not tracker.phase.final
                    and tracker.phase is not NodePhase.RESTARTING and now - tracker.exited_at > LOG_DRAIN_S):
                self.finish(tracker)
        if (self.active and not self.warned_no_progress and not self.progress_seen
                and any(f.at_step is not None for f in self.pending_faults)
                and self.first_worker_at is not None and now - self.first_worker_at > NO_PROGRESS_WARNING_S):
            self.warned_no_progress = True
            steps = " ".join(str(f) for f in self.pending_faults if f.at_step is not None)
            self.say(f"no worker has reported a training step in {NO_PROGRESS_WARNING_S:.0f} s: {steps} cannot"
                     " fire; report steps with orchestrate.progress.report(step) in the training loop")

    def handle(self, event: _Event) -> None:
        tracker = self.trackers[event.node]
        if event.kind == "line":
            if event.stream != tracker.stream:
                return  # a stream that a restart superseded
            self.show(tracker, tracker.output.add(event.line, event.time), event.at)
        elif event.kind == "log-end":
            if event.stream == tracker.stream:
                tracker.log_open = False
                self.show(tracker, tracker.output.end(event.time), event.at)
                if tracker.exited_at is not None and tracker.phase is not NodePhase.RESTARTING:
                    self.finish(tracker)
        else:
            self.handle_engine(tracker, event)

    def show(self, tracker: NodeTracker, lines: list[OutputLine], at: float) -> None:
        """Print a node's lines; its workers' first lines mark ranks started and the node running."""
        for line in lines:
            if line.global_rank is not None and line.global_rank not in self.ranks_seen:
                self.ranks_seen.add(line.global_rank)
                self.record("rank-started", node=tracker.plan.name, rank=line.global_rank)
            if line.local_rank is not None and tracker.phase is NodePhase.STARTING:
                tracker.move(NodePhase.RUNNING)
                self.record("node-running", node=tracker.plan.name)
                if self.first_worker_at is None:
                    self.first_worker_at = at
            self.out.write(line.render(self.width) + "\n")
        self.out.flush()

    def handle_engine(self, tracker: NodeTracker, event: _Event) -> None:
        action = event.action
        if action == "oom":
            tracker.result.oom_kills += 1
            self.record("oom", node=tracker.plan.name)
        elif action == "start" and tracker.phase in (NodePhase.RESTARTING, NodePhase.CREATED):
            # A restarted container's log goes on from the restart; a container that was only
            # created when we began following has had no log stream worth the name yet.
            restarted = tracker.phase is NodePhase.RESTARTING
            tracker.move(NodePhase.STARTING)
            if restarted or not tracker.log_open:
                self.stream_logs(tracker, since=event.time or None)
        elif action == "die" and tracker.phase not in (NodePhase.RESTARTING,) and not tracker.phase.final:
            code = event.attrs.get("exitCode")
            tracker.exit_code = int(code) if code not in (None, "") else None
            tracker.exited_at = event.at
            self.record("node-exited", node=tracker.plan.name, exit_code=tracker.exit_code)
            if self.should_restart(tracker):
                self.restart_job(tracker)
            elif not tracker.log_open:
                self.finish(tracker)

    # Endings -----------------------------------------------------------------------------

    def finish(self, tracker: NodeTracker) -> None:
        """A node ended: record how, and on the first failure start ending the job."""
        result = tracker.result
        result.exit_code = tracker.exit_code
        result.ended_at = tracker.exited_at or self.clock()
        result.wall_s = result.ended_at - self.started_at
        if result.exit_code == 0:
            tracker.move(NodePhase.SUCCEEDED)
            return
        if result.killed_by_launcher:
            tracker.move(NodePhase.STOPPED)
            return
        if result.exit_code == 75:
            tracker.move(NodePhase.ORPHANED)
            return
        tracker.move(NodePhase.FAILED)
        result.root_cause = tracker.output.root_cause()
        result.last_lines = tracker.output.last_lines(result.root_cause.rank if result.root_cause else None)
        self.read_error_file(tracker)
        self.record("node-failed", node=tracker.plan.name, exit_code=result.exit_code,
                    rank=result.root_cause.rank if result.root_cause else None)
        if self.active and not self.first_failure_seen:
            self.first_failure_seen = True
            self.stop_others_after(tracker.plan.name)

    def read_error_file(self, tracker: NodeTracker) -> None:
        """Complete a failed node's root cause from the worker's error file on the host mount."""
        result = tracker.result
        cause = result.root_cause
        files = latest_error_files(self.spec.run_dir, tracker.plan.name)
        path: Optional[Path] = None
        if cause is not None and cause.error_file.startswith(RUN_DIR_MOUNT):
            path = error_file_on_host(self.spec.run_dir, cause.error_file)
        elif cause is not None:
            path = files.get(cause.local_rank)
        elif files:
            local, path = min(files.items())
            rank = tracker.plan.global_ranks[local] if local < len(tracker.plan.global_ranks) else local
            cause = result.root_cause = RootCause(rank, local, result.exit_code)
        if cause is not None and path is not None and path.exists():
            cause.add_error_file(path.read_text(errors="replace"))

    def stop_others_after(self, failed: str) -> None:
        """After the first failure: name and stop hung nodes now, the others after a grace."""
        running = [t for t in self.trackers.values() if not t.phase.final]
        if self.spec.memory_limited:
            self.probe_oom()
        for tracker in running:
            reason = probe_node(tracker.container, NETWORK)
            if reason:
                tracker.result.unresponsive = reason
                self.say(f"{tracker.plan.name} stopped answering: {reason}")
                self.record("node-unresponsive", node=tracker.plan.name, reason=reason)
        self.kill([t.plan.name for t in running if t.result.unresponsive])
        if any(not t.result.unresponsive for t in running):
            self.say(f"{failed} failed; stopping the other nodes in {FAILURE_GRACE_S:.0f} s")
            self.kill_at = self.clock() + FAILURE_GRACE_S

    def probe_oom(self) -> None:
        """Find nodes the kernel OOM-killed in (they explain their peers' failures)."""
        for tracker in self.trackers.values():
            try:
                tracker.container.reload()
                state = tracker.container.attrs.get("State", {})
                counter = exec_output(self.client, tracker.container, OOM_COUNTER_ARGV)[1] \
                    if state.get("Running") else None
            except Exception as exc:  # gone: nothing more to learn from it
                log.debug("OOM probe of %s: %s", tracker.plan.name, exc)
                continue
            kills = max(oom_kills(state, counter), tracker.result.oom_kills)
            if kills and not tracker.result.oom_reported:
                tracker.result.oom_kills = kills
                tracker.result.oom_reported = True
                self.say(f"{tracker.plan.name} was OOM-killed: the kernel killed {kills} process(es) at its memory limit")

    def kill(self, names: list[str]) -> None:
        """Kill the named nodes' containers (the launcher ends them), ignoring those gone."""
        import docker.errors

        for name in names:
            tracker = self.trackers[name]
            tracker.result.killed_by_launcher = True
            try:
                if tracker.container.status == "paused" or tracker.result.unresponsive.startswith("its container is paused"):
                    tracker.container.unpause()
                tracker.container.kill()
            except docker.errors.APIError as exc:  # already stopped or removed
                log.debug("kill %s: %s", name, exc)
            self.record("node-killed", node=name)

    def stop_all(self) -> None:
        """Kill every node that still runs and mark it stopped (Ctrl-C of the foreground run)."""
        live = [t for t in self.trackers.values() if not t.phase.final]
        self.kill([t.plan.name for t in live])
        for tracker in live:
            tracker.move(NodePhase.STOPPED)

    # Faults and progress -----------------------------------------------------------------

    def announce_step_faults(self) -> None:
        step_faults = [f for f in self.pending_faults if f.at_step is not None]
        if step_faults:
            self.say(f"{' '.join(str(f) for f in step_faults)}: fires when a worker reports that step through"
                     " orchestrate.progress.report(step) (app/ does, every step); ranks wait at that step"
                     " until the fault is injected")

    def read_progress(self, now: float) -> None:
        for record in self.progress.poll():
            self.progress_seen = True
            open_recovery = next((r for r in self.recoveries if r.resumed_at is None), None)
            if record.resumed is not None:
                if open_recovery is not None:
                    open_recovery.resumed_from = record.resumed
                continue
            if record.step is None:
                continue
            if open_recovery is not None and open_recovery.resumed_from is not None:
                open_recovery.resumed_at = now
                self.record("resumed", node=open_recovery.node, step=record.step,
                            recovery_s=open_recovery.recovery_s, steps_lost=open_recovery.steps_lost)
                self.max_step = record.step
                continue
            self.max_step = max(self.max_step or 0, record.step)

    def fire_due_faults(self, elapsed_s: float) -> None:
        """Inject every fault whose time or training step has come."""
        for fault in [f for f in self.pending_faults if f.due(elapsed_s, self.max_step)]:
            self.pending_faults.remove(fault)
            tracker = self.trackers[fault.node]
            try:
                network = project_network(self.client, self.spec.project) \
                    if fault.action is FaultAction.DISCONNECT else None
                apply_fault(self.client, tracker.container, fault.action, network)
            except Exception as exc:  # a node that already ended cannot be faulted
                self.say(f"fault {fault} could not be injected: {str(exc).splitlines()[0][:160]}")
                self.record("fault-failed", node=fault.node, spec=str(fault), error=str(exc)[:500])
                continue
            finally:
                if fault.at_step is not None:
                    mark_fired(self.spec.run_dir / PROGRESS_SUBDIR, fault.at_step)
            tracker.result.fault = str(fault)
            step = "-" if self.max_step is None else self.max_step
            self.say(f"fault injected: {fault} ({elapsed_s:.1f} s into the job, at step {step})")
            self.record("fault", node=fault.node, spec=str(fault), action=fault.action.value, step=self.max_step)

    # Elastic recovery --------------------------------------------------------------------

    def should_restart(self, tracker: NodeTracker) -> bool:
        """Whether a node's exit is a death an elastic job recovers from."""
        if not (self.active and self.spec.elastic and tracker.exit_code != 0
                and self.job_restarts < self.spec.max_restarts and self.kill_at is None
                and not self.first_failure_seen):
            return False
        return tracker.exit_code in (None, 137, 143) or bool(tracker.result.fault)

    def restart_job(self, dead: NodeTracker) -> None:
        """Restart every node so that the dead one rejoins (elastic recovery).

        Every node restarts, not only the dead one: torch's c10d rendezvous lets a freshly
        started agent join only if rank 0's agent is fresh too (an agent that stays rank 0
        keeps its cached bootstrap address and never publishes it for the new round, so
        the newcomer waits forever). Fresh agents everywhere form a fresh rendezvous, and
        the workers resume from the latest checkpoint.
        """
        self.job_restarts += 1
        result = dead.result
        cause = f"injected fault {result.fault}" if result.fault else "its death"
        self.recoveries.append(Recovery(dead.plan.name, cause, self.clock(), step_before=self.max_step))
        self.say(f"{dead.plan.name} died ({cause}); restarting every node so that it rejoins"
                 f" ({self.job_restarts}/{self.spec.max_restarts})")
        self.record("restart", node=dead.plan.name, cause=cause, step=self.max_step)
        self.ranks_seen.clear()
        result.fault = ""
        for tracker in self.trackers.values():
            tracker.move(NodePhase.RESTARTING)
            tracker.exited_at = tracker.exit_code = None
        for tracker in self.trackers.values():
            tracker.container.restart(timeout=0)

    # The outcome -------------------------------------------------------------------------

    def outcome(self) -> JobOutcome:
        """How the run ended, timed by the engine: containers' start and finish times and the
        log lines' own timestamps, so that ``attach`` after the end reports what ``run`` did."""
        timings = Timings(job_s=self.clock() - self.started_at, recoveries=list(self.recoveries))
        starts, ends, created = [], [], []
        for tracker in self.trackers.values():
            try:
                tracker.container.reload()
                state = tracker.container.attrs.get("State", {})
            except Exception as exc:  # removed meanwhile: the supervisor's own clock must do
                log.debug("timing %s: %s", tracker.plan.name, exc)
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
        if starts and len(ends) == len(self.trackers):
            timings.job_s = max(ends) - min(starts)
        if created and len(created) == len(starts):
            timings.bring_up_s = max(0.0, max(starts) - min(created))
        firsts = [t.output.first_worker_line_at for t in self.trackers.values() if t.output.first_worker_line_at]
        if firsts and starts:
            timings.rendezvous_s = max(0.0, min(firsts) - min(starts))
        return JobOutcome(self.spec.run_id, self.spec.run_dir, [t.result for t in self.trackers.values()], timings)
