"""The Slurm backend: a plan as a Slurm job on the simulated cluster (``--scheduler slurm``).

The run itself (its directory, the launcher's heartbeat, ``docker compose up`` and ``down``,
its record) is :class:`orchestrate.launch.run.Run`'s; this backend renders the cluster (the
Slurm configuration, the munge key, the batch script, the Compose project), waits until every
slurmd is idle, submits with ``sbatch`` and follows the job. The job's state comes from Slurm
itself (``scontrol show job``, ``scontrol show node``); its output is the file Slurm writes
(``StdOut``), followed in the batch host; the workers' root cause comes from torchrun's error
files in the run directory, as with Compose. The generated script starts every worker through
the start-up hook, as a Compose node does, so the hang watchdog follows the job as it follows a
Compose run's (:class:`~orchestrate.hangs.watchdog.HangWatch`): a job quiet past
``--hang-timeout`` is said HUNG, with where every rank waits, and cancelled through Slurm.
"""
from __future__ import annotations

import json
import logging
import queue
import os
import re
import secrets
import shlex
import shutil
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Optional

from orchestrate.config.fault_spec import FaultSpec
from orchestrate.debugger.states import LEFT
from orchestrate.engine.client import exec_answer, exec_output, stream_lines
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.images import DOCKER_DIR, build_context, build_lock, docker_build, image_exists
from orchestrate.engine.labels import containers_of_project
from orchestrate.engine.runs import read_stop_request
from orchestrate.errors import EngineError, NodesNotReadyError, OrchestrateError
from orchestrate.faults.in_effect import faults_now
from orchestrate.faults.inject import inject
from orchestrate.faults.scheduler import FaultScheduler
from orchestrate.hangs.diagnosis import HangDiagnosis, place_failure
from orchestrate.hangs.snapshots import answers, ask_snapshots, debug_dir
from orchestrate.hangs.watchdog import (AT_THE_INTERRUPT, AT_THE_TIME_LIMIT, DyingRanks, HangWatch,
                                        is_progress_line, say_hung)
from orchestrate.outcome.events import record_event
from orchestrate.outcome.judge import Failure
from orchestrate.outcome.model import FaultRecord, RunResult, SlurmJob, Timings, marked_before_first_step
from orchestrate.outcome.root_cause import (RootCause, exception_chain, is_collateral, latest_error_files,
                                            latest_worker_logs, restarts_in_place, users_frame_in)
from orchestrate.plan.layout import PROGRESS_SUBDIR, RUN_DIR_MOUNT, WORKSPACE_DIR
from orchestrate.plan.model import JobPlan, NodePlan
from orchestrate.slurm.cluster import (
    CONTROLLER,
    JOB_SCRIPT,
    SLURM_DIR,
    cluster_batch_options,
    job_environment,
    parse_scontrol,
    render_slurm_compose,
    sinfo_idle,
    slurm_conf,
)
from orchestrate.slurm.script import render_sbatch
from orchestrate.slurm.stop import kill_jobs_after, terminate_jobs
from orchestrate.supervise.progress import ProgressWatch
from orchestrate.supervise.rank_probe import RankHost, absent_reasons, network_cuts
from orchestrate.supervise.console_filter import ConsoleFilter
from orchestrate.supervise.worker_lines import OutputLine, WorkerLines
from orchestrate.text import counted, for_terminal

log = logging.getLogger(__name__)

FINAL_JOB_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                    "BOOT_FAIL", "DEADLINE"}
SLURM_REPOSITORY = "ddp-compose-slurm"
# How long the controller may fail to answer for the job before the run gives up on it.
CONTROLLER_SILENCE_S = 30.0
# A job still pending this long is said to be, with Slurm's reason (once).
PENDING_SAID_AFTER_S = 5.0
# Slurm's reasons for holding a job pending that the run's own cluster never meets: the job is
# cancelled and the run fails, saying why, instead of waiting for ever; once the reason has stood
# this long (Slurm names PartitionConfig first, then PartitionNodeLimit, for one job too large).
NEVER_STARTS_AFTER_S = 2.0
NEVER_STARTS = {
    "PartitionNodeLimit": "it asks for more nodes than the cluster has: its #SBATCH --nodes against --nodes",
    "PartitionTimeLimit": "its time limit is longer than the cluster's partition allows",
    "PartitionConfig": "it asks for what the cluster's partition does not have",
    "BadConstraints": "its constraints match no node of the cluster",
}
# How long, and how often, the queue is asked for a job sbatch gave no id for.
JOB_LOOKUP_S = 15.0
JOB_LOOKUP_POLL_S = 0.5
# "T: [R|L]:text" (srun --label, then torchrun's prefix), or "T: text" (torchrun's agent).
# A line without a task label is srun's own ("srun: error: node1: task 1: Exited ..."), shown as this node's.
SRUN = "slurm"
_LABELLED = re.compile(r"^\s*(?P<task>\d+): (?P<text>.*)$")


