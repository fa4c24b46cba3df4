"""Faults as a user asks for them (pure): what happens to a node or to one worker, when, and
for how long. Doing them is :mod:`orchestrate.faults`.

A fault is written ``KIND:TARGET[,KEY=VALUE...][@t=S[..E]|@step=N[..M]]``:

- node faults aim at a node (``node1``): ``kill``, ``lose`` (killed, and never brought back:
  an elastic job goes on with the nodes left), ``pause``, ``disconnect``, ``restart``,
  ``preempt``, ``slow`` (``cpus=F``: its CPU quota cut, a straggler) and ``degrade``
  (``rate=R``: its link rate drops);
- rank faults aim at a global rank (``3``): ``kill-rank`` (the worker process dies while its
  node lives) and ``hang-rank`` (the worker is stopped: the classic hung collective);
- storage faults aim at the writes of a node's workers to its work directory
  (``path=GLOB``, relative to it; by default the directory of what the job saved last, else
  any file): ``torn-write`` (the next such write is cut short at a random byte, and the node
  dies at once: a crash in the middle of a save) and ``disk-full`` (such writes fail with
  ENOSPC while it lasts);
- a network fault aims at groups of nodes: ``partition:node0,node1|node2,node3`` splits the
  run's nodes into two groups that cannot reach each other, each group keeping its own links;
- ``kill``, ``pause`` and ``disconnect`` may aim at the run's own rendezvous store instead
  (``kill:store``; ``--rdzv-store container``): the rendezvous host lost, hung or cut off.

Without a trigger a fault fires as soon as the job starts. The faults that last
(``pause``, ``disconnect``, ``slow``, ``degrade``, ``hang-rank``) may be given an end:
``slow:node1,cpus=0.2@t=5..20`` is a straggler from 5 s to 20 s into the job,
``degrade:node0,rate=10mbit@step=10..20`` degrades its link from step 10 until a worker
reports step 20 (the end may repeat its unit: ``@t=5..t=20``). (An end at a step is refused
where no step can come while the fault lasts: a paused or cut-off node, a hung rank.)

``@step=+N`` counts in an attempt: the fault fires at the N-th step of the first attempt of an
elastic job that began after the fault before it in the list fired, wherever that attempt
resumed from. ``kill:node0@step=8 kill:node1@step=+5`` kills node0 at step 8, then node1 five
steps into the job's next attempt; ``chaos`` places its second and later faults so, so that
each strikes in training time, never in the start-up of the attempt before.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from orchestrate.config.link import LinkSpec, format_rate, parse_rate
from orchestrate.errors import UsageError

USAGE = ("usage: KIND:TARGET[,KEY=VALUE][@t=SECONDS[..END]|@step=N[..END]|@step=+N], e.g. kill:node1@step=20,"
         " slow:node1,cpus=0.2@t=5..20, degrade:node0,rate=10mbit, hang-rank:1@t=10")
_NUMBER = r"\d+(?:\.\d+)?"
# A time and its end: @t=5..20, and as a user may well write it, @t=5s..20s or @t=5..t=20.
_AT_SECONDS = rf"t=(?P<seconds>{_NUMBER})s?(?:\.\.(?:t=)?(?P<until_seconds>{_NUMBER})s?)?"
_SPEC = re.compile(
    r"^(?P<kind>[a-z][a-z-]*):(?P<target>[a-z]*\d+|store)(?P<options>(?:,[a-z]+=[^,@]*)*)"
    rf"(?:@(?:{_AT_SECONDS}"
    r"|step=(?P<in_attempt>\+)?(?P<step>\d+)(?:\.\.(?:step=)?(?P<until_step>\d+))?))?$"
)
# A straggler's CPU quota unless ``cpus=`` says otherwise, and a degraded link's rate.
DEFAULT_SLOW_CPUS = 0.25
DEFAULT_DEGRADED_RATE = "10mbit"
DEFAULT_DEGRADED_RATE_BITS = parse_rate(DEFAULT_DEGRADED_RATE, "rate")
DEFAULT_LOSSY_PCT = 1.0  # a lossy node's share of packets dropped, in percent
# The target that names the run's own rendezvous store (``--rdzv-store container``), not a node.
STORE_TARGET = "store"
# How long a pause or disconnect of the rendezvous store lasts at least for the job to feel it: torch's
# c10d agents call the store with a keep-alive every 5 s (its DynamicRendezvousHandler's
# keep_alive_interval), so a shorter outage may fall between two calls and be felt by none.
STORE_FELT_S = 5.0


class FaultAction(str, Enum):
    """What a fault does."""

    KILL = "kill"  # SIGKILL every process of a node: a node that dies
    LOSE = "lose"  # SIGKILL a node and never bring it back: a host lost for good, the job goes on without it
    PAUSE = "pause"  # freeze every process of a node: a node that hangs
    DISCONNECT = "disconnect"  # take a node off the project network: a node that is cut off
    RESTART = "restart"  # kill and start a node's container again: a node that reboots
    PREEMPT = "preempt"  # SIGTERM, then SIGKILL after the stop grace: a node its cluster takes back
    SLOW = "slow"  # cut a node's CPU quota: a straggler
    DEGRADE = "degrade"  # drop a node's link rate: a link that degrades
    KILL_RANK = "kill-rank"  # SIGKILL one worker process: a worker that dies on a healthy node
    HANG_RANK = "hang-rank"  # SIGSTOP one worker process: a worker that hangs in a collective
    TORN_WRITE = "torn-write"  # cut a node's next save short, and kill the node: a crash mid-save
    DISK_FULL = "disk-full"  # a node's writes fail with ENOSPC: a full disk
    PARTITION = "partition"  # two groups of nodes that cannot reach each other: a split network
    LOSSY = "lossy"  # drop a share of a node's packets at random: a lossy link

    @property
    def on_rank(self) -> bool:
        """Aimed at a global rank, not a node."""
        return self in (FaultAction.KILL_RANK, FaultAction.HANG_RANK)

    @property
    def on_storage(self) -> bool:
        """Done to the writes of a node's workers, in the workers (not to its container)."""
        return self in (FaultAction.TORN_WRITE, FaultAction.DISK_FULL)

    @property
    def lasting(self) -> bool:
        """It lasts until undone, so it may be given an end."""
        return self in (FaultAction.PAUSE, FaultAction.DISCONNECT, FaultAction.SLOW, FaultAction.DEGRADE,
                        FaultAction.HANG_RANK, FaultAction.DISK_FULL, FaultAction.PARTITION, FaultAction.LOSSY)

    @property
    def restart_ends(self) -> Optional[bool]:
        """Whether a restart of its node ends it (a lasting fault; None: it depends, or no such
        restart is done). Its processes start anew (pause, hang-rank), or its network namespace, the
        rules in it with it, and the node is shaped as the run made it (degrade, lossy); a CPU quota
        (slow), a network left (disconnect) and a storage fault armed in the run's directory
        (disk-full) outlast it. A split's routes on the other nodes may outlive one node's restart,
        or match its address no more: not said."""
        if self in (FaultAction.PAUSE, FaultAction.HANG_RANK, FaultAction.DEGRADE, FaultAction.LOSSY):
            return True
        if self in (FaultAction.SLOW, FaultAction.DISCONNECT, FaultAction.DISK_FULL):
            return False
        return None

    @property
    def stops_progress(self) -> bool:
        """While it lasts no rank gets past its next collective, so no later step is reported."""
        return self in (FaultAction.PAUSE, FaultAction.DISCONNECT, FaultAction.HANG_RANK, FaultAction.PARTITION)

    @property
    def cuts_network(self) -> bool:
        """While it lasts the nodes' collectives across it wait: no packet gets through."""
        return self in (FaultAction.DISCONNECT, FaultAction.PARTITION)

    @property
    def reaches_store(self) -> bool:
        """It may aim at the run's own rendezvous store: its host dies, hangs or is cut off."""
        return self in (FaultAction.KILL, FaultAction.PAUSE, FaultAction.DISCONNECT)

    @property
    def options(self) -> tuple[str, ...]:
        """The ``,KEY=VALUE`` options it takes."""
        return {FaultAction.SLOW: ("cpus",), FaultAction.DEGRADE: ("rate",), FaultAction.TORN_WRITE: ("path",),
                FaultAction.DISK_FULL: ("path",), FaultAction.LOSSY: ("p",)}.get(self, ())


