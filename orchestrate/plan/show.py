"""The plan as --dry-run prints it."""
from __future__ import annotations

import shlex

from orchestrate.config.user_env import MASK
from orchestrate.plan.gpu_assignment import shared_gpus
from orchestrate.plan.layout import RDZV_PORT, WORKSPACE_DIR
from orchestrate.plan.model import JobPlan
from orchestrate.text import format_bytes, format_table


def format_plan(plan: JobPlan) -> str:
    """Render the plan as the readable table ``--dry-run`` prints."""
    cfg = plan.config
    lines = [
        f"run {plan.run_id}  (compose project {plan.project_name})",
        f"image {plan.image}  backend {plan.backend}  workdir {cfg.workdir} -> {WORKSPACE_DIR}",
        *mount_lines(plan),
        f"nodes N={cfg.nodes}  GPUs per node G={cfg.gpus_per_node}  local world size"
        f" L={cfg.nprocs_text}  world size W={plan.world_size}"
        + ("" if cfg.elastic else f"  master {plan.master_addr}:{plan.master_port}"),
        "",
    ]
    header = ("node", "node rank", "local rank", "global rank", "GPUs (host ids)")
    if cfg.elastic:
        store = "the run's own store container" if cfg.rdzv_store == "container" else "node0's torchrun agent"
        restarts = "the dead node alone" if cfg.restart == "node" else "every node"
        lines.insert(3, f"elastic: c10d rendezvous on {cfg.store_host}:{RDZV_PORT} ({store}), nodes"
                        f" {cfg.min_nodes}:{cfg.max_nodes}, max restarts {cfg.max_restarts} ({restarts});"
                        " node and global ranks are decided by the rendezvous")
    rows = [
        (
            n.name,
            "by rendezvous" if cfg.elastic else str(n.node_rank),
            str(local),
            str(n.global_ranks[local]) if n.global_ranks else "by rendezvous",
            ",".join(n.process_gpus[local]) or "- (CPU)",
        )
        for n in plan.nodes
        for local in range(cfg.nprocs_of(n.node_rank))
    ]
    lines += format_table(header, rows)
    if cfg.share_gpus:
        shared = shared_gpus({n.name: n.process_gpus for n in plan.nodes})
        lines.append("GPUs shared (--share-gpus): " + ("; ".join(f"GPU {gpu} by {', '.join(users)}"
                                                               for gpu, users in sorted(shared.items()))
                                                     or "none: there are enough for every process")
                     + ". Correctness, CUDA code paths and NCCL's control flow, not NCCL's speed: the transport"
                       " between workers is sockets")
    lines.append("")
    for n in plan.nodes:
        lines.append(f"{n.name}$ {shlex.join(n.torchrun_argv)}")
    lines.append(env_line(plan))
    lines.append(f"each node: {node_size(plan)}; runs as {'uid:gid ' + cfg.run_as if cfg.run_as else 'the image user'};"
                 f" link {cfg.link or 'as the bridge gives it'}")
    lines += image_and_fault_lines(plan)
    return "\n".join(lines)


def mount_lines(plan: JobPlan) -> list[str]:
    """The user's mounts, each as host path -> node path."""
    return [f"mount {m.source} -> {m.target}{' (read-only)' if m.read_only else ''}" for m in plan.config.mounts]


def env_line(plan: JobPlan, leave_out: tuple[str, ...] = ()) -> str:
    """The nodes' environment (but ``leave_out``), the user's values masked; a variable whose value
    is each node's own shows as ``DDP_NODE=<node name>`` (or ``<per node>``), not node0's."""
    cfg = plan.config
    env = {k: v for k, v in (plan.nodes[0].env if plan.nodes else {}).items() if k not in leave_out}
    for key in env:
        values = [node.env.get(key) for node in plan.nodes]
        if len(set(values)) > 1:
            named = all(value == node.name for value, node in zip(values, plan.nodes))
            env[key] = "<node name>" if named else "<per node>"
    return ("env: " + " ".join(f"{k}={MASK if k in cfg.user_env else v}" for k, v in sorted(env.items()))
            + (" (your variables' values are not shown)" if cfg.user_env else ""))


def node_size(plan: JobPlan) -> str:
    """Each node's CPUs and memory, as limited."""
    cfg = plan.config
    sizes = [f"{cfg.cpus_per_node:g} CPUs" if cfg.cpus_per_node else "",
             f"{format_bytes(cfg.memory_per_node)} memory" if cfg.memory_per_node else ""]
    return ", ".join(s for s in sizes if s) or "no CPU or memory limit"


def image_and_fault_lines(plan: JobPlan) -> list[str]:
    """The image derived for the user's requirements or Dockerfile, and the faults asked for."""
    cfg = plan.config
    lines = []
    if cfg.requirements or cfg.dockerfile:
        extra = [f"pip install -r {cfg.requirements}" if cfg.requirements else "",
                 f"{cfg.dockerfile}" if cfg.dockerfile else ""]
        lines.append(f"derived image: {cfg.image} + {' + '.join(e for e in extra if e)}"
                     " (built at run time, tagged by a digest of its inputs)")
    if cfg.faults:
        lines.append("faults: " + " ".join(str(f) for f in cfg.faults))
    return lines
