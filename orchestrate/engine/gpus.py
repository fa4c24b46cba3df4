"""GPUs: which ones the Docker engine can hand out, and the topology a node sees.

How a run splits them among its nodes is :mod:`orchestrate.config.gpu_layout` (pure).
"""
from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import EngineError
from orchestrate.plan.model import JobPlan

log = logging.getLogger(__name__)

CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs the engine can give containers.

    Attributes:
        runtime: How they are exposed: "nvidia" (the NVIDIA runtime), "cdi", or "" (none).
        indices: The host's GPU indices.
    """

    runtime: str = ""
    indices: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.indices) if self.runtime else 0

    def describe(self) -> str:
        if not self.count:
            return "no GPUs the engine can hand out (no NVIDIA runtime or CDI devices)"
        return f"{self.count} GPU(s) via {self.runtime}: {', '.join(self.indices)}"


def host_gpu_indices() -> tuple[str, ...]:
    """The GPU indices ``nvidia-smi`` lists on this host (none without it)."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip().isdigit())


def has_nvidia_cdi(dirs: tuple[Path, ...] = CDI_DIRS) -> bool:
    """Whether a CDI spec for NVIDIA GPUs is installed."""
    for directory in dirs:
        for spec in list(directory.glob("*.yaml")) + list(directory.glob("*.json")):
            try:
                if "nvidia.com/gpu" in spec.read_text(errors="replace"):
                    return True
            except OSError:
                continue
    return False


def detect_gpus(client: Any) -> GpuInventory:
    """Ask the engine for the NVIDIA runtime (or look for CDI specs), then list the host's GPUs.

    Raises:
        EngineError: When the engine cannot say: a GPU host must not fall back to the CPU
            silently because its engine failed to answer.
    """
    try:
        runtimes = client.info().get("Runtimes") or {}
    except engine_errors() as exc:
        raise EngineError(f"cannot ask the engine which GPUs it has: {describe(exc)}") from None
    runtime = "nvidia" if "nvidia" in runtimes else ("cdi" if has_nvidia_cdi() else "")
    if not runtime:
        return GpuInventory()
    return GpuInventory(runtime, host_gpu_indices())


def gpu_topology(client: Any, plan: JobPlan, container: Any = None) -> str:
    """``nvidia-smi topo -m`` as node0 sees its GPUs: in its container, or a throwaway one."""
    argv = ["nvidia-smi", "topo", "-m"]
    try:
        if container is not None:
            _, text = exec_output(client, container, argv)
            return text.rstrip()
        import docker.types

        request = docker.types.DeviceRequest(
            driver="nvidia", device_ids=list(plan.nodes[0].gpu_ids), capabilities=[["gpu"]]
        )
        output = client.containers.run(plan.image, argv, device_requests=[request], remove=True, entrypoint=[])
        return output.decode("utf-8", "replace").rstrip()
    except engine_errors() as exc:  # the topology is information, never a reason to fail a run
        return f"(nvidia-smi topo -m unavailable: {describe(exc)[:200]})"