@dataclass(frozen=True)
class FaultSpec:
    """One fault to inject.

    Attributes:
        action: What it does.
        node: The node it aims at (node faults; "" for rank faults).
        at_seconds: When it fires, in seconds into the job (None: at once, or at a step).
        at_step: The training step at which it fires.
        rank: The global rank it aims at (rank faults).
        until_seconds: When it ends, in seconds into the job (lasting faults).
        until_step: The training step at which it ends.
        cpus: A slowed node's CPU quota, in CPUs.
        rate_bits: A degraded link's rate, in bits per second.
        in_attempt: ``at_step`` counts the steps of the first attempt that began after the
            fault before this one fired (``@step=+N``), not the job's step numbers.
        path: The files a storage fault reaches: a glob relative to the work directory
            (None: the directory of what the job saved last, else any file).
        groups: A partition's two groups of nodes.
        loss_pct: The share of a lossy node's incoming packets dropped, in percent.
    """

    action: FaultAction
    node: str = ""
    at_seconds: Optional[float] = None
    at_step: Optional[int] = None
    rank: Optional[int] = None
    until_seconds: Optional[float] = None
    until_step: Optional[int] = None
    cpus: Optional[float] = None
    rate_bits: Optional[int] = None
    in_attempt: bool = False
    path: Optional[str] = None
    groups: tuple[tuple[str, ...], ...] = ()
    loss_pct: Optional[float] = None

    @property
    def target(self) -> str:
        if self.groups:
            return "|".join(",".join(group) for group in self.groups)
        return str(self.rank) if self.action.on_rank else self.node

    @property
    def on_store(self) -> bool:
        """Aimed at the run's own rendezvous store (``kill:store``), not at a node."""
        return self.node == STORE_TARGET

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes a node or network fault aims at."""
        return tuple(n for group in self.groups for n in group) if self.groups else (self.node,)

    @property
    def has_end(self) -> bool:
        return self.until_seconds is not None or self.until_step is not None

    def __str__(self) -> str:
        options = ""
        if self.action is FaultAction.SLOW:
            options = f",cpus={self.slow_cpus:g}"
        elif self.action is FaultAction.DEGRADE:
            options = f",rate={format_rate(self.degraded_rate_bits)}"
        elif self.path is not None:
            options = f",path={self.path}"
        elif self.action is FaultAction.LOSSY:
            options = f",p={self.lossy_pct:g}%"
        if self.at_step is not None:
            trigger = f"@step={'+' if self.in_attempt else ''}{self.at_step}" + (f"..{self.until_step}" if self.until_step is not None else "")
        elif self.at_seconds or self.until_seconds is not None:
            trigger = f"@t={self.at_seconds or 0:g}" + (
                f"..{self.until_seconds:g}" if self.until_seconds is not None else "")
        else:
            trigger = ""
        return f"{self.action.value}:{self.target}{options}{trigger}"

    @property
    def slow_cpus(self) -> float:
        return self.cpus if self.cpus is not None else DEFAULT_SLOW_CPUS

    @property
    def lossy_pct(self) -> float:
        return self.loss_pct if self.loss_pct is not None else DEFAULT_LOSSY_PCT

    @property
    def degraded_rate_bits(self) -> int:
        return self.rate_bits if self.rate_bits is not None else DEFAULT_DEGRADED_RATE_BITS

    def due(self, elapsed_s: float, step: Optional[int], attempt_steps: Optional[int] = None) -> bool:
        """Whether the fault should fire, ``elapsed_s`` into the job at training ``step``, the
        attempt it counts in (``@step=+N``) having done ``attempt_steps`` (None: none begun)."""
        if self.in_attempt:
            return attempt_steps is not None and attempt_steps >= (self.at_step or 0)
        if self.at_step is not None:
            return step is not None and step >= self.at_step
        return elapsed_s >= (self.at_seconds or 0.0)

    def end_due(self, elapsed_s: float, step: Optional[int]) -> bool:
        """Whether a fault with an end that fired should be undone now."""
        if self.until_step is not None:
            return step is not None and step >= self.until_step
        return self.until_seconds is not None and elapsed_s >= self.until_seconds


def short_store_outage_note(fault: FaultSpec) -> str:
    """For a pause or disconnect of the run's store with an end (pure): that one shorter than
    :data:`STORE_FELT_S` may go unfelt, where its window in seconds is that short, or may be, where
    its end is a step ("" for any other fault). ``chaos`` draws such outages 5 s long at least; a
    ``run`` is told, as the trial's ``pause:store@step=3..8`` held 1.8 s and tested nothing."""
    if not (fault.on_store and fault.action in (FaultAction.PAUSE, FaultAction.DISCONNECT) and fault.has_end):
        return ""
    felt = (f"less than the {STORE_FELT_S:g} s between the torchrun agents' keep-alive calls to the store, the job"
            " may not feel it")
    if fault.until_seconds is not None and fault.at_step is None:
        out_s = fault.until_seconds - (fault.at_seconds or 0.0)
        if out_s >= STORE_FELT_S:
            return ""
        return (f"{fault}: the store is out {out_s:g} s only: {felt}; give it an end {STORE_FELT_S:g} s or more after"
                " its start")
    return (f"{fault}: how long the store is out depends on how fast the steps go; if {felt} (the summary says how"
            " long it held)")


