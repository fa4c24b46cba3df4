"""The pure plan step: turn a :class:`RunConfig` into the exact nodes, ranks and commands.

Nothing here talks to Docker; ``--dry-run`` prints what :func:`make_plan` returns, and the
apply step (:mod:`orchestrate.launch`) only carries it out.
"""
from __future__ import annotations

import shlex
from typing import Optional

from orchestrate.config.link import link_commands
from orchestrate.config.run_config import STORE_SERVICE, RunConfig
from orchestrate.errors import UsageError
from orchestrate.plan.gpu_assignment import node_gpus, process_gpus
from orchestrate.plan.layout import (
    HEARTBEAT_FILE,
    LOG_LINE_PREFIX_TEMPLATE,
    NODE_INTERFACE,
    NODE_MAIN,
    NODE_NAME_ENV,
    DEBUG_SUBDIR,
    PROGRESS_SUBDIR,
    PROJECT_MOUNT_DIR,
    RDZV_PORT,
    RDZV_STORE,
    RUN_DIR_MOUNT,
    SHARED_DIR,
    WORKER_START,
    mount_conflict,
)
from orchestrate.plan.model import COLLECTIVE_CHECK_ENV, COLLECTIVE_CHECK_LEVEL, JobPlan, NodePlan, node_name
from orchestrate.plan.torchrun import STORE_PER_ROUND_ENV, elastic_torchrun_argv, torchrun_argv

# --collective-timeout, in every node's environment, where app/ reads it
COLLECTIVE_TIMEOUT_ENV = "DDP_TIMEOUT"


def assign_ranks(nodes: int, nproc_per_node: int) -> list[tuple[int, ...]]:
    """Assign global ranks to every node's workers, ``nproc_per_node`` each (see
    :func:`assign_uneven_ranks`): node ``i``'s local rank ``l`` is global rank
    ``i * nproc_per_node + l``."""
    return assign_uneven_ranks([nproc_per_node] * nodes)


def assign_uneven_ranks(counts: list[int]) -> list[tuple[int, ...]]:
    """Assign global ranks to every node's workers, node ``i`` running ``counts[i]``.

    torchrun's static rendezvous with ``--node-rank`` orders workers by node rank, then by
    local rank (each agent's local world size is shared through the store, so nodes may differ;
    measured with torch 2.9.1: ``--nproc-per-node 2`` on node rank 0 and ``1`` on node rank 1
    give ranks 0, 1 and 2, world size 3), so:

    1. node ``i`` has node rank ``i``;
    2. its local rank ``l`` is global rank ``counts[0] + ... + counts[i-1] + l``.

    Returns:
        One tuple of global ranks per node, in node-rank order.
    """
    ranks, first = [], 0
    for count in counts:
        ranks.append(tuple(range(first, first + count)))
        first += count
    return ranks


def lease_args(config: RunConfig, detached: bool) -> tuple[str, ...]:
    """The node supervisor's options for the launcher's lease (none for a detached run): the
    heartbeat file, how long it may go stale, and the grace the workers get when it does."""
    if detached:
        return ()
    return ("--lease", f"{RUN_DIR_MOUNT}/{HEARTBEAT_FILE}", "--lease-timeout", f"{config.lease_timeout_s:g}",
            "--stop-grace", f"{config.stop_grace_s:g}")


def node_command(config: RunConfig, torchrun: tuple[str, ...], detached: bool, netem: bool) -> tuple[str, ...]:
    """The container's main process: the node supervisor (``orchestrate/node/main.py``)
    waiting for the peers, holding the launcher's lease unless detached, and running torchrun;
    ``netem``: whether the kernel has it (else a link's loss is an iptables rule)."""
    lease = lease_args(config, detached)
    shaping: tuple[str, ...] = ()
    if config.link is not None:
        # The container starts as root with NET_ADMIN to shape its link; torchrun runs as the user.
        shaping = tuple(a for cmd in link_commands(config.link, NODE_INTERFACE, netem)
                        for a in ("--tc", shlex.join(cmd)))
        if config.run_as:
            shaping += ("--run-as", config.run_as)
    peers = ",".join(node_name(i) for i in range(config.nodes))
    return ("python3", NODE_MAIN, "--peers", peers, "--ready-timeout", f"{config.ready_timeout_s:g}",
            *lease, *shaping, "--", *torchrun)


