"""``stop RUN`` for a run under Slurm, as a cluster's user stops a job: its tasks get SIGTERM
through Slurm (``scancel --signal=TERM``), SIGKILL after the stop's timeout, and the job
leaves the queue. The launcher that follows the run then says it was stopped and tears the
cluster down; where none follows it, the nodes and the controller are stopped here.

Stopping the slurmd containers instead (what ``stop`` did before) left Slurm to find its nodes
silent: the job ended as NODE_FAIL half a minute later, a failure nobody had.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from orchestrate.engine.client import exec_answer, exec_output
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.labels import containers_of_project
from orchestrate.engine.runs import STOPPED_BY, RunInfo, forget_stop_request, mark_stop_requested, stop_run
from orchestrate.errors import EngineError
from orchestrate.slurm.cluster import CONTROLLER, KILL_WAIT_S, parse_scontrol

# How often the queue is looked at while the job ends.
QUEUE_POLL_S = 0.5


def stop_slurm_run(client: Any, run: RunInfo, timeout_s: float, say: Callable[[str], None] = print,
                   clock: Callable[[], float] = time.monotonic, by: str = STOPPED_BY) -> list[str]:
    """Stop the run's Slurm job (SIGTERM to its tasks, SIGKILL after ``timeout_s``); return its
    live nodes. The launcher that follows the run tears them down; where none does, they and the
    controller are stopped here, their state kept.

    Raises:
        EngineError: When Slurm refused to signal the job.
    """
    live = [node.name for node in run.live_nodes]
    controller = containers_of_project(client, run.project).get(CONTROLLER)
    if not live or controller is None or controller.status != "running":
        return stop_run(run, round(timeout_s), by, say)
    jobs = queued_jobs(client, controller)
    if jobs:
        mark_stop_requested(run.run_dir, live, by)  # whoever follows the run says STOPPED, not a failure
        try:
            terminate_jobs(client, controller, run.run_id, jobs)
        except EngineError:
            forget_stop_request(run.run_dir)  # nothing was stopped: the job's own end stands
            raise
        say(f"sent SIGTERM to Slurm job {', '.join(jobs)} of run {run.run_id} (scancel --signal=TERM);"
            f" SIGKILL after {timeout_s:g} s")
        kill_jobs_after(client, controller, run.run_id, jobs, timeout_s, say, clock)
    if run.launcher_alive and jobs:
        return live  # its launcher says how the job ended, then tears the cluster down
    stopped = stop_run(run, round(timeout_s), by, say)
    try:
        controller.stop(timeout=round(timeout_s))
    except engine_errors() as exc:  # gone meanwhile: stopped all the same
        say(f"the Slurm controller of run {run.run_id} was not stopped: {describe(exc)}")
    return stopped


def terminate_jobs(client: Any, controller: Any, run_id: str, jobs: list[str]) -> None:
    """SIGTERM to the tasks of ``jobs`` through Slurm (``scancel --signal=TERM``: the job's steps,
    torchrun in every node, which hands it to its workers; the batch script waits for them, as
    ``--full`` would not: it would end the script, and with it the job, at once); a job still
    pending is cancelled instead, at once (a signal to it made ``scancel`` retry for 95 s).

    Raises:
        EngineError: When Slurm refused both.
    """
    pending = pending_jobs(client, controller, jobs)
    if pending:  # no task to signal: cancelled (scancel --signal retries on one for 95 s, then refuses)
        scancel(client, controller, run_id, pending, refused_raises=True)
    started = [job for job in jobs if job not in pending]
    if started and not scancel(client, controller, run_id, ["--signal=TERM", *started]):
        scancel(client, controller, run_id, started, refused_raises=True)  # pending after all: cancelled


def pending_jobs(client: Any, controller: Any, jobs: list[str]) -> list[str]:
    """Those of ``jobs`` Slurm holds pending, as ``scontrol show job`` says (none where it cannot
    be asked: the signal is tried, as before)."""
    pending = []
    for job in jobs:
        try:
            code, text = exec_output(client, controller, ["scontrol", "show", "job", job, "-o"])
        except engine_errors():
            continue
        if code == 0 and parse_scontrol(text).get("JobState") == "PENDING":
            pending.append(job)
    return pending


def kill_jobs_after(client: Any, controller: Any, run_id: str, jobs: list[str], grace_s: float,
                    say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                    meanwhile: Callable[[], None] = lambda: None) -> bool:
    """Wait up to ``grace_s`` for ``jobs`` to leave the queue (calling ``meanwhile`` at every
    look); then (at once with no grace) SIGKILL their tasks and cancel them, and wait for Slurm to
    let them go. Whether they ended within the grace (False: killed).

    Raises:
        EngineError: When Slurm refused to cancel them.
    """
    if grace_s > 0:
        if wait_until_gone(client, controller, jobs, clock() + grace_s, clock, meanwhile):
            return True
        say(f"Slurm job {', '.join(jobs)} still runs after {grace_s:g} s: cancelling it (SIGKILL)")
    scancel(client, controller, run_id, ["--signal=KILL", "--full", *jobs])
    scancel(client, controller, run_id, jobs, refused_raises=True)
    if not wait_until_gone(client, controller, jobs, clock() + KILL_WAIT_S + 5.0, clock):
        say(f"Slurm job {', '.join(jobs)} is still in the queue; its nodes are stopped anyway")
    return False


def queued_jobs(client: Any, controller: Any) -> list[str]:
    """The ids of the jobs in the cluster's queue, pending or running (not those completing: they
    have ended already); none where the controller is gone. An empty queue is asked again
    (:func:`exec_answer`): a stop that saw no job would stop the nodes under a running one."""
    try:
        code, text = exec_answer(client, controller, ["squeue", "-h", "-t", "PD,CF,R,S", "-o", "%A"],
                                 lambda answer: any(line.strip().isdigit() for line in answer.splitlines()))
    except engine_errors():
        return []
    return [line.strip() for line in text.splitlines() if line.strip().isdigit()] if code == 0 else []


def scancel(client: Any, controller: Any, run_id: str, argv: list[str], refused_raises: bool = False) -> bool:
    """``scancel ARGV`` in the controller; False where Slurm refused it (EngineError instead with
    ``refused_raises``). A job that ended meanwhile, or a cluster torn down, is no refusal."""
    try:
        code, text = exec_output(client, controller, ["scancel", *argv])
    except engine_errors():  # the launcher tore the cluster down meanwhile: the job is gone
        return True
    if code == 0 or "already completing or completed" in text or "Invalid job id" in text:
        return True
    if refused_raises:
        last = text.strip().splitlines()[-1] if text.strip() else f"exit code {code}"
        raise EngineError(f"Slurm refused to stop the job of run {run_id}: {last}")
    return False


def wait_until_gone(client: Any, controller: Any, jobs: list[str], deadline: float,
                    clock: Callable[[], float], meanwhile: Callable[[], None] = lambda: None) -> bool:
    """Whether every one of ``jobs`` left the queue before ``deadline``; ``meanwhile`` is called
    at every look (the launcher shows the tasks' last lines)."""
    while True:
        meanwhile()
        if not set(jobs) & set(queued_jobs(client, controller)):
            return True
        if clock() >= deadline:
            return False
        time.sleep(QUEUE_POLL_S)