def parse_fault(text: str) -> FaultSpec:
    """Parse one ``--fault`` value.

    Raises:
        UsageError: Quoting the value and what is wrong with it.
    """
    if text.strip().startswith(FaultAction.PARTITION.value + ":"):
        return _parse_partition(text)
    match = _SPEC.match(text.strip())
    if not match:
        raise UsageError(f"invalid --fault {text!r}: {USAGE}")
    try:
        action = FaultAction(match["kind"])
    except ValueError:
        choices = ", ".join(a.value for a in FaultAction)
        raise UsageError(f"invalid --fault {text!r}: the kind must be one of {choices}") from None
    node, rank = _target(text, action, match["target"])
    options = _options(text, action, match["options"])
    seconds, until_seconds = _number(match["seconds"]), _number(match["until_seconds"])
    step, until_step = _integer(match["step"]), _integer(match["until_step"])
    if (until_seconds is not None or until_step is not None) and not action.lasting:
        lasting = ", ".join(a.value for a in FaultAction if a.lasting)
        raise UsageError(f"invalid --fault {text!r}: {action.value} has no end (only {lasting} last)")
    if until_seconds is not None and until_seconds <= (seconds or 0.0):
        raise UsageError(f"invalid --fault {text!r}: the end must come after the start")
    if until_step is not None and until_step <= (step or 0):
        raise UsageError(f"invalid --fault {text!r}: the end must come after the start")
    in_attempt = bool(match["in_attempt"])
    if in_attempt and (until_step is not None or not step):
        raise UsageError(f"invalid --fault {text!r}: @step=+N counts N steps (1 or more) into an attempt, with no end")
    if until_step is not None and action.stops_progress and node != STORE_TARGET:
        raise UsageError(f"invalid --fault {text!r}: while {action.value} lasts no step is reported, so an end at a"
                         " step never comes; give it in seconds, e.g. @t=5..20")
    return FaultSpec(action, node, seconds, step, rank, until_seconds, until_step, **options, in_attempt=in_attempt)


