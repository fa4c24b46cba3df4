"""torchrun's command line for one node: static (node ranks) or elastic (c10d rendezvous)."""
from __future__ import annotations

from typing import Optional

from orchestrate.config.run_config import RunConfig
from orchestrate.plan.layout import RDZV_PORT, RUN_DIR_MOUNT
from orchestrate.plan.model import node_name

# What every elastic job's workers get, on the nodes and in the exported jobs. torch (2.9.1)
# hands the workers its rendezvous's TCPStore (TORCHELASTIC_USE_AGENT_STORE), keeps that one
# store across restarts of the worker group, and scopes no key by attempt (pytorch#135712): a
# rank of a restarted group that reaches the store before a peer has read the peer's address
# from the attempt before, and measured, connected to a closed port and failed, or hung. And
# it caches the first round's address in every agent, so a node restarted alone cannot form a
# group with the agents that survived. torch's opt-out gives each round a store of its own.
STORE_PER_ROUND_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def torchrun_argv(
    *,
    nodes: int,
    node_rank: int,
    nproc_per_node: int,
    master_addr: str,
    master_port: int,
    target: tuple[str, ...],
) -> tuple[str, ...]:
    """Build the torchrun command of one node (static rendezvous).

    ``--tee 3`` prints every worker line prefixed by :data:`LOG_LINE_PREFIX_TEMPLATE`, and
    ``--log-dir`` keeps each worker's output and structured error file in the node's
    directory of the run, on the host.
    """
    return (
        "torchrun",
        "--nnodes", str(nodes),
        "--node-rank", str(node_rank),
        "--nproc-per-node", str(nproc_per_node),
        "--master-addr", master_addr,
        "--master-port", str(master_port),
        "--max-restarts", "0",
        "--tee", "3",
        "--log-dir", torchrun_log_dir(node_name(node_rank)),
        *target,
    )


def torchrun_log_dir(node: str) -> str:
    """Where torchrun keeps a node's per-worker logs and error files (inside the node)."""
    return f"{RUN_DIR_MOUNT}/{node}/torchrun"


def elastic_torchrun_argv(config: RunConfig, run_id: str, rdzv_host: str, node: str,
                          target: tuple[str, ...] = (), nproc: Optional[int] = None) -> tuple[str, ...]:
    """Build the torchrun command of every node in elastic mode (c10d rendezvous on node0).

    The same command runs on every node: the rendezvous assigns node and global ranks, and
    torchrun restarts the workers (up to ``--max-restarts``) when a node leaves or joins.
    ``target``: what torchrun runs (default: the config's target); ``nproc``: this node's
    workers (default: ``--nproc-per-node``).
    """
    return (
        "torchrun",
        "--nnodes", f"{config.min_nodes}:{config.max_nodes}",
        "--nproc-per-node", str(nproc or config.nproc_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{rdzv_host}:{RDZV_PORT}",
        "--rdzv-id", run_id,
        # Short keep-alives: a dead node leaves the rendezvous after ~3 s instead of 15 s.
        "--rdzv-conf", f"join_timeout={config.rdzv_timeout_s:g},last_call_timeout=2,close_timeout=10,"
                       "keep_alive_interval=1,keep_alive_max_attempt=3",
        "--max-restarts", str(config.max_restarts),
        "--monitor-interval", "0.5",
        "--tee", "3",
        "--log-dir", torchrun_log_dir(node),
        *(target or config.target),
    )
