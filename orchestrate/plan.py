"""The pure plan step: turn a :class:`RunConfig` into the exact nodes, ranks and commands.

Nothing here talks to Docker; ``--dry-run`` prints what :func:`make_plan` returns, and the
apply step (:mod:`orchestrate.launcher`) only carries it out.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from orchestrate.config import RunConfig, format_bytes
from orchestrate.link import tc_commands
from orchestrate.user_env import shown_value

WORKSPACE_DIR = "/workspace"
PROJECT_MOUNT_DIR = "/opt/ddp-compose"
SHARED_DIR = "/shared"
# The run's directory on the host (logs, torchrun's error files, progress, the launcher's
# heartbeat), mounted in every node.
RUN_DIR_MOUNT = "/ddp-run"
NODE_MAIN = f"{PROJECT_MOUNT_DIR}/orchestrate/node_main.py"
HEARTBEAT_FILE = "heartbeat"
PROGRESS_SUBDIR = "progress"
# A node stops itself when the foreground launcher's heartbeat is this old: with the poll and
# the stop grace, its containers end within LEASE_TIMEOUT_S + 7 s of the launcher's death.
LEASE_TIMEOUT_S = 30
# torchrun prefixes every worker line with its global and local rank: "[3|1]:text".
LOG_LINE_PREFIX_TEMPLATE = "[${rank}|${local_rank}]:"
# Each node sits on one project network, so its only interface besides lo is eth0.
NODE_INTERFACE = "eth0"
# The elastic rendezvous store (torchrun's c10d backend) listens here on node0.
RDZV_PORT = 29400


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

    @property
    def run_dir(self):
        """The run's directory on the host: logs, torchrun's error files, progress."""
        return self.config.runs_dir / self.run_id


def node_name(node_rank: int) -> str:
    """Return the service (and host) name of the node with ``node_rank``."""
    return f"node{node_rank}"


def assign_ranks(nodes: int, nproc_per_node: int) -> list[tuple[int, ...]]:
    """Assign global ranks to every node's workers.

    torchrun's static rendezvous with ``--node-rank`` orders workers by node rank, then by
    local rank, so:

    1. node ``i`` has node rank ``i``;
    2. its local rank ``l`` is global rank ``i * nproc_per_node + l``.

    Args:
        nodes: Number of nodes.
        nproc_per_node: Workers per node.

    Returns:
        One tuple of global ranks per node, in node-rank order.
    """
    return [
        tuple(range(i * nproc_per_node, (i + 1) * nproc_per_node)) for i in range(nodes)
    ]


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


def node_command(config: RunConfig, node: str, torchrun: tuple[str, ...], detached: bool) -> tuple[str, ...]:
    """The container's main process: the node supervisor (``orchestrate/node_main.py``)
    waiting for the peers, holding the launcher's lease unless detached, and running torchrun."""
    lease = () if detached else ("--lease", f"{RUN_DIR_MOUNT}/{HEARTBEAT_FILE}",
                                 "--lease-timeout", str(LEASE_TIMEOUT_S))
    shaping: tuple[str, ...] = ()
    if config.link is not None:
        # The container starts as root with NET_ADMIN to shape its link; torchrun runs as the user.
        shaping = tuple(a for cmd in tc_commands(config.link, NODE_INTERFACE) for a in ("--tc", shlex.join(cmd)))
        if config.run_as:
            shaping += ("--run-as", config.run_as)
    peers = ",".join(node_name(i) for i in range(config.nodes))
    return ("python3", NODE_MAIN, "--peers", peers, "--ready-timeout", f"{config.ready_timeout_s:g}",
            *lease, *shaping, "--", *torchrun)


def elastic_torchrun_argv(config: RunConfig, run_id: str, rdzv_host: str, node: str) -> tuple[str, ...]:
    """Build the torchrun command of every node in elastic mode (c10d rendezvous on node0).

    The same command runs on every node: the rendezvous assigns node and global ranks, and
    torchrun restarts the workers (up to ``--max-restarts``) when a node leaves or joins.
    """
    return (
        "torchrun",
        "--nnodes", f"{config.min_nodes}:{config.max_nodes}",
        "--nproc-per-node", str(config.nproc_per_node),
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
        *config.target,
    )