_PARTITION = re.compile(r"^partition:(?P<groups>[a-z0-9,]+\|[a-z0-9,]+)"
                        rf"(?:@(?:{_AT_SECONDS}|step=(?P<step>\d+)))?$")


def _parse_partition(text: str) -> FaultSpec:
    """``partition:NODES|NODES[@t=S[..E]]``: two disjoint groups of nodes, comma-separated."""
    match = _PARTITION.match(text.strip())
    if not match:
        raise UsageError(f"invalid --fault {text!r}: usage: partition:NODES|NODES[@t=S[..END]|@step=N], e.g."
                         " partition:node0,node1|node2,node3@t=5..20 (a partition's end is in seconds: no step"
                         " comes while the network is split)")
    groups = tuple(tuple(group.split(",")) for group in match["groups"].split("|"))
    names = [n for group in groups for n in group]
    if not all(re.fullmatch(r"node\d+", n) for n in names):
        raise UsageError(f"invalid --fault {text!r}: a partition's groups are nodes, e.g. node0,node1|node2")
    if len(set(names)) != len(names):
        raise UsageError(f"invalid --fault {text!r}: a node cannot be in both groups, nor twice in one")
    seconds, until_seconds = _number(match["seconds"]), _number(match["until_seconds"])
    if until_seconds is not None and until_seconds <= (seconds or 0.0):
        raise UsageError(f"invalid --fault {text!r}: the end must come after the start")
    return FaultSpec(FaultAction.PARTITION, at_seconds=seconds, at_step=_integer(match["step"]),
                     until_seconds=until_seconds, groups=groups)