def slurm_image(client: Any, base: str, progress: Callable[[str], None]) -> str:
    """The Slurm variant of ``base`` (built once per base image id)."""
    tag = f"{SLURM_REPOSITORY}:{client.images.get(base).id.split(':')[-1][:12]}"
    with build_lock(tag, progress):
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
    may run one per process); what follows is torchrun's output, joined as a node's is.

    The job's log keeps every line; the console shows what a Compose run's console shows of a
    node's lines (:class:`~orchestrate.supervise.console_filter.ConsoleFilter`: not torchrun's INFO
    records, nor its own traceback as the job is cancelled), or every line with ``verbose``."""

    def __init__(self, plan: JobPlan, width: int, tasks_are_nodes: bool = True, verbose: bool = False) -> None:
        self.plan = plan
        self.width = width
        self.tasks_are_nodes = tasks_are_nodes
        self.tasks: dict[int, WorkerLines] = {}
        self.console = None if verbose else ConsoleFilter()
        self.ranks_seen: set[int] = set()  # the global ranks that printed a line
        self.progress_lines = 0  # the workers' lines that show the job moves (not torchrun's, nor torch's log lines)
        self.dying_lines = 0  # those of them of a rank's traceback as it dies (its collective's timeout): no move
        self.dying_ranks = DyingRanks()

    def feed(self, raw: str) -> list[OutputLine]:
        """The lines that ``raw``, one line of the output file, completes (srun's own as ``slurm``'s)."""
        match = _LABELLED.match(raw)
        if not match:
            return [OutputLine(SRUN, raw)]
        task = int(match["task"])
        if task not in self.tasks:
            self.tasks[task] = WorkerLines(self.task_node(task))
        lines = self.tasks[task].feed(match["text"])
        self.ranks_seen.update(line.global_rank for line in lines if line.global_rank is not None)
        progress = [line for line in lines if line.global_rank is not None and is_progress_line(line.text)]
        self.progress_lines += len(progress)
        self.dying_lines += sum(1 for line in progress if self.dying_ranks.dying_line(line.global_rank, line.text))
        return lines

    def flush(self) -> list[OutputLine]:
        """The lines the workers left unfinished (the job has ended)."""
        return [line for lines in self.tasks.values() for line in lines.flush()]

    def shown(self, lines: list[OutputLine], *, ended: bool = False) -> list[OutputLine]:
        """The console's share of ``lines``; with ``ended``, what it held back too."""
        if self.console is None:
            return lines
        shown = [kept for line in lines for kept in self.console.shown(line)]
        if ended:
            for name in [SRUN, *(self.task_node(task).name for task in self.tasks)]:
                shown += self.console.flush(name)
        return shown

    def task_node(self, task: int) -> NodePlan:
        """The node a task stands for; a task of a user's script is named for itself, and its
        workers' ranks are torchrun's."""
        if self.tasks_are_nodes and task < len(self.plan.nodes):
            return self.plan.nodes[task]
        return NodePlan(name=f"{'node' if self.tasks_are_nodes else 'task'}{task}", node_rank=task,
                        global_ranks=(), gpu_ids=(), process_gpus=(), torchrun_argv=(), env={})


