"""Doing a fault to a node's container, and probing a node that stopped answering."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

import re
from typing import Any, Optional

from orchestrate.config.fault_spec import FaultAction
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.labels import project_network


def inject(client: Any, project: str, container: Any, action: FaultAction) -> None:
    """Do ``action`` to a node's container in Compose project ``project`` (whose network a
    disconnect needs).

    Raises:
        docker.errors.DockerException: When the engine refuses (the node already ended).
        NodeLookupError: When the project's network cannot be found.
    """
    network = project_network(client, project) if action is FaultAction.DISCONNECT else None
    apply_fault(client, container, action, network)


def apply_fault(client: Any, container: Any, action: FaultAction, network: Any = None) -> None:
    """Do ``action`` to a node's container."""
    if action is FaultAction.KILL:
        container.kill()
    elif action is FaultAction.PAUSE:
        container.pause()
    elif action is FaultAction.DISCONNECT:
        network.disconnect(container, force=True)
    elif action is FaultAction.RESTART:
        container.restart(timeout=0)
    elif action is FaultAction.PREEMPT:  # its SIGKILL, after the stop grace, is the caller's to send
        container.kill(signal="SIGTERM")


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
    state = container.attrs.get("State", {})
    if state.get("Paused") or container.status == "paused":
        return "its container is paused (hung)"
    if not state.get("Running", container.status == "running"):
        return None  # it ended: its own exit code says how, it is not hung
    networks = container.attrs.get("NetworkSettings", {}).get("Networks", {}) or {}
    if not any(name == network_name or name.endswith("_" + network_name) for name in networks):
        return f"it is cut off from the {network_name} network"
    return None