def _target(text: str, action: FaultAction, target: str) -> tuple[str, Optional[int]]:
    if action.on_rank:
        if not target.isdigit():
            raise UsageError(f"invalid --fault {text!r}: {action.value} aims at a global rank, e.g."
                             f" {action.value}:1")
        return "", int(target)
    if target == STORE_TARGET:
        if not action.reaches_store:
            *others, last = [a.value for a in FaultAction if a.reaches_store]
            reaching = f"{', '.join(others)} or {last}"
            raise UsageError(f"invalid --fault {text!r}: {action.value} aims at a node, e.g. {action.value}:node1;"
                             f" the rendezvous store takes {reaching}")
        return target, None
    if not re.fullmatch(r"node\d+", target):
        raise UsageError(f"invalid --fault {text!r}: {action.value} aims at a node, e.g. {action.value}:node1")
    return target, None


def _options(text: str, action: FaultAction, written: str) -> dict:
    options: dict = {}
    for part in filter(None, written.split(",")):
        key, _, value = part.partition("=")
        if key not in action.options or key in options:
            takes = f"takes {', '.join(k + '=' for k in action.options)}" if action.options else "takes no options"
            raise UsageError(f"invalid --fault {text!r}: {action.value} {takes}")
        options[key] = value
    if "cpus" in options:
        cpus = _number(options["cpus"]) if re.fullmatch(_NUMBER, options["cpus"]) else None
        if cpus is None or not 0.01 <= cpus:
            raise UsageError(f"invalid --fault {text!r}: cpus must be a number of CPUs of 0.01 or more, e.g. 0.2")
        options["cpus"] = cpus
    if "path" in options:
        glob = options["path"]
        if not glob or glob.startswith("/") or ".." in glob.split("/"):
            raise UsageError(f"invalid --fault {text!r}: path is a glob relative to the work directory,"
                             " e.g. path=checkpoints/*")
    if "p" in options:
        share = re.fullmatch(rf"({_NUMBER})%?", options.pop("p"))
        if not share or not 0 < float(share[1]) < 100:
            raise UsageError(f"invalid --fault {text!r}: p is a percentage above 0 and below 100, e.g. p=1%")
        options["loss_pct"] = float(share[1])
    if action is FaultAction.LOSSY:
        options.setdefault("loss_pct", DEFAULT_LOSSY_PCT)
    if "rate" in options:
        options["rate_bits"] = parse_rate(options.pop("rate"), f"--fault {text!r}: rate")
    if action is FaultAction.SLOW:
        options.setdefault("cpus", DEFAULT_SLOW_CPUS)
    if action is FaultAction.DEGRADE:
        options.setdefault("rate_bits", DEFAULT_DEGRADED_RATE_BITS)
    return options


def _number(text: Optional[str]) -> Optional[float]:
    return float(text) if text is not None else None