def sbatch_refusal(output: str) -> str:
    """What sbatch said when it refused a job, as one line: its error lines from the first on, the
    ``sbatch: error:`` that starts each taken off all but the first (sbatch wraps one reason over
    several, and its last alone may be only an example: "For instance: #!/bin/sh"); every line
    where none is an error's."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("sbatch: error:")]
    lines = lines[errors[0]:] if errors else lines  # (a warning before it is not its reason)
    if not lines:
        return "no output"
    return " ".join([lines[0], *(line.removeprefix("sbatch: error:").strip() for line in lines[1:])])


class SlurmBackend:
    """One plan as a Slurm job; the :class:`~orchestrate.launch.run.Run` drives it."""

    def __init__(self, plan: JobPlan, client: Any, out: IO[str], *, run_as: str, image: str,
                 sbatch: Optional[Path] = None, clock: Callable[[], float] = time.monotonic,
                 verbose: bool = False) -> None:
        self.plan = plan
        self.client = client
        self.out = out
        self.run_as = run_as
        self.image = image
        self.sbatch = sbatch
        self.clock = clock
        self.containers: dict[str, Any] = {}
        self.job_id = ""
        self.started_at: Optional[float] = None  # when the job was submitted
        self.submitted_time = 0.0  # the same, in Unix seconds (the workers' records' clock)
        # the job's pending reason, and when Slurm first gave it (a reason never met counts from then)
        self.pending_reason: tuple[str, float] = ("", 0.0)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.progress = ProgressWatch(plan.run_dir / PROGRESS_SUBDIR, self.record)
        self.faults = FaultScheduler(plan.config.faults, self.inject, plan.run_dir / PROGRESS_SUBDIR, self.say,
                                     self.record)
        self.width = max(len(f"{n.name}/rank{max(n.global_ranks, default=9)}") for n in plan.nodes) + 1
        self.job_lines = JobLines(plan, self.width, tasks_are_nodes=sbatch is None, verbose=verbose)
        cfg, debug = plan.config, debug_dir(plan.run_dir)
        # (a script of the user's own starts its workers without the hook: none would answer)
        self.hangs = (HangWatch(cfg.hang_diagnose_after_s, cfg.hang_timeout_s, lambda: ask_snapshots(debug),
                                lambda request, at: answers(debug, request, at), self.expected_ranks,
                                self.why_absent, self.say, clock, run_id=plan.run_id,
                                cut_by=lambda: network_cuts(self.rank_hosts()),
                                collective_timeout_s=cfg.collective_timeout_s) if sbatch is None else None)
        self.hang: Optional[HangDiagnosis] = None  # the hang that ended the job
        self.last_look: Optional[HangDiagnosis] = None  # where the ranks were as its time limit cancelled it
        self.moves_seen = 0  # the progress records and lines the watchdog has taken
        self.dying_seen = 0  # the lines of dying ranks' tracebacks among them

    def say(self, text: str) -> None:
        # (wrapped on a terminal, each of its lines prefixed: a long hint wrapped as the terminal cut it)
        wrapped = for_terminal(text, self.out, "[orchestrate] ").split("\n")
        self.out.write("".join(f"[orchestrate] {line}\n" for line in wrapped))
        self.out.flush()

    def record(self, kind: str, **fields: Any) -> None:
        record_event(self.plan.run_dir, kind, **fields)

    def inject(self, fault: FaultSpec) -> str:
        inject(self.client, self.plan.project_name, self.containers[fault.node], fault)
        return fault.node

    # The hang watchdog's view of the job ------------------------------------------------------

    def expected_ranks(self) -> set[int]:
        """The ranks that should answer: the plan's (an elastic job's: those that printed)."""
        return {rank for node in self.plan.nodes for rank in node.global_ranks} or set(self.job_lines.ranks_seen)

    def rank_hosts(self) -> list[RankHost]:
        """The nodes as the rank probe sees them, each with the faults it suffers now."""
        nodes = {node.name: self.containers[node.name] for node in self.plan.nodes if node.name in self.containers}
        faults = faults_now(self.plan.run_dir, nodes)
        return [RankHost(node.name, nodes[node.name], node.global_ranks, self.plan.config.nproc_per_node,
                         tuple(faults.get(node.name, []))) for node in self.plan.nodes if node.name in nodes]

    def why_absent(self, ranks: set[int]) -> dict[int, str]:
        """Why ranks that did not answer cannot: their node paused or their process stopped (with
        the fault that did it), or their script returned."""
        return absent_reasons(self.client, self.rank_hosts(), ranks, returned=set(self.progress.finished))

    def note_debugger_changes(self) -> None:
        """Record each rank that stopped in its debugger or left it, for the report; say one that
        left (one that stops says so itself, with the command that reaches it, in its lines)."""
        changes, self.progress.debugger_changes = self.progress.debugger_changes, []
        for change, rank in changes:
            if change == LEFT:
                self.say(f"rank {rank.rank} left its debugger")
            self.record("debugger", rank=rank.rank, node=rank.node, state=change, call=rank.call,
                        where=rank.where(), what=rank.what())

    def watch_for_a_hang(self, log_file: IO[str]) -> None:
        """Take what moved since the last look (a worker's line, a progress record); end the job
        when the watchdog finds it hung past --hang-timeout."""
        if self.hangs is None or self.hang is not None:
            return
        self.take_moves()
        found = self.hangs.poll(self.clock())
        if found is not None:
            self.end_hung(found, log_file)

    def take_moves(self) -> None:
        """Tell the watchdog what moved since it last heard (a worker's line, a progress record),
        or that a terminal debugging a rank holds the job as asked."""
        assert self.hangs is not None
        now = self.clock()
        moves = self.progress.records + self.job_lines.progress_lines
        dying = self.job_lines.dying_lines
        if self.progress.debugger.attached():  # a terminal debugging a rank holds the job as asked
            self.hangs.progress(now, moved=False)
        elif moves > self.moves_seen:  # (a dying rank's traceback alone is progress, but takes no hang back)
            self.hangs.progress(now, moved=moves - self.moves_seen > dying - self.dying_seen)
        self.moves_seen, self.dying_seen = moves, dying

    def look_at_the_end(self, log_file: IO[str], occasion: str = AT_THE_TIME_LIMIT) -> Optional[HangDiagnosis]:
        """Before the time limit (or an interrupt: ``occasion``) cancels a job whose quiet time the
        watchdog has not judged yet: its two looks at every rank, as a Compose run's supervisor
        takes them, no fault firing meanwhile; what the watchdog found last otherwise (hung, or
        quiet and working)."""
        hangs = self.hangs
        if hangs is None or self.hang is not None:
            return None
        self.take_moves()
        if hangs.due_at_the_end():
            self.faults.cancel()

            def go_on_until(until: float) -> None:
                while self.clock() < until:
                    time.sleep(0.25)
                    self.drain_output(log_file)
                    self.progress.poll(self.clock(), None)
                    self.take_moves()

            hangs.look_at_the_end(go_on_until, occasion)
        return hangs.last_verdict

    def end_hung(self, found: HangDiagnosis, log_file: IO[str]) -> None:
        """Say where every rank waits, then end the job as ``stop RUN`` does, through Slurm:
        SIGTERM to its tasks, SIGKILL after the run's stop grace."""
        self.hang = found
        say_hung(found, self.say, self.record)
        grace_s = self.plan.config.stop_grace_s
        self.say(f"cancelling Slurm job {self.job_id}: SIGTERM to its tasks, SIGKILL after {grace_s:g} s")
        controller, jobs = self.containers[CONTROLLER], [self.job_id]
        try:
            if grace_s > 0:
                terminate_jobs(self.client, controller, self.plan.run_id, jobs)
            kill_jobs_after(self.client, controller, self.plan.run_id, jobs, grace_s, self.say, self.clock,
                            meanwhile=lambda: self.drain_output(log_file))
        except EngineError as exc:  # the teardown removes the cluster, and the job with it
            self.say(f"{exc}; the teardown removes the cluster")
            raise OrchestrateError(f"the job was found hung, and {exc}") from exc

    # Bring-up --------------------------------------------------------------------------------

    def bring_up_line(self) -> str:
        return (f"run {self.plan.run_id}: bringing up a Slurm cluster: {CONTROLLER} (slurmctld) and"
                f" {counted(len(self.plan.nodes), 'node')} (slurmd) (project {self.plan.project_name})")

    def render(self, run_dir: Path) -> Path:
        """The Slurm configuration, the munge key, the batch script and the cluster's Compose file."""
        slurm_dir = run_dir / SLURM_DIR
        slurm_dir.mkdir()
        info = self.client.info()
        (slurm_dir / "slurm.conf").write_text(
            slurm_conf(self.plan, int(info.get("NCPU") or 1), int((info.get("MemTotal") or 2**30) // 2**20)))
        key = slurm_dir / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(secrets.token_bytes(1024))
        if self.sbatch is None:
            (slurm_dir / JOB_SCRIPT).write_text(render_sbatch(self.plan, cluster_batch_options(self.plan)))
        else:
            # byte for byte: submitted unchanged; and no more readable than the user's own (an exported
            # job holding their variables' values is theirs alone: export -o writes it 0700)
            shutil.copy(self.sbatch, slurm_dir / self.sbatch.name)
        compose_file = run_dir / "compose.json"
        compose_file.touch(mode=0o600)
        compose_file.write_text(json.dumps(render_slurm_compose(self.plan, self.image, self.run_as), indent=2) + "\n")
        return compose_file

    def wait_ready(self) -> None:
        """Find the cluster's containers, then wait until every slurmd is idle."""
        self.containers = containers_of_project(self.client, self.plan.project_name)
        timeout_s = self.plan.config.ready_timeout_s
        deadline = self.clock() + timeout_s
        last = ""
        while self.clock() < deadline:
            code, last = exec_output(self.client, self.containers[CONTROLLER], ["sinfo", "-h", "-N", "-o", "%N %t"])
            if code == 0 and sinfo_idle(last, len(self.plan.nodes)):
                return
            time.sleep(0.5)
        raise NodesNotReadyError(f"Slurm nodes not idle after {timeout_s:.0f} s (sinfo: {' '.join(last.split())})")

    def ready_lines(self, bring_up_s: float) -> list[str]:
        return [f"Slurm nodes idle in {bring_up_s:.1f} s; submitting the job with sbatch"]

    # The job ---------------------------------------------------------------------------------

    def submit(self) -> str:
        script = f"{RUN_DIR_MOUNT}/{SLURM_DIR}/{self.sbatch.name if self.sbatch else JOB_SCRIPT}"
        argv = ["sbatch", "--parsable"]
        text = (self.plan.run_dir / SLURM_DIR / self.sbatch.name).read_text(errors="replace") if self.sbatch else ""
        if self.sbatch is not None and not names_output(text):
            # Slurm's default is the submitting directory, the work directory: every run's job 1
            # would write over the last one's slurm-1.out there
            argv.append(f"--output={RUN_DIR_MOUNT}/{SLURM_DIR}/slurm-%j.out")
        chdir = chdir_in_the_nodes(text, self.plan.config.workdir) if self.sbatch is not None else None
        if chdir:  # (sbatch's own options override its script's directives)
            argv.append(f"--chdir={chdir}")
        code, output = exec_output(self.client, self.containers[CONTROLLER], [*argv, script],
                                   user=self.run_as, workdir=WORKSPACE_DIR, environment=job_environment(self.plan))
        output = output.strip()
        if code != 0:
            raise OrchestrateError(f"sbatch refused the job: {sbatch_refusal(output)}")
        job_id = output.splitlines()[-1].split(";")[0].strip() if output else ""
        # docker's exec can lose a short command's output (docker/docker-py#2042; seen once in CI):
        # the job is then asked of Slurm. Submitting again would run it twice.
        return job_id if job_id.isdigit() else self.first_job(output)

    def first_job(self, sbatch_said: str) -> str:
        """The id of the first job of the run's own cluster (the one just submitted, whatever
        its script names it), asked of Slurm until it answers (for about :data:`JOB_LOOKUP_S`);
        every state: a short job may have ended already."""
        code, text = 0, ""
        for _ in range(int(JOB_LOOKUP_S / JOB_LOOKUP_POLL_S) + 1):
            code, text = exec_output(self.client, self.containers[CONTROLLER], ["squeue", "-h", "-t", "all", "-o", "%A"])
            found = sorted(int(line) for line in text.splitlines() if line.strip().isdigit()) if code == 0 else []
            if found:
                return str(found[0])
            time.sleep(JOB_LOOKUP_POLL_S)
        squeue = " ".join(text.split())[:200] or "nothing"
        raise OrchestrateError(f"sbatch gave no job id (it said {sbatch_said!r}), and Slurm's queue has no job after"
                               f" {JOB_LOOKUP_S:.0f} s (squeue, exit code {code}: {squeue})")

    def job_record(self, job_id: str) -> dict[str, str]:
        code, text = exec_output(self.client, self.containers[CONTROLLER], ["scontrol", "show", "job", job_id, "-o"])
        return parse_scontrol(text) if code == 0 else {}

    def node_records(self) -> dict[str, dict[str, str]]:
        """Each node's record; asked again where the answer came back empty (a cluster always has
        nodes: docker's exec lost its output, docker/docker-py#2042)."""
        code, text = exec_answer(self.client, self.containers[CONTROLLER], ["scontrol", "show", "node", "-o"],
                                 lambda answer: bool(answer.strip()))
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
            except engine_errors() as exc:  # the batch host went away before the exec started
                log.debug("output of the job: %s", exc)

        threading.Thread(target=read, name="slurm-output", daemon=True).start()

    def drain_output(self, log_file: IO[str], *, ended: bool = False) -> None:
        """Take the job's output that came: every line into the job's log, the console's share
        of them to the console."""
        lines = []
        while not self.lines.empty():
            lines += self.job_lines.feed(self.lines.get())
        if ended:
            lines += self.job_lines.flush()
        for line in lines:
            log_file.write(line.render(self.width) + "\n")
        for line in self.job_lines.shown(lines, ended=ended):
            self.out.write(line.render(self.width) + "\n")
        self.out.flush()

    def follow(self, timeout_s: Optional[float] = None) -> RunResult:
        """Submit the job and follow it to its end in Slurm's state (cancelled after
        ``timeout_s``); judge it."""
        self.submitted_time = time.time()
        self.job_id = self.submit()
        self.say(f"sbatch submitted job {self.job_id}")
        slurm = SlurmJob(self.job_id)
        result = RunResult(self.plan.run_id, self.plan.run_dir, [], Timings(), slurm=slurm)
        self.started_at = started = self.clock()
        if self.hangs is not None:  # a job stuck before its first line (a rendezvous) counts too
            self.hangs.progress(started)
        following = said_pending = False
        self.pending_reason = ("", started)
        try:
            with open(self.plan.run_dir / "slurm-job.log", "w", encoding="utf-8") as log_file:
                last_seen = self.clock()
                while True:
                    job = self.job_record(self.job_id)
                    if job:
                        last_seen = self.clock()
                    elif self.clock() - last_seen > CONTROLLER_SILENCE_S:
                        raise OrchestrateError(f"slurmctld has not answered for job {self.job_id} in"
                                               f" {CONTROLLER_SILENCE_S:.0f} s (scontrol show job failed)")
                    if not following and job.get("BatchHost") in self.containers and job.get("StdOut"):
                        self.follow_output(job["BatchHost"], job["StdOut"])
                        following = True
                    if job.get("JobState") == "PENDING" and not result.error:
                        said_pending = self.note_pending(job, said_pending, result)
                    self.drain_output(log_file)
                    if (timeout_s is not None and self.clock() - started > timeout_s and not result.error
                            and self.hang is None):  # (a job found hung is being cancelled already)
                        self.last_look = self.look_at_the_end(log_file)
                        job = self.job_record(self.job_id) or job
                        if job.get("JobState") not in FINAL_JOB_STATES:  # (it may have ended during the looks)
                            self.say(f"the job did not end within its time limit of {timeout_s:g} s: cancelling it")
                            exec_output(self.client, self.containers[CONTROLLER], ["scancel", self.job_id])
                            result.error = f"timed out: the job did not end within {timeout_s:g} s"
                            result.error_exit_code = 1
                    if job.get("JobState") in FINAL_JOB_STATES:
                        time.sleep(1.0)  # the last lines of the file
                        self.drain_output(log_file, ended=True)
                        slurm.job = job
                        break
                    self.progress.poll(self.clock(), None)
                    self.note_debugger_changes()
                    if self.faults.waiting:
                        self.faults.fire_due(self.clock() - started, self.progress.max_step, self.progress.attempt_steps)
                    if not result.error and not read_stop_request(self.plan.run_dir).nodes:
                        self.watch_for_a_hang(log_file)  # (not while its time limit or `stop RUN` cancels it)
                    time.sleep(0.5)
        finally:
            result.timings.job_s = self.clock() - started
            result.faults = self.fault_records(result.timings.job_s)
            result.hang = self.hang or (self.last_look if result.error else None)
        self.progress.poll(self.clock(), None)  # what the workers' hook recorded last: the warnings' facts
        result.written_shared = self.progress.written_whole()
        result.written_locally = self.progress.written_on_nodes_disks()
        result.shuffled_alike = self.progress.shuffled_alike()
        result.init_calls = self.progress.groups_made()
        slurm.nodes = self.node_records()
        slurm.restarts_in_place = {node.name: count for node in self.plan.nodes  # (whatever scontrol answered)
                                   if (count := restarts_in_place(self.plan.run_dir, node.name))}
        stop = read_stop_request(self.plan.run_dir)
        if stop.nodes and not result.error and ended_by_a_stop(slurm.job, stop.time):
            # `stop RUN` (or `down RUN`) signalled the job from another terminal: stopped, not failed
            result.interrupted, result.signal_number, result.stopped_by = True, int(signal.SIGTERM), stop.by
            self.record("job-stopped", job=self.job_id, state=slurm.state, by=result.stopped_by)
        elif not result.succeeded:
            result.reported_failure = self.root_cause(slurm)
            self.place_the_failure(result)
        return result

    def note_pending(self, job: dict[str, str], said: bool, result: RunResult) -> bool:
        """A job Slurm still holds pending: cancelled, the run failing, where its reason is one the
        cluster never meets (:data:`NEVER_STARTS`); else said once, with the reason, after
        :data:`PENDING_SAID_AFTER_S`. Whether it has been said."""
        reason = job.get("Reason", "") or "-"
        if self.pending_reason[0] != reason:
            self.pending_reason = (reason, self.clock())  # (a reason counts from when Slurm first gave it)
        if reason in NEVER_STARTS and self.clock() - self.pending_reason[1] >= NEVER_STARTS_AFTER_S:
            self.say(f"Slurm holds job {self.job_id} pending (reason {reason}): {NEVER_STARTS[reason]}; cancelling it")
            exec_output(self.client, self.containers[CONTROLLER], ["scancel", self.job_id])
            result.error = (f"Slurm cannot start job {self.job_id} in this cluster of"
                            f" {len(self.plan.nodes)} node(s): pending, reason {reason} ({NEVER_STARTS[reason]})")
            result.error_exit_code = 2
            return True
        if not said and self.clock() - self.started_at >= PENDING_SAID_AFTER_S:
            self.say(f"job {self.job_id} is still pending in Slurm (reason {reason})")
            return True
        return said

    def place_the_failure(self, result: RunResult) -> None:
        """Where the ranks were as the job failed, by what the workers' hook wrote, as for a Compose
        run: a collective that timed out is a hang that torch ended (its diagnosis, where every
        rank waited), collectives that differ are said, and so is where torchrun's SIGTERM found
        the ranks it ended. Records written before the job was submitted are an earlier run's."""
        placed = place_failure(result.reported_failure, debug_dir(self.plan.run_dir), self.expected_ranks(),
                               self.submitted_time)
        result.stopped_where, result.divergence = placed.stopped_where, placed.divergence
        result.skipped = placed.skipped
        result.collectives_checked = placed.collectives_checked or any(n.checks_collectives for n in self.plan.nodes)
        if result.hang is None and placed.timed_out is not None:
            result.hang = placed.timed_out
            result.hang.run_id = self.plan.run_id
            # (--collective-timeout does not reach the workers of a batch script of the user's own)
            result.hang.collective_timeout_s = self.plan.config.collective_timeout_s if self.sbatch is None else None

    def partial_result(self) -> RunResult:
        """What is known of a job that was interrupted, without asking Slurm (the engine may be
        what failed)."""
        elapsed = self.clock() - self.started_at if self.started_at is not None else 0.0
        return RunResult(self.plan.run_id, self.plan.run_dir, [], Timings(job_s=elapsed),
                         slurm=SlurmJob(self.job_id), faults=self.fault_records(elapsed), hang=self.hang)

    def fault_records(self, elapsed_s: float) -> list[FaultRecord]:
        """Every fault asked for, ``elapsed_s`` into the job: those that fell before its first
        step marked so."""
        step = self.progress.max_step
        return marked_before_first_step(self.faults.records(elapsed_s, step, self.progress.seen), step,
                                        self.progress.first_step_time)

    def wind_down(self, grace_s: float, stopped_by: str = "") -> RunResult:
        """After an interrupt: end the job as ``stop RUN`` does, through Slurm: SIGTERM to its
        tasks, SIGKILL after ``grace_s`` (the run's --stop-grace; at once with 0), the job
        cancelled; the nodes go with the teardown."""
        ended_on, last_look = "", None
        if self.job_id and CONTROLLER in self.containers:
            controller, jobs = self.containers[CONTROLLER], [self.job_id]
            with open(self.plan.run_dir / "slurm-job.log", "a", encoding="utf-8") as log_file:
                if grace_s > 0:  # (a further interrupt cuts the look short: the caller then cancels at once)
                    last_look = self.look_at_the_end(log_file, AT_THE_INTERRUPT)
                elif self.hangs is not None:  # no look, but what the watchdog found before is kept
                    last_look = self.hangs.last_verdict
                try:
                    if grace_s > 0:
                        terminate_jobs(self.client, controller, self.plan.run_id, jobs)
                    took_sigterm = kill_jobs_after(self.client, controller, self.plan.run_id, jobs, grace_s, self.say,
                                                   self.clock, meanwhile=lambda: self.drain_output(log_file))
                    ended_on = "SIGTERM" if took_sigterm else "SIGKILL"
                except EngineError as exc:  # the teardown removes the cluster, and the job with it
                    self.say(f"{exc}; the teardown removes the cluster")
                self.drain_output(log_file, ended=True)
        result = self.partial_result()
        result.hang = result.hang or last_look
        assert result.slurm is not None
        result.slurm.ended_on = ended_on
        if ended_on:  # Slurm answered: how it saw the job end, for the summary's table
            try:
                result.slurm.job, result.slurm.nodes = self.job_record(self.job_id), self.node_records()
            except engine_errors() as exc:  # the controller went meanwhile: the summary says what is known
                log.debug("the interrupted job's record: %s", exc)
        return result

    def root_cause(self, slurm: SlurmJob) -> Failure:
        """The worker failure that explains the others, from what they left in torchrun's
        --log-dir, per node: a worker's error file, else the traceback its log ends in (a script
        whose main is not wrapped in ``@record`` writes no error file); one that is not a peer's
        closed connection first, then the earliest (the error files' timestamps have one-second
        steps; a log's is when it was last written)."""
        found: list[tuple[bool, float, str, RootCause]] = []
        for node in self.plan.nodes:
            error_files = latest_error_files(self.plan.run_dir, node.name)
            logs = latest_worker_logs(self.plan.run_dir, node.name)
            for local in sorted(set(error_files) | set(logs)):
                cause = RootCause(node.global_rank(local) if local < len(node.global_ranks) else local, local)
                if local in error_files:
                    cause.add_error_file(error_files[local].read_text(errors="replace"))
                if not cause.exception and local in logs:
                    cause.add_worker_log(logs[local])
                if not cause.exception:
                    continue
                stamp = cause.timestamp if cause.timestamp is not None else float("inf")
                found.append((is_collateral(cause, cause.traceback.splitlines()), stamp, node.name, cause))
        describe = f"Slurm job {slurm.job_id} {slurm.state} (reason {slurm.job.get('Reason', '-')})"
        if not found:
            return Failure("", None, None, "", (), description=describe)
        collateral, _, node, cause = min(found, key=lambda f: f[:2])
        slurm.workers_collateral = collateral
        return Failure(node, cause.rank, cause.exit_code, cause.exception, (), traceback=cause.traceback,
                       description=f"{describe}; workers: {node} rank {cause.rank}: {cause.exception}",
                       users_frame=users_frame_in(cause.traceback.splitlines()),
                       chain=exception_chain(cause.traceback.splitlines()))


def directive_words(script: str) -> list[str]:
    """A batch script's ``#SBATCH`` words, as sbatch reads them: lines that begin with ``#SBATCH``
    (at their first column) before the script's first command, their words split as a shell
    would, a ``#`` starting a comment."""
    found: list[str] = []
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # sbatch reads no directive after the first command
        if not line.startswith("#SBATCH") or line[len("#SBATCH"):][:1] not in (" ", "\t"):
            continue
        try:
            found += shlex.split(line[len("#SBATCH"):], comments=True)
        except ValueError:  # an unclosed quote: sbatch would refuse the line too
            continue
    return found


def names_output(script: str) -> bool:
    """Whether a batch script's ``#SBATCH`` lines (:func:`directive_words`) name its output file:
    ``-o FILE``, ``-oFILE``, ``--output`` or a start of it that getopt takes for it
    (``--out=FILE``)."""
    for word in directive_words(script):
        name = word.split("=", 1)[0]
        if (word.startswith("-o") and not word.startswith("--")) or (
                len(name) >= len("--out") and "--output".startswith(name)):
            return True
    return False


def chdir_in_the_nodes(script: str, workdir: Path) -> Optional[str]:
    """Where a batch script's ``#SBATCH --chdir`` (``-D DIR``, ``-DDIR``, ``--chdir DIR``; the last
    one) is in the simulated cluster's nodes, where it names the work directory or a directory in
    it: the nodes have the work directory at ``WORKSPACE_DIR``, and the host's path (an exported
    script's) is in none of them. None where it names no such directory."""
    words, named = directive_words(script), None
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else None
        if word in ("-D", "--chdir"):
            named = following
        elif word.startswith("--chdir="):
            named = word[len("--chdir="):]
        elif word.startswith("-D"):
            named = word[len("-D"):]
    if not named or not Path(named).is_absolute():
        return None
    try:
        inside = Path(os.path.realpath(named)).relative_to(workdir)  # (its .., its links)
    except ValueError:
        return None
    return str(PurePosixPath(WORKSPACE_DIR, inside))


def ended_by_a_stop(job: dict[str, str], requested_at: Optional[float] = None) -> bool:
    """Whether the job's end is what ``stop RUN`` (asked at ``requested_at``, wall time) did to it:
    cancelled, its tasks ended by SIGTERM or SIGKILL (``ExitCode`` is ``CODE:SIGNAL``), or any
    end after the stop came: the tasks took their SIGTERM, and torchrun, which a signal ends with
    exit code 1, ended with them. A job that ended before the stop came is judged as it ended."""
    code, _, signal_number = job.get("ExitCode", "").partition(":")
    if job.get("JobState") == "CANCELLED" or signal_number in ("9", "15") or code in ("137", "143"):
        return True
    ended = slurm_time(job.get("EndTime", ""))
    # EndTime has whole seconds: an end in the second the stop came counts as after it
    return requested_at is not None and ended is not None and ended + 1.0 >= requested_at


def slurm_time(text: str) -> Optional[float]:
    """Wall time of one of Slurm's times (``2026-11-30T21:16:24``, the cluster's clock in UTC);
    None for ``Unknown`` or ``None``."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
