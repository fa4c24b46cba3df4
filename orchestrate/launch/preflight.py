"""Pre-flight: what the engine must give before a run may start, asked in one place.

The engine answers, Compose v2 is there, the node sizes fit the engine, and the image the
nodes run exists: the node image (built on first use when it is the default), the kernel's
netem where the link needs it, and the image derived for the user's requirements and
Dockerfile. Each refusal is one line (exit 2) and nothing has started.
"""
from __future__ import annotations

from typing import Any, Callable

from orchestrate.config.fault_spec import check_fault_levels
from orchestrate.config.link import netem_missing_message
from orchestrate.config.run_config import RunConfig
from orchestrate.engine.images import ensure_image
from orchestrate.engine.netem import probe_netem
from orchestrate.engine.user_image import derived_image_spec, ensure_derived_image
from orchestrate.errors import UsageError


def check_engine_resources(config: RunConfig, engine_info: dict) -> None:
    """Refuse node sizes the engine cannot give (it would fail every container at start), and
    where the nodes have no CPU limit, a slow fault that the engine's CPUs leave no slower."""
    cpus = engine_info.get("NCPU")
    if config.cpus_per_node and cpus and config.cpus_per_node > cpus:
        raise UsageError(f"--cpus-per-node {config.cpus_per_node:g} is more than the engine's {cpus} CPUs")
    if not config.cpus_per_node and cpus:
        check_fault_levels(list(config.faults), None, cpus,
                           f"the engine's {cpus} CPUs, all a node without --cpus-per-node has")
    memory = engine_info.get("MemTotal")
    if config.memory_per_node and memory and config.memory_per_node > memory:
        raise UsageError(f"--memory-per-node {config.memory_per_node // 2**20}m is more than the"
                         f" engine's {memory // 2**20}m of memory")


def link_netem(client: Any, config: RunConfig, say: Callable[[str], None]) -> bool:
    """Whether the nodes' links get netem (True also where the link needs none); where the
    kernel has none, a loss is dropped by iptables instead, and that is said.

    Raises:
        UsageError: When the link asks for a delay and the engine's kernel has no netem.
    """
    if config.link is None or not config.link.needs_netem:
        return True
    missing = probe_netem(client, config.image)
    if missing is None:
        return True
    if config.link.delay_ms:
        raise UsageError(netem_missing_message(config.link, missing))
    say(f"--link loss={config.link.loss_pct:g}%: by iptables statistic (this kernel has no netem)")
    return False


def prepare_image(client: Any, config: RunConfig, *, build: bool, progress: Callable[[str], None]) -> str:
    """The image the nodes will run: the node image, made sure of, or the one derived from it
    for the user's requirements and Dockerfile.

    Raises:
        ImageUnavailableError: When an image cannot be had or built.
    """
    ensure_image(client, config.image, build_default=build, progress=progress)
    spec = derived_image_spec(config)
    return ensure_derived_image(client, spec, progress) if spec is not None else config.image