def _integer(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None else None


def check_lost_nodes(faults: list[FaultSpec], nodes: int, min_nodes: Optional[int], max_restarts: int,
                     said: str = "--fault ") -> None:
    """Refuse ``lose`` faults that leave the job no way on: in a static job (``min_nodes``
    None), without a restart left for torchrun to restart the workers of the nodes left, that
    leave fewer nodes than its ``--nnodes`` MIN, or a node lost twice (the second never fires).
    ``said``: how the refusal names a fault (``--fault `` for run's, "" for ``fault RUN``'s)."""
    losses = [f for f in faults if f.action is FaultAction.LOSE]
    if not losses:
        return
    spec, lost = f"{said}{losses[0]}", sorted({f.node for f in losses})
    if min_nodes is None:
        raise UsageError(f"{spec}: a lost node is for an elastic job that goes on without it (--rdzv c10d"
                         f" --nnodes MIN:{nodes} with MIN below {nodes}); a static job cannot, and kill:{lost[0]}"
                         " shows it die")
    if len(lost) < len(losses):
        twice = next(node for node in lost if sum(f.node == node for f in losses) > 1)
        raise UsageError(f"{spec}: {twice} is lost twice, and a lost node is gone for good: the second loss could"
                         " never fire")
    if not max_restarts:
        raise UsageError(f"{spec}: the nodes left go on only where torchrun may restart their workers in a smaller"
                         " world: give --max-restarts 1 or more")
    left = nodes - len(lost)
    if left < 1:
        raise UsageError(f"{spec}: losing {' and '.join(lost)} leaves no node: the job could not go on")
    if left < min_nodes:
        raise UsageError(f"{spec}: losing {' and '.join(lost)} leaves {left} of {nodes} nodes, fewer than --nnodes"
                         f" MIN ({min_nodes}): the job could not go on; give --nnodes {left}:{nodes}")


def check_fault_levels(faults: list[FaultSpec], link: Optional[LinkSpec], cpus: Optional[float],
                       cpus_said: str = "", said: str = "--fault ") -> None:
    """Refuse a fault whose level would leave its node as the run made it, or better: a degrade
    whose rate is not below the run's ``--link`` rate (a run without one is unshaped: any rate
    degrades it), or a slow whose CPUs are not below what the node has (``cpus``: its
    ``--cpus-per-node``, or where it has none the engine's CPUs, which ``cpus_said`` then names;
    None: unknown, not checked). Such a fault would raise the node's rate or quota, or change nothing,
    and still be said as injected. ``said``: how the refusal names a fault, as in
    :func:`check_lost_nodes`."""
    for fault in faults:
        if fault.action is FaultAction.DEGRADE and link is not None and link.rate_bits \
                and fault.degraded_rate_bits >= link.rate_bits:
            raise UsageError(f"{said}{fault}: a degraded link's rate must be below the run's --link"
                             f" rate={format_rate(link.rate_bits)} (rate={format_rate(fault.degraded_rate_bits)} would"
                             f" leave {fault.node}'s link as fast, or make it faster); e.g."
                             f" rate={format_rate(max(link.rate_bits // 10, 1))}")
        if fault.action is FaultAction.SLOW and cpus and fault.slow_cpus >= cpus:
            limit = cpus_said or f"its --cpus-per-node {cpus:g}"
            raise UsageError(f"{said}{fault}: a slow node's cpus must be below {limit}"
                             f" (cpus={fault.slow_cpus:g} would leave {fault.node} as fast, or make it faster); e.g."
                             f" cpus={max(cpus / 2, 0.01):g}")


def check_fault_targets(faults: list[FaultSpec], node_names: list[str], world_size: int,
                        store_container: bool = False) -> None:
    """Refuse faults aimed at nodes or ranks the run does not have, or at a rendezvous store
    that is no container of the run's own (``store_container``: ``--rdzv-store container``)."""
    for fault in faults:
        if fault.on_store:
            if not store_container:
                raise UsageError(f"--fault {fault}: the rendezvous store is a container of the run's own only with"
                                 " --rdzv c10d --rdzv-store container; otherwise node0's torchrun agent holds it,"
                                 f" and {fault.action.value}:node0 takes it with the node")
        elif fault.groups:
            missing = [n for n in fault.nodes if n not in node_names]
            if missing:
                raise UsageError(f"--fault {fault}: no {', '.join(missing)} in this run (nodes: {', '.join(node_names)})")
        elif fault.action.on_rank:
            if fault.rank is not None and fault.rank >= world_size:
                raise UsageError(f"--fault {fault}: no rank {fault.rank} in this run (ranks 0-{world_size - 1})")
        elif fault.node not in node_names:
            raise UsageError(f"--fault {fault}: no {fault.node} in this run (nodes: {', '.join(node_names)})")
