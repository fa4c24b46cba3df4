"""Render a :class:`JobPlan` as a Compose project (pure); :mod:`orchestrate.engine.compose_cli`
drives ``docker compose`` for it."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from orchestrate.config.run_config import STORE_SERVICE
from orchestrate.engine.labels import ROLE_LABEL, RUN_ID_LABEL, STORE_ROLE, node_labels, owner_labels, project_labels
from orchestrate.plan.layout import (
    CPU_PERIOD_US,
    NETWORK,
    PROJECT_MOUNT_DIR,
    RUN_DIR_MOUNT,
    SHARED_DIR,
    SHARED_VOLUME,
    SHM_SIZE,
    WORKSPACE_DIR,
)
from orchestrate.plan.model import JobPlan, NodePlan

log = logging.getLogger(__name__)


def escape_interpolation(value: Any) -> Any:
    """Double every ``$`` so that Compose passes strings through as they are (torchrun's
    ``${rank}`` template, a user's ``--env PRICE=$5``)."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [escape_interpolation(v) for v in value]
    if isinstance(value, dict):
        return {k: escape_interpolation(v) for k, v in value.items()}
    return value


def render_node(plan: JobPlan, node: NodePlan) -> dict[str, Any]:
    """Return the Compose service of one node.

    Its main process is the node supervisor running torchrun (``node.command``), so the
    container's exit code, log and restarts are torchrun's, and the engine holds them.
    """
    cfg = plan.config
    service: dict[str, Any] = {
        "image": plan.image,
        "pull_policy": "never",
        "hostname": node.name,
        "init": True,
        "command": escape_interpolation(list(node.command)),
        "working_dir": WORKSPACE_DIR,
        "environment": escape_interpolation(dict(node.env)),
        "shm_size": SHM_SIZE,
        # `docker stop` and `compose stop` give the workers the run's grace before SIGKILL.
        "stop_grace_period": f"{cfg.stop_grace_s:g}s",
        "networks": [NETWORK],
        "volumes": [
            {"type": "bind", "source": str(cfg.workdir), "target": WORKSPACE_DIR},
            {
                "type": "bind",
                "source": str(cfg.project_root),
                "target": PROJECT_MOUNT_DIR,
                "read_only": True,
            },
            {"type": "volume", "source": SHARED_VOLUME, "target": SHARED_DIR},
            {"type": "bind", "source": str(plan.run_dir), "target": RUN_DIR_MOUNT},
            *user_mounts(cfg),
        ],
        "labels": escape_interpolation(node_labels(plan, node)),
    }
    if cfg.link is not None:
        # Shaping the link needs root and NET_ADMIN, in shaped runs only; the node supervisor
        # shapes, then starts torchrun as the user.
        service["user"] = "0:0"
    elif cfg.run_as:
        # The invoking user's uid:gid, so that what the workers write is theirs on the host.
        service["user"] = cfg.run_as
    if cfg.shapes_links:
        # A degrade fault shapes the link from outside (an exec as root): the workers, as the
        # user, hold no capability of it.
        service["cap_add"] = ["NET_ADMIN"]
    if cfg.cpus_per_node:
        # As a quota, not `cpus`: a slow fault changes the quota at run time, which the engine
        # refuses for a container created with `cpus` (NanoCpus).
        service["cpu_period"] = CPU_PERIOD_US
        service["cpu_quota"] = int(round(cfg.cpus_per_node * CPU_PERIOD_US))
    if cfg.memory_per_node:
        service["mem_limit"] = cfg.memory_per_node
        service["memswap_limit"] = cfg.memory_per_node  # no swap: past the limit a node is OOM-killed
    if node.gpu_ids:
        # NCCL pins memory for its transports; unlimited memlock is what it expects.
        service["ulimits"] = {"memlock": -1}
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [
                        {
                            "driver": "nvidia",
                            "device_ids": list(node.gpu_ids),
                            "capabilities": ["gpu"],
                        }
                    ]
                }
            }
        }
    return service


def render_store(plan: JobPlan) -> dict[str, Any]:
    """Return the Compose service of the run's own rendezvous store (``--rdzv-store
    container``): the node image serving torch's TCPStore, on the nodes' network, holding the
    launcher's lease; labelled with the run, and as no node of it."""
    cfg = plan.config
    service: dict[str, Any] = {
        "image": plan.image,
        "pull_policy": "never",
        "hostname": STORE_SERVICE,
        "init": True,
        "command": escape_interpolation(list(plan.store_command)),
        "environment": {"PYTHONUNBUFFERED": "1"},
        "stop_grace_period": "2s",
        "networks": [NETWORK],
        "volumes": [
            {"type": "bind", "source": str(cfg.project_root), "target": PROJECT_MOUNT_DIR, "read_only": True},
            {"type": "bind", "source": str(plan.run_dir), "target": RUN_DIR_MOUNT},
        ],
        "labels": escape_interpolation({RUN_ID_LABEL: plan.run_id, ROLE_LABEL: STORE_ROLE, **owner_labels(plan)}),
    }
    if cfg.run_as:
        service["user"] = cfg.run_as
    return service


def user_mounts(cfg: Any) -> list[dict[str, Any]]:
    """The ``--mount`` paths as the nodes' bind mounts."""
    return [{"type": "bind", "source": str(m.source), "target": m.target, **({"read_only": True} if m.read_only else {})}
            for m in cfg.mounts]


def render_compose(plan: JobPlan) -> dict[str, Any]:
    """Render the whole Compose project of a run (JSON-compatible, so also valid YAML)."""
    services = {node.name: render_node(plan, node) for node in plan.nodes}
    if plan.store_command:
        services[STORE_SERVICE] = render_store(plan)
    return {
        "name": plan.project_name,
        "services": services,
        **project_resources(plan),
    }


def project_resources(plan: JobPlan) -> dict[str, Any]:
    """The run's network and volume, labelled with the run's id and owner: Compose makes them
    before the nodes, so a launcher killed in between leaves them, and these labels are what
    ``ps``, ``down`` and ``prune`` find them by."""
    labels = escape_interpolation(project_labels(plan))
    return {"networks": {NETWORK: {"driver": "bridge", "labels": labels}}, "volumes": {SHARED_VOLUME: {"labels": labels}}}


def write_compose_file(plan: JobPlan, path: Path) -> Path:
    """Write the rendered project to ``path`` (readable by its owner only: it holds the
    user's environment) and return it."""
    path.touch(mode=0o600)
    path.write_text(json.dumps(render_compose(plan), indent=2) + "\n")
    return path


