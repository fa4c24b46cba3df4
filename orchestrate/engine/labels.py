"""A run's record in the engine: the labels on its containers, and finding them by those labels."""
from __future__ import annotations

from typing import Any

from orchestrate.errors import NodeLookupError
from orchestrate.plan.layout import NETWORK
from orchestrate.plan.model import JobPlan, NodePlan

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
# An elastic job's --nnodes MIN ("" for a static job): how many nodes `fault RUN lose:...` must leave.
MIN_NODES_LABEL = "io.ddp-compose.min-nodes"


GPUS_LABEL = "io.ddp-compose.gpus"


WORKDIR_LABEL = "io.ddp-compose.workdir"


RUN_DIR_LABEL = "io.ddp-compose.run-dir"


DETACHED_LABEL = "io.ddp-compose.detached"
# Whether the launcher keeps the run's nodes after it (--keep, ddp_cluster's --ddp-keep): "1" or "0"
KEEP_LABEL = "io.ddp-compose.keep"


LAUNCHER_LABEL = "io.ddp-compose.launcher"


CREATED_LABEL = "io.ddp-compose.created"


COMMAND_LABEL = "io.ddp-compose.command"
STOP_GRACE_LABEL = "io.ddp-compose.stop-grace"
# The --link the nodes were shaped to ("" unshaped): what a degrade fault's end gives back.
LINK_LABEL = "io.ddp-compose.link"
# The --cpus-per-node of the nodes ("" unlimited): what a slow fault's end gives back.
CPUS_LABEL = "io.ddp-compose.cpus-per-node"
# The hang watchdog's --hang-diagnose-after and --hang-timeout ("" never): attach follows them too.
HANG_LABEL = "io.ddp-compose.hang"
# What an elastic job's node death restarts ("all" or "node") and where its rendezvous store
# lives (a node's name, or the store container's): for a supervisor that attaches later.
RESTART_LABEL = "io.ddp-compose.restart"
STORE_HOST_LABEL = "io.ddp-compose.rdzv-store"
# Who launched the run: the uid ("" where the OS has none) and its login name (for display). On a
# shared engine, `ps --mine` and `prune` tell the caller's runs from other users' by them.
OWNER_LABEL = "io.ddp-compose.owner"
OWNER_NAME_LABEL = "io.ddp-compose.owner-name"


def node_labels(plan: JobPlan, node: NodePlan) -> dict[str, str]:
    """The labels of a node's container: the run's record in the engine."""
    cfg = plan.config
    return {
        RUN_ID_LABEL: plan.run_id,
        NODE_RANK_LABEL: str(node.node_rank),
        NODES_LABEL: str(cfg.nodes),
        NPROC_LABEL: cfg.nprocs_text,  # "2", or each node's own: "2,1,1"
        RDZV_LABEL: cfg.rdzv,
        MAX_RESTARTS_LABEL: str(cfg.max_restarts),
        MIN_NODES_LABEL: str(cfg.min_nodes) if cfg.elastic and cfg.min_nodes else "",
        GPUS_LABEL: ",".join(node.gpu_ids),
        WORKDIR_LABEL: str(cfg.workdir),
        RUN_DIR_LABEL: str(plan.run_dir),
        DETACHED_LABEL: "1" if plan.detached else "0",
        KEEP_LABEL: "1" if cfg.keep else "0",
        LAUNCHER_LABEL: plan.launcher,
        CREATED_LABEL: plan.created,
        COMMAND_LABEL: plan.command_line,
        STOP_GRACE_LABEL: f"{cfg.stop_grace_s:g}",
        LINK_LABEL: str(cfg.link or ""),
        CPUS_LABEL: f"{cfg.cpus_per_node:g}" if cfg.cpus_per_node else "",
        RESTART_LABEL: cfg.restart,
        STORE_HOST_LABEL: cfg.store_host,
        HANG_LABEL: f"{cfg.hang_diagnose_after_s:g},{'' if cfg.hang_timeout_s is None else f'{cfg.hang_timeout_s:g}'}",
        **owner_labels(plan),
    }


def owner_labels(plan: JobPlan) -> dict[str, str]:
    """The labels naming who launched the run: the uid of its ``run_as`` (the invoking user's
    ``UID:GID``) and that user's login name; both "" where the OS has no uids."""
    cfg = plan.config
    return {OWNER_LABEL: cfg.run_as.partition(":")[0] if cfg.run_as else "", OWNER_NAME_LABEL: cfg.user_name}


def project_labels(plan: JobPlan) -> dict[str, str]:
    """The labels of a run's network and volume: enough to find them, and whose they are, where
    the run has no container to carry its record (a launcher killed between Compose making them
    and making its nodes: see :mod:`orchestrate.engine.remains`)."""
    return {RUN_ID_LABEL: plan.run_id, RUN_DIR_LABEL: str(plan.run_dir), LAUNCHER_LABEL: plan.launcher,
            CREATED_LABEL: plan.created, **owner_labels(plan)}


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


def find_node_container(client: Any, project_name: str, node: NodePlan) -> Any:
    """Find a node's container by its Compose labels.

    Raises:
        NodeLookupError: When zero or several containers carry those labels.
    """
    labels = [
        f"{COMPOSE_PROJECT_LABEL}={project_name}",
        f"{COMPOSE_SERVICE_LABEL}={node.name}",
        f"{NODE_RANK_LABEL}={node.node_rank}",
    ]
    found = client.containers.list(all=True, ignore_removed=True, filters={"label": labels})
    if len(found) != 1:
        raise NodeLookupError(
            f"expected one container labelled {', '.join(labels)}; found {len(found)}"
        )
    return found[0]


def find_store_container(client: Any, run_id: str, service: str) -> Any:
    """Run ``run_id``'s own rendezvous store container (Compose service ``service``).

    Raises:
        NodeLookupError: When the engine has not one such container.
        docker.errors.DockerException: When the engine does not answer.
    """
    labels = [f"{RUN_ID_LABEL}={run_id}", f"{COMPOSE_SERVICE_LABEL}={service}"]
    found = client.containers.list(all=True, ignore_removed=True, filters={"label": labels})
    if len(found) != 1:
        raise NodeLookupError(f"the run's rendezvous store ({service}): expected one container, found {len(found)}")
    return found[0]


def containers_of_project(client: Any, project_name: str) -> dict[str, Any]:
    """Every container of a Compose project, by its service name."""
    found = client.containers.list(all=True, ignore_removed=True, filters={"label": f"{COMPOSE_PROJECT_LABEL}={project_name}"})
    return {container.labels[COMPOSE_SERVICE_LABEL]: container for container in found}


ROLE_LABEL = "io.ddp-compose.role"


CONTROLLER_ROLE = "controller"  # the role label of the slurmctld container (not a node)
STORE_ROLE = "rdzv-store"  # the role label of a run's own rendezvous store (not a node)
# Containers of a run that are not its nodes: listings of runs pass them by.
SERVICE_ROLES = (CONTROLLER_ROLE, STORE_ROLE)


SCHEDULER_LABEL = "io.ddp-compose.scheduler"
