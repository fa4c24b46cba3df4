"""The launch configuration: what the user asked for, validated in one place."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from orchestrate.config.fault_spec import (FaultAction, FaultSpec, check_fault_levels, check_fault_targets,
                                          check_lost_nodes)
from orchestrate.config.link import LinkSpec
from orchestrate.config.mounts import Mount
from orchestrate.config.user_env import check_name
from orchestrate.errors import UsageError
from orchestrate.text import node_conditions

DEFAULT_IMAGE = "ddp-compose-node:latest"
DEFAULT_TARGET: tuple[str, ...] = ("-m", "app.toy")
DEFAULT_MASTER_PORT = 29500
# The project root holds app/; it is mounted into every node so `-m app.NAME` works from
# any work directory.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# The engine refuses smaller memory limits.
MIN_NODE_MEMORY = 6 * 1024**2
# A node stops itself when the foreground launcher's heartbeat is this old: with the poll and
# the stop grace, its containers end within LEASE_TIMEOUT_S + 7 s of the launcher's death.
LEASE_TIMEOUT_S = 30.0
# Where each run gets its directory (--runs-dir), relative to the directory the command runs in.
DEFAULT_RUNS_DIR = Path("runs")
# The workers' time between SIGTERM and SIGKILL when a run is stopped (--stop-grace).
DEFAULT_STOP_GRACE_S = 10.0
# How long the nodes wait for each other, and the launcher for them (--ready-timeout).
DEFAULT_READY_TIMEOUT_S = 60.0
# How long an elastic rendezvous waits for its nodes (--rdzv-timeout).
DEFAULT_RDZV_TIMEOUT_S = 60.0
# The port of an elastic job's c10d rendezvous (torchrun's store) on its host: --master-port is a
# static job's.
ELASTIC_RDZV_PORT = 29400
# The service (and host) name of a run's own rendezvous store (--rdzv-store container).
STORE_SERVICE = "rdzv-store"
# The restarts an elastic run makes unless --max-restarts says otherwise (a static one makes none).
DEFAULT_ELASTIC_RESTARTS = 3
# Seconds without progress before the hang watchdog says where every rank waits (0: never).
DEFAULT_HANG_DIAGNOSE_AFTER_S = 120.0
# The host variable that shortens it, for tests that watch a launcher die.
LEASE_TIMEOUT_ENV = "DDP_COMPOSE_LEASE_TIMEOUT_S"
_RUN_AS = re.compile(r"^\d+:\d+$")


def parse_memory(text: str) -> int:
    """Bytes in a size like ``512m``, ``2g``, ``1.5G`` or ``1073741824``, as Docker reads it.

    Raises:
        UsageError: ``--memory-per-node: expected a size like 512m or 2g. Given: 'abc'``
    """
    from docker.errors import DockerException
    from docker.utils import parse_bytes

    try:
        size = int(parse_bytes(text.strip()))
    except (DockerException, ValueError):
        raise UsageError(f"--memory-per-node: expected a size like 512m or 2g. Given: {text!r}") from None
    if size < MIN_NODE_MEMORY:
        raise UsageError(f"--memory-per-node must be at least 6m (the engine's minimum), got {text!r}")
    return size


def not_a_file(path: Path) -> str:
    """Why ``path``, given as a file, is none: "is a directory", or "not found"."""
    return "is a directory, not a file" if path.is_dir() else "not found"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs to know, checked when it is made.

    Attributes:
        nodes: Number of simulated nodes (containers).
        nproc_per_node: Worker processes torchrun starts on every node.
        target: What torchrun runs: ``("script.py", *args)`` or ``("-m", "module", *args)``.
        workdir: Host directory mounted into every node as its working directory.
        image: Node image to run.
        gpus_per_node: GPUs reserved for each node; 0 runs the CPU/Gloo variant.
        backend: The collective backend the workers are told to use (gloo or nccl).
        keep: Leave the containers, network and volume behind after the run.
        master_port: Port of torchrun's rendezvous on node 0 (inside the project network).
        runs_dir: Where every run gets a directory of logs.
        project_root: The ddp-compose checkout mounted at /opt/ddp-compose in every node.
        ready_timeout_s: Deadline for all nodes to resolve each other by name.
        collective_timeout_s: Process group timeout the workers are told to use
            (``DDP_TIMEOUT``); None leaves it to them.
        faults: Faults to inject during the run.
        rdzv: "static" (``--node-rank``, fixed ranks) or "c10d" (elastic: torchrun's c10d
            rendezvous hosted on node0, nodes may leave and rejoin).
        min_nodes: Elastic mode's smallest node count (``--nnodes MIN:MAX``).
        max_nodes: Elastic mode's largest node count.
        max_restarts: How often torchrun restarts its workers (and the launcher a dead node).
        rdzv_timeout_s: How long an elastic rendezvous waits for nodes to join.
        restart: What the launcher restarts when a node of an elastic job dies: ``all`` its
            nodes (a Slurm requeue, a JobSet's recreate-all) or the dead ``node`` only (a
            Kubernetes pod restart).
        rdzv_store: Where the elastic rendezvous's store lives: ``node0`` (its torchrun agent) or
            a ``container`` of the run's own, which survives any node.
        user_env: The user's variables for every node (``--env``, ``--env-file``, ``--copy-env``).
        run_as: ``UID:GID`` the nodes run as (the invoking user's, so that what the workers
            write into the work directory is theirs); None keeps the image's user.
        user_name: The invoking user's login name: with ``run_as``, the workers' ``USER`` and
            ``LOGNAME`` (the image has no passwd entry for the uid).
        cpus_per_node: CPU limit of each node container (None: unlimited).
        memory_per_node: Memory limit of each node container in bytes (None: unlimited).
        mounts: Host paths mounted into every node (``--mount``), sources absolute.
        requirements: A pip requirements file installed into a derived node image.
        dockerfile: A Dockerfile (``FROM`` the node image) built into a derived node image.
        link: How every node's link is shaped (``--link``); None leaves the bridge as it is.
        stop_grace_s: The workers' time between SIGTERM and SIGKILL when the run is stopped.
        lease_timeout_s: How long the nodes of a foreground run outlive a silent launcher.
        hang_timeout_s: End the run as failed (hung) after this long without progress (None: never).
        hang_diagnose_after_s: Say where every rank waits after this long without progress (0: never).
        debug_collectives: Run the workers with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``.
        post_mortem: A rank's uncaught error stops it in pdb's post-mortem, which waits for
            ``debug RUN RANK`` (``--pdb``).
        node_nprocs: Each node's own number of workers (uneven nodes, ``--nproc-per-node
            2,1,1``; empty: every node runs ``nproc_per_node``, which is then the most of them).
    """

    nodes: int = 2
    nproc_per_node: int = 1
    target: tuple[str, ...] = DEFAULT_TARGET
    workdir: Path = field(default_factory=Path.cwd)
    image: str = DEFAULT_IMAGE
    gpus_per_node: int = 0
    share_gpus: bool = False
    backend: str = "gloo"
    nccl_as_gloo: bool = False
    keep: bool = False
    master_port: int = DEFAULT_MASTER_PORT
    runs_dir: Path = field(default_factory=lambda: Path.cwd() / "runs")
    project_root: Path = PROJECT_ROOT
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    collective_timeout_s: Optional[float] = None
    faults: tuple[FaultSpec, ...] = ()
    rdzv: str = "static"
    min_nodes: Optional[int] = None
    max_nodes: Optional[int] = None
    max_restarts: int = 0
    rdzv_timeout_s: float = DEFAULT_RDZV_TIMEOUT_S
    restart: str = "all"
    rdzv_store: str = "node0"
    user_env: dict[str, str] = field(default_factory=dict)
    run_as: Optional[str] = None
    user_name: str = ""
    cpus_per_node: Optional[float] = None
    memory_per_node: Optional[int] = None
    mounts: tuple[Mount, ...] = ()
    requirements: Optional[Path] = None
    dockerfile: Optional[Path] = None
    link: Optional[LinkSpec] = None
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    lease_timeout_s: float = LEASE_TIMEOUT_S
    hang_timeout_s: Optional[float] = None
    hang_diagnose_after_s: float = DEFAULT_HANG_DIAGNOSE_AFTER_S
    debug_collectives: bool = False
    post_mortem: bool = False
    node_nprocs: tuple[int, ...] = ()

    def nprocs_of(self, node_rank: int) -> int:
        """How many workers node ``node_rank`` runs."""
        return self.node_nprocs[node_rank] if self.node_nprocs else self.nproc_per_node

    @property
    def world_size(self) -> int:
        """Every worker of the planned nodes."""
        return sum(self.nprocs_of(i) for i in range(self.nodes))

    @property
    def nprocs_text(self) -> str:
        """``--nproc-per-node`` as given: ``2`` or ``2,1,1``."""
        return ",".join(str(n) for n in self.node_nprocs) if self.node_nprocs else str(self.nproc_per_node)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"--nodes must be a positive integer, got {self.nodes}")
        if self.nproc_per_node < 1:
            raise UsageError(
                f"--nproc-per-node must be a positive integer, got {self.nproc_per_node}"
            )
        if self.node_nprocs:
            self._check_uneven()
        if self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more, got {self.gpus_per_node}")
        for count in self.node_nprocs or (self.nproc_per_node,):
            if self.gpus_per_node and count <= self.gpus_per_node and self.gpus_per_node % count:
                raise UsageError(f"--gpus-per-node {self.gpus_per_node} cannot be split evenly among {count}"
                                 f" processes (--nproc-per-node {self.nprocs_text})")
        if self.backend not in ("gloo", "nccl"):
            raise UsageError(f"--backend must be gloo or nccl, got {self.backend!r}")
        if self.backend == "nccl" and not self.gpus_per_node:
            raise UsageError("--backend nccl needs GPUs (--gpus-per-node 1 or more)")
        if self.nccl_as_gloo and self.backend != "gloo":
            raise UsageError("--nccl-as-gloo gives scripts that name nccl gloo instead: use it with --backend gloo"
                             " (or --cpu)")
        if self.gpus_per_node and self.nproc_per_node > self.gpus_per_node and not self.share_gpus:
            raise UsageError(f"--nproc-per-node {self.nproc_per_node} is more than the {self.gpus_per_node} GPU(s)"
                             " per node: add --share-gpus to let processes share them")
        if not 1 <= self.master_port <= 65535:
            raise UsageError(f"--master-port must be in 1-65535, got {self.master_port}")
        if self.stop_grace_s < 0:
            raise UsageError(f"--stop-grace must be 0 or more, got {self.stop_grace_s:g}")
        if not self.lease_timeout_s > 0:
            raise UsageError(f"the launcher's lease must be positive, got {self.lease_timeout_s:g} s")
        if self.hang_timeout_s is not None and not self.hang_timeout_s > 0:
            raise UsageError(f"--hang-timeout must be positive, got {self.hang_timeout_s:g}")
        if self.hang_diagnose_after_s < 0:
            raise UsageError(f"--hang-diagnose-after must be 0 or more, got {self.hang_diagnose_after_s:g}")
        if self.collective_timeout_s is not None and self.collective_timeout_s <= 0:
            raise UsageError(f"--collective-timeout must be positive, got {self.collective_timeout_s}")
        self._check_rendezvous()
        most_nodes = self.nodes if self.max_nodes is None else max(self.nodes, self.max_nodes)
        check_fault_targets(list(self.faults), [f"node{i}" for i in range(self.nodes)],
                            self.world_size + (most_nodes - self.nodes) * self.nproc_per_node,
                            store_container=self.rdzv_store == "container")  # (elastic: checked above)
        check_lost_nodes(list(self.faults), self.nodes, self.min_nodes if self.elastic else None, self.max_restarts)
        if not self.image:
            raise UsageError("--image must not be empty")
        workdir = Path(self.workdir)
        if not workdir.is_dir():
            raise UsageError(f"work directory {str(workdir)!r} does not exist or is not a directory")
        object.__setattr__(self, "workdir", workdir.resolve())
        object.__setattr__(self, "mounts", self._checked_mounts())
        object.__setattr__(self, "runs_dir", Path(self.runs_dir).resolve())
        object.__setattr__(self, "project_root", Path(self.project_root).resolve())
        target = tuple(self.target) or DEFAULT_TARGET
        if target[0] == "--module":  # python's and torchrun's long spelling; the nodes run "-m"
            target = ("-m", *target[1:])
        object.__setattr__(self, "target", target)
        self._check_target(target)
        self._check_node_options()
        check_fault_levels(list(self.faults), self.link, self.cpus_per_node)  # (its sizes checked first)

    def _check_node_options(self) -> None:
        for name in self.user_env:
            check_name(name, "--env")
        if self.run_as is not None and not _RUN_AS.match(self.run_as):
            raise UsageError(f"run_as must be UID:GID, got {self.run_as!r}")
        if self.cpus_per_node is not None and not self.cpus_per_node > 0:
            raise UsageError(f"--cpus-per-node must be positive, e.g. 1 or 0.5, got {self.cpus_per_node:g}")
        if self.memory_per_node is not None and self.memory_per_node < MIN_NODE_MEMORY:
            raise UsageError(f"--memory-per-node must be at least 6m, got {self.memory_per_node} bytes")
        for option, path in (("--requirements", self.requirements), ("--dockerfile", self.dockerfile)):
            if path is None:
                continue
            if not Path(path).is_file():
                raise UsageError(f"{option} file {str(path)!r} {not_a_file(Path(path))}")
            object.__setattr__(self, option.strip("-"), Path(path).resolve())

    @property
    def shapes_links(self) -> bool:
        """Whether the nodes' links are shaped: at start (``--link``), by a ``degrade`` fault or
        split by a ``partition``, which need NET_ADMIN in the nodes."""
        return self.link is not None or any(f.action in (FaultAction.DEGRADE, FaultAction.PARTITION, FaultAction.LOSSY)
                                            for f in self.faults)

    @property
    def conditions(self) -> str:
        """The link and node sizes given (:func:`~orchestrate.text.node_conditions`); "" where none was."""
        return node_conditions(str(self.link or ""), self.cpus_per_node, self.memory_per_node)

    @property
    def store_host(self) -> str:
        """Who holds the elastic rendezvous's store: ``node0`` or the store container."""
        return STORE_SERVICE if self.rdzv_store == "container" else "node0"

    @property
    def elastic(self) -> bool:
        """Whether ranks come from an elastic (c10d) rendezvous rather than --node-rank."""
        return self.rdzv == "c10d"

    def _check_uneven(self) -> None:
        """Each node's own count: one per node, each a positive number its GPUs can take."""
        counts = self.node_nprocs
        if len(counts) != self.nodes:
            raise UsageError(f"--nproc-per-node {self.nprocs_text} gives {len(counts)} nodes their workers, but"
                             f" --nodes is {self.nodes}: give one count per node")
        if min(counts) < 1:
            raise UsageError(f"--nproc-per-node {self.nprocs_text}: every node needs 1 worker or more")
        object.__setattr__(self, "nproc_per_node", max(counts))

    def _check_rendezvous(self) -> None:
        if self.rdzv not in ("static", "c10d"):
            raise UsageError(f"--rdzv must be static or c10d, got {self.rdzv!r}")
        if self.max_restarts < 0:
            raise UsageError(f"--max-restarts must be 0 or more, got {self.max_restarts}")
        if self.rdzv_timeout_s <= 0:
            raise UsageError(f"--rdzv-timeout must be positive, got {self.rdzv_timeout_s}")
        if self.restart not in ("all", "node"):
            raise UsageError(f"--restart must be all or node, got {self.restart!r}")
        if self.rdzv_store not in ("node0", "container"):
            raise UsageError(f"--rdzv-store must be node0 or container, got {self.rdzv_store!r}")
        if not self.elastic:
            if self.min_nodes is not None or self.max_nodes is not None:
                raise UsageError("--nnodes MIN:MAX needs --rdzv c10d (elastic mode)")
            if self.restart != "all" or self.rdzv_store != "node0":
                raise UsageError("--restart and --rdzv-store are for --rdzv c10d (elastic mode): a static job"
                                 " restarts nothing and has no rendezvous store")
            if self.max_restarts:
                raise UsageError(f"--max-restarts {self.max_restarts} is for --rdzv c10d (elastic mode): a static"
                                 " job restarts nothing (its torchrun runs with --max-restarts 0)")
            if self.rdzv_timeout_s != DEFAULT_RDZV_TIMEOUT_S:
                raise UsageError(f"--rdzv-timeout {self.rdzv_timeout_s:g} is for --rdzv c10d (elastic mode): a static"
                                 " job's nodes meet at node0's master port, with no rendezvous to time")
            return
        if self.master_port != DEFAULT_MASTER_PORT:
            raise UsageError(f"--master-port {self.master_port} is for a static job: an elastic job's c10d"
                             f" rendezvous is on port {ELASTIC_RDZV_PORT} of its store's host")
        low = self.nodes if self.min_nodes is None else self.min_nodes
        high = self.nodes if self.max_nodes is None else self.max_nodes
        if not 1 <= low <= self.nodes <= high:
            raise UsageError(
                f"--nnodes {low}:{high} must satisfy 1 <= MIN <= --nodes ({self.nodes}) <= MAX"
            )
        object.__setattr__(self, "min_nodes", low)
        object.__setattr__(self, "max_nodes", high)

    def _checked_mounts(self) -> tuple[Mount, ...]:
        """The ``--mount`` paths, each source absolute and present on the host, no two at one
        node path."""
        mounts = tuple(mount.resolved(Path.cwd()) for mount in self.mounts)
        targets: set[str] = set()
        for given, mount in zip(self.mounts, mounts):
            if not mount.source.exists():
                raise UsageError(f"--mount {given}: {str(mount.source)!r} does not exist on this host")
            if mount.target in targets:
                raise UsageError(f"--mount {given}: another --mount is at {mount.target} in the nodes already")
            targets.add(str(mount.target))
        return mounts

    def _check_target(self, target: tuple[str, ...]) -> None:
        if target[0] == "-m":
            if len(target) < 2 or not _MODULE_NAME.match(target[1]):
                given = target[1] if len(target) > 1 else "nothing"
                raise UsageError(
                    f"-m needs a module name, usage example: -- -m app.toy. Given: {given}"
                )
            missing = missing_module(target[1], self.workdir)
            if missing:
                raise UsageError(missing)
            return
        if target[0].startswith("-"):
            raise UsageError(
                f"TARGET must be a script path or -m MODULE, usage example: -- train.py --epochs 2."
                f" Given: {target[0]}"
            )
        script = Path(target[0])
        if script.is_absolute():
            inside = _relative_inside(script, self.workdir)
            hint = (f"give it as {str(inside)!r}" if inside is not None
                    else f"or give --workdir {script.parent} and the script as {script.name!r}")
            raise UsageError(
                f"script {target[0]!r} must be a path relative to the work directory {self.workdir} ({hint})"
            )
        if (self.workdir / script).is_dir():
            raise UsageError(f"script {target[0]!r} is a directory (work directory {self.workdir}): give a script,"
                             " or -m MODULE")
        if not (self.workdir / script).is_file():
            raise UsageError(f"script {target[0]!r} not found in work directory {self.workdir}")
        inside = _relative_inside(self.workdir / script, self.workdir)
        if inside is None:
            real = (self.workdir / script).resolve()
            raise UsageError(
                f"script {target[0]!r} is outside the work directory {self.workdir}: only the work directory"
                f" is mounted in the nodes; give --workdir {real.parent} and the script as {real.name!r}, or move"
                " the script into it"
            )
        if Path(os.path.normpath(script)).parts[0] == "..":  # above the work directory, then back into it: in the
            # nodes, above it is not the host's directory (/workspace/../proj is /proj)
            raise UsageError(f"script {target[0]!r} climbs out of the work directory {self.workdir} and back: in the"
                             f" nodes nothing of the host is above it; give it as {str(inside)!r}")


