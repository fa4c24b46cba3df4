"""Run a plan on the simulated Slurm cluster: bring it up, ``sbatch``, follow, report, tear down.

The job's state comes from Slurm itself (``scontrol show job``, ``scontrol show node``); its
output is the file Slurm writes (``StdOut``), followed in the batch host; the workers' root
cause comes from torchrun's error files in the run directory, as with Compose.
"""
from __future__ import annotations

import json
import logging
import queue
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional

from orchestrate.engine.client import docker_errors, exec_output, stream_lines
from orchestrate.engine.compose_cli import ComposeProject
from orchestrate.engine.images import DOCKER_DIR, build_context, build_lock, docker_build, image_exists
from orchestrate.errors import NodesNotReadyError, OrchestrateError
from orchestrate.faults.inject import inject
from orchestrate.faults.scheduler import FaultScheduler
from orchestrate.faults.spec import FaultSpec
from orchestrate.launch.heartbeat import Heartbeat
from orchestrate.launch.run import teardown
from orchestrate.launch.run_dir import prepare_run_dir
from orchestrate.outcome.events import record_event
from orchestrate.outcome.root_cause import RootCause, is_collateral, latest_error_files
from orchestrate.plan.layout import HEARTBEAT_FILE, PROGRESS_SUBDIR, RUN_DIR_MOUNT, WORKSPACE_DIR
from orchestrate.plan.model import JobPlan, NodePlan
from orchestrate.report.page import end_record
from orchestrate.slurm.cluster import (
    CONTROLLER,
    SLURM_DIR,
    parse_scontrol,
    render_slurm_compose,
    sinfo_idle,
    slurm_conf,
)
from orchestrate.slurm.script import BatchOptions, render_sbatch
from orchestrate.supervise.progress import ProgressWatch
from orchestrate.supervise.worker_lines import WorkerLines

log = logging.getLogger(__name__)

FINAL_JOB_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                    "BOOT_FAIL", "DEADLINE"}
SLURM_REPOSITORY = "ddp-compose-slurm"
# How long the controller may fail to answer for the job before the run gives up on it.
CONTROLLER_SILENCE_S = 30.0
# "T: [R|L]:text" (srun --label, then torchrun's prefix), or "T: text" (torchrun's agent).
_LABELLED = re.compile(r"^\s*(?P<task>\d+): (?P<text>.*)$")


def slurm_image(client: Any, base: str, progress: Callable[[str], None]) -> str:
    """The Slurm variant of ``base`` (built once per base image id)."""
    tag = f"{SLURM_REPOSITORY}:{client.images.get(base).id.split(':')[-1][:12]}"
    with build_lock():
        if image_exists(client, tag):
            return tag
        progress(f"building {tag}: {base} + Debian's slurmctld, slurmd, slurm-client and munge")
        docker_build(client, build_context({"Dockerfile": DOCKER_DIR / "slurm" / "Dockerfile"}), tag,
                     buildargs={"BASE_IMAGE": base}, progress=progress)
    return tag


class JobLines:
    """The job's output, as ``srun --label`` writes it, in whole lines with the node and global
    rank in front, as ``run`` shows them. ``srun --label`` puts the task id first: the node's
    index when the script runs one task per node (ours), else just the task (a user's script
    may run one per process); what follows is torchrun's output, joined as a node's is."""

    def __init__(self, plan: JobPlan, width: int, tasks_are_nodes: bool = True) -> None:
        self.plan = plan
        self.width = width
        self.tasks_are_nodes = tasks_are_nodes
        self.tasks: dict[int, WorkerLines] = {}

    def feed(self, raw: str) -> list[str]:
        """The rendered lines that ``raw``, one line of the output file, completes."""
        match = _LABELLED.match(raw)
        if not match:
            return ["[slurm]".ljust(self.width + 2) + " " + raw]
        task = int(match["task"])
        if task not in self.tasks:
            self.tasks[task] = WorkerLines(self.task_node(task))
        return [line.render(self.width) for line in self.tasks[task].feed(match["text"])]

    def flush(self) -> list[str]:
        """The lines the workers left unfinished (the job has ended)."""
        return [line.render(self.width) for lines in self.tasks.values() for line in lines.flush()]

    def task_node(self, task: int) -> NodePlan:
        """The node a task stands for; a task of a user's script is named for itself, and its
        workers' ranks are torchrun's."""
        if self.tasks_are_nodes and task < len(self.plan.nodes):
            return self.plan.nodes[task]
        return NodePlan(name=f"{'node' if self.tasks_are_nodes else 'task'}{task}", node_rank=task,
                        global_ranks=(), gpu_ids=(), process_gpus=(), torchrun_argv=(), env={})


