"""Where every rank of a running run is now: the workers' snapshots, with the engine's word on
the ranks that cannot answer (a paused node, a stopped process, a process that exited while its
node runs on). Used by the hang watchdog and by ``stacks RUN``."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.labels import COMPOSE_SERVICE_LABEL
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.faults.in_effect import faults_now
from orchestrate.faults.inject import probe_node
from orchestrate.faults.ranks import stopped_ranks, worker_states
from orchestrate.hangs.diagnosis import EXITED, HangDiagnosis, diagnose
from orchestrate.hangs.snapshots import ANSWER_TIMEOUT_S, Probe, debug_dir, request_snapshots
from orchestrate.outcome.progress import ProgressReader
from orchestrate.plan.layout import NETWORK, PROGRESS_SUBDIR

STACKS_FILE = "stacks.json"


@dataclass(frozen=True)
class RankHost:
    """A node as the probe needs it: its container, its ranks (empty when the rendezvous
    assigns them), how many worker processes it runs, the faults it suffers (oldest first)."""

    name: str
    container: Any
    ranks: tuple[int, ...]
    nproc: int
    faults: tuple[FaultSpec, ...] = ()


def rank_hosts(run: RunInfo) -> list[RankHost]:
    """The run's live nodes as the probe needs them: their planned ranks (none where the rendezvous
    numbers them), their worker counts and the faults in effect on them now."""
    plans = {plan.name: plan for plan in node_plans(run)}  # every node of the run's, the live ones among them
    live = run.live_nodes
    faults = faults_now(run.run_dir, {n.name: n.container for n in live})
    return [RankHost(n.name, n.container, plans[n.name].global_ranks, run.nprocs_of(n.node_rank),
                     tuple(faults.get(n.name, []))) for n in live]


def absent_reasons(client: Any, hosts: list[RankHost], ranks: set[int],
                   returned: Collection[int] = ()) -> dict[int, str]:
    """Why ``ranks`` (which did not answer) cannot: their node's container is paused, or their
    process is stopped, with the fault that did it, or (for ``returned``, the ranks whose script
    returned, by the progress channel: a rank not yet started has no process either) their node
    runs no process of theirs any more, while its torchrun goes on. The others are left out. A
    paused node whose ranks are not known (elastic) may hold any of them: it is the reason only
    for those no other node accounts for, and no rank is said to have exited from it."""
    why: dict[int, str] = {}
    paused_unplanned: list[RankHost] = []
    for host in hosts:
        mine = set(host.ranks) & ranks if host.ranks else set(ranks)
        if not mine:
            continue
        status = container_status(host)
        if not status:
            continue
        if status == "paused" and not host.ranks:
            paused_unplanned.append(host)
        elif status == "paused":
            why.update({rank: paused_reason([host]) for rank in mine})
        else:
            states = worker_states(client, host.container)
            if states is None:
                continue
            why.update({rank: stopped_reason(host, rank) for rank, state in states.items()
                        if state == "T" and rank in ranks})
            if host.ranks:
                why.update({rank: exited_reason(host.name) for rank in mine - set(states) if rank in returned})
    if paused_unplanned:
        why.update({rank: paused_reason(paused_unplanned) for rank in ranks if rank not in why})
    return why


def network_cuts(hosts: list[RankHost]) -> tuple[str, ...]:
    """The faults these nodes suffer that cut the nodes' network (a partition, a disconnect),
    each once: ranks that wait across them wait for the fault."""
    return tuple(dict.fromkeys(str(f) for host in hosts for f in host.faults if f.action.cuts_network))


def store_state(container: Any, faults: Collection[FaultSpec] = ()) -> str:
    """What ``stacks`` says of a run's own rendezvous store (its container, just looked at):
    serving, or why it cannot (paused, cut off, ended, gone), with the faults in effect on it."""
    store = f"the run's rendezvous store (its container {container.labels.get(COMPOSE_SERVICE_LABEL) or container.name})"
    why = probe_node(container, NETWORK)
    status = getattr(container, "status", "")
    if why is None and status in ("exited", "dead"):
        code = container.attrs.get("State", {}).get("ExitCode")
        why = f"its container has ended (exit code {code if code is not None else 'unknown'})"
    note = fault_note(", ".join(str(f) for f in faults))
    if why is None:
        return f"{store} is serving{note}"
    return f"{store}: {why}{note}: no rendezvous can form while it cannot answer (a worker group restarted waits)"


def fault_note(fault: str) -> str:
    """A fault, as said after what it explains ("" when none)."""
    return f" (injected fault {fault})" if fault else ""


def pause_fault(host: RankHost) -> str:
    """The fault that paused the node: the latest pause among its faults ("" when none)."""
    return next((str(spec) for spec in reversed(host.faults) if spec.action is FaultAction.PAUSE), "")


def stop_fault(host: RankHost, rank: int) -> str:
    """The fault that stopped ``rank``'s process on the node: the latest hang-rank of that rank
    among its faults ("" when none)."""
    return next((str(spec) for spec in reversed(host.faults)
                 if spec.action is FaultAction.HANG_RANK and spec.rank == rank), "")


def stopped_reason(host: RankHost, rank: int) -> str:
    """Why ``rank``, whose process is stopped on ``host``, cannot answer."""
    return f"is stopped: its process on {host.name} got SIGSTOP{fault_note(stop_fault(host, rank))}"


def exited_reason(node: str) -> str:
    """Why a rank whose script returned cannot answer, its node running on."""
    return f"{EXITED}: its script returned on {node}, whose torchrun runs on"


def finished_node_reason(node: str) -> str:
    """Why a rank whose node finished while others run on cannot answer."""
    return f"{EXITED}: its script returned on {node}, which finished (exit code 0)"


def paused_reason(paused: list[RankHost]) -> str:
    """Why a rank of a node among ``paused`` (elastic: which one is not known) cannot answer."""
    faults = [fault for fault in (pause_fault(host) for host in paused) if fault]
    if len(paused) == 1:
        return f"is on {paused[0].name}, whose container is paused{fault_note(pause_fault(paused[0]))}"
    fault = f" (injected faults {', '.join(faults)})" if faults else ""
    return f"is on one of {', '.join(host.name for host in paused)}, whose containers are paused{fault}"


def where_ranks_are(client: Any, run_dir: Path, hosts: list[RankHost], interval_s: float,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                    answer_timeout_s: float = ANSWER_TIMEOUT_S) -> HangDiagnosis:
    """Ask every rank twice, ``interval_s`` apart (to tell computing from waiting), and
    describe where each is; the result is also written to the run's ``stacks.json``. Each look
    waits (at most ``answer_timeout_s``) for the ranks of the nodes that can answer (a paused
    node's cannot): their planned ranks, or where the rendezvous numbers them (elastic), as
    many as those nodes run workers."""
    able = [host for host in hosts if container_status(host) != "paused"]
    planned = {rank for host in able for rank in host.ranks}
    at_least = sum(host.nproc for host in able)

    def look(expected: set[int]) -> Probe:
        return request_snapshots(debug_dir(run_dir), expected, answer_timeout_s, clock, sleep, at_least=at_least)

    first = look(planned)
    sleep(interval_s)
    second = look(planned or set(first.snapshots))
    expected = {rank for host in hosts for rank in host.ranks}
    if expected:
        why = absent_reasons(client, hosts, expected - set(second.snapshots), ranks_that_returned(run_dir))
        unheard = []
    else:
        answered = {**first.snapshots, **second.snapshots}
        placement = place_ranks(client, hosts, answered)
        expected = set(answered) | set(placement.stopped)
        missing = expected - set(second.snapshots)
        why = {rank: reason for rank, reason in placement.stopped.items() if rank in missing}
        not_asked = [host for host in placement.hosts if host.name not in placement.asked]
        # no rank is said to have exited: the ranks placed here are those heard, and a restart
        # renumbers them between the looks
        why.update(absent_reasons(client, not_asked, missing - set(why), returned=()))
        unheard = placement.unheard
    apart = max(second.at - first.at, 0.0)
    found = diagnose(second, first, expected, why, None, f"no rank made progress between two looks {apart:.1f} s apart")
    found.unheard_nodes = unheard
    found.cut_by = network_cuts(hosts)
    try:
        (Path(run_dir) / STACKS_FILE).write_text(json.dumps({"time": time.time(), **found.to_json()}, indent=1))
    except OSError:
        pass  # the run directory went away: the screen still has it
    return found


def ranks_that_returned(run_dir: Path) -> set[int]:
    """The ranks whose latest record on the run's progress channel says their script returned
    (a step after it is a new process of the rank)."""
    latest = {record.rank: record.finished for record in ProgressReader(Path(run_dir) / PROGRESS_SUBDIR).poll()}
    return {rank for rank, finished in latest.items() if finished}


def container_status(host: RankHost) -> str:
    """The node's container's status now ("" when the engine cannot say: ended meanwhile)."""
    try:
        host.container.reload()
        return host.container.status
    except engine_errors():
        return ""


@dataclass(frozen=True)
class Placement:
    """An elastic run's ranks on its nodes (see :func:`place_ranks`)."""

    hosts: list[RankHost]  # with the ranks known to be on them; a node with none left out
    stopped: dict[int, str]  # the ranks whose process the engine found stopped, with why
    asked: set[str]  # the nodes asked for their stopped processes
    unheard: list[str]  # a line for each node some of whose ranks were not heard of at all


def place_ranks(client: Any, hosts: list[RankHost], answered: dict[int, Any]) -> Placement:
    """Place an elastic run's ranks (numbered by the rendezvous): those that answered, on the
    node their answer names; on a node fewer of whose ranks answered than it runs, those the
    engine finds stopped. The ranks still missing have no number anyone knows: their node's line
    says how many, and why where the engine knows (a paused container)."""
    placed, stopped, asked, unheard = [], {}, set(), []
    for host in hosts:
        ranks = {rank for rank, snapshot in answered.items() if snapshot.node == host.name}
        missing = host.nproc - len(ranks)
        status = container_status(host) if missing > 0 else ""
        if status == "running":
            asked.add(host.name)
            found = set(stopped_ranks(client, host.container))
            stopped.update({rank: stopped_reason(host, rank) for rank in found})
            missing -= len(found - ranks)
            ranks |= found
        if missing > 0:
            why = f": its container is paused{fault_note(pause_fault(host))}" if status == "paused" else ""
            unheard.append(f"{host.name}: {missing} of its {host.nproc} ranks did not answer{why}")
        if ranks:
            placed.append(replace(host, ranks=tuple(sorted(ranks))))
    return Placement(placed, stopped, asked, unheard)


def stack_lines(found: HangDiagnosis) -> list[str]:
    """What ``stacks`` prints: the groups (odd ones out first), the ranks that cannot answer or
    are computing, and the first divergence of their collectives; where the ranks made progress
    between the looks, the verdict first (the job is working), and no divergence: its ranks are
    looked at a moment apart, so one is collectives ahead of another as they go."""
    lines = found.lines()[1:]
    if not found.hung:
        return [found.headline, *(line.removeprefix("  ") for line in lines)]
    divergence = found.divergence
    if divergence is not None and not any(divergence.text in line for line in lines):
        # said only in the headline, which this leaves out (ranks missing: said nowhere else)
        # right past where every rank is, before what says more of it: where each waits now, the hints
        lines.insert(len(found.place_lines()) - 1, f"  {divergence.text}")
    return [line.removeprefix("  ") for line in lines]