def store_command(config: RunConfig, detached: bool) -> tuple[str, ...]:
    """The run's own rendezvous store's main process (``--rdzv-store container``): torch's
    TCPStore (:mod:`orchestrate.node.rdzv_store`) under the node supervisor, which holds the
    launcher's lease as every node does; empty when the store lives on node0."""
    if not config.elastic or config.rdzv_store != "container":
        return ()
    return ("python3", NODE_MAIN, "--peers", STORE_SERVICE, "--ready-timeout", f"{config.ready_timeout_s:g}",
            *lease_args(config, detached), "--", "python3", RDZV_STORE, str(RDZV_PORT))


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
        "DDP_DEBUG_DIR": f"{RUN_DIR_MOUNT}/{DEBUG_SUBDIR}",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LOG_LINE_PREFIX_TEMPLATE,
        "GLOO_SOCKET_IFNAME": NODE_INTERFACE,
        "NCCL_SOCKET_IFNAME": NODE_INTERFACE,
    }
    if host_cpus:
        env["OMP_NUM_THREADS"] = str(threads_per_process(config, host_cpus))
    if config.share_gpus:
        env["DDP_SHARED_GPUS"] = "1"  # app/: local rank l takes GPU l mod the node's GPUs
    if config.collective_timeout_s is not None:
        env[COLLECTIVE_TIMEOUT_ENV] = f"{config.collective_timeout_s:g}"
    if config.debug_collectives:
        env[COLLECTIVE_CHECK_ENV] = COLLECTIVE_CHECK_LEVEL
    if config.post_mortem:  # (node.remote_debugger.POST_MORTEM_ENV: the plan imports nothing of the nodes')
        env["DDP_POST_MORTEM"] = "1"
    if config.elastic:
        env["LOGLEVEL"] = "INFO"  # torchrun then reports every rendezvous round it joins
        env.update(STORE_PER_ROUND_ENV)  # a restarted worker group reads no address of the one before
    if config.run_as:
        # The uid has no passwd entry in the image: without these, getpass.getuser() fails,
        # and with it torch.compile (its cache directory is named after the user).
        env["USER"] = env["LOGNAME"] = config.user_name or "node"
    user = dict(config.user_env)
    if user.get("PYTHONPATH"):
        user["PYTHONPATH"] = f"{user['PYTHONPATH']}:{PROJECT_MOUNT_DIR}"
    env.update(user)
    return env


def worker_target(config: RunConfig) -> tuple[str, ...]:
    """What torchrun runs: the workers' start-up hook (:mod:`orchestrate.node.worker_start`)
    around the target, with what the run asks of it."""
    flags: list[str] = []
    if config.share_gpus and config.gpus_per_node and config.nproc_per_node > config.gpus_per_node:
        flags.append("--nccl-hostid-per-rank")  # two ranks of a node on one GPU
    if config.nccl_as_gloo:
        flags.append("--nccl-as-gloo")
    if config.collective_timeout_s is not None:
        flags += ["--collective-timeout", f"{config.collective_timeout_s:g}"]
    return (WORKER_START, *flags, "--", *config.target)


def check_mounts(config: RunConfig) -> None:
    """Refuse a ``--mount`` whose node path is one of the node's own paths, above one, or
    inside one the node needs whole.

    Raises:
        UsageError: Naming the mount, the node's path, and another place to put it.
    """
    for mount in config.mounts:
        own = mount_conflict(str(mount.target))
        if own:
            raise UsageError(f"--mount {mount}: {mount.target} in the nodes collides with their own {own}; give it"
                             f" another node path, e.g. --mount {mount.source}:/data/{mount.source.name or 'host'}")


def project_name(run_id: str) -> str:
    """The Compose project of run ``run_id``: its containers, network and volume are named after it."""
    return f"ddp-{run_id}"


def make_plan(config: RunConfig, run_id: str, *, detached: bool = False,
              gpu_ids: tuple[str, ...] = (), launcher: str = "", command_line: str = "",
              created: str = "", host_cpus: Optional[int] = None, netem: bool = True) -> JobPlan:
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
        netem: Whether the engine's kernel has netem (a link's loss is otherwise an iptables
            rule in each node).
        host_cpus: The cores of the host the nodes share; each worker then gets
            ``OMP_NUM_THREADS`` = its share (see :func:`threads_per_process`). None: unset.
        gpu_ids: The host GPUs this run may use, in order (the free ones, see
            :mod:`orchestrate.config.gpu_layout`); node ``i`` gets the ``i``-th block of
            ``gpus_per_node``. Default: ``0 .. N*G-1``.

    Returns:
        The plan the apply step carries out.
    """
    check_mounts(config)
    gpu_ids = tuple(gpu_ids) or tuple(str(g) for g in range(config.nodes * config.gpus_per_node))
    needed = config.gpus_per_node if config.share_gpus else config.nodes * config.gpus_per_node
    if len(gpu_ids) < needed:
        raise ValueError(f"{needed} GPUs planned but only {len(gpu_ids)} given")
    master_addr = node_name(0)
    backend = config.backend
    env = node_env(config, backend, host_cpus)
    target = worker_target(config)
    nodes = []
    counts = [config.nprocs_of(i) for i in range(config.nodes)]
    for rank, global_ranks in enumerate(assign_uneven_ranks(counts)):
        gpus = node_gpus(gpu_ids, rank, config.gpus_per_node, config.share_gpus)
        if config.elastic:
            argv = elastic_torchrun_argv(config, run_id, config.store_host, node_name(rank), target, nproc=counts[rank])
            global_ranks = ()
        else:
            argv = torchrun_argv(
                nodes=config.nodes,
                node_rank=rank,
                nproc_per_node=counts[rank],
                master_addr=master_addr,
                master_port=config.master_port,
                target=target,
            )
        nodes.append(NodePlan(node_name(rank), rank, global_ranks, gpus, process_gpus(gpus, counts[rank]),
                              argv, {**env, NODE_NAME_ENV: node_name(rank), "DDP_RUN_ID": run_id},
                              node_command(config, argv, detached, netem)))
    return JobPlan(
        run_id=run_id,
        project_name=project_name(run_id),
        config=config,
        image=config.image,
        master_addr=master_addr,
        master_port=config.master_port,
        world_size=config.world_size,
        backend=backend,
        nodes=tuple(nodes),
        detached=detached,
        launcher=launcher,
        command_line=command_line,
        created=created,
        store_command=store_command(config, detached),
    )


