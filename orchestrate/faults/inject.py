"""Doing a fault to a node's container, to one worker or to the network between nodes (:func:`do_fault`) and undoing it at
its end (:func:`end_fault`), and probing a node that stopped answering. Finding and signalling
one worker is :mod:`orchestrate.faults.ranks`."""
from __future__ import annotations

import logging
import re
from typing import Any, Optional

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.config.link import NETEM_MISSING, LinkSpec, degrade_commands, loss_rule, tc_commands
from orchestrate.config.run_config import STORE_SERVICE
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.labels import project_network
from orchestrate.errors import EngineError, NodeLookupError
from orchestrate.faults.network import as_root, heal, split
from orchestrate.faults.ranks import signal_rank
from orchestrate.plan.layout import CPU_PERIOD_US, NODE_INTERFACE

log = logging.getLogger(__name__)


# The signal a rank fault sends its worker; its end sends SIGCONT (a stopped worker goes on).
RANK_SIGNALS = {FaultAction.KILL_RANK: "SIGKILL", FaultAction.HANG_RANK: "SIGSTOP"}


def do_fault(client: Any, project: str, containers: dict[str, Any], fault: FaultSpec,
             link: Optional[LinkSpec] = None) -> str:
    """Do ``fault`` to its node, or to its rank's worker on whichever of ``containers`` (node
    name -> live container; the run's own rendezvous store under ``store``) runs it; return the
    node it landed on (``link``: the run's, see :func:`inject`). A preemption's SIGKILL after
    the grace is the caller's to send.

    Raises:
        NodeLookupError: When the fault's node is not among ``containers`` (it ended).
    """
    if fault.action.on_rank:
        return signal_rank(client, containers, fault.rank, RANK_SIGNALS[fault.action])
    if fault.action is FaultAction.PARTITION:
        split(client, project, containers, fault.groups)
        return fault.nodes[0]
    if fault.node not in containers:
        raise NodeLookupError(f"{fault.node} is not running")
    inject(client, project, containers[fault.node], fault, link)
    return fault.node


def end_fault(client: Any, project: str, containers: dict[str, Any], fault: FaultSpec, *, node: str,
              cpus_per_node: Optional[float] = None, link: Optional[LinkSpec] = None) -> None:
    """End a lasting fault that landed on ``node`` (``containers``: the live nodes'): its worker
    goes on, the network is whole again, or the node is as the run made it (see :func:`undo`)."""
    if fault.action.on_rank:
        signal_rank(client, {node: containers[node]}, fault.rank, "SIGCONT")
    elif fault.action is FaultAction.PARTITION:
        heal(client, containers, fault.groups)
    else:
        undo(client, project, containers[node], fault, node=node, cpus_per_node=cpus_per_node, link=link)


# runc cannot freeze a cgroup whose processes are busy in the kernel at that instant ("OCI runtime
# pause failed: unable to freeze"): it thaws them again, and a moment later it can. Seen on a busy
# 2-core engine, pausing a node one of whose ranks had just been stopped.
FREEZE_TRIES = 3
FREEZE_RETRY_S = 1.0


def could_not_freeze(error: BaseException) -> bool:
    return "unable to freeze" in str(error)


def pause_node(container: Any, retry_s: float = FREEZE_RETRY_S) -> None:
    """Pause a node's container, trying again where runc could not freeze it at once."""
    for attempt in Retrying(stop=stop_after_attempt(FREEZE_TRIES), wait=wait_fixed(retry_s),
                            retry=retry_if_exception(could_not_freeze), reraise=True):
        with attempt:
            container.pause()


def inject(client: Any, project: str, container: Any, fault: FaultSpec, link: Optional[LinkSpec] = None) -> None:
    """Do ``fault`` (a node fault) to a node's container in Compose project ``project``
    (whose network a disconnect needs); ``link``: the run's ``--link``, which a degrade keeps
    but for its rate.

    Raises:
        docker.errors.DockerException: When the engine refuses (the node already ended).
        NodeLookupError: When the project's network cannot be found.
        EngineError: When the node's link cannot be shaped.
    """
    action = fault.action
    if action in (FaultAction.KILL, FaultAction.LOSE):  # (no one brings a lost node back: the supervisor's part)
        container.kill()
    elif action is FaultAction.PAUSE:
        pause_node(container)
    elif action is FaultAction.DISCONNECT:
        project_network(client, project).disconnect(container, force=True)
    elif action is FaultAction.RESTART:
        container.restart(timeout=0)
    elif action is FaultAction.PREEMPT:  # its SIGKILL, after the stop grace, is the caller's to send
        container.kill(signal="SIGTERM")
    elif action is FaultAction.SLOW:
        container.update(cpu_period=CPU_PERIOD_US, cpu_quota=int(round(fault.slow_cpus * CPU_PERIOD_US)))
    elif action is FaultAction.DEGRADE:
        rate = fault.degraded_rate_bits
        try:
            shape(client, container, degrade_commands(rate, link, NODE_INTERFACE))
        except EngineError as exc:  # a link whose loss is iptables' (no netem): the rate alone is tc's
            if link is None or not link.needs_netem or not NETEM_MISSING.search(str(exc)):
                raise
            shape(client, container, degrade_commands(rate, link, NODE_INTERFACE, netem=False))
    elif action is FaultAction.LOSSY:  # iptables, netem or not: a netem qdisc would replace the link's own
        shape(client, container, [["iptables", "-w", "-A", *loss_rule(NODE_INTERFACE, fault.lossy_pct)]])
    else:
        raise ValueError(f"{action.value} is not a node fault")


