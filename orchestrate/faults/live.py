"""Faults done now to a run that is already going (``fault RUN``), as the library does them: which
can be done (every target first, so nothing is done when one cannot be), doing each
(:func:`~orchestrate.faults.inject.do_fault`, the supervisor's own; a preempt's SIGKILL after
the run's grace is the engine's ``stop`` here, as no supervisor of ours follows the run), holding
those with an end for their duration, and undoing them, wholly, even on an interrupt.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrate.config.fault_spec import STORE_TARGET, FaultAction, FaultSpec, check_fault_levels, check_lost_nodes
from orchestrate.config.link import LinkSpec
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.errors import EngineError, UsageError
from orchestrate.faults.inject import do_fault, end_fault
from orchestrate.faults.live_notes import new_fault_id, note_live_fault
from orchestrate.faults.storage import STORAGE_REACH, ArmedStorageFaults, StorageEvent
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.text import listed

# How often a torn write held by `fault RUN` looks for the worker's tear.
TEAR_POLL_S = 0.2
# How often a held fault's nodes are looked for while it is held: removed (`down`), nothing is left to
# undo, and the hold ends then rather than at its end, which may be minutes away.
HOLD_POLL_S = 1.0


# The faults done from inside their nodes, as root, which need NET_ADMIN there: each with its tool.
NETWORK_TOOLS = {FaultAction.DEGRADE: "tc", FaultAction.LOSSY: "iptables", FaultAction.PARTITION: "ip route"}


def has_net_admin(container: Any) -> bool:
    """Whether a node's container was given NET_ADMIN (pure: its ``HostConfig``; where the engine
    says nothing of its capabilities, it is taken to have it, and its own refusal says otherwise)."""
    host = container.attrs.get("HostConfig") or {}
    if "CapAdd" not in host:
        return True
    added = {str(cap).upper().removeprefix("CAP_") for cap in host.get("CapAdd") or []}
    return bool(host.get("Privileged")) or bool(added & {"NET_ADMIN", "ALL"})


class LiveFaults:
    """Faults for the live nodes of one run.

    Args:
        client: The engine.
        run_id: The run, as the user named it.
        project: Its Compose project (a disconnect needs its network).
        live: Its live nodes' containers, by node name.
        stop_grace_s: The run's stop grace: a preempt's SIGTERM to SIGKILL.
        cpus_per_node, link: What the run gave its nodes (the end of a slow or degrade fault).
        run_dir: The run's directory (storage faults are armed there; None: cannot be).
        min_nodes: An elastic run's --nnodes MIN (how many nodes a lost one must leave); None for
            a static run, which cannot go on without a node.
        max_restarts: The run's --max-restarts (the nodes left go on through torchrun's restarts).
        store: Its own rendezvous store's container (``--rdzv-store container``; None: it has none),
            which ``kill:store``, ``pause:store`` and ``disconnect:store`` aim at.
        say: Where the lines go.
    """

    def __init__(self, client: Any, run_id: str, project: str, live: dict[str, Any], *, stop_grace_s: float,
                 cpus_per_node: Optional[float] = None, link: Optional[LinkSpec] = None,
                 run_dir: Optional[Path] = None, min_nodes: Optional[int] = None, max_restarts: int = 0,
                 store: Optional[Any] = None, say: Callable[[str], None] = print) -> None:
        self.client = client
        self.run_id = run_id
        self.project = project
        self.live = live
        self.store = store
        # what a fault may be done to: the live nodes, and the run's own store as its target names it
        self.targets = {**live, STORE_TARGET: store} if store is not None else dict(live)
        self.stop_grace_s = stop_grace_s
        self.cpus_per_node = cpus_per_node
        self.link = link
        self.say = say
        self.run_dir = run_dir
        self.min_nodes = min_nodes
        self.max_restarts = max_restarts
        self.unnoted_said = False  # said once that the run's directory takes no notes from here
        self.ids: dict[int, str] = {}  # each fault's id in the notes, by the spec object given
        self.held: list[tuple[FaultSpec, str]] = []  # done, with an end still to come
        progress = None if run_dir is None or not run_dir.name else run_dir / PROGRESS_SUBDIR  # "": none
        self.storage = ArmedStorageFaults(progress) if progress is not None and progress.is_dir() else None
        self.tearing: list[FaultSpec] = []  # torn writes armed, their write still to come
        self.met: dict[str, list[StorageEvent]] = {}  # what the workers met of each storage fault armed here

    def check(self, specs: list[FaultSpec]) -> None:
        """Refuse what cannot be done now, before anything is done.

        Raises:
            UsageError: A start at a step (no launcher of ours counts steps here), a start in
                seconds (a fault is injected now: a start would be ignored, and said of
                it as if it had been waited for), a node that is not running, a lost node the
                run could not go on without, or a slow or degrade that would leave its node no
                slower than the run made it (its recorded --cpus-per-node, else the engine's
                CPUs, and --link).
        """
        for spec in specs:
            if spec.at_step is not None:  # (an end at a step comes only after a start at one)
                now = replace(spec, at_step=None, until_step=None, in_attempt=False)
                raise UsageError(f"{spec}: a start at a step needs the run's launcher (give it to run --fault); here"
                                 f" a fault is injected now: give {now}"
                                 + (f", or an end in seconds: {now}@t=0..30" if spec.action.lasting else ""))
            if spec.at_seconds:
                now = (f"{replace(spec, at_seconds=0.0, until_seconds=duration_s(spec))} to hold it"
                       f" {duration_s(spec):g} s" if spec.until_seconds is not None
                       else str(replace(spec, at_seconds=None)))
                raise UsageError(f"{spec}: a fault is injected now, not at t={spec.at_seconds:g} (a start needs the"
                                 f" run's launcher: give it to run --fault); give {now}")
            if spec.on_store:
                self.check_store(spec)
                continue
            missing = [n for n in spec.nodes if n not in self.live] if not spec.action.on_rank else []
            if missing:
                raise UsageError(f"no running {', '.join(missing)} in run {self.run_id} (see `python -m orchestrate ps`)")
            if spec.action in NETWORK_TOOLS:
                self.check_net_admin(spec)
            if spec.action.on_storage and self.storage is None:
                raise UsageError(f"{spec}: run {self.run_id}'s directory cannot be reached from here, and storage"
                                 " faults are armed there")
        check_lost_nodes(specs, len(self.live), self.min_nodes, self.max_restarts, said="")
        cpus, cpus_said = self.cpus_per_node, ""
        if cpus is None and any(spec.action is FaultAction.SLOW for spec in specs):
            cpus = self.engine_cpus()
            cpus_said = f"the engine's {cpus} CPUs, all a node of run {self.run_id} (no --cpus-per-node) has"
        check_fault_levels(specs, self.link, cpus, cpus_said, said="")

    def check_net_admin(self, spec: FaultSpec) -> None:
        """Refuse a fault done from inside its nodes, as root (a degrade, a lossy link, a split),
        where they lack NET_ADMIN: the engine gives it only to a run that shapes its links. The
        node would refuse it too, in its tool's words, which say nothing of what to do."""
        lacking = [n for n in spec.nodes if not has_net_admin(self.live[n])]
        if lacking:
            raise UsageError(f"{spec}: run {self.run_id}'s nodes lack NET_ADMIN, which a {spec.action.value} fault"
                             f" needs ({NETWORK_TOOLS[spec.action]} as root in {', '.join(lacking)}); a run's nodes"
                             " have it only when it starts with --link or a degrade, lossy or partition --fault:"
                             " start it again with --link SPEC (e.g. --link 100gbe), or give this fault to run"
                             " --fault (not with --detach)")

    def engine_cpus(self) -> Optional[int]:
        """The engine's CPU count: what a node without ``--cpus-per-node`` may use (None: the
        engine did not say; a slow fault is then not checked against it)."""
        try:
            return self.client.info().get("NCPU") or None
        except engine_errors():
            return None

    def check_store(self, spec: FaultSpec) -> None:
        """Refuse a fault to a store the run has not, or that has ended."""
        if self.store is None:
            raise UsageError(f"{spec}: run {self.run_id} has no rendezvous store of its own (--rdzv c10d --rdzv-store"
                             f" container); node0's torchrun agent holds it, if any: {spec.action.value}:node0 takes"
                             " it with the node")
        try:
            self.store.reload()
            status = self.store.status
        except engine_errors() as exc:
            status = describe(exc)
        if status not in ("running", "paused"):
            raise UsageError(f"{spec}: run {self.run_id}'s rendezvous store is not running ({status})")

    def inject(self, spec: FaultSpec) -> str:
        """Do one fault now; return the node it landed on; hold it when it has an end.

        Raises:
            EngineError: When the engine refused it.
        """
        if spec.action.on_storage and self.storage is not None:
            armed = self.storage.arm(spec)
            self.note(spec, spec.node, "done", storage_key=armed.key)
            self.say(f"armed {spec} on {spec.node}'s workers of run {self.run_id}, files {armed.glob!r} of the work"
                     f" directory{self.for_the_rest_of_the_run(spec, spec.node)}")
            if spec.action is FaultAction.TORN_WRITE:
                self.tearing.append(spec)
            elif spec.has_end:
                self.held.append((spec, spec.node))
            return spec.node
        if not spec.action.on_rank:  # noted first: the node's end may come before the engine's answer
            self.note(spec, spec.nodes[0], "doing")
        try:
            if spec.action is FaultAction.PREEMPT:  # SIGTERM, then the engine's SIGKILL after the run's grace
                self.live[spec.node].stop(timeout=math.ceil(self.stop_grace_s))
                node = spec.node
            else:
                node = do_fault(self.client, self.project, self.targets, spec, link=self.link)
        except Exception as exc:  # the engine's refusal, or the node's own (no NET_ADMIN for a partition)
            why = describe(exc) if isinstance(exc, engine_errors()) else str(exc) or type(exc).__name__
            if not spec.action.on_rank:
                self.note(spec, spec.nodes[0], "failed", error=why)
            if isinstance(exc, engine_errors()):
                raise EngineError(f"cannot {spec.action.value} {spec.target} of run {self.run_id}: {why}") from None
            raise
        self.note(spec, node, "done")  # a rank fault's node is known only now
        into = (spec.target if spec.groups else "the rendezvous store" if spec.on_store
                else node if spec.rank is None else f"rank {spec.rank} on {node}")
        self.say(f"injected {spec.action.value} into {into} of run {self.run_id}"
                 f"{self.for_the_rest_of_the_run(spec, node)}")
        if spec.has_end:
            self.held.append((spec, node))
        return node

    def for_the_rest_of_the_run(self, spec: FaultSpec, node: str) -> str:
        """What a lasting fault given no end, done to ``node``, is told with: that it holds until the
        run ends, as no command of ours undoes it once ``fault`` has returned, or until the node
        restarts where a restart ends it (:attr:`~FaultAction.restart_ends`), and how to give one
        an end ("" for a fault with an end, which ``fault`` holds and then undoes, or one that is
        done at once). A pause is not one that nothing undoes: ``fault RUN restart:NODE`` ends it."""
        if not spec.action.lasting or spec.has_end:
            return ""
        with_end = f"`fault {self.run_id} {spec}@t=0..SECONDS` holds one for SECONDS, then undoes it"
        ends = None if spec.on_store else spec.action.restart_ends  # (no fault restarts the store)
        if ends:
            return (f"; it holds for the rest of the run, or until {node} restarts (`fault {self.run_id}"
                    f" restart:{node}` ends it, starting its workers anew): no command of this tool undoes it in"
                    f" place ({with_end})")
        neither = f", nor does a restart of {node}" if ends is False else ""
        return f"; it holds for the rest of the run: no command of this tool undoes it{neither} ({with_end})"

    def note(self, spec: FaultSpec, node: str, phase: str, error: str = "", storage_key: str = "") -> None:
        """Note a step of a fault in the run's directory for whoever follows the run (see
        :mod:`~orchestrate.faults.live_notes`); say once where that cannot be done from here."""
        fault_id = self.ids.setdefault(id(spec), new_fault_id())
        if note_live_fault(self.run_dir, fault_id, spec, node, phase, error, storage_key) or self.unnoted_said:
            return
        self.unnoted_said = True
        self.say(f"run {self.run_id}'s directory cannot be written from here: its summary will not name the faults"
                 " done now")

    def hold(self, sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> None:
        """Wait for the torn writes armed (each worker's tear kills its node), then keep the
        faults with an end for their duration (from now), undoing each as its end comes; an
        interrupt leaves the rest held (see :meth:`end_all`). A fault whose nodes were all removed
        meanwhile (the run taken down) has nothing left to undo: its hold ends then, said so."""
        started = clock()  # every end counts from now, the tears' wait included
        self.wait_for_tears(sleep)
        if not self.held:
            return
        self.held.sort(key=lambda item: duration_s(item[0]))
        self.say(f"holding {', '.join(str(s) for s, _ in self.held)} for up to {duration_s(self.held[-1][0]):g} s;"
                 " Ctrl-C ends them now")
        while self.held:
            for spec, node in [item for item in self.held if self.removed(item)]:
                self.held.remove((spec, node))
                removed = f"{', '.join(self.fault_nodes(spec, node))} of run {self.run_id} removed meanwhile"
                self.note(spec, node, "ended", error=removed)
                self.say(f"{spec}: {removed}; nothing left to undo")
            if not self.held:
                return
            spec, node = self.held[0]
            wait = started + duration_s(spec) - clock()
            if wait > 0:
                sleep(min(wait, HOLD_POLL_S))
                continue
            self.end(spec, node)
            self.held.pop(0)

    def wait_for_tears(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Until every torn write armed has cut a file: kill each node whose worker tore one (a
        crash mid-save), saying what was cut."""
        if not self.tearing or self.storage is None:
            return
        self.say(f"waiting for the next write on {', '.join(s.node for s in self.tearing)}; Ctrl-C disarms")
        while self.tearing:
            # which nodes ended, then what was cut: a node whose worker cut a write and that ended
            # since (its run's launcher, following it, kills it at once) was torn, not missed
            ended = [s for s in self.tearing if not self.running(s.node)]
            for spec, event in self.take_storage_events():
                if spec not in self.tearing or not event.torn:
                    continue
                self.tearing.remove(spec)
                self.storage.end(spec)
                self.say(f"{spec}: {event.describe()}; killing {spec.node}")
                try:
                    self.live[spec.node].kill()
                except engine_errors() as exc:  # its run's launcher was first, or it ended
                    self.say(f"{spec.node} was not killed here: {describe(exc)}")
            for spec in [s for s in ended if s in self.tearing]:
                self.tearing.remove(spec)
                self.storage.end(spec)
                self.note(spec, spec.node, "ended")
                self.say(f"disarmed {spec}: {spec.node} is no longer running, and no write of it was cut")
            if self.tearing:
                sleep(TEAR_POLL_S)

    def take_storage_events(self) -> list[tuple[FaultSpec, StorageEvent]]:
        """What the workers met of the storage faults armed here since the last look, also kept
        by fault (a full disk's failed writes, said at its end)."""
        if self.storage is None:
            return []
        taken = [(spec, event) for spec, event in self.storage.poll() if spec is not None]
        for spec, event in taken:
            self.met.setdefault(str(spec), []).append(event)
        return taken

    def running(self, node: str) -> bool:
        """Whether ``node``'s container still runs (the engine's word; gone counts as not)."""
        try:
            self.targets[node].reload()
        except engine_errors():
            return False
        return self.targets[node].status in ("running", "paused")

    @staticmethod
    def fault_nodes(spec: FaultSpec, node: str) -> list[str]:
        """The nodes a fault was done to (a rank fault's: the node that runs the rank)."""
        return [node] if spec.action.on_rank or not spec.nodes else list(spec.nodes)

    def removed(self, held: tuple[FaultSpec, str]) -> bool:
        """Whether every node a held fault was done to is gone from the engine (an engine that
        cannot answer now, or a node that only ended, counts as still there: its fault is undone
        at its end, as asked)."""
        return self.all_ended(*held, stopped_too=False)

    def all_ended(self, spec: FaultSpec, node: str, stopped_too: bool) -> bool:
        """Whether every node a fault was done to is gone from the engine, or, ``stopped_too``,
        stopped (not running, paused or restarting); one the engine cannot answer for now counts
        as still there."""
        for name in self.fault_nodes(spec, node):
            try:
                self.targets[name].reload()
            except engine_errors() as exc:
                if classify(exc) is EngineFault.NOT_FOUND:
                    continue
                return False
            if not stopped_too or self.targets[name].status in ("running", "paused", "restarting"):
                return False
        return True

    def end_all(self) -> None:
        """Undo every fault still held, and disarm the torn writes still to come."""
        while self.held:
            self.end(*self.held.pop(0))
        while self.tearing and self.storage is not None:
            spec = self.tearing.pop(0)
            self.storage.end(spec)
            self.note(spec, spec.node, "ended")
            self.say(f"disarmed {spec}: no write came")

    def end(self, spec: FaultSpec, node: str) -> None:
        """Undo one fault; say so, or why it could not be undone."""
        if spec.action.on_storage and self.storage is not None:
            self.storage.end(spec)
            self.note(spec, node, "ended")
            self.take_storage_events()
            self.say(f"ended {spec} on {node} of run {self.run_id}: {met_writes(self.met.get(str(spec), []), node)}")
            return
        try:
            end_fault(self.client, self.project, self.targets, spec, node=node, cpus_per_node=self.cpus_per_node,
                      link=self.link)
        except (*engine_errors(), EngineError) as exc:
            if self.all_ended(spec, node, stopped_too=True):  # `stop RUN`, or its end: nothing to undo on it
                text = f"{', '.join(self.fault_nodes(spec, node))} of run {self.run_id} stopped meanwhile"
                self.note(spec, node, "ended", error=text)
                self.say(f"{spec}: {text}; nothing left to undo")
                return
            self.say(f"could not end {spec} on {node}: {describe(exc)}")
            self.note(spec, node, "ended", error=describe(exc))  # its hold is over all the same
            return
        self.note(spec, node, "ended")
        self.say(f"ended {spec} on {'the rendezvous store' if spec.on_store else node} of run {self.run_id}")


def met_writes(events: list[StorageEvent], node: str) -> str:
    """What a full disk did while it lasted (pure): the files whose writes it failed, or that no
    write of ``node``'s workers reached it, and what it reaches."""
    if not events:
        return f"no write of {node}'s workers reached it ({STORAGE_REACH})"
    files = list(dict.fromkeys(event.file for event in events))
    return f"writes to {len(files)} file(s) failed with ENOSPC: {listed(files, 3)}"


def duration_s(spec: FaultSpec) -> float:
    """How long a fault with an end in seconds lasts."""
    assert spec.until_seconds is not None
    return spec.until_seconds - (spec.at_seconds or 0.0)
