"""A run's plan as data: every node with its ranks, GPUs, command and environment."""
from __future__ import annotations

from dataclasses import dataclass

from orchestrate.config.run_config import RunConfig


# torch's check of every collective: the variable and the level (node.ddp_detail_guard reads it so in the workers).
COLLECTIVE_CHECK_ENV = "TORCH_DISTRIBUTED_DEBUG"
COLLECTIVE_CHECK_LEVEL = "DETAIL"


@dataclass(frozen=True)
class NodePlan:
    """One simulated node: a container that runs one torchrun.

    Attributes:
        name: Service name, also the host name other nodes resolve it by.
        node_rank: torchrun's ``--node-rank``.
        global_ranks: The global ranks of this node's workers, local rank 0 first (empty in
            elastic mode, where the rendezvous decides them).
        gpu_ids: Host GPU indices reserved for this node (empty on CPU).
        process_gpus: For each local rank, the host GPU indices its process spans.
        torchrun_argv: The exact torchrun command of this node.
        env: Environment of that command.
        command: The container's main process: the node supervisor around ``torchrun_argv``.
    """

    name: str
    node_rank: int
    global_ranks: tuple[int, ...]
    gpu_ids: tuple[str, ...]
    process_gpus: tuple[tuple[str, ...], ...]
    torchrun_argv: tuple[str, ...]
    env: dict[str, str]
    command: tuple[str, ...] = ()

    def global_rank(self, local_rank: int) -> int:
        """Return the global rank of this node's worker with ``local_rank``."""
        return self.global_ranks[local_rank]

    @property
    def checks_collectives(self) -> bool:
        """Whether its workers run torch's check of every collective (``--debug-collectives``, or
        the user's ``--env TORCH_DISTRIBUTED_DEBUG=DETAIL``), as its environment says."""
        return self.env.get(COLLECTIVE_CHECK_ENV, "").strip().upper() == COLLECTIVE_CHECK_LEVEL


@dataclass(frozen=True)
class JobPlan:
    """A whole run: the Compose project and every node in it.

    ``image`` is what the nodes run: the configured image, or the image derived from it for
    the user's requirements and Dockerfile once that is built.
    """

    run_id: str
    project_name: str
    config: RunConfig
    image: str
    master_addr: str
    master_port: int
    world_size: int
    backend: str
    nodes: tuple[NodePlan, ...]
    detached: bool = False
    launcher: str = ""
    command_line: str = ""
    created: str = ""
    store_command: tuple[str, ...] = ()  # the run's own rendezvous store's (--rdzv-store container)

    @property
    def run_dir(self):
        """The run's directory on the host: logs, torchrun's error files, progress."""
        return self.config.runs_dir / self.run_id


def node_name(node_rank: int) -> str:
    """Return the service (and host) name of the node with ``node_rank``."""
    return f"node{node_rank}"
