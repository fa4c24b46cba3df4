"""Follow a run through the engine: the Supervisor drives every node's phase to its end.

The nodes run by themselves (their main process is torchrun, see ``orchestrate/node/main.py``);
the :class:`Supervisor` is a client that may come and go. It coordinates, and each of its
collaborators has one job:

- :class:`~orchestrate.supervise.log_pump.LogPump`: container logs into whole, rank-prefixed
  worker lines on screen and in the node logs;
- :class:`~orchestrate.supervise.engine_events.EngineEvents`: the engine's ``start``, ``die``
  and ``oom`` events of the run's containers;
- :class:`~orchestrate.supervise.progress.ProgressWatch`: the workers' training steps;
- :class:`~orchestrate.faults.scheduler.FaultScheduler`: faults fired at their time or step;
- :class:`~orchestrate.supervise.live_faults.LiveFaultWatch`: faults ``fault RUN`` did from
  another terminal, said and blamed;
- :class:`~orchestrate.supervise.restart_policy.RestartPolicy`: elastic restarts;
- :class:`~orchestrate.supervise.diagnosis.Diagnosis`: root causes, OOM kills, hung nodes;
- :class:`~orchestrate.supervise.inspection.Inspector`: the containers as the engine describes
  them now (events for speed, inspection for truth), and an engine that stopped answering;
- :class:`~orchestrate.hangs.watchdog.HangWatch`: a job that makes no progress, diagnosed (where
  every rank waits, the first divergence of their collectives) and, with ``--hang-timeout``, ended.

Each node moves through :class:`~orchestrate.outcome.states.NodePhase`, here only. An
*active* supervisor (the foreground launcher, or ``attach`` of a detached run) also acts: it
fires faults, ends the job on the first failure (the others get a grace period, hung nodes
are killed at once) and restarts the nodes of an elastic job. A *passive* one (a second
``attach``) only watches. A node is stopped as a cluster stops one: SIGTERM, then SIGKILL
after the run's stop grace, without holding up the loop.
"""
from __future__ import annotations

import logging
import queue
import signal
import time
from pathlib import Path
from typing import IO, Any, Callable, Optional

from orchestrate.config.fault_spec import STORE_TARGET, FaultAction, FaultSpec
from orchestrate.debugger.states import LEFT, WAITS, waits_line
from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.labels import find_store_container
from orchestrate.engine.processes import processes_at_once
from orchestrate.engine.runs import (KILL_TIME_SLACK_S, KILLED_EXIT_CODE, STOP_EXIT_CODES, StopRequest,
                                     mark_stop_requested, read_stop_request, unpause_if_paused)
from orchestrate.errors import EngineError, NodeLookupError
from orchestrate.faults.in_effect import parsed_fault
from orchestrate.faults.inject import do_fault, end_fault
from orchestrate.faults.ranks import signal_rank
from orchestrate.faults.scheduler import FaultScheduler
from orchestrate.faults.storage import ArmedStorageFaults, StorageEvent
from orchestrate.hangs.collectives import ended_apart
from orchestrate.hangs.diagnosis import ATTEMPT_CLOCK_SLACK_S, HangDiagnosis, place_failure
from orchestrate.hangs.init_calls import certain_init_waits
from orchestrate.hangs.snapshots import answers, ask_snapshots, debug_dir
from orchestrate.hangs.watchdog import (AT_THE_INTERRUPT, AT_THE_TIME_LIMIT, DyingRanks, HangWatch,
                                        is_progress_line, say_hung)
from orchestrate.interrupts import uninterrupted
from orchestrate.node.main import EXIT_LAUNCHER_GONE
from orchestrate.outcome.events import addresses_in, event_identity, read_events, record_event
from orchestrate.outcome.model import FaultRecord, RunResult, marked_before_first_step
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.preemption import Preemption
from orchestrate.outcome.root_cause import restarted_attempt_errors, restarts_in_place
from orchestrate.outcome.states import NodePhase
from orchestrate.plan.layout import PROGRESS_SUBDIR, SIGTERM_MARK_PREFIX
from orchestrate.supervise.api import (AttachedAt, EngineEvent, EventsEnded, LineArrived, LogEnded, Message,
                                      NodeTracker, RunSpec)
from orchestrate.supervise.diagnosis import Diagnosis
from orchestrate.supervise.engine_events import EngineEvents
from orchestrate.supervise.inspection import Inspector, Seen, store_ended_before
from orchestrate.supervise.live_faults import LiveFaultWatch
from orchestrate.supervise.log_pump import LogPump
from orchestrate.supervise.progress import ProgressWatch
from orchestrate.supervise.rank_probe import RankHost, absent_reasons, finished_node_reason, network_cuts
from orchestrate.supervise.restart_policy import RestartPolicy, full_disk_outlasts
from orchestrate.supervise.timings import run_timings
from orchestrate.supervise.workdir_writes import WorkdirWrites
from orchestrate.supervise.worker_lines import NodeOutput, OutputLine
from orchestrate.text import for_terminal, grace_ran_out

PREFIX = "[orchestrate] "  # what starts every line the supervisor says

log = logging.getLogger(__name__)

# After the first failure, the other nodes get this long to end by themselves (so that
# their own torchrun reports are not lost) before they are killed.
FAILURE_GRACE_S = 3.0
# A node's exit is final once its log stream has ended too, or this long after its exit and its
# last line (a log still read, its lines arriving, is waited for however long it takes).
LOG_DRAIN_S = 3.0
# How often what time alone decides is looked at (see tick), however many lines come between: a
# look reads the progress channel and more, and once per line would fall behind a job that
# prints fast (200,000 lines in 17 s).
TICK_S = 0.2
# A container's StartedAt and its start event's time differ by the engine's own bookkeeping:
# an event this much older than the start it is compared with belongs to an earlier start.
STAMP_SLACK_S = 0.001
# After an interrupt, how long beyond the stop grace the supervisor waits for the nodes' ends.
WIND_DOWN_MARGIN_S = 5.0


def recorded_addresses(run_dir: Path) -> dict[str, str]:
    """The nodes by their addresses as the launcher recorded them once they came up (none where
    it did not: a run started before 2026-12-06, or with no directory)."""
    return addresses_in(read_events(run_dir)) if run_dir.name else {}


def addresses_with(addresses: dict[str, str], node: str, attrs: dict) -> dict[str, str]:
    """The nodes by their addresses (pure), with ``node``'s as its container's ``attrs`` give them
    in place of any it had before (a restarted container may get others); unchanged where the
    container has none now (it is not running): a peer an error names by address is named by
    its node."""
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    found = {n["IPAddress"]: node for n in networks.values() if isinstance(n, dict) and n.get("IPAddress")}
    if not found:
        return addresses
    return {**{a: n for a, n in addresses.items() if n != node and a not in found}, **found}