@dataclass
class SlurmOutcome:
    """How the Slurm job ended, in Slurm's words and the workers'."""

    run_id: str
    run_dir: Path
    job_id: str = ""
    job: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    root_cause: Optional[RootCause] = None
    root_node: str = ""
    root_is_collateral: bool = False  # the workers' error is a peer's closed connection
    faults: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bring_up_s: float = 0.0
    interrupted: bool = False
    signal_number: int = 2
    error: str = ""
    error_exit_code: int = 2
    teardown_error: str = ""

    @property
    def state(self) -> str:
        return self.job.get("JobState", "")

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and not self.error and not self.interrupted

    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + self.signal_number
        if self.error:
            return self.error_exit_code
        if not self.succeeded:
            return 1
        return 2 if self.teardown_error else 0


def format_slurm_summary(outcome: SlurmOutcome) -> str:
    """The table and verdict printed at the end of a Slurm run."""
    from orchestrate.text import format_table

    lines = ["", f"=== run {outcome.run_id} summary (Slurm job {outcome.job_id or '-'}) ==="]
    rows = [(name, info.get("State", "?"), info.get("Reason", "") or "-") for name, info in sorted(outcome.nodes.items())]
    if rows:
        lines += format_table(("node", "Slurm state", "reason"), rows)
    job = outcome.job
    if job:
        lines.append(f"job {outcome.job_id}: {job.get('JobState', '?')} (reason {job.get('Reason', '-')}),"
                     f" exit code {job.get('ExitCode', '?')}, on {job.get('NodeList', '-')},"
                     f" run time {job.get('RunTime', '-')}")
    lines.append(f"bring-up {outcome.bring_up_s:.1f} s | job {outcome.seconds:.1f} s")
    for fault in outcome.faults:
        lines.append(f"fault injected: {fault}")
    lines.append(f"logs: {outcome.run_dir}")
    if outcome.teardown_error:
        lines.append(f"TEARDOWN FAILED: {outcome.teardown_error}")
    if outcome.succeeded:
        lines.append(f"SUCCEEDED: Slurm job {outcome.job_id} COMPLETED, exit code {job.get('ExitCode', '0:0')}")
        return "\n".join(lines)
    if outcome.interrupted:
        lines.append(f"INTERRUPTED: Slurm job {outcome.job_id or '-'} cancelled, every node stopped")
    elif outcome.error:
        lines.append(f"FAILED: {outcome.error}")
    else:
        down = [f"{n} {i.get('State')} ({i.get('Reason') or 'no reason given'})" for n, i in sorted(outcome.nodes.items())
                if any(s in i.get("State", "") for s in ("DOWN", "FAIL", "DRAIN", "NOT_RESPONDING"))]
        lines.append(f"FAILED: Slurm job {outcome.job_id} {outcome.state} (reason {job.get('Reason', '-')},"
                     f" exit code {job.get('ExitCode', '?')})" + (f"; Slurm reports {', '.join(down)}" if down else ""))
        cause = outcome.root_cause
        if cause is not None:
            # A peer's closed connection only follows from what Slurm reported: say so, briefly.
            label = "workers, as a result" if outcome.root_is_collateral and (down or outcome.faults) else "workers"
            lines.append(f"  {label}: {outcome.root_node} rank {cause.rank}:"
                         f" {cause.exception or 'exit code ' + str(cause.exit_code)}")
            if cause.traceback and label == "workers":
                lines += [f"  | {ln}" for ln in cause.traceback.rstrip().splitlines()[-12:]]
    return "\n".join(lines)