_MODULE_SUFFIXES = (".py", ".pyc", ".so")  # a source, a compiled module, an extension (name.cpython-311-...so)


def missing_module(name: str, workdir: Path) -> str:
    """Why ``python -m name`` would fail to find it in the nodes, where its top-level package (a
    directory with ``__init__.py``) or module lies in the work directory, the first place Python
    looks: a part of it that is not there, or a package with no ``__main__``; "" where it is
    there, or its top level is not in the work directory (the image's, or a mount's)."""
    parts = name.split(".")
    top = workdir / parts[0]
    try:
        if not ((top / "__init__.py").is_file() or module_file(workdir, parts[0]) is not None):
            return ""
        return missing_part(name, parts, workdir)
    except OSError:  # a directory this user may not read: left to Python in the nodes
        return ""


def missing_part(name: str, parts: list[str], workdir: Path) -> str:
    """:func:`missing_module`'s walk down ``parts`` from the work directory; "" where a link (it
    may point somewhere only the nodes have) or a package that extends its ``__path__`` (its
    modules may lie elsewhere) leaves the rest to Python."""
    where = workdir
    for depth, part in enumerate(parts):
        if any(candidate.is_symlink() for candidate in (where / part, where / f"{part}.py")):
            return ""
        init = where / part / "__init__.py"
        if init.is_file() and "__path__" in init.read_text(encoding="utf-8", errors="replace"):
            return ""
        found = module_file(where, part)  # a regular package comes first, then a module, then a namespace
        if found is not None and not (where / part / "__init__.py").is_file():
            if depth < len(parts) - 1:
                return (f"-m {name}: {found.relative_to(workdir)} is a module, not a package, so it has no"
                        f" {parts[depth + 1]} (work directory {workdir})")
            return ""
        if not (where / part).is_dir():
            here = where.relative_to(workdir)
            prefix = "" if str(here) == "." else f"{here}/"
            return (f"-m {name}: no module {'.'.join(parts[:depth + 1])} in the work directory {workdir} (neither"
                    f" {prefix}{part}.py nor {prefix}{part}/ is there)")
        where = where / part
    if module_file(where, "__main__") is None:
        return (f"-m {name}: {where.relative_to(workdir)}/ is a package with no __main__.py, so python -m cannot run"
                f" it (work directory {workdir}); name one of its modules")
    return ""


def module_file(directory: Path, name: str) -> Optional[Path]:
    """The file of module ``name`` in ``directory`` (a source, compiled, or an extension), or None."""
    for suffix in _MODULE_SUFFIXES:
        if (directory / f"{name}{suffix}").is_file():
            return directory / f"{name}{suffix}"
    extensions = sorted(directory.glob(f"{name}.*.so")) if directory.is_dir() else []
    return extensions[0] if extensions else None


def _relative_inside(path: Path, workdir: Path) -> Optional[Path]:
    """``path`` (its links followed) relative to ``workdir``; None where it lies outside it."""
    try:
        return path.resolve().relative_to(workdir.resolve())
    except ValueError:
        return None