def threads_per_process(config: RunConfig, host_cpus: int) -> int:
    """The CPU threads each worker should use: its share of the cores its node really has.

    Every simulated node runs on the same host, yet torch in each of them sizes its thread
    pools by all the host's cores, so N nodes ask for N times the cores there are. The
    oversubscribed threads slow the compute and starve the communication threads (on 2
    cores, 2 nodes x 1 process: ResNet-50 steps 1.4x slower without DDP, 2.9x with it).
    A node has ``--cpus-per-node`` cores when given, else an equal share of the host's.
    """
    node_cpus = config.cpus_per_node or host_cpus / config.nodes
    return max(1, int(node_cpus // config.nproc_per_node))


def node_env(config: RunConfig, backend: str, host_cpus: Optional[int] = None) -> dict[str, str]:
    """Return the environment torchrun and its workers get on every node.

    The user's variables come first and may override the launcher's defaults (the socket
    interfaces, ``DDP_TIMEOUT``, ``OMP_NUM_THREADS``), except ``PYTHONPATH``, which keeps the
    project at its end so that ``-m app.NAME`` still resolves. ``host_cpus`` (the cores of
    the host the nodes share) sets ``OMP_NUM_THREADS`` to each worker's share of them; without
    it (an export to a real cluster, whose nodes have their own cores) torchrun's default stands.
    """
    env = {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": PROJECT_MOUNT_DIR,
        "DDP_BACKEND": backend,
        "DDP_SHARED_DIR": SHARED_DIR,
        "DDP_PROGRESS_DIR": f"{RUN_DIR_MOUNT}/{PROGRESS_SUBDIR}",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LOG_LINE_PREFIX_TEMPLATE,
        "GLOO_SOCKET_IFNAME": NODE_INTERFACE,
        "NCCL_SOCKET_IFNAME": NODE_INTERFACE,
    }
    if host_cpus:
        env["OMP_NUM_THREADS"] = str(threads_per_process(config, host_cpus))
    if config.collective_timeout_s is not None:
        env["DDP_TIMEOUT"] = f"{config.collective_timeout_s:g}"
    if config.elastic:
        env["LOGLEVEL"] = "INFO"  # torchrun then reports every rendezvous round it joins
    if config.run_as:
        # The uid has no passwd entry in the image: without these, getpass.getuser() fails,
        # and with it torch.compile (its cache directory is named after the user).
        env["USER"] = env["LOGNAME"] = config.user_name or "node"
    user = dict(config.user_env)
    if user.get("PYTHONPATH"):
        user["PYTHONPATH"] = f"{user['PYTHONPATH']}:{PROJECT_MOUNT_DIR}"
    env.update(user)
    return env


def make_plan(config: RunConfig, run_id: str, *, detached: bool = False,
              gpu_ids: tuple[str, ...] = (), launcher: str = "", command_line: str = "",
              created: str = "", host_cpus: Optional[int] = None) -> JobPlan:
    """Plan a run: nodes, ranks, master address and every node's command.

    Args:
        config: The validated launch configuration.
        run_id: Unique id of this run; it names the Compose project, so two runs on one
            host never share containers or networks.
        detached: The launcher will not stay: the nodes hold no lease on it.
        launcher: Who launches it (``host:pid:start``), recorded so that ``ps`` can tell
            a run whose launcher died.
        command_line: The command line that asked for it (recorded for ``ps`` and reports).
        created: When it was asked for (ISO 8601).
        host_cpus: The cores of the host the nodes share; each worker then gets
            ``OMP_NUM_THREADS`` = its share (see :func:`threads_per_process`). None: unset.
        gpu_ids: The host GPUs this run may use, in order (the free ones, see
            :mod:`orchestrate.gpus`); node ``i`` gets the ``i``-th block of
            ``gpus_per_node``. Default: ``0 .. N*G-1``.

    Returns:
        The plan the apply step carries out.
    """
    wanted = config.nodes * config.gpus_per_node
    gpu_ids = tuple(gpu_ids) or tuple(str(g) for g in range(wanted))
    if len(gpu_ids) < wanted:
        raise ValueError(f"{wanted} GPUs planned but only {len(gpu_ids)} given")
    master_addr = node_name(0)
    backend = config.backend
    env = node_env(config, backend, host_cpus)
    per_process = config.gpus_per_node // config.nproc_per_node
    nodes = []
    for rank, global_ranks in enumerate(assign_ranks(config.nodes, config.nproc_per_node)):
        node_gpus = gpu_ids[rank * config.gpus_per_node:(rank + 1) * config.gpus_per_node]
        if config.elastic:
            argv = elastic_torchrun_argv(config, run_id, master_addr, node_name(rank))
            global_ranks = ()
        else:
            argv = torchrun_argv(
                nodes=config.nodes,
                node_rank=rank,
                nproc_per_node=config.nproc_per_node,
                master_addr=master_addr,
                master_port=config.master_port,
                target=config.target,
            )
        process_gpus = tuple(
            node_gpus[local * per_process:(local + 1) * per_process]
            for local in range(config.nproc_per_node)
        )
        nodes.append(NodePlan(node_name(rank), rank, global_ranks, node_gpus, process_gpus, argv, dict(env),
                              node_command(config, node_name(rank), argv, detached)))
    return JobPlan(
        run_id=run_id,
        project_name=f"ddp-{run_id}",
        config=config,
        image=config.image,
        master_addr=master_addr,
        master_port=config.master_port,
        world_size=config.nodes * config.nproc_per_node,
        backend=backend,
        nodes=tuple(nodes),
        detached=detached,
        launcher=launcher,
        command_line=command_line,
        created=created,
    )


def format_plan(plan: JobPlan) -> str:
    """Render the plan as the readable table ``--dry-run`` prints."""
    cfg = plan.config
    lines = [
        f"run {plan.run_id}  (compose project {plan.project_name})",
        f"image {plan.image}  backend {plan.backend}  workdir {cfg.workdir} -> {WORKSPACE_DIR}",
        f"nodes N={cfg.nodes}  GPUs per node G={cfg.gpus_per_node}  local world size"
        f" L={cfg.nproc_per_node}  world size W={plan.world_size}"
        f"  master {plan.master_addr}:{plan.master_port}",
        "",
    ]
    header = ("node", "node rank", "local rank", "global rank", "GPUs (host ids)")
    if cfg.elastic:
        lines.insert(3, f"elastic: c10d rendezvous on {plan.master_addr}:{RDZV_PORT}, nodes"
                        f" {cfg.min_nodes}:{cfg.max_nodes}, max restarts {cfg.max_restarts};"
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
        for local in range(cfg.nproc_per_node)
    ]
    lines += format_table(header, rows)
    lines.append("")
    for n in plan.nodes:
        lines.append(f"{n.name}$ {shlex.join(n.torchrun_argv)}")
    env = plan.nodes[0].env if plan.nodes else {}
    lines.append("env: " + " ".join(f"{k}={shown_value(k, v)}" for k, v in sorted(env.items())))
    sizes = [f"{cfg.cpus_per_node:g} CPUs" if cfg.cpus_per_node else "",
             f"{format_bytes(cfg.memory_per_node)} memory" if cfg.memory_per_node else ""]
    lines.append(f"each node: {', '.join(s for s in sizes if s) or 'no CPU or memory limit'};"
                 f" runs as {'uid:gid ' + cfg.run_as if cfg.run_as else 'the image user'};"
                 f" link {cfg.link or 'as the bridge gives it'}")
    if cfg.requirements or cfg.dockerfile:
        extra = [f"pip install -r {cfg.requirements}" if cfg.requirements else "",
                 f"{cfg.dockerfile}" if cfg.dockerfile else ""]
        lines.append(f"derived image: {cfg.image} + {' + '.join(e for e in extra if e)}"
                     " (built at run time, tagged by a digest of its inputs)")
    if cfg.faults:
        lines.append("faults: " + " ".join(str(f) for f in cfg.faults))
    return "\n".join(lines)


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Format rows as left-aligned columns under a header and a rule."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip(), "  ".join("-" * w for w in widths)]
    out += [fmt.format(*row).rstrip() for row in rows]
    return out