class Supervisor:
    """Follows one run to its end; see the module docstring."""

    def __init__(self, spec: RunSpec, client: Any, out: IO[str], *, active: bool,
                 containers: dict[str, Any], clock: Callable[[], float] = time.monotonic,
                 verbose: bool = False, records: Optional[bool] = None, job_began: Optional[float] = None,
                 attached_at: Optional[AttachedAt] = None) -> None:
        self.spec = spec
        self.client = client
        self.out = out
        self.active = active
        # whether the run's record (events.jsonl) is this follower's to write: its launcher's, or
        # the first to judge a detached run that ended unfollowed; never a watcher's (default: active)
        self.records = active if records is None else records
        # what the record held before this follower: an attach reads the nodes' logs from the start,
        # and the events it stamps with their engine time (a first line) an earlier follower recorded
        self.recorded_before = read_events(spec.run_dir) if self.records else []
        self.recorded_identities = {event_identity(e) for e in self.recorded_before}
        self.clock = clock
        # (a SimpleQueue: no Python-level lock that an interrupt could leave held mid-get)
        self.inbox: "queue.SimpleQueue[Message]" = queue.SimpleQueue()
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        self.trackers = {
            n.name: NodeTracker(n, containers[n.name], NodeResult(n),
                                NodeOutput(n, open(spec.run_dir / f"{n.name}.log", "w", encoding="utf-8")))
            for n in spec.nodes
        }
        width = max(len(f"{n.name}/rank{max(n.global_ranks, default=9)}") for n in spec.nodes) + 1
        self.logs = LogPump(self.inbox, out, width, clock, verbose)
        # the run's own rendezvous store (--rdzv-store container), a container of its own: followed for its death
        self.store_service = spec.store_host if spec.elastic and spec.store_host not in self.trackers else None
        self.store_lost = ""
        self.store_killed_by = ""  # the injected fault that killed the store (kill:store), if one did
        self.store_looked_for = False  # whether the store's death was looked for at the first failure
        self.engine_events = EngineEvents(client, spec.run_id, set(self.trackers) | {self.store_service} - {None},
                                          self.inbox, clock)
        self.progress = ProgressWatch(spec.run_dir / PROGRESS_SUBDIR, self.record)
        self.faults = FaultScheduler(spec.faults if active else (), self.inject, spec.run_dir / PROGRESS_SUBDIR,
                                     self.say, self.record, undo=self.undo)
        self.storage = ArmedStorageFaults(spec.run_dir / PROGRESS_SUBDIR)
        # the latest attempt of a node's workers whose write a full disk failed, when, and the rank whose write it
        # was, by node and armed key
        self.full_disk_attempts: dict[tuple[str, str], tuple[int, float, Optional[int]]] = {}
        self.stopped_on_a_full_disk: set[str] = set()  # the nodes stopped so, in the middle of an attempt
        self.restarts = RestartPolicy(enabled=active and spec.elastic, max_restarts=spec.max_restarts,
                                      say=self.say, record=self.record, clock=clock, scope=spec.restart_scope,
                                      store_host=spec.store_host, firing=self.firing_in_effect)
        self.diagnosis = Diagnosis(client, spec.run_dir, self.say, self.record)
        self.inspector = Inspector(clock, self.say)
        debug = debug_dir(spec.run_dir)
        self.dying_ranks = DyingRanks()  # the ranks printing the traceback they die of
        self.hangs = HangWatch(spec.hang_diagnose_after_s, spec.hang_timeout_s, lambda: ask_snapshots(debug),
                               lambda request, at: answers(debug, request, at), self.expected_ranks,
                               self.why_absent, self.say, clock, run_id=spec.run_id,
                               cut_by=lambda: network_cuts(self.rank_hosts()),
                               collective_timeout_s=spec.collective_timeout_s) if active else None
        self.hang: Optional[HangDiagnosis] = None  # the hang that ended the run
        self.attached_at = attached_at  # an attach's: where it found the run (None: as it follows from its start)
        self.progress_records = 0
        self.init_records = 0  # the init_process_group calls looked at (see warn_of_certain_init_waits)
        self.init_wait_said = False
        self.stop_came = False  # a node ended by `stop RUN` (see finish)
        self.stop_request = StopRequest()  # what `stop RUN` (or `down RUN`) asked, once it has come
        self.kill_at: Optional[float] = None
        # nodes sent SIGTERM: when they get SIGKILL, and the grace they were given (0 s: a preempt's
        # under --stop-grace 0, named as given none)
        self.force_at: dict[str, tuple[float, float]] = {}
        # the nodes a preempt sent SIGTERM: its fault, and when (Unix seconds) the first one came
        self.preempted_at: dict[str, tuple[str, float]] = {}
        # the nodes by their addresses on the run's network: as they came up, then as the engine says
        self.node_addresses: dict[str, str] = recorded_addresses(spec.run_dir)
        self.winding_down = False
        self.looking_at_the_end = False  # the time limit's looks: no verdict of the watchdog's own meanwhile
        self.closed = False
        self.first_failure_seen = False
        self.asked_at_failure: Optional[float] = None  # when the ranks still running were asked where they are
        self.started_at = clock()
        self.started_time = time.time()  # the same moment, on the progress records' clock
        # what `fault RUN` did from another terminal, in seconds into the job (job_began: an attach's, as its nodes
        # came up; else now)
        self.live_faults = LiveFaultWatch(spec, self.trackers, self.started_time, lambda: self.progress.max_step,
                                          self.say, self.record, job_began=job_began)
        # (the first to judge a run that ended unfollowed says what its job loaded from before it, too)
        self.writes = (WorkdirWrites(spec.workdir, self.started_time, skip=[spec.run_dir.parent], clock=clock,
                                     began=job_began) if self.records and spec.workdir is not None else None)
        self.first_worker_at: Optional[float] = None
        self.ranks_seen: set[int] = set()  # ranks whose first line was recorded (since the last restart)

    def say(self, text: str) -> None:
        # (wrapped on a terminal, each of its lines prefixed: a long hint wrapped as the terminal cut it)
        self.out.write("".join(f"{PREFIX}{line}\n" for line in for_terminal(text, self.out, PREFIX).split("\n")))
        self.out.flush()

    def record(self, kind: str, *, when: Optional[float] = None, **fields: Any) -> None:
        """Append one event to the run's event file (events.jsonl), stamped ``when`` (the
        engine's time of it) or now; a follower that only watches records nothing, and none
        records an engine-stamped event that the record held before it (an earlier attach's)."""
        if not self.records:
            return
        if when is not None and event_identity({"time": when, "event": kind, **fields}) in self.recorded_identities:
            return
        record_event(self.spec.run_dir, kind, when=when, **fields)

    def inject(self, fault: FaultSpec) -> str:
        """Do a fault (the scheduler's callback); return the node it landed on."""
        if self.writes is not None:
            self.writes.walk()  # what the job had saved before the fault, to the moment
        if fault.action.on_storage:
            return self.arm_storage(fault)
        if fault.on_store:
            return self.fault_store(fault)
        mark = self.mark_sigterm(fault.node) if fault.action is FaultAction.PREEMPT else None
        try:  # a rank fault lands on whichever node runs the rank now
            node = do_fault(self.client, self.spec.project, {t.name: t.container for t in self.live}, fault,
                            link=self.spec.link)
        except BaseException:
            if mark is not None:  # no SIGTERM came: a later preempt's is the one its workers meet
                mark.unlink(missing_ok=True)
            raise
        # (after the engine sent it: the workers get it from torchrun later still, so that what
        # they do about it comes after this, and a save of theirs a moment before it does not)
        signalled = self.wall_time(self.clock())
        tracker = self.trackers[node]
        if fault.action.on_rank:
            tracker.result.culprit_rank = fault.rank
        tracker.result.fault = str(fault)
        if fault.action is FaultAction.RESTART:  # its container started again: what a restart ends is gone
            tracker.restarted()
        elif fault.action is FaultAction.KILL_RANK:
            tracker.rank_killed()
        elif fault.action.lasting and not fault.has_end:
            tracker.holding.append(str(fault))
        if fault.action is FaultAction.LOSE:  # for good: no restart brings it back
            tracker.result.lost = str(fault)
        if fault.action is FaultAction.PREEMPT:  # as a cluster preempts: SIGTERM, then SIGKILL after the grace
            self.force_at[tracker.name] = (self.clock() + self.spec.stop_grace_s, self.spec.stop_grace_s)
            self.preempted_at.setdefault(tracker.name, (str(fault), signalled))
        return tracker.name

    def mark_sigterm(self, node: str) -> Optional[Path]:
        """Leave the mark that tells a node's workers a SIGTERM is on its way (before it is sent):
        they say again the files they write after it; return it (None: it could not be left, and
        what the workers write again is not said, which the run's log says)."""
        mark = self.spec.run_dir / PROGRESS_SUBDIR / f"{SIGTERM_MARK_PREFIX}{node}"
        try:
            mark.touch()
        except OSError as exc:
            log.warning("could not mark %s's SIGTERM for its workers (%s): files they write again after it"
                        " are not said", node, exc)
            return None
        return mark

    def fault_store(self, fault: FaultSpec) -> str:
        """Do a fault to the run's own rendezvous store (the scheduler's inject); return its target.

        Raises:
            NodeLookupError: When the run has no such store, or it is gone.
        """
        if self.store_service is None:
            raise NodeLookupError("the run has no rendezvous store of its own (--rdzv-store container)")
        if fault.action is FaultAction.KILL:  # set first: its death may be seen before the engine answers
            self.store_killed_by = str(fault)
        try:
            container = find_store_container(self.client, self.spec.run_id, self.store_service)
            return do_fault(self.client, self.spec.project, {STORE_TARGET: container}, fault)
        except BaseException:
            self.store_killed_by = ""
            raise

    def faults_on_live_nodes(self) -> list[str]:
        """The run's own faults without an end that the nodes still running suffer now (a pause
        without an end holds its node until the stop lets it go): every one done to a node since
        its latest start, not only its latest fault (a pause, then a slow: both still hold)."""
        return [spec for t in self.live for spec in t.holding]

    def let_the_store_go(self) -> None:
        """As the nodes are stopped: a fault that still holds the run's store (paused, cut off)
        is ended first, and said. The agents' shutdown may reach for it, and a kept run
        (``--keep``) keeps no store hung; the nodes' own are let go by their stop."""
        self.faults.end_early(lambda fault: fault.on_store, self.clock() - self.started_at)

    def undo(self, fault: FaultSpec, node: str) -> None:
        """End a lasting fault (the scheduler's callback): the node, or its worker, is well again."""
        if fault.on_store:
            assert self.store_service is not None
            container = find_store_container(self.client, self.spec.run_id, self.store_service)
            end_fault(self.client, self.spec.project, {STORE_TARGET: container}, fault, node=STORE_TARGET)
            return
        tracker = self.trackers[node]
        if fault.action.on_storage:
            self.storage.end(fault)
            self.blame_what_still_holds(tracker)
            return
        end_fault(self.client, self.spec.project, {t.name: t.container for t in self.trackers.values()}, fault, node=node,
                  cpus_per_node=self.spec.cpus_per_node, link=self.spec.link)
        self.blame_what_still_holds(tracker)

    def blame_what_still_holds(self, tracker: NodeTracker) -> None:
        """A fault with an end ended on a node: its blame goes back to a fault that still holds it,
        with an end still to come (a slow to 30 s and a degrade to 60: the degrade), else the
        latest without an end (a pause, then a slow that ended: the pause still freezes it), or to
        none."""
        with_an_end = [str(fault) for fault, node in self.faults.lasting if node == tracker.name]
        still = with_an_end[-1:] or tracker.holding[-1:]
        held = parsed_fault(still[0]) if still else None
        tracker.result.fault = str(held) if held is not None else ""
        tracker.result.culprit_rank = held.rank if held is not None and held.action.on_rank else None

    def firing_in_effect(self, tracker: NodeTracker) -> str:
        """The firing of ``tracker``'s fault that is in effect now ("": none, or it ended): a
        storage fault by where it is armed, the run's own by when it fired, a ``fault RUN`` one by
        its id. The same spec fired again after its end is another firing."""
        spec = tracker.result.fault
        fault = parsed_fault(spec) if spec else None
        if fault is None:
            return ""
        if fault.action.on_storage:
            key = self.storage.armed_key(spec, tracker.name)
            return f"{spec} armed as {key}" if key else ""
        lasting = any(str(f) == spec and n == tracker.name for f, n in self.faults.lasting) or spec in tracker.holding
        own = [r for r in self.faults.fired
               if r.spec == spec and r.node == tracker.name and r.ended_s is None and lasting]
        if own:
            return f"{spec} fired {own[-1].elapsed_s} s into the job"
        live = [fault_id for fault_id, r in self.live_faults.done.items()
                if r.spec == spec and r.node == tracker.name and r.ended_s is None]
        return f"{spec} done by `fault` as {live[-1]}" if live else ""

    # Storage faults ---------------------------------------------------------------------

    def arm_storage(self, fault: FaultSpec) -> str:
        """Arm a storage fault for its node's workers (the scheduler's inject); return the node.
        A torn write blames its node once it tears (:meth:`on_storage_event`), a full disk now."""
        if fault.node not in {t.name for t in self.live}:
            raise NodeLookupError(f"{fault.node} is not running")
        glob = self.storage.arm(fault, self.writes.latest() if self.writes is not None else None).glob
        what = "the next write is cut short, and the node killed"
        if fault.action is FaultAction.DISK_FULL:
            what = "writes fail with ENOSPC"
            self.trackers[fault.node].result.fault = str(fault)
            if not fault.has_end:
                self.trackers[fault.node].holding.append(str(fault))
        self.say(f"{fault}: armed on {fault.node}'s workers, files {glob!r} of the work directory: {what}")
        return fault.node

    def end_a_full_disk_met_again(self, tracker: NodeTracker, fault: FaultSpec, event: StorageEvent) -> None:
        """A full disk failed a write of a later attempt of ``tracker``'s workers than one whose write
        it failed before: torchrun restarted them in place, and the new attempt met the same firing.
        Where it still holds when the attempts torchrun has left would reach the write, every restart
        left would meet it again: the node is stopped, and the job ends, naming the fault (a restart
        in place per firing is let be, as a script may catch a failed write and go on; one whose end
        comes first is let be too; so is one after an attempt whose rank reported a step after its
        failed write: it went on, and its end was another's). An event from before the container's
        latest start is an earlier container's torchrun's, read late: its attempts are not this one's."""
        if event.attempt is None or event.time is None or tracker.predates_start(event.time):
            return
        before = self.full_disk_attempts.get((event.node, event.key))
        self.full_disk_attempts[(event.node, event.key)] = (event.attempt, event.time, event.rank)
        if before is None or event.attempt <= before[0]:  # its first attempt to meet it (a new torchrun counts from 0)
            return
        if before[2] is not None and self.progress.stepped_after(before[2], before[1]):
            return  # the earlier attempt caught its failed write and went on: not ended by it
        ending = self.winding_down or self.first_failure_seen or self.kill_at is not None or self.stop_requested()
        if not self.active or ending or tracker.phase.final or tracker.phase is NodePhase.RESTARTING:
            return
        attempt_s = max(event.time - before[1], 0.0)
        restarts_left = self.spec.max_restarts - event.attempt  # torchrun's --max-restarts is the run's
        holds = full_disk_outlasts(fault, self.clock() - self.started_at, attempt_s, restarts_left)
        if not holds:
            return
        by = f"rank {event.rank}" if event.rank is not None else f"a worker of {event.node}"
        self.restarts.met_again_in_place(tracker, (
            f"{fault}: {by}'s write to {event.file} failed again in attempt {event.attempt + 1} of {event.node}'s"
            f" workers, after torchrun restarted them in place ({attempt_s:.1f} s after attempt {before[0] + 1}'s):"
            f" the full disk still holds ({holds}), so every restart would meet it again; stopping {event.node},"
            " and the job ends"))
        self.stopped_on_a_full_disk.add(tracker.name)
        try:
            tracker.container.kill()
        except engine_errors() as exc:  # it ended meanwhile
            log.debug("kill after a full disk met again: %s", exc)

    def on_storage_event(self, fault: Optional[FaultSpec], event: StorageEvent) -> None:
        """A worker met a storage fault: say where; a torn write's node dies at once (killed by
        the supervisor that follows the run actively, not by one that only watches)."""
        spec = str(fault) if fault is not None else self.live_faults.spec_of(event.key) or f"{event.kind}:{event.node}"
        self.say(f"{spec}: {event.describe()}")
        self.record("storage-fault", node=event.node, spec=spec, storage=event.kind, file=event.file, rank=event.rank,
                    byte=event.byte, size=event.size)
        if fault is not None:
            self.faults.note(fault, event.describe(), struck=event.file if event.torn else "")
        tracker = self.trackers.get(event.node)
        armed_still = fault is not None and self.storage.still_armed(event.key)
        if armed_still and not event.torn and not event.returned and tracker is not None:
            # a write it failed raises in the worker: the node's end is the fault's, in whichever attempt (a
            # restart let its blame go, but the full disk held on)
            tracker.result.fault = spec
            self.end_a_full_disk_met_again(tracker, fault, event)
        if not event.torn or not self.active or tracker is None or tracker.phase.final:
            return
        if fault is not None:
            self.storage.end(fault)
        tracker.result.fault = spec
        self.say(f"killing {event.node}: a crash in the middle of the save")
        try:
            tracker.container.kill()
        except engine_errors() as exc:  # it ended meanwhile
            log.debug("kill after a torn write: %s", exc)

    # Hangs ------------------------------------------------------------------------------

    def expected_ranks(self) -> set[int]:
        """The ranks that should answer: the live nodes', and those of nodes that finished while
        the others run on, which may be waiting for them (an elastic run's: those seen since its
        last restart)."""
        planned = {rank for t in self.live for rank in t.plan.global_ranks}
        if not planned:
            return set(self.ranks_seen)
        return planned | {rank for t in self.trackers.values() if t.phase is NodePhase.SUCCEEDED
                          for rank in t.plan.global_ranks}

    def rank_hosts(self) -> list[RankHost]:
        """The live nodes as the rank probe sees them, each with the fault it suffers now."""
        return [RankHost(t.name, t.container, t.plan.global_ranks, len(t.plan.process_gpus),
                         tuple(filter(None, [parsed_fault(t.result.fault)]))) for t in self.live]

    def why_absent(self, ranks: set[int]) -> dict[int, str]:
        """Why ranks that did not answer cannot (the hang watchdog's callback)."""
        why = absent_reasons(self.client, self.rank_hosts(), ranks, returned=set(self.progress.finished))
        why.update({rank: finished_node_reason(t.name) for t in self.trackers.values()
                    if t.phase is NodePhase.SUCCEEDED for rank in t.plan.global_ranks if rank in ranks})
        return why

    def look_at_the_end(self, occasion: str = AT_THE_TIME_LIMIT) -> None:
        """Before the time limit (or an interrupt: ``occasion``) stops a run whose quiet time the
        watchdog has not judged yet: its two looks at every rank
        (:meth:`HangWatch.look_at_the_end`), no fault firing meanwhile, nor a verdict of the
        watchdog's own."""
        hangs = self.hangs
        if hangs is None or self.ending or self.winding_down or not hangs.due_at_the_end():
            return  # (a run already ending, by a failure or a stop, waits on that, not on a hang)
        self.faults.cancel(self.faults_on_live_nodes(), [t.name for t in self.live])
        self.looking_at_the_end = True
        try:
            hangs.look_at_the_end(lambda until: self.loop(until=until), occasion)
        finally:
            self.looking_at_the_end = False

    def end_hung(self, found: HangDiagnosis) -> None:
        """End a run that made no progress for --hang-timeout: say where every rank waits, then
        stop every node."""
        self.hang = found
        say_hung(found, self.say, self.record)
        self.say("stopping every node")
        self.first_failure_seen = True
        self.stop(self.live, self.spec.stop_grace_s)

    @property
    def ending(self) -> bool:
        """The job is ending (its first failure, a hang verdict): its lines are its end, not a move."""
        return self.first_failure_seen or self.kill_at is not None

    @property
    def live(self) -> list[NodeTracker]:
        return [t for t in self.trackers.values() if not t.phase.final]

    # The loop ----------------------------------------------------------------------------

    def follow(self, timeout_s: Optional[float] = None) -> RunResult:
        """Follow the run until every node has ended (or ``timeout_s`` has passed: every node
        is then stopped, and the run fails, saying so); return how it ended.

        KeyboardInterrupt propagates, with the sources still open: the caller decides whether
        that stops the run (:meth:`wind_down`, the foreground launcher) or only detaches
        (:meth:`close`, ``attach``).
        """
        self.engine_events.start()
        for tracker in self.trackers.values():
            self.sync(tracker)
            self.logs.follow(tracker)
        self.faults.announce()
        if self.hangs is not None:  # a job stuck before its first line (a rendezvous, a stopped rank) counts too
            # (an attach: quiet since the run's last output, not since the attach, so that its words and
            # its --hang-timeout are true)
            quiet_before = self.attached_at.quiet_s if self.attached_at is not None else None
            self.hangs.progress(self.clock() - (quiet_before or 0.0))
        try:
            self.loop(until=None if timeout_s is None else self.clock() + timeout_s)
        except KeyboardInterrupt:
            raise
        except BaseException:
            self.close()
            raise
        if self.live:  # the time limit, not the job, ended it
            self.look_at_the_end()
        if self.live:  # (the job may have ended during the look)
            self.say(f"the run did not end within its time limit of {timeout_s:g} s: stopping every node")
            result = self.wind_down(self.spec.stop_grace_s, look_first=False, by_request=False)  # (looked at above)
            result.error, result.error_exit_code = f"timed out: the job did not end within {timeout_s:g} s", 1
            return result
        self.close()
        return self.result()

    def loop(self, until: Optional[float] = None) -> None:
        """Take the sources' messages, and tick every :data:`TICK_S`, until every node has ended
        (or ``until``)."""
        next_tick = self.clock()
        while self.live and (until is None or self.clock() < until):
            if self.clock() >= next_tick:
                self.tick()
                next_tick = self.clock() + TICK_S
            try:
                message = self.inbox.get(timeout=min(TICK_S, max(0.0, next_tick - self.clock())))
            except queue.Empty:
                continue
            self.handle(message)
            self.take_waiting(until=next_tick)
            self.logs.flush(list(self.trackers.values()))

    def take_waiting(self, until: float) -> None:
        """Handle the messages that are already waiting, until ``until`` (the next tick)."""
        while self.live and self.clock() < until:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return
            self.handle(message)

    def close(self) -> None:
        """Stop reading the sources; close the node logs."""
        if self.closed:
            return
        self.closed = True
        self.engine_events.close()
        for tracker in self.trackers.values():
            tracker.output.log_file.close()

    def wind_down(self, grace_s: float, look_first: bool = True, by_request: bool = True,
                  stopped_by: str = "") -> RunResult:
        """After an interrupt: stop every node (SIGTERM, then SIGKILL after ``grace_s``) and
        follow them to their end, so that their last lines and real times are kept. A second
        interrupt kills them at once. ``look_first``: a job quiet since its last line is looked at
        first (:meth:`look_at_the_end`), unless the stop has no grace; an interrupt during the
        look propagates, for the caller to wind down again without one (the launcher: at once).
        ``by_request``: a stop asked of the run stops them (not the run's own time limit).
        ``stopped_by``: who stopped them (its launcher's Ctrl-C), left in the run's stop request
        as the stop begins, after the look, so that an attach watching the run says STOPPED."""
        killed_all, deadline = False, None  # every node has had its SIGKILL
        said: list[bool] = []

        def kill_now() -> float:  # said once, even if an interrupt makes it run again
            if not said:
                self.say("interrupted again: killing every node now")
                said.append(True)
            self.kill(self.live)
            return self.clock() + LOG_DRAIN_S + WIND_DOWN_MARGIN_S

        if look_first and grace_s > 0:  # a job quiet since its last line: where every rank waits, before the stop
            self.look_at_the_end(AT_THE_INTERRUPT)  # (a further interrupt cuts it short: the caller then kills)
        self.winding_down = True
        self.let_the_store_go()
        self.faults.cancel(self.faults_on_live_nodes(), [t.name for t in self.live])
        while True:  # an interrupt anywhere in here forces; a further one is waited out
            try:
                if deadline is None:
                    deadline = self.clock() + grace_s + WIND_DOWN_MARGIN_S
                    for tracker in self.live:  # (not where an ending of the launcher's own had begun)
                        tracker.result.stopped_by_request = by_request and not (
                            tracker.result.killed_by_launcher or self.ending)
                    if stopped_by and self.live:  # the nodes this stop stops, for whoever watches the run (not
                        # uninterrupted: a second Ctrl-C here kills now, as anywhere in the stop)
                        mark_stop_requested(self.spec.run_dir, [t.name for t in self.live], stopped_by, grace_s=grace_s)
                    self.stop(self.live, grace_s)
                    killed_all = grace_s <= 0  # a stop without a grace kills
                self.loop(until=deadline)
                break
            except KeyboardInterrupt:
                if not killed_all:  # the first further one, or one that cut the stop short
                    killed_all = True
                    deadline = uninterrupted(kill_now)
        self.close()
        for tracker in self.live:  # no end seen in time: the teardown removes them
            tracker.move(NodePhase.STOPPED)
        return self.result()

    def sync(self, tracker: NodeTracker) -> None:
        """Take a node's phase from its container as the supervisor starts following it."""
        tracker.container.reload()
        state = tracker.container.attrs.get("State", {})
        tracker.first_started = engine_time(state.get("StartedAt", ""))
        # its current run's start: an event of a run before it (an attach's replay of the last
        # second: a restart's own die) is no news of this one
        tracker.latest_start = tracker.latest_start or tracker.first_started
        self.node_addresses = addresses_with(self.node_addresses, tracker.name, tracker.container.attrs)
        if tracker.container.status in ("running", "paused", "restarting"):
            tracker.move(NodePhase.STARTING)
        elif tracker.container.status in ("exited", "dead"):
            tracker.move(NodePhase.STARTING)
            tracker.exit_code = state.get("ExitCode")
            tracker.exited_at = self.clock()
            tracker.exited_time = engine_time(state.get("FinishedAt", "")) or None
            self.record_end(tracker, "node-exited", exit_code=tracker.exit_code, via="inspection",
                            when=tracker.exited_time)
            tracker.result.note_oom(in_state=bool(state.get("OOMKilled")))

    def end_recorded(self, tracker: NodeTracker, kind: str) -> bool:
        """Whether the record before this follower holds an end event ``kind`` of the node
        (``node-exited``, ``node-failed``, ...) since its container's latest start: an earlier
        attach saw it end, and recorded it as its die event came (at its own time of it, not the
        engine's); an end before that start was an earlier attempt's."""
        return any(e["event"] == kind and e.get("node") == tracker.name
                   and e["time"] >= (tracker.first_started or 0.0) for e in self.recorded_before)

    def record_end(self, tracker: NodeTracker, kind: str, **fields: Any) -> None:
        """Record how a node ended, unless an earlier follower recorded that end already."""
        if not self.end_recorded(tracker, kind):
            self.record(kind, node=tracker.name, **fields)

    def read_channels(self, now: float) -> None:
        """What the workers and ``fault RUN`` wrote meanwhile: steps, files, faults, storage events."""
        recovery = self.restarts.open_recovery
        self.progress.poll(now, recovery, None if recovery is None else self.wall_time(recovery.failed_at))
        self.say_debugger_changes()
        if self.progress.init_records > self.init_records:
            self.init_records = self.progress.init_records
            self.warn_of_certain_init_waits()
        if self.writes is not None:
            self.writes.poll(now)
        self.live_faults.poll()
        for fault, event in self.storage.poll():
            self.on_storage_event(fault, event)

    def say_debugger_changes(self) -> None:
        """Say a rank that stopped in its debugger, and how to reach it; and when it left."""
        changes, self.progress.debugger_changes = self.progress.debugger_changes, []
        for change, rank in changes:
            if change == WAITS:
                self.say(waits_line(rank, self.spec.run_id))
            elif change == LEFT:
                self.say(f"rank {rank.rank} left its debugger")
            if self.active:
                self.record("debugger", rank=rank.rank, node=rank.node, state=change, call=rank.call,
                            where=rank.where(), what=rank.what())

    def warn_of_certain_init_waits(self) -> None:
        """Say, once and as soon as the calls are made, ``init_process_group`` calls that can only
        wait until torch's timeout (ranks of several nodes each in a store on its own node), rather
        than minutes later with every rank's stack."""
        if self.init_wait_said:
            return
        nodes = {rank: t.name for t in self.trackers.values() for rank in t.plan.global_ranks}
        for text in certain_init_waits(self.progress.init_asked, nodes):
            self.init_wait_said = True
            self.say(f"warning: {text}")
            if self.active:
                self.record("init-will-wait", text=text)

    def held_by(self) -> str:
        """The faults with an end that hold the job now, named (those from another terminal as such)."""
        held = [str(fault) for fault, _ in self.faults.lasting]
        held += ["a fault from `python -m orchestrate fault`"] if self.live_faults.holding else []
        return ", ".join(held)

    def tick(self) -> None:
        """What time alone decides: progress, due faults, the end of a failure's grace, stop
        graces that ran out, inspections, exits whose log never ended."""
        now = self.clock()
        self.read_channels(now)
        if not self.winding_down and self.stop_requested():
            self.winding_down = True  # `stop RUN` is stopping the nodes: no hang verdict, no more faults
            self.let_the_store_go()
            self.faults.cancel(self.faults_on_live_nodes(), [t.name for t in self.live])
        if self.hangs is not None and not self.winding_down:  # (a stop's lines keep the verdict of the quiet before it)
            reported = self.progress.records > self.progress_records and not (
                self.attached_at is not None and self.progress.newest_time <= self.attached_at.host_time)
            held_by = self.held_by()
            held = bool(held_by) or self.progress.debugger.attached()
            if reported or held:
                # a step reported, a fault with an end holding the job as asked, or a terminal
                # debugging a rank: not a hang (the job moved only where a record came of itself)
                self.progress_records = self.progress.records
                self.hangs.progress(now, moved=reported and not held and not self.ending, held_by=held_by)
            if not (self.first_failure_seen or self.kill_at is not None or self.looking_at_the_end):
                found = self.hangs.poll(now)
                if found is not None:
                    self.end_hung(found)
        if self.faults.waiting:
            self.faults.fire_due(now - self.started_at, self.progress.max_step, self.progress.attempt_steps,
                                 self.progress.step_said)
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            self.stop(self.live, self.spec.stop_grace_s)
        graces_out, given_none = [], []
        for name, (at, grace_s) in list(self.force_at.items()):
            if now >= at:
                del self.force_at[name]
                if not self.trackers[name].phase.final and self.trackers[name].exited_at is None:
                    (graces_out if grace_s > 0 else given_none).append(self.trackers[name])
        if graces_out:
            self.kill_after_grace(graces_out)
        if given_none:  # (a preempt's under --stop-grace 0: its SIGKILL follows the SIGTERM at once)
            self.kill_after_grace(given_none, no_grace=True)
        if self.inspector.due(now):
            for seen in self.inspector.inspect([t for t in self.live if t.phase is not NodePhase.CREATED]):
                self.on_seen(self.trackers[seen.node], seen)
        for tracker in self.live:
            if (tracker.exited_at is not None and tracker.phase is not NodePhase.RESTARTING
                    and now - max(tracker.exited_at, tracker.last_line_at) > LOG_DRAIN_S):
                if tracker.log_open:  # the engine never ended its log: what it still held is not shown
                    self.say(f"{tracker.name}'s log had not ended {LOG_DRAIN_S:g} s after it exited: its last lines"
                             f" may be missing here and from {tracker.name}.log (docker logs has them while the"
                             " container exists)")
                self.finish(tracker)
        self.faults.warn_if_no_progress(
            self.progress.seen, None if self.first_worker_at is None else now - self.first_worker_at)

    def handle(self, message: Message) -> None:
        if isinstance(message, EventsEnded):
            self.say(f"the engine's event stream ended ({message.reason}); following the nodes by inspecting"
                     " their containers")
            self.record("events-ended", reason=message.reason)
            self.inspector.without_events()
            return
        if isinstance(message, EngineEvent) and message.node == self.store_service:
            self.on_store_event(message)
            return
        tracker = self.trackers[message.node]
        if isinstance(message, EngineEvent):
            self.on_engine_event(tracker, message)
            return
        if isinstance(message, LineArrived) and message.stream == tracker.stream:  # taken now: a backlog still read
            tracker.last_line_at = self.clock()
        self.on_lines(tracker, self.logs.take(tracker, message), message.at,
                      message.stamp if isinstance(message, LineArrived) else None)
        # (not final: the late end of a stream a restart superseded, or of one the node's end no
        # longer waited for after its exit, is not the node's end again)
        if (isinstance(message, LogEnded) and not tracker.log_open and tracker.phase is not NodePhase.RESTARTING
                and not tracker.phase.final):
            if tracker.exited_at is not None:
                self.finish(tracker)
            else:  # the stream ended, but no exit was seen: ask the engine what happened
                self.inspector.soon()

    def before_the_attach(self, stamp: Optional[float]) -> bool:
        """Whether a line the engine stamped so came before the attach that follows the run: read
        again from the start, the run's history is no progress now (its quiet counted from it)."""
        return self.attached_at is not None and stamp is not None and stamp < self.attached_at.engine_time

    def on_lines(self, tracker: NodeTracker, lines: list[OutputLine], at: float,
                 stamp: Optional[float] = None) -> None:
        """A node's workers' first lines mark its ranks started and the node running, recorded at
        the engine's time of the line (``stamp``) where known: a log read after the node ended
        is not when it ran; any worker line but torch's own log lines is progress. A line from
        before the container's current run (the attempt before a restart, read again by the
        stream that follows the new one) is shown and is progress, but marks nothing started."""
        progress = [line for line in lines if line.global_rank is not None and is_progress_line(line.text)]
        dying = [self.dying_ranks.dying_line(line.global_rank, line.text) for line in progress]
        if self.hangs is not None and not self.winding_down and progress and not self.before_the_attach(stamp):
            if all(dying):  # a rank dying of its error (its collective's timeout): no move
                self.hangs.progress(at, moved=False)
            else:
                self.hangs.progress(at, moved=not self.ending)  # (a failure's traceback, a hang's end: no move)
        if tracker.predates_start(stamp):  # a line of the attempt before
            return
        for line in lines:
            if line.global_rank is not None and line.global_rank not in self.ranks_seen:
                self.ranks_seen.add(line.global_rank)
                self.record("rank-started", node=tracker.name, rank=line.global_rank, when=stamp or None)
            if line.local_rank is not None and tracker.phase is NodePhase.STARTING:
                tracker.move(NodePhase.RUNNING)
                self.record("node-running", node=tracker.name, when=stamp or None)
                if self.first_worker_at is None:
                    self.first_worker_at = at

    def on_engine_event(self, tracker: NodeTracker, event: EngineEvent) -> None:
        if event.action == "oom":
            tracker.result.note_oom(event=True)
            self.record("oom", node=tracker.name)
        elif (event.action == "start" and tracker.phase in (NodePhase.RESTARTING, NodePhase.CREATED)
              and not tracker.predates_start(event.stamp, STAMP_SLACK_S)):
            # A restarted container's log goes on from the restart; a container that was only
            # created when we began following has had no log stream worth the name yet.
            restarted = tracker.phase is NodePhase.RESTARTING
            tracker.move(NodePhase.STARTING)
            if event.stamp:
                tracker.latest_start = max(tracker.latest_start or 0.0, event.stamp)
            if restarted or not tracker.log_open:
                self.on_lines(tracker, self.logs.follow(tracker, since=event.stamp or None), event.at)
        elif (event.action == "die" and tracker.phase is not NodePhase.RESTARTING and not tracker.phase.final
              and tracker.exited_at is None  # an inspection may have seen the exit first
              and not tracker.predates_start(event.stamp)):  # strict: a restart's own die comes just before it
            code = event.attrs.get("exitCode")
            self.on_exit(tracker, int(code) if code not in (None, "") else None, event.at)

    def on_store_event(self, event: EngineEvent) -> None:
        """The run's store container died while the job ran: every node's agent loses the
        rendezvous, and the nodes' failures that follow are its consequence."""
        ending = self.winding_down or self.first_failure_seen or self.kill_at is not None or self.stop_requested()
        if event.action != "die" or ending or not self.live or self.store_lost:
            return
        if any(self.failed_before_the_store(t) for t in self.trackers.values()):
            return  # a node's own failure came first (its log still draining): it, not the store, ends the job
        code = event.attrs.get("exitCode")
        self.lost_store(event.node, int(code) if code not in (None, "") else None)

    def failed_before_the_store(self, tracker: NodeTracker) -> bool:
        """Whether a node's own failure came before the run's store died and is still being read:
        it exited non-zero, not on a stop, is not restarting, and has not ended yet (its log drains;
        a node lost for good has ended, and the store's death after it is news). At its exit the
        engine's clock was asked whether the store had ended before it (:meth:`store_died_first`):
        it had not."""
        return (tracker.exited_at is not None and tracker.exit_code != 0 and not tracker.phase.final
                and tracker.phase is not NodePhase.RESTARTING and not self.stopped_on_request(tracker))

    def lost_store(self, service: str, code: Optional[int]) -> None:
        """Say and record that the store died: the cause of the nodes' failures that follow."""
        self.live_faults.poll()  # a kill from another terminal is noted before it is done
        killed_by = self.store_killed_by or self.live_faults.store_killed_by
        self.store_lost = (f"the run's rendezvous store (its container {service}) died"
                           f" (exit code {code if code is not None else 'unknown'})"
                           + (f", killed by injected fault {killed_by}" if killed_by else ""))
        self.say(self.store_lost)
        self.record("store-died", service=service, exit_code=code)

    def store_died_first(self, failed: NodeTracker) -> None:
        """At the first failure, before the store's death is ruled out as its cause: the
        store's die event may not be in yet (an inspection saw the nodes' exits first)."""
        if self.store_service is None or self.store_lost or self.winding_down or self.stop_requested():
            return
        ended = store_ended_before(self.client, self.spec.run_id, self.store_service, failed.container)
        if ended is not None:
            self.lost_store(self.store_service, ended.exit_code)

    def on_seen(self, tracker: NodeTracker, seen: Seen) -> None:
        """What an inspection found that the events did not say: an exit, a restart, a broken log."""
        if seen.ended and tracker.exited_at is None and tracker.phase is not NodePhase.RESTARTING:
            tracker.result.note_oom(in_state=seen.oom_killed)
            if seen.status == "gone" and not self.stopped_on_request(tracker):  # `down RUN` removes what it stops
                tracker.result.unresponsive = tracker.result.unresponsive or f"its container is gone ({seen.detail})"
            self.on_exit(tracker, seen.exit_code, self.clock(), via="inspection")
        elif tracker.phase is NodePhase.RESTARTING and (seen.status == "running" or seen.ended):
            if tracker.predates_start(seen.started_at, STAMP_SLACK_S):
                return  # seen before its restart (one inspection's sightings outlive a restart it caused)
            tracker.move(NodePhase.STARTING)  # its start event is late, or was missed
            tracker.latest_start = max(tracker.latest_start or 0.0, seen.started_at or 0.0) or None
            # (one that started and already ended, between two looks: the next look sees its end)
            self.on_lines(tracker, self.logs.follow(tracker, since=dict(tracker.last_log_stamps)), self.clock())
        elif seen.status in ("running", "paused") and not tracker.log_open and tracker.exited_at is None:
            # its log stream broke off (the engine's connection dropped): go on where it stopped
            self.on_lines(tracker, self.logs.follow(tracker, since=dict(tracker.last_log_stamps)), self.clock())

    def on_exit(self, tracker: NodeTracker, code: Optional[int], at: float, via: str = "") -> None:
        """A node's container ended: restart the job (elastic), or finish the node."""
        # a fault from another terminal is noted before it is done: read now, the node's end is blamed
        # on it however soon after the last tick the engine's event came
        self.live_faults.poll()
        tracker.exit_code, tracker.exited_at = code, at
        self.force_at.pop(tracker.name, None)  # a SIGKILL due after a grace: it ended before
        self.record("node-exited", node=tracker.name, exit_code=code, **({"via": via} if via else {}))
        ending = (self.kill_at is not None or self.first_failure_seen or self.winding_down
                  or self.stopped_on_request(tracker))
        if not ending and code != 0 and self.store_service is not None:
            self.store_died_first(tracker)  # (its die event may come later than this exit)
        ending = ending or bool(self.store_lost)  # a dead store: no node restarted could rejoin a rendezvous
        if self.restarts.should_restart(tracker, ending) and not self.container_gone(tracker):
            self.restarts.restart(tracker, list(self.trackers.values()), *self.progress.step_said())
            self.force_at.clear()  # every node starts a new attempt: no grace set for the old one stands
            self.ranks_seen.clear()
            return
        self.restarts.met_again(tracker, ending) or self.restarts.out_of_restarts(tracker, ending)
        if not tracker.log_open:
            self.finish(tracker)

    def container_gone(self, tracker: NodeTracker) -> bool:
        """Whether a node's container no longer exists, or is being removed (``docker rm -f``
        from elsewhere: its die comes with the status "removing"): nothing can restart it, and
        its end is a failure that says so."""
        try:
            tracker.container.reload()
        except engine_errors() as exc:
            if classify(exc) is not EngineFault.NOT_FOUND:
                return False  # the engine cannot say now: the restart tries
            gone = describe(exc)
        else:
            if tracker.container.status != "removing":
                return False
            gone = "being removed"
        tracker.result.unresponsive = tracker.result.unresponsive or f"its container is gone ({gone})"
        return True

    # Endings -----------------------------------------------------------------------------

    def stop_requested(self) -> frozenset[str]:
        """The nodes ``stop RUN`` (from another terminal) is stopping, those live when it came:
        looked for in the run's directory until it has come, then kept."""
        if not self.stop_request.nodes:
            self.stop_request = read_stop_request(self.spec.run_dir)
        return self.stop_request.nodes

    def stopped_on_request(self, tracker: NodeTracker) -> bool:
        """Whether ``stop RUN`` is stopping this node: its end is then neither a failure nor a
        death to recover from."""
        return tracker.name in self.stop_requested()

    def wall_time(self, at: float) -> float:
        """Unix seconds of a moment on the supervisor's clock (the clock the workers' records use)."""
        return self.started_time + (at - self.started_at)

    def grace_ran_out_on_request(self, tracker: NodeTracker) -> dict[str, Any]:
        """Whether ``stop RUN`` had to SIGKILL this node it stopped: it ended 137 when the grace
        of the latest stop asked ran out (at once, where it gave none), not before (a fault's
        kill, ``docker kill``). The
        request is read anew: a later ``stop`` or ``down`` may have asked another grace, and
        ``stop`` adds what still ran in the node just before the SIGKILL. Noted in the node's
        result; the node-stopped event's fields that say so."""
        result = tracker.result
        if result.exit_code != KILLED_EXIT_CODE:  # (an OOM-killed node is not stopped on request)
            return {}
        request = read_stop_request(self.spec.run_dir)
        ended = self.wall_time(tracker.exited_at or self.clock())
        if (request.grace_s is None or request.time is None
                or ended < request.time + request.grace_s - KILL_TIME_SLACK_S):
            return {}
        result.grace_ran_out = True
        result.no_grace = request.grace_s <= 0  # (`stop --timeout 0`: its SIGKILL came with the SIGTERM)
        result.still_running = request.left_running(tracker.name)
        return {"grace_ran_out": True, **({"no_grace": True} if result.no_grace else {}),
                **({"still_running": result.still_running} if result.still_running else {})}

    def finish(self, tracker: NodeTracker) -> None:
        """A node ended: record how, and on the first failure start ending the job."""
        result = tracker.result
        result.exit_code = tracker.exit_code
        result.ended_at = tracker.exited_at or self.clock()
        result.wall_s = result.ended_at - self.started_at
        if result.exit_code == 0:
            tracker.move(NodePhase.SUCCEEDED)
        elif result.lost:  # a lose fault took it (whatever else was sent it): the job goes on without it, or fails
            self.lose(tracker)
        elif result.killed_by_launcher:
            tracker.move(NodePhase.STOPPED)
        elif ((result.exit_code in STOP_EXIT_CODES or result.exit_code is None) and not result.oom_kills
              and self.stopped_on_request(tracker)):
            # `stop RUN` stopped it from another terminal, or `down RUN` stopped and removed it (its
            # exit code gone with it where an inspection saw it gone before its die event came)
            self.stop_came = True
            result.stopped_by_request = not self.ending
            tracker.move(NodePhase.STOPPED)
            extra = self.grace_ran_out_on_request(tracker)
            self.record_end(tracker, "node-stopped", exit_code=result.exit_code, by=self.stop_request.by,
                            when=tracker.exited_time, **extra)
        elif result.exit_code == EXIT_LAUNCHER_GONE:
            tracker.move(NodePhase.ORPHANED)
        else:
            tracker.move(NodePhase.FAILED)
            self.diagnosis.explain_failure(tracker, stopped_in_an_attempt=tracker.name in self.stopped_on_a_full_disk)
            cause = result.root_cause
            self.record_end(tracker, "node-failed", exit_code=result.exit_code, rank=cause.rank if cause else None,
                            when=tracker.exited_time)
            if not self.first_failure_seen and not self.store_looked_for:  # a watcher's summary names it too
                self.store_looked_for = True
                self.store_died_first(tracker)
            if self.active and not self.first_failure_seen:
                self.first_failure_seen = True
                self.end_job_after(tracker)

    def lose(self, tracker: NodeTracker) -> None:
        """A node a ``lose`` fault took for good: nothing brings it back, and the nodes left go on
        without it, as torchrun's agents do (a smaller world), unless it held the rendezvous."""
        result = tracker.result
        tracker.move(NodePhase.LOST)
        self.ranks_seen.clear()  # the nodes left come back numbered anew: the ranks past theirs answer no more
        # (where it held the rendezvous store, none can go on: that is the job's end)
        result.consequence = self.restarts.go_on_without(tracker, self.progress.max_step, at=result.ended_at)
        self.say(f"{tracker.name} {result.consequence}" if result.consequence else
                 f"{tracker.name} is lost for good ({result.lost}): the job goes on with the nodes left")
        self.record_end(tracker, "node-lost", exit_code=result.exit_code, fault=result.lost, when=tracker.exited_time)

    def end_job_after(self, failed: NodeTracker) -> None:
        """After the first failure: name and kill hung nodes now (they cannot finish anything),
        and stop the others after a grace in which they may end by themselves."""
        running = self.live
        if self.spec.memory_limited:  # an OOM kill is said with the step it came after: the steps reported up to now
            self.read_channels(self.clock())
            for tracker in self.trackers.values():
                self.note_steps_reached(tracker)
            self.diagnosis.find_oom_kills(list(self.trackers.values()))
        hung = [t for t in running if self.diagnosis.unresponsive(t)]
        self.kill(hung)
        if len(hung) < len(running):
            self.say(f"{failed.name} failed; stopping the other nodes in {FAILURE_GRACE_S:.0f} s")
            self.kill_at = self.clock() + FAILURE_GRACE_S
            self.asked_at_failure = self.ask_where_ranks_are()

    def note_steps_reached(self, tracker: NodeTracker) -> None:
        """Note in the node's result the highest step each of its ranks has reported so far."""
        tracker.result.steps_reached = self.progress.steps_reached_on(tracker.name, tuple(tracker.plan.global_ranks))

    def ask_where_ranks_are(self) -> Optional[float]:
        """Ask the ranks still running where they are as the first failure ends the job (they
        answer within the grace, before they are stopped), so that a collective's timeout places
        a rank that wrote no record of its own (one computing, or spinning, outside any
        collective) by its answer; return when it asked (Unix seconds; None: not asked)."""
        directory = debug_dir(self.spec.run_dir)
        if not directory.is_dir():
            return None
        asked = self.wall_time(self.clock()) - ATTEMPT_CLOCK_SLACK_S  # the workers' clock may be a little behind
        try:
            ask_snapshots(directory)
        except OSError as exc:  # the answers are a help: a run without them is judged as before
            log.debug("asking the ranks where they are: %s", exc)
            return None
        return asked

    def stop(self, trackers: list[NodeTracker], grace_s: float) -> None:
        """Stop these nodes as a cluster does: SIGTERM to their workers now, SIGKILL to what is
        left after ``grace_s`` (see :meth:`tick`)."""
        now = self.clock()
        for tracker in trackers:
            tracker.result.killed_by_launcher = True
        if grace_s <= 0:  # (`--stop-grace 0`) killed at once, each named as `stop --timeout 0` names them
            self.kill_after_grace(trackers, no_grace=True)
            return
        for tracker in trackers:
            self.signal(tracker, "SIGTERM")
            self.force_at[tracker.name] = (now + grace_s, grace_s)
            self.record("node-stopping", node=tracker.name, grace_s=grace_s)

    def kill_after_grace(self, trackers: list[NodeTracker], no_grace: bool = False) -> None:
        """SIGKILL nodes whose stop grace ran out (``no_grace``: their stop gave none, 0 s), each
        named with what still ran in it."""
        left = processes_at_once({tracker.name: tracker.container for tracker in trackers})
        for tracker in trackers:
            still = left.get(tracker.name, [])
            if self.kill([tracker], by_launcher=tracker.result.killed_by_launcher, still_running=still):
                tracker.result.grace_ran_out, tracker.result.still_running = True, still
                tracker.result.no_grace = no_grace
                self.say(grace_ran_out(tracker.name, still, no_grace))

    def kill(self, trackers: list[NodeTracker], by_launcher: bool = True,
             still_running: Optional[list[str]] = None) -> list[str]:
        """SIGKILL these nodes' containers now, ignoring those that already ended; the names of
        those it was sent to (``still_running``: what a grace left running, for the record)."""
        killed = []
        for tracker in trackers:
            tracker.result.killed_by_launcher = tracker.result.killed_by_launcher or by_launcher
            self.force_at.pop(tracker.name, None)
            if self.signal(tracker, "SIGKILL"):
                killed.append(tracker.name)
                extra = {"still_running": still_running} if still_running else {}
                self.record("node-killed", node=tracker.name, **extra)
        return killed

    def signal(self, tracker: NodeTracker, signal_name: str) -> bool:
        """Send a signal to a node's main process (a paused node is unpaused first, and a worker
        that a hang-rank fault stopped is continued before a SIGTERM, which it could not take
        while stopped: its node would wait out the whole grace); False when its container already
        ended or is gone."""
        if signal_name == "SIGTERM" and tracker.result.culprit_rank is not None and tracker.result.fault.startswith(
                f"{FaultAction.HANG_RANK.value}:"):
            try:
                signal_rank(self.client, {tracker.name: tracker.container}, tracker.result.culprit_rank, "SIGCONT")
            except (*engine_errors(), EngineError) as exc:  # it ended meanwhile
                log.debug("SIGCONT to rank %s before SIGTERM: %s", tracker.result.culprit_rank, exc)
        try:
            if tracker.container.status == "paused":  # as of the last inspection: unpaused since is no error
                unpause_if_paused(tracker.container)
            tracker.container.kill(signal=signal_name)
            return True
        except engine_errors() as exc:
            if classify(exc) not in (EngineFault.NOT_FOUND, EngineFault.CONFLICT):
                raise
            log.debug("%s to %s: %s", signal_name, tracker.name, exc)  # it ended meanwhile
            return False

    # The result --------------------------------------------------------------------------

    def result(self) -> RunResult:
        """How the run ended, timed by the engine (see :mod:`orchestrate.supervise.timings`)."""
        self.read_channels(self.clock())  # what came since the last tick, up to TICK_S ago
        trackers = list(self.trackers.values())
        # the ranks whose script returned before any node ended (not one that a stop made return)
        exits = [t.exited_at for t in trackers if t.exited_at is not None]
        until = self.wall_time(min(exits)) if exits else float("inf")
        finished, returned = self.progress.finished_before(until), self.progress.finished_before(float("inf"))
        for tracker in trackers:
            tracker.result.finished_ranks = {rank: finished[rank] for rank in tracker.plan.global_ranks if rank in finished}
            self.note_steps_reached(tracker)
            tracker.result.returned_ranks = tuple(rank for rank in tracker.plan.global_ranks if rank in returned)
            # torchrun's restarts in place, and what ended each restarted attempt (a failed node's are read already)
            tracker.result.restarts_in_place = restarts_in_place(self.spec.run_dir, tracker.name)
            if tracker.result.restarts_in_place and not tracker.result.attempts:
                tracker.result.attempts = restarted_attempt_errors(self.spec.run_dir, tracker.name)
        for recovery in self.restarts.recoveries:  # the nodes left trained on after a loss
            if recovery.lost and recovery.resumed_at is not None:
                self.trackers[recovery.node].result.went_on_without = True
        timings = run_timings(trackers, self.clock() - self.started_at, self.restarts.recoveries)
        timings.unrecovered = self.restarts.unrecovered
        if self.writes is not None:
            self.writes.walk()
        for name, (fault, signalled) in self.preempted_at.items():  # how the preempted nodes' ranks met the SIGTERM
            tracker = self.trackers[name]
            met = self.progress.after_sigterm(name, tracker.plan.global_ranks, signalled)
            # the lowest rank's lines, where it printed any and only one process of it ran (a rank's
            # tail spans the run: an earlier process's lines would pass for its handler's)
            shown = next((m.rank for m in met if tracker.output.rank_tails.get(m.rank)
                          and self.progress.processes_of(m.rank) == 1), None)
            lines = tuple(tracker.output.rank_tails.get(shown, ())) if shown is not None else ()
            tracker.result.preemption = Preemption(fault, self.spec.stop_grace_s, met, lines, shown)
        result = RunResult(self.spec.run_id, self.spec.run_dir, [t.result for t in trackers], timings,
                           faults=self.fault_records(), writes=self.writes.files() if self.writes else None,
                           started_time=self.started_time)
        result.store_lost = self.store_lost
        result.written_shared = self.progress.written_whole()
        result.loaded_from_before = self.writes.held_when_loaded(self.progress.loaded) if self.writes else ()
        result.written_locally = self.progress.written_on_nodes_disks()
        result.shuffled_alike = self.progress.shuffled_alike()
        if not self.restarts.recoveries and not any(t.result.restarts_in_place for t in trackers):
            # (an elastic restart renumbers ranks and begins their counts again: nothing to compare)
            result.ended_apart = ended_apart(self.progress.ended_collectives) if result.job_succeeded else ""
        result.init_calls = self.progress.groups_made()
        result.node_addresses = dict(self.node_addresses)
        if self.stop_came and not any(t.phase is NodePhase.FAILED for t in trackers):  # else the failure stands
            result.interrupted, result.signal_number = True, int(signal.SIGTERM)
            result.stopped_by = self.stop_request.by
            result.stop_look, result.stop_look_hung = self.stop_request.look, self.stop_request.look_hung
        attempt_began = max((t.latest_start or t.first_started or 0.0 for t in trackers), default=0.0)
        ranks = {r for t in trackers for r in t.plan.global_ranks}
        placed = place_failure(result.failure, debug_dir(self.spec.run_dir), ranks, attempt_began,
                               asked_since=self.asked_at_failure)
        result.stopped_where = placed.stopped_where
        said = self.hangs.diagnosis if self.hangs else None  # found hung, not ended: the run ended otherwise
        # found quiet but working, and ended from outside (an interrupt, `stop`, the time limit): where it was
        working = self.hangs.working if self.hangs and self.winding_down else None
        result.hang = self.hang or said or working or placed.timed_out
        if result.hang is not None:  # (what the diagnosis knows of the run: its hints name its options)
            result.hang.run_id, result.hang.collective_timeout_s = self.spec.run_id, self.spec.collective_timeout_s
        result.divergence, result.skipped = placed.divergence, placed.skipped
        result.collectives_checked = placed.collectives_checked or any(n.checks_collectives for n in self.spec.nodes)
        return result

    def fault_records(self) -> list[FaultRecord]:
        """Every fault asked for so far: the run's own (those that fired, then those that did not,
        with why), then those ``fault RUN`` did from another terminal; those that fell before the
        job's first step marked so."""
        step = self.progress.max_step
        return [*marked_before_first_step(self.faults.records(self.clock() - self.started_at, step, self.progress.seen),
                                          step, self.progress.first_step_time),
                *self.live_faults.records(step, self.progress.first_step_time)]