class SlurmRun:
    """One plan on the simulated Slurm cluster; :meth:`run` does it all."""

    def __init__(self, plan: JobPlan, client: Any, out: IO[str], *, run_as: str, sbatch: Optional[Path] = None,
                 compose_factory: Callable[[str, Path], ComposeProject] = ComposeProject,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.client = client
        self.out = out
        self.run_as = run_as
        self.sbatch = sbatch
        self.compose_factory = compose_factory
        self.clock = clock
        self.containers: dict[str, Any] = {}
        self.outcome = SlurmOutcome(plan.run_id, plan.run_dir)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.progress = ProgressWatch(plan.run_dir / PROGRESS_SUBDIR, self.record)
        self.faults = FaultScheduler(plan.config.faults, self.inject, plan.run_dir / PROGRESS_SUBDIR, self.say,
                                     self.record)
        self.width = max(len(f"{n.name}/rank{max(n.global_ranks, default=9)}") for n in plan.nodes) + 1
        self.job_lines = JobLines(plan, self.width, tasks_are_nodes=sbatch is None)

    def say(self, text: str) -> None:
        self.out.write(f"[orchestrate] {text}\n")
        self.out.flush()

    # Bring-up --------------------------------------------------------------------------------

    def prepare(self, image: str) -> Path:
        """The run directory: the Slurm configuration, the munge key, the batch script."""
        run_dir = prepare_run_dir(self.plan)
        slurm_dir = run_dir / SLURM_DIR
        slurm_dir.mkdir()
        info = self.client.info()
        (slurm_dir / "slurm.conf").write_text(
            slurm_conf(self.plan, int(info.get("NCPU") or 1), int((info.get("MemTotal") or 2**30) // 2**20)))
        key = slurm_dir / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(secrets.token_bytes(1024))
        if self.sbatch is None:
            script = render_sbatch(self.plan, self.batch_options())
            (slurm_dir / "job.sbatch").write_text(script)
        else:
            shutil.copyfile(self.sbatch, slurm_dir / self.sbatch.name)  # byte for byte: submitted unchanged
        compose_file = run_dir / "compose.json"
        compose_file.touch(mode=0o600)
        compose_file.write_text(json.dumps(render_slurm_compose(self.plan, image, self.run_as), indent=2) + "\n")
        return compose_file

    def batch_options(self) -> BatchOptions:
        env = dict(self.plan.nodes[0].env)
        return BatchOptions(job_name=f"ddp-{self.plan.run_id}", output=f"{RUN_DIR_MOUNT}/{SLURM_DIR}/slurm-%j.out",
                            chdir=WORKSPACE_DIR, env=env, log_dir=f"{RUN_DIR_MOUNT}/$SLURMD_NODENAME/torchrun")

    def wait_until_idle(self, timeout_s: float) -> None:
        deadline = self.clock() + timeout_s
        last = ""
        while self.clock() < deadline:
            code, last = exec_output(self.client, self.containers[CONTROLLER], ["sinfo", "-h", "-N", "-o", "%N %t"])
            if code == 0 and sinfo_idle(last, len(self.plan.nodes)):
                return
            time.sleep(0.5)
        raise NodesNotReadyError(f"Slurm nodes not idle after {timeout_s:.0f} s (sinfo: {' '.join(last.split())})")

    def find_containers(self) -> None:
        from orchestrate.engine.labels import COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL

        for container in self.client.containers.list(all=True, filters={
                "label": f"{COMPOSE_PROJECT_LABEL}={self.plan.project_name}"}):
            self.containers[container.labels[COMPOSE_SERVICE_LABEL]] = container

    # The job ---------------------------------------------------------------------------------

    def submit(self) -> str:
        script = f"{RUN_DIR_MOUNT}/{SLURM_DIR}/{self.sbatch.name if self.sbatch else 'job.sbatch'}"
        code, output = exec_output(self.client, self.containers[CONTROLLER], ["sbatch", "--parsable", script],
                                   user=self.run_as, workdir=WORKSPACE_DIR, environment=self.plan.nodes[0].env)
        output = output.strip()
        if code != 0:
            raise OrchestrateError(f"sbatch refused the job: {output.splitlines()[-1] if output else 'no output'}")
        return output.split(";")[0]

    def job_record(self, job_id: str) -> dict[str, str]:
        code, text = exec_output(self.client, self.containers[CONTROLLER], ["scontrol", "show", "job", job_id, "-o"])
        return parse_scontrol(text) if code == 0 else {}

    def node_records(self) -> dict[str, dict[str, str]]:
        code, text = exec_output(self.client, self.containers[CONTROLLER], ["scontrol", "show", "node", "-o"])
        records = [parse_scontrol(line) for line in text.splitlines() if line.strip()] if code == 0 else []
        return {r["NodeName"]: r for r in records if "NodeName" in r}

    def follow_output(self, host: str, path: str) -> None:
        """Stream the job's output file from its batch host (a thread)."""
        def read() -> None:
            try:
                exec_id = self.client.api.exec_create(self.containers[host].id, ["tail", "-n", "+1", "-F", path],
                                                      stdout=True, stderr=False)["Id"]
                for raw in stream_lines(self.client.api.exec_start(exec_id, stream=True)):
                    self.lines.put(raw.decode("utf-8", "replace"))
            except Exception as exc:  # the batch host went away before the exec started
                log.debug("output of the job: %s", exc)

        threading.Thread(target=read, name="slurm-output", daemon=True).start()

    def drain_output(self, log_file: IO[str], *, ended: bool = False) -> None:
        rendered = []
        while not self.lines.empty():
            rendered += self.job_lines.feed(self.lines.get())
        if ended:
            rendered += self.job_lines.flush()
        for line in rendered:
            self.out.write(line + "\n")
            log_file.write(line + "\n")
        self.out.flush()

    def record(self, kind: str, **fields: Any) -> None:
        record_event(self.plan.run_dir, kind, **fields)

    def inject(self, fault: FaultSpec) -> None:
        inject(self.client, self.plan.project_name, self.containers[fault.node], fault.action)

    def follow(self, job_id: str) -> None:
        started = self.clock()
        following = False
        with open(self.plan.run_dir / "slurm-job.log", "w", encoding="utf-8") as log_file:
            last_seen = self.clock()
            while True:
                job = self.job_record(job_id)
                if job:
                    last_seen = self.clock()
                elif self.clock() - last_seen > CONTROLLER_SILENCE_S:
                    raise OrchestrateError(f"slurmctld has not answered for job {job_id} in"
                                           f" {CONTROLLER_SILENCE_S:.0f} s (scontrol show job failed)")
                if not following and job.get("BatchHost") in self.containers and job.get("StdOut"):
                    self.follow_output(job["BatchHost"], job["StdOut"])
                    following = True
                self.drain_output(log_file)
                if job.get("JobState") in FINAL_JOB_STATES:
                    time.sleep(1.0)  # the last lines of the file
                    self.drain_output(log_file, ended=True)
                    self.outcome.job = job
                    break
                if self.faults.pending:
                    self.progress.poll(self.clock(), None)
                    self.faults.fire_due(self.clock() - started, self.progress.max_step)
                time.sleep(0.5)
        self.outcome.seconds = self.clock() - started
        self.outcome.faults = [fired.describe() for fired in self.faults.fired]

    def root_cause(self) -> None:
        """The worker failure that explains the others, from the error files they left
        (torchrun's --log-dir, per node): one that is not a peer's closed connection first,
        then the earliest (the files' timestamps have one-second steps)."""
        found: list[tuple[bool, float, str, RootCause]] = []
        for node in self.plan.nodes:
            for local, path in latest_error_files(self.plan.run_dir, node.name).items():
                cause = RootCause(node.global_rank(local) if local < len(node.global_ranks) else local, local)
                cause.add_error_file(path.read_text(errors="replace"))
                stamp = cause.timestamp if cause.timestamp is not None else float("inf")
                found.append((is_collateral(cause, []), stamp, node.name, cause))
        if found:
            collateral, _, self.outcome.root_node, self.outcome.root_cause = min(found, key=lambda f: f[:2])
            self.outcome.root_is_collateral = collateral

    # All of it -----------------------------------------------------------------------------

    def run(self, image: str) -> SlurmOutcome:
        compose = self.compose_factory(self.plan.project_name, self.prepare(image))
        heartbeat = Heartbeat(self.plan.run_dir / HEARTBEAT_FILE).start()
        job_id = ""
        try:
            t0 = self.clock()
            self.say(f"run {self.plan.run_id}: bringing up a Slurm cluster: {CONTROLLER} (slurmctld) and"
                     f" {len(self.plan.nodes)} nodes (slurmd) (project {self.plan.project_name})")
            record_event(self.plan.run_dir, "bring-up", nodes=[n.name for n in self.plan.nodes])
            compose.up()
            self.find_containers()
            self.wait_until_idle(self.plan.config.ready_timeout_s)
            record_event(self.plan.run_dir, "nodes-up")
            self.outcome.bring_up_s = self.clock() - t0
            job_id = self.submit()
            self.outcome.job_id = job_id
            self.say(f"Slurm nodes idle in {self.outcome.bring_up_s:.1f} s; sbatch submitted job {job_id}")
            self.follow(job_id)
            self.outcome.nodes = self.node_records()
            if not self.outcome.succeeded:
                self.root_cause()
        except KeyboardInterrupt as exc:
            self.outcome.interrupted = True
            self.outcome.signal_number = int(getattr(exc, "signum", 2))
            self.say("interrupted: cancelling the job and stopping every node")
            if job_id and CONTROLLER in self.containers:
                exec_output(self.client, self.containers[CONTROLLER], ["scancel", job_id])
        except OrchestrateError as exc:
            self.outcome.error, self.outcome.error_exit_code = str(exc), exc.exit_code
        except docker_errors() as exc:
            self.outcome.error = f"engine error: {str(exc).splitlines()[0][:300]}"
        finally:
            heartbeat.stop()
            if self.plan.config.keep:
                self.say(f"--keep: leaving the cluster in the engine; remove it with: python -m orchestrate down"
                         f" {self.plan.run_id}")
            else:
                self.outcome.teardown_error = teardown(compose, self.say)
            self.finish_record()
        return self.outcome

    def finish_record(self) -> None:
        """outcome.json, the last event and the report page, as for a Compose run."""
        outcome = self.outcome
        cause = outcome.root_cause
        failure = None
        if not outcome.succeeded and not outcome.interrupted and not outcome.error:
            failure = {"node": outcome.root_node, "rank": cause.rank if cause else None,
                       "describe": f"Slurm job {outcome.job_id} {outcome.state} (reason {outcome.job.get('Reason', '-')})"
                                   + (f"; workers: {outcome.root_node} rank {cause.rank}: {cause.exception}" if cause else ""),
                       "traceback": cause.traceback if cause else "", "then": [], "last_lines": []}
        try:
            (outcome.run_dir / "outcome.json").write_text(json.dumps({
                "run_id": outcome.run_id, "scheduler": "slurm", "job_id": outcome.job_id, "job": outcome.job,
                "slurm_nodes": outcome.nodes, "succeeded": outcome.succeeded, "exit_code": outcome.exit_code(),
                "interrupted": outcome.interrupted, "error": outcome.error, "failure": failure}, indent=2) + "\n")
        except OSError as exc:  # the run directory went away: the summary on screen still says it all
            log.debug("outcome.json: %s", exc)
        end_record(outcome.run_dir, exit_code=outcome.exit_code(), succeeded=outcome.succeeded,
                   interrupted=outcome.interrupted, error=outcome.error, job_state=outcome.state)
