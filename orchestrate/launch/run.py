"""The library's product: :class:`Run`, one object that owns a run's whole life.

::

    request ─ check ─ pre-flight ─ image ─┬─ GPU lease ─ plan ─ bring up ─┐
                                          │          (one host lock)      │
                                          └───────────────────────────────┴─ follow ─ judge ─ tear down ─ record

``run``, ``plan``, ``attach``, Slurm runs and the benchmarks all go through
it, and every run ends in the one :class:`~orchestrate.outcome.model.RunResult` and the one
``outcome.json``. A backend does what differs between schedulers
(:class:`~orchestrate.launch.compose_backend.ComposeBackend`,
:class:`~orchestrate.slurm.backend.SlurmBackend`); the run directory, the launcher's
heartbeat, ``docker compose up`` and ``down`` and the record are the Run's.

A foreground run keeps a heartbeat in its directory: if the launcher dies, the nodes notice
within ``LEASE_TIMEOUT_S`` and stop themselves. A detached run returns once its nodes run,
and the engine keeps it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import secrets
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Optional

from orchestrate.config.fault_spec import short_store_outage_note
from orchestrate.config.request import HostFacts, RunRequest, resolve_config, unused_requirements_note
from orchestrate.config.run_config import RunConfig
from orchestrate.config.user_env import copy_env_notes, mask_assignments
from orchestrate.engine.client import connect, engine_now
from orchestrate.engine.compose_cli import ComposeProject, find_compose_meanwhile
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.gpus import detect_gpus
from orchestrate.engine.images import TORCH_LABEL, image_label
from orchestrate.engine.locks import try_lock
from orchestrate.engine.runs import RunInfo, find_run, launcher_identity, node_plans
from orchestrate.engine.user_image import derived_image_spec
from orchestrate.errors import EngineUnavailableError, OrchestrateError
from orchestrate.interrupts import SignalInterrupt, uninterrupted
from orchestrate.launch.backend import Backend
from orchestrate.launch.compose_backend import SUPERVISOR_LOCK, ComposeBackend
from orchestrate.launch.heartbeat import Heartbeat
from orchestrate.launch.lease import free_gpu_ids, gpu_lease, wants_gpus
from orchestrate.launch.preflight import check_engine_resources, link_netem, prepare_image
from orchestrate.launch.recorded_runs import run_as_recorded
from orchestrate.launch.run_dir import check_runs_dir, prepare_run_dir, writing_run_dir
from orchestrate.launch.teardown import finish_record, tear_down_and_record, teardown
from orchestrate.outcome.events import NODES_UP, record_event
from orchestrate.outcome.model import RunResult, Timings
from orchestrate.outcome.summary import format_summary
from orchestrate.text import for_terminal
from orchestrate.plan.layout import HEARTBEAT_FILE
from orchestrate.plan.make import make_plan, project_name
from orchestrate.plan.model import JobPlan
from orchestrate.slurm.backend import SlurmBackend, slurm_image
from orchestrate.slurm.cluster import slurm_caveats
from orchestrate.supervise.api import AttachedAt, RunSpec
from orchestrate.supervise.worker_quiet import seconds_quiet



def new_run_id() -> str:
    """A run id unique on this host: time for humans, random for two runs in one second."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class Run:
    """One run, from the request to a torn-down engine and a written record.

    Args:
        request: What to run (see :class:`~orchestrate.config.request.RunRequest`).
        out: Where the workers' lines, the launcher's lines and the progress go.
        client: A docker SDK client (default: the environment's engine, asked when needed).
        host: The launching host's environment and user (default: this process's).
        command_line: The command that asked for the run (recorded for ``ps`` and reports).
        run_id: The run's id (default: a new one).
        compose_factory: Makes the driver of a Compose project (a fake one in unit tests).
        clock: Monotonic clock.
        verbose: Show torchrun's own INFO records too (``-v``; the node logs always keep them).
        timeout_s: The most the job may run once its nodes are up; then every node is stopped
            and the run fails (None: no limit).
        ends_by: A clock time by which the job must have been ended, and why (a test's own time
            limit): where it comes before ``timeout_s`` would, it is the job's time limit, and a
            run that meets it says why.
        notes: Say what the request asks that the run does less of than asked (a ``--copy-env``
            pattern that matches nothing, ...); a check that runs one job many times says them once.
    """

    def __init__(self, request: RunRequest, *, out: IO[str] = sys.stdout, client: Any = None,
                 host: Optional[HostFacts] = None, command_line: str = "", run_id: Optional[str] = None,
                 compose_factory: Callable[[str, Path], ComposeProject] = ComposeProject,
                 clock: Callable[[], float] = time.monotonic, verbose: bool = False,
                 timeout_s: Optional[float] = None, notes: bool = True,
                 ends_by: Optional[tuple[float, str]] = None) -> None:
        self.request = request
        self.out = out
        # Detached, the caller's output carries only the run id (RUN=$(python -m orchestrate run -d ...)).
        self.chatter = sys.stderr if request.detach else out
        self.client = client
        self.host = host or HostFacts.here()
        self.command_line = command_line
        self.run_id = run_id or new_run_id()
        self.compose_factory = compose_factory
        self.clock = clock
        self.verbose = verbose
        self.timeout_s = timeout_s
        self.ends_by = ends_by
        self.notes = notes
        self.plan: Optional[JobPlan] = None
        self.backend: Optional[Backend] = None
        self.config: Optional[RunConfig] = None  # built once, by check()
        self.compose: Optional[ComposeProject] = None
        self.heartbeat: Optional[Heartbeat] = None
        self.bring_up_s: Optional[float] = None
        self.image_torch = ""
        self.result: Optional[RunResult] = None
        self.attached: Optional[RunInfo] = None

    @property
    def run_dir(self) -> Path:
        """The run's directory of records (its logs, events, outcome.json, report.html)."""
        return Path(self.request.runs_dir).resolve() / self.run_id

    @property
    def project_name(self) -> str:
        return project_name(self.run_id)

    @classmethod
    def attach(cls, run_id: str, *, out: IO[str] = sys.stdout, client: Any = None,
               clock: Callable[[], float] = time.monotonic, verbose: bool = False) -> "Run":
        """A run already in the engine (``attach``): :meth:`follow` watches it to its end, and
        acts as its launcher when it is a detached run that nobody else follows."""
        client = client if client is not None else connect()
        found = find_run(client, run_id)  # the id may be a unique part of it
        found.require_run_dir("attach to")  # its follower's logs and record would be the working directory's
        run = cls(RunRequest(), out=out, client=client, run_id=found.run_id, clock=clock, verbose=verbose)
        run.attached = found
        return run

    # Talking ---------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        # one write, line end and all: an interrupt between two writes left the next line on this one
        print(f"[orchestrate] {text}\n", end="", file=self.chatter, flush=True)

    def progress(self, text: str) -> None:
        print(f"[image] {text}", file=self.chatter, flush=True)

    def engine(self) -> Any:
        if self.client is None:
            self.client = connect()
        return self.client

    # Before anything starts ------------------------------------------------------------------

    def check(self) -> RunConfig:
        """Refuse bad input with one line, before the engine is asked anything; the run's
        configuration, built once (a plan with GPUs leased adds the count the engine gave)."""
        if self.config is not None:
            return self.config
        request = self.request
        request.check_combination()  # options that cannot go together, whatever they name
        # Then paths and the target: a missing script is reported whatever the engine has (so
        # checked as a CPU run, where the GPU options have nothing to act on).
        as_cpu = request.replace(cpu=True, backend="gloo", share_gpus=False)
        cpu_config = resolve_config(as_cpu, self.host)
        derived_image_spec(cpu_config)
        check_runs_dir(cpu_config.runs_dir)
        # a CPU run is that run itself (its "auto" backend is gloo): built once
        cpu_already = request.cpu and not request.share_gpus and request.backend in ("auto", "gloo")
        # GPUs whose count is the engine's (no --gpus-per-node): the GPU options are checked against the count
        # once it is known (_plan), not refused now as if none were there
        config = cpu_config if cpu_already or self.gpu_count_pending else resolve_config(request, self.host)
        self.config = config
        if self.notes:
            for note in copy_env_notes(request.copy_env, self.host.environ):
                self.say(note)
            for note in slurm_caveats(config, request.sbatch) if request.scheduler == "slurm" else []:
                self.say(note)
            for note in filter(None, (short_store_outage_note(fault) for fault in config.faults)):
                self.say(note)
            if note := unused_requirements_note(request):
                self.say(note)
        return config

    @property
    def gpu_count_pending(self) -> bool:
        """Whether the run's GPU layout waits for the engine's count of GPUs: it may have GPUs and
        does not say how many per node."""
        return not self.request.cpu and self.request.gpus_per_node is None

    def dry_plan(self) -> JobPlan:
        """The plan alone (``plan``, ``run --dry-run``): the engine is asked at most which GPUs
        it has, how many CPUs and how much memory, and whether its kernel has netem where the
        link needs it (node sizes it cannot give and a delay it cannot make are refused, as the
        run would refuse them), and nothing when none answers.

        The netem probe is the run's own: it starts a throwaway container of the node image
        (about a second), so a dry run with a ``--link`` delay or loss starts that one container.
        Where no engine answers, or the node image is not built yet, the link is planned
        unchecked, and that is said in one line.

        Raises:
            UsageError: As the run would refuse the request (node sizes, a delay without netem).
        """
        config = self.check()
        client = None
        needs_netem = config.link is not None and config.link.needs_netem
        if not self.request.cpu or config.cpus_per_node or config.memory_per_node or needs_netem:
            with contextlib.suppress(EngineUnavailableError):  # a dry run needs no engine
                client = self.engine()
        info = client.info() if client is not None else {}
        check_engine_resources(config, info)
        netem = self._dry_link_netem(client, config) if needs_netem else True
        free = None
        if client is not None:
            free = free_gpu_ids(client, self.request) if wants_gpus(self.request) else None
        self.plan = self._plan(info, self.request.image, free, netem)
        return self.plan

    def _dry_link_netem(self, client: Any, config: RunConfig) -> bool:
        """:func:`~orchestrate.launch.preflight.link_netem` for a dry run: the probe where the
        engine and the node image are there (a dry run builds nothing), else the plan as if the
        kernel had netem, said to be unchecked; likewise where the engine refused the probe (an
        ``--image`` without ``tc``): a plan is still printed, with why it is unchecked."""
        from orchestrate.engine.images import image_exists

        why = ("no engine answers" if client is None
               else "" if image_exists(client, config.image) else f"the image {config.image} is not built yet")
        if not why:
            try:
                return link_netem(client, config, self.say)
            except engine_errors() as exc:
                why = f"the engine refused the probe: {describe(exc)}"
        assert config.link is not None
        needs = ("the run refuses its delay where the kernel has no netem" if config.link.delay_ms
                 else "where the kernel has no netem, the run drops its loss by iptables")
        self.say(f"--link {config.link}: not checked against the engine's kernel ({why}); {needs}")
        return True

    def _plan(self, engine_info: dict, image: str, free_gpus: Optional[tuple[str, ...]], netem: bool = True) -> JobPlan:
        if free_gpus is not None:
            config = resolve_config(self.request, self.host, len(free_gpus))
        elif self.gpu_count_pending:  # no engine answered (a dry run): its GPU options are refused as unknown
            config = resolve_config(self.request, self.host)
        else:
            config = self.check()
        detached = self.request.detach
        plan = make_plan(config, self.run_id, detached=detached, gpu_ids=free_gpus or (),
                         launcher="" if detached else launcher_identity(),
                         command_line=mask_assignments(self.command_line, config.user_env),
                         created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         host_cpus=engine_info.get("NCPU") or None, netem=netem)
        return plan if image == plan.image else dataclasses.replace(plan, image=image)

    # Starting --------------------------------------------------------------------------------

    def start(self) -> JobPlan:
        """Pre-flight, image, GPU lease, plan and bring-up: the nodes run when it returns (a
        detached run is then the engine's).

        Raises:
            OrchestrateError: When something refuses the run (bad input, the engine, the
                image, a failed bring-up); whatever was created is removed first.
        """
        config = self.check()
        compose_found = find_compose_meanwhile(self.compose_factory.find_cli)
        client = self.engine()
        info = client.info()
        check_engine_resources(config, info)
        inventory = detect_gpus(client) if wants_gpus(self.request) else None  # once a run: the lease takes it
        if inventory is not None and self.gpu_count_pending:  # its GPU options against it now, not after the image
            resolve_config(self.request, self.host, inventory.count)
        compose_found()
        image = prepare_image(client, config, build=not self.request.no_build, progress=self.progress)
        netem = link_netem(client, config, self.say)
        self.image_torch = image_label(client, image, TORCH_LABEL)
        node_image = slurm_image(client, image, self.progress) if self.request.scheduler == "slurm" else image
        # The lease is held until the containers, which carry the GPUs' labels, exist.
        with gpu_lease(client, self.request, self.run_id, self.say, inventory) as free:
            self.plan = self._plan(info, image, free, netem)
            self.backend = self._backend(self.plan, node_image)
            try:
                self._bring_up()
            except BaseException:
                self.close()
                raise
        return self.plan

    def _backend(self, plan: JobPlan, node_image: str) -> Backend:
        if self.request.scheduler == "slurm":
            sbatch = Path(self.request.sbatch).resolve() if self.request.sbatch else None
            return SlurmBackend(plan, self.client, self.out, run_as=plan.config.run_as or "0:0", image=node_image,
                                sbatch=sbatch, clock=self.clock, verbose=self.verbose)
        return ComposeBackend.for_plan(plan, self.client, self.out, self.clock, self.verbose)

    def _bring_up(self) -> None:
        plan, backend = self.plan, self.backend
        assert plan is not None and backend is not None
        run_dir = prepare_run_dir(plan)
        with writing_run_dir(run_dir):
            compose_file = backend.render(run_dir)
        self.compose = self.compose_factory(plan.project_name, compose_file)
        self.heartbeat = None if plan.detached else Heartbeat(run_dir / HEARTBEAT_FILE).start()
        started = self.clock()
        self.say(backend.bring_up_line())
        record_event(run_dir, "bring-up", nodes=[n.name for n in plan.nodes])
        self.compose.up()
        backend.wait_ready()
        record_event(run_dir, NODES_UP)
        self.bring_up_s = self.clock() - started
        for line in backend.ready_lines(self.bring_up_s):
            self.say(line)

    def close(self) -> None:
        """Remove what the run has in the engine, without following it to its end (a start
        that failed, or a started run its caller gives up)."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.compose is not None:
            teardown(self.compose, self.say)
            self.compose = None

    # Following to the end --------------------------------------------------------------------

    def run(self) -> RunResult:
        """The foreground run whole: start, follow, judge, tear down, record.

        A failing job is a result, not an exception, and so are Ctrl-C (or a teardown signal
        raised as KeyboardInterrupt: every node gets SIGTERM and the stop grace, a second one
        kills them at once) and an engine or bring-up error once the run exists. Before that
        (bad input, no engine, no image) the error is raised. The teardown happens whatever
        happens, a further Ctrl-C included.
        """
        self.check()
        try:
            self.start()
            self.result = self.follow()
        except KeyboardInterrupt as exc:
            if not self._exists():
                raise
            self.result = self._wind_down(int(getattr(exc, "signum", 2)))
        except OrchestrateError as exc:
            if not self._exists():
                raise
            self.result = self._partial_result()
            self.result.error, self.result.error_exit_code = str(exc), exc.exit_code
        except engine_errors() as exc:  # the engine refused something: an environment problem
            if not self._exists():
                raise
            self.result = self._partial_result()
            self.result.error = f"engine error: {describe(exc)}"
        finally:  # once the run exists, it is torn down and recorded, whatever happened
            if self.result is None and self._exists():
                self.result = uninterrupted(self._partial_result)
                self.result.error = self.result.error or "the launcher failed; see the log above"
            if self.result is not None:
                self._finish(self.result)
        assert self.result is not None
        return self.result

    def _exists(self) -> bool:
        """Whether the run has begun (its directory exists): from then on it ends in a result."""
        return self.plan is not None and self.plan.run_dir.is_dir()

    def _wind_down(self, signal_number: int) -> RunResult:
        """Stop every node gracefully after an interrupt and follow them to their end; an
        interrupt before the backend takes charge of it forces, as a second one does later."""
        assert self.plan is not None
        grace = self.plan.config.stop_grace_s
        if self.backend is None:
            result = RunResult(self.plan.run_id, self.plan.run_dir, [], Timings())
        else:
            again = False
            while True:
                try:
                    if again:
                        self.say("interrupted again: killing every node now")
                    elif grace:
                        self.say(f"interrupted: stopping every node (SIGTERM, then SIGKILL after {grace:g} s;"
                                 " interrupt again to kill them now)")
                    else:
                        self.say("interrupted: killing every node now (--stop-grace 0)")
                    result = self.backend.wind_down(grace, stopped_by=interrupted_by(signal_number))
                    break
                except KeyboardInterrupt:
                    grace, again = 0, True
        result.interrupted, result.signal_number, result.stopped_by = True, signal_number, ""
        return self._known(result)

    def follow(self) -> RunResult:
        """Follow the started (or attached) run to its end and judge it; nothing is torn down."""
        if self.attached is not None:
            return self._follow_attached()
        assert self.backend is not None and self.plan is not None
        timeout_s, why = self.time_limit()
        with try_lock(self.plan.run_dir / SUPERVISOR_LOCK):  # a later attach then only watches
            result = self.backend.follow(timeout_s)
        if why and result.error.startswith("timed out"):
            result.error += f" ({why})"
            result.limited_by = why
        return self._known(result)

    def time_limit(self) -> tuple[Optional[float], str]:
        """The job's time limit from now, its nodes up: ``timeout_s``, or what :attr:`ends_by`
        leaves where that is less (at least 1 s), with why ("" for ``timeout_s``)."""
        if self.ends_by is None:
            return self.timeout_s, ""
        at, why = self.ends_by
        left = max(1.0, float(round(at - self.clock())))
        if self.timeout_s is not None and self.timeout_s <= left:
            return self.timeout_s, ""
        return left, why

    def _partial_result(self) -> RunResult:
        """What is known of a run that an error ended early (the teardown stops its nodes)."""
        assert self.plan is not None
        if self.backend is None:
            result = RunResult(self.plan.run_id, self.plan.run_dir, [], Timings())
        else:
            result = self.backend.partial_result()
        return self._known(result)

    def _known(self, result: RunResult) -> RunResult:
        """``result`` with what the launcher knows beyond the nodes: the bring-up's time, the
        image's torch, and the link and node sizes asked for."""
        assert self.plan is not None
        result.timings.bring_up_s = self.bring_up_s
        result.image_torch = self.image_torch
        result.conditions = self.plan.config.conditions
        return result

    def _finish(self, result: RunResult) -> None:
        """Stop the heartbeat; tear down (unless --keep) while the record is finished; nothing,
        a further interrupt included, skips the teardown."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        compose, kept = (None, self.compose) if self.request.keep else (self.compose, None)
        self.compose = None
        try:
            if kept is not None:
                self.say(f"--keep: leaving run {self.run_id} in the engine; remove it with:"
                         f" python -m orchestrate down {self.run_id}")
        finally:  # an interrupt here (a closed output, a signal) still leaves the run recorded
            tear_down_and_record(result, compose, self.say, self.clock)

    # Attached runs ---------------------------------------------------------------------------

    def _follow_attached(self) -> RunResult:
        """Follow a run found in the engine; act as its launcher when it is detached and no one
        else does (then its record is this process's to finish). A detached run that ended while
        no one followed it has no launcher's word on how it ended: the first to attach then
        finishes its record with the summary it says (a fault asked for that never fired fails a
        job whose nodes all exited 0), so that ``ps`` names it so too. So does the first to follow
        a foreground run whose launcher died before it said how the run ended, where the run asked
        for no fault (the faults' records, and whether each fired, died with that launcher: a
        judge without them would call a job whose fault never fired a success). KeyboardInterrupt
        propagates: for ``attach`` it only detaches."""
        from orchestrate.launch.unfollowed import LINES_KEPT
        from orchestrate.outcome.events import launcher_exit_code, read_events
        from orchestrate.outcome.record import recorded_loaded_from_before, write_outcome
        from orchestrate.outcome.run_dirs import read_conditions, recorded_faults

        run = self.attached
        assert run is not None
        spec = spec_for_run(run)
        with try_lock(spec.run_dir / SUPERVISOR_LOCK) as holds_lock:
            active = run.detached and holds_lock and not run.state.ended
            events = read_events(spec.run_dir)
            unjudged = run.detached and holds_lock and run.state.ended and launcher_exit_code(events) is None
            # a foreground run whose launcher died: the first to follow it after writes its events (and, where it
            # asked for no fault, its outcome: its run-ended event then tells a second follower so)
            orphaned = (not run.detached and holds_lock and run.launcher_alive is False
                        and launcher_exit_code(events) is None and not any(e["event"] == LINES_KEPT for e in events))
            judges_orphan = orphaned and recorded_faults(spec.run_dir) == ()
            role = "acting as its launcher" if active else "watching"
            self.say(f"attached to run {run.run_id} ({run_as_recorded(run).state.value}, {role}); Ctrl-C detaches")
            nodes_up = [e["time"] for e in events if e["event"] == NODES_UP]  # where the job's seconds count from
            backend = ComposeBackend(spec, self.client, self.out, active=active,
                                     containers={n.name: n.container for n in run.nodes}, clock=self.clock,
                                     verbose=self.verbose, records=active or unjudged or orphaned,
                                     job_began=nodes_up[-1] if nodes_up else None,
                                     attached_at=attached_at(self.client, run) if active else None)
            try:
                result = backend.follow()
            except KeyboardInterrupt:
                backend.detach()
                raise
        image = run.nodes[0].container.attrs.get("Config", {}).get("Image", "") if run.nodes else ""
        result.image_torch = image_label(self.client, image, TORCH_LABEL) if image else ""
        result.conditions = read_conditions(spec.run_dir)
        if active or unjudged or judges_orphan:  # its launcher, or the first to judge it: its record is ours to finish
            write_outcome(result)
            finish_record(result)
        elif not result.loaded_from_before:  # what its judge knew of the work directory as the run began
            result.loaded_from_before = recorded_loaded_from_before(spec.run_dir)
        return result


def attached_at(client: Any, run: RunInfo) -> AttachedAt:
    """Where an attach finds the run: the engine's clock and this host's now, and how long no
    worker has printed (as ``ps`` counts QUIET), for its hang watchdog to count from."""
    engine_time = engine_now(client)
    return AttachedAt(engine_time, time.time(), seconds_quiet(run, engine_time) if run.scheduler == "compose" else None)


def interrupted_by(signal_number: int) -> str:
    """Who stopped a run whose launcher was interrupted, as a follower in another terminal says
    it (``STOPPED by its launcher's Ctrl-C``)."""
    if signal_number == signal.SIGINT:
        return "its launcher's Ctrl-C"
    try:
        return f"its launcher's {signal.Signals(signal_number).name}"
    except ValueError:
        return f"its launcher's signal {signal_number}"


def unwatched_while_detached(config: RunConfig) -> str:
    """What a detached run of ``config`` was asked to have that only a follower does (the hang
    watchdog's end, an elastic node's restart), said as it detaches; "" when nothing."""
    asked = []
    if config.hang_timeout_s is not None:
        asked.append(f"--hang-timeout {config.hang_timeout_s:g}")
    if config.elastic and config.max_restarts > 0:
        asked.append("the restarts of its elastic nodes")
    if not asked:
        return ""
    verb = "act" if len(asked) > 1 or config.hang_timeout_s is None else "acts"  # "the restarts ... act"
    return (f"{' and '.join(asked)} {verb} only while `attach` follows the run: nobody watches it while it is"
            " detached")


def spec_for_run(run: RunInfo) -> RunSpec:
    """What a supervisor needs of a run found in the engine (no faults: those are the
    foreground launcher's, or the `fault` command's); its work directory, where its label names
    one, so that an attach that records the run's summary says what its job loaded from before the
    run, as its launcher would have."""
    return RunSpec(run.run_id, run.project, run.run_dir, node_plans(run), elastic=run.elastic,
                   max_restarts=run.max_restarts, stop_grace_s=run.stop_grace_s,
                   hang_diagnose_after_s=run.hang_limits[0], hang_timeout_s=run.hang_limits[1],
                   collective_timeout_s=run.collective_timeout_s,
                   memory_limited=any(n.container.attrs.get("HostConfig", {}).get("Memory") for n in run.nodes),
                   restart_scope=run.restart_scope, store_host=run.store_host,
                   workdir=Path(run.workdir) if run.workdir else None)


def run(request: RunRequest, **options: Any) -> RunResult:
    """Run ``request`` in the foreground to its end: ``Run(request, **options).run()``."""
    return Run(request, **options).run()


def run_and_report(run: Run, *, raise_interrupt: bool) -> RunResult:
    """Follow ``run`` to its end and print its summary: how ``run``, ``chaos`` and the pytest
    plugin run a job, one way. An interrupted run is torn down first; with
    ``raise_interrupt`` it then raises :class:`~orchestrate.interrupts.SignalInterrupt` (a check
    or a test session stops), else its result says so (exit code 128 + the signal). A run that
    ``stop RUN`` stopped from another terminal is not an interrupt of this process: its result
    says so (a test that fails, not a session that ends).
    """
    result = run.run()
    print(for_terminal(format_summary(result), run.out), file=run.out, flush=True)
    if result.interrupted and raise_interrupt and not result.stopped_by:
        raise SignalInterrupt(result.signal_number)
    return result