def undo(client: Any, project: str, container: Any, fault: FaultSpec, *, node: str,
         cpus_per_node: Optional[float] = None, link: Optional[LinkSpec] = None) -> None:
    """End a lasting node fault: the node as the run made it again (its ``--cpus-per-node``
    quota, its ``--link`` shaping).

    Raises:
        docker.errors.DockerException: When the engine refuses (the node already ended).
        EngineError: When the node's link cannot be shaped back.
    """
    action = fault.action
    if action is FaultAction.PAUSE:
        container.unpause()
    elif action is FaultAction.DISCONNECT:  # (the store is found by its service's name, as its host)
        project_network(client, project).connect(container, aliases=[STORE_SERVICE if fault.on_store else node])
    elif action is FaultAction.SLOW:
        quota = int(round(cpus_per_node * CPU_PERIOD_US)) if cpus_per_node else -1  # -1: no quota
        container.update(cpu_period=CPU_PERIOD_US, cpu_quota=quota)
    elif action is FaultAction.DEGRADE:
        restore = tc_commands(link, NODE_INTERFACE) if link is not None else []
        try:
            shape(client, container, [["tc", "qdisc", "del", "dev", NODE_INTERFACE, "root"], *restore])
        except EngineError as exc:  # a link whose loss is iptables' (no netem): its rate alone is tc's
            if link is None or not NETEM_MISSING.search(str(exc)):
                raise
            shape(client, container, tc_commands(link, NODE_INTERFACE, netem=False))
    elif action is FaultAction.LOSSY:
        shape(client, container, [["iptables", "-w", "-D", *loss_rule(NODE_INTERFACE, fault.lossy_pct)]])


def shape(client: Any, container: Any, commands: list[list[str]]) -> None:
    """Run traffic-control (and iptables) commands in a node, as root (the node has NET_ADMIN
    in runs that shape links).

    Raises:
        EngineError: Quoting the command when it fails.
    """
    as_root(client, container, commands, "shape the link")


# The kernel's OOM-kill counter of a container's memory cgroup (v1, then v2), read inside it.
OOM_COUNTER_ARGV = ["sh", "-c", "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"]


_OOM_KILL = re.compile(r"^oom_kill (\d+)$", re.M)


def oom_kills(state: dict, counter_output: Optional[str]) -> int:
    """How many processes the kernel OOM-killed in a node (pure).

    Args:
        state: The container's ``State`` (``OOMKilled`` is set once it has exited).
        counter_output: What :data:`OOM_COUNTER_ARGV` printed in it, while it runs.
    """
    counted = sum(int(n) for n in _OOM_KILL.findall(counter_output or ""))
    return max(counted, 1 if state.get("OOMKilled") else 0)


def probe_node(container: Any, network_name: str) -> Optional[str]:
    """Why a running node cannot answer its peers (paused, gone, off the network), or None
    (it answers, it already ended, or the engine cannot say)."""
    try:
        container.reload()
    except engine_errors() as exc:
        if classify(exc) is EngineFault.NOT_FOUND:
            return f"its container is gone ({describe(exc)[:80]})"
        log.debug("probe of %s: the engine cannot say: %s", getattr(container, "name", "?"), exc)
        return None  # the engine did not answer: that is no reason to blame the node
    if container.status == "paused":  # the SDK's status is the engine's State.Status
        return "its container is paused (hung)"
    if container.status not in ("running", "restarting"):
        return None  # it ended: its own exit code says how, it is not hung
    networks = container.attrs.get("NetworkSettings", {}).get("Networks", {}) or {}
    if not any(name == network_name or name.endswith("_" + network_name) for name in networks):
        return f"it is cut off from the {network_name} network"
    return None
