"""A run as the user asks for it, and how it becomes a :class:`RunConfig`.

:class:`RunRequest` holds the options as given, ``None`` where the tool decides (GPUs per node,
processes per node, restarts). :func:`resolve_config` decides them from the engine's free GPUs
and reads what the options point at (the env file, the host's variables), refusing bad input
with one line before anything starts.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.config.gpu_layout import GpuLayout, resolve_gpu_layout
from orchestrate.config.link import LinkSpec
from orchestrate.config.mounts import Mount
from orchestrate.config.run_config import (
    DEFAULT_ELASTIC_RESTARTS,
    DEFAULT_HANG_DIAGNOSE_AFTER_S,
    DEFAULT_IMAGE,
    DEFAULT_MASTER_PORT,
    DEFAULT_RDZV_TIMEOUT_S,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_RUNS_DIR,
    DEFAULT_STOP_GRACE_S,
    LEASE_TIMEOUT_ENV,
    LEASE_TIMEOUT_S,
    RunConfig,
    not_a_file,
)
from orchestrate.config.user_env import copy_env, merge_user_env, parse_env_file
from orchestrate.errors import UsageError


@dataclass(frozen=True)
class RunRequest:
    """Every option of a run (see :mod:`orchestrate.config.options`), as asked.

    ``target`` is what torchrun runs: ``("train.py", *args)`` or ``("-m", "module", *args)``;
    empty means the default job. The other fields are the options of ``run``, named as
    their flags (``--nproc-per-node`` is ``nproc_per_node``), with the same defaults.
    """

    target: tuple[str, ...] = ()
    nodes: int = 2
    nproc_per_node: Optional[Union[int, tuple[int, ...]]] = None  # a tuple: each node's own count
    cpu: bool = False
    gpus_per_node: Optional[int] = None
    share_gpus: bool = False
    backend: str = "auto"
    nccl_as_gloo: bool = False
    workdir: Path = Path(".")
    image: str = DEFAULT_IMAGE
    master_port: int = DEFAULT_MASTER_PORT
    collective_timeout: Optional[float] = None
    rdzv: str = "static"
    nnodes: Optional[tuple[int, int]] = None
    max_restarts: Optional[int] = None
    rdzv_timeout: float = DEFAULT_RDZV_TIMEOUT_S
    restart: str = "all"
    rdzv_store: str = "node0"
    env: tuple[tuple[str, str], ...] = ()
    env_file: tuple[Path, ...] = ()
    copy_env: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    requirements: Optional[Path] = None
    dockerfile: Optional[Path] = None
    no_dockerfile: bool = False
    link: Optional[LinkSpec] = None
    cpus_per_node: Optional[float] = None
    memory_per_node: Optional[int] = None
    runs_dir: Path = DEFAULT_RUNS_DIR
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S
    scheduler: str = "compose"
    sbatch: Optional[Path] = None
    stop_grace: float = DEFAULT_STOP_GRACE_S
    hang_timeout: Optional[float] = None
    hang_diagnose_after: float = DEFAULT_HANG_DIAGNOSE_AFTER_S
    debug_collectives: bool = False
    post_mortem: bool = False
    faults: tuple[FaultSpec, ...] = ()
    keep: bool = False
    no_build: bool = False
    detach: bool = False

    @classmethod
    def from_options(cls, target: tuple[str, ...] = (), **options: Any) -> "RunRequest":
        """A request from keyword options, as the command line would take them: text is
        parsed by the option's own parser (``link="1gbe"``, ``faults=["kill:node1@t=5"]``,
        ``memory_per_node="2g"``), ``env`` may be a mapping.

        Raises:
            UsageError: For an option ``run`` does not have, or a bad value.
        """
        from orchestrate.config.options import OPTIONS_BY_DEST

        values: dict[str, Any] = {}
        for name, given in options.items():
            option = OPTIONS_BY_DEST.get(name)
            if option is None:
                raise UsageError(unknown_option(name, OPTIONS_BY_DEST))
            if name == "env" and isinstance(given, Mapping):
                given = tuple(given.items())
            values[name] = option.value(given)
        return cls(target=tuple(target), **values)

    def replace(self, **changes: Any) -> "RunRequest":
        return dataclasses.replace(self, **changes)

    @property
    def elastic(self) -> bool:
        return self.rdzv == "c10d"

    def check_combination(self) -> None:
        """Refuse options that cannot go together, before anything is asked of the engine."""
        if self.sbatch is not None and self.scheduler != "slurm":
            raise UsageError("--sbatch needs --scheduler slurm")
        if self.detach and self.faults:
            raise UsageError("--fault needs the launcher attached: drop --detach (inject faults into a detached run"
                             " with `python -m orchestrate fault RUN SPEC`)"
                             + ("; and --keep is for a run in the foreground" if self.keep else ""))
        if self.detach and self.keep:
            raise UsageError("--keep is for a run in the foreground: a detached run is kept until"
                             " `python -m orchestrate down RUN` removes it; drop --keep")
        if self.cpu and self.gpus_per_node:
            raise UsageError(f"--cpu reserves no GPUs: drop --gpus-per-node {self.gpus_per_node}, or --cpu")
        if self.dockerfile is not None and self.no_dockerfile:
            raise UsageError(f"--dockerfile {self.dockerfile} and --no-dockerfile: give one of them")
        if self.scheduler != "slurm":
            return
        if self.sbatch is not None and self.target:
            raise UsageError(f"--sbatch {self.sbatch} runs what that script runs: drop the job after --"
                             f" ({shlex.join(self.target)})")
        if self.sbatch is not None and not self.sbatch.is_file():
            raise UsageError(f"--sbatch file {str(self.sbatch)!r} {not_a_file(self.sbatch)}")
        shaping = [flag for flag, given in (
            ("--nproc-per-node", self.nproc_per_node is not None), ("--rdzv", self.rdzv != "static"),
            ("--nnodes", self.nnodes is not None), ("--max-restarts", self.max_restarts is not None),
            ("--rdzv-timeout", self.rdzv_timeout != DEFAULT_RDZV_TIMEOUT_S),
            ("--master-port", self.master_port != DEFAULT_MASTER_PORT)) if given]
        if self.sbatch is not None and shaping:
            raise UsageError(f"--sbatch {self.sbatch} starts torchrun as that script says: drop {', '.join(shaping)}"
                             " (--nodes sizes the cluster it runs on)")
        refuse_a_range_past_its_nodes(self.nodes, self.nnodes, SLURM_NODES_ARE_FIXED)
        if self.detach:
            raise UsageError("--detach is for --scheduler compose; a Slurm run stays attached (Slurm keeps the queue)")
        if not self.cpu and (self.gpus_per_node or 0) > 0:
            raise UsageError(f"the simulated Slurm cluster runs CPU/Gloo nodes: drop --gpus-per-node"
                             f" {self.gpus_per_node} (export --to slurm writes #SBATCH --gpus-per-node for a real"
                             " cluster)")
        if self.share_gpus or self.nccl_as_gloo:
            raise UsageError("--share-gpus and --nccl-as-gloo are for --scheduler compose: the simulated Slurm"
                             " cluster runs CPU/Gloo nodes")
        if self.post_mortem and self.sbatch is not None:
            raise UsageError(f"--pdb needs the generated batch script: --sbatch {self.sbatch} starts its workers as"
                             " it says, without the start-up hook that takes their pdb to `debug RUN RANK`")
        if self.link is not None:
            raise UsageError("--link is for --scheduler compose: the simulated Slurm cluster's nodes do not shape"
                             " their network")
        if self.sbatch is not None and (self.hang_timeout is not None
                                        or self.hang_diagnose_after != DEFAULT_HANG_DIAGNOSE_AFTER_S):
            raise UsageError(f"--hang-timeout and --hang-diagnose-after need the generated batch script: --sbatch"
                             f" {self.sbatch} starts its workers as it says, without the start-up hook that says"
                             " where each rank waits")
        if self.restart != "all" or self.rdzv_store != "node0":
            raise UsageError("--restart and --rdzv-store are for --scheduler compose: under Slurm, Slurm restarts"
                             " (a requeue restarts the whole job) and torchrun's rendezvous is the batch host's")
        if isinstance(self.nproc_per_node, tuple) and len(set(self.nproc_per_node)) > 1:
            raise UsageError(f"--nproc-per-node {','.join(map(str, self.nproc_per_node))}: under --scheduler slurm"
                             " one srun starts the same torchrun on every node, so the nodes' workers are even")
        for fault in self.faults:
            if fault.on_store:  # (before the store's own check, whose way out Slurm refuses)
                raise UsageError(f"--fault {fault}: under --scheduler slurm the rendezvous store is torchrun's agent on"
                                 " the batch host (the first node), and kill:node0 takes it with the node; a fault to a"
                                 " store container of the run's own is for --scheduler compose with --rdzv c10d"
                                 " --rdzv-store container")
            if fault.action not in SLURM_FAULTS or fault.has_end:
                raise UsageError(f"--fault {fault}: under --scheduler slurm a fault is one of"
                                 f" {', '.join(a.value for a in SLURM_FAULTS)}, without an end")


SLURM_NODES_ARE_FIXED = "a Slurm job's allocation cannot grow past the nodes it starts on"


def refuse_a_range_past_its_nodes(nodes: int, nnodes: Optional[tuple[int, int]], why: str) -> None:
    """UsageError for ``--nnodes MIN:MAX`` with MAX above ``--nodes`` where no node can ever join
    past ``nodes`` (``why`` says where: a Slurm allocation, an Indexed Job's pods), so that each
    rendezvous would wait torchrun's last call for nodes that never come."""
    if nnodes and nnodes[1] > nodes:
        raise UsageError(f"--nnodes {nnodes[0]}:{nnodes[1]} with --nodes {nodes}: {why}, so MAX is --nodes:"
                         f" give --nnodes {nnodes[0]}:{nodes}")


# The faults a Slurm node can suffer: those Slurm itself sees (a node down, hung, cut off).
SLURM_FAULTS = (FaultAction.KILL, FaultAction.PAUSE, FaultAction.DISCONNECT, FaultAction.RESTART,
                FaultAction.PREEMPT)


@dataclass(frozen=True)
class HostFacts:
    """What the launching host adds to a run: its environment (for ``--copy-env``) and the user
    the nodes run as."""

    environ: Mapping[str, str] = field(default_factory=dict)
    run_as: Optional[str] = None
    user_name: str = ""

    @classmethod
    def here(cls) -> "HostFacts":
        """This process's environment and user."""
        return cls(dict(os.environ), invoking_user(), invoking_user_name())


def invoking_user() -> Optional[str]:
    """``UID:GID`` of whoever runs the launcher (None where the OS has no uids)."""
    if not hasattr(os, "getuid"):
        return None
    return f"{os.getuid()}:{os.getgid()}"


def invoking_user_name() -> str:
    """The login name of whoever runs the launcher: its uid's, not a USER it may have
    inherited (setpriv, su); "" where it has none."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no uids (Windows), or a uid without a name
        return ""


def user_env(request: RunRequest, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of --env-file (each file over the one before it), --copy-env and --env, in
    that order of precedence."""
    from orchestrate.config.options import OPTIONS_BY_DEST

    from_file: dict[str, str] = {}
    for path in OPTIONS_BY_DEST["env_file"].value(request.env_file):  # one path, several or None, as run takes them
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"--env-file {path}: {exc.strerror or exc}") from None
        from_file.update(parse_env_file(text, str(path)))
    return merge_user_env(from_file, copy_env(request.copy_env, environ), request.env)


def chosen_dockerfile(request: RunRequest) -> Optional[Path]:
    """--dockerfile, else the work directory's Dockerfile unless --no-dockerfile."""
    if request.dockerfile is not None:
        return Path(request.dockerfile)
    found = Path(request.workdir) / "Dockerfile"
    return found if not request.no_dockerfile and found.is_file() else None


def unused_requirements_note(request: RunRequest) -> str:
    """What to say of a ``requirements.txt`` in the work directory that the run leaves alone (no
    ``--requirements``, no Dockerfile and no ``--image`` of the user's, which may install it): that the nodes do not
    install it, and how they would; "" where there is none. It is not installed unasked: that
    would build an image for every run of such a directory, and may pin another torch than the
    node image's."""
    found = Path(request.workdir) / "requirements.txt"
    if request.requirements is not None or request.image != DEFAULT_IMAGE or chosen_dockerfile(request) is not None \
            or not found.is_file():
        return ""
    return (f"{found} is not installed in the nodes (they run the node image as it is);"
            f" --requirements {found} installs it")


def resolve_layout(request: RunRequest, available: Optional[int]) -> GpuLayout:
    """GPUs and processes per node, and the backend, for ``available`` GPUs (None: unknown)."""
    counts = request.nproc_per_node
    most = max(counts) if isinstance(counts, tuple) else counts
    return resolve_gpu_layout(nodes=request.nodes, nproc_per_node=most,
                              gpus_per_node=request.gpus_per_node, available=available, cpu=request.cpu,
                              backend=request.backend, share=request.share_gpus)


def resolve_config(request: RunRequest, host: HostFacts, available_gpus: Optional[int] = None) -> RunConfig:
    """The validated configuration of ``request`` on a host with ``available_gpus`` free GPUs
    (None: unknown, as in a dry run without an engine; the request's own numbers stand).

    Raises:
        UsageError: With the one line that says what is wrong.
    """
    layout = resolve_layout(request, available_gpus)
    counts = request.nproc_per_node if isinstance(request.nproc_per_node, tuple) else ()
    return RunConfig(
        nodes=request.nodes,
        nproc_per_node=layout.nproc_per_node,
        node_nprocs=counts if len(set(counts)) > 1 or len(counts) != request.nodes else (),
        target=tuple(request.target),
        workdir=request.workdir,
        image=request.image,
        gpus_per_node=layout.gpus_per_node,
        share_gpus=layout.shared,
        backend=layout.backend,
        nccl_as_gloo=request.nccl_as_gloo,
        keep=request.keep,
        master_port=request.master_port,
        runs_dir=request.runs_dir,
        ready_timeout_s=request.ready_timeout,
        collective_timeout_s=request.collective_timeout,
        faults=tuple(request.faults),
        rdzv=request.rdzv,
        min_nodes=request.nnodes[0] if request.nnodes else None,
        max_nodes=request.nnodes[1] if request.nnodes else None,
        max_restarts=request.max_restarts if request.max_restarts is not None else (DEFAULT_ELASTIC_RESTARTS if request.elastic else 0),
        rdzv_timeout_s=request.rdzv_timeout,
        restart=request.restart,
        rdzv_store=request.rdzv_store,
        user_env=user_env(request, host.environ),
        run_as=host.run_as,
        user_name=host.user_name,
        cpus_per_node=request.cpus_per_node,
        memory_per_node=request.memory_per_node,
        mounts=request.mounts,
        requirements=request.requirements,
        dockerfile=chosen_dockerfile(request),
        link=request.link,
        stop_grace_s=request.stop_grace,
        lease_timeout_s=lease_timeout(host.environ),
        hang_timeout_s=request.hang_timeout,
        hang_diagnose_after_s=request.hang_diagnose_after,
        debug_collectives=request.debug_collectives,
        post_mortem=request.post_mortem,
    )


def lease_timeout(environ: Mapping[str, str]) -> float:
    """How long the nodes outlive a silent foreground launcher: ``LEASE_TIMEOUT_S``, or the
    host's ``DDP_COMPOSE_LEASE_TIMEOUT_S`` (a test setting: tests that kill a launcher wait
    that long, not 30 s)."""
    text = environ.get(LEASE_TIMEOUT_ENV)
    if not text:
        return LEASE_TIMEOUT_S
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{LEASE_TIMEOUT_ENV} must be seconds, e.g. 5, got {text!r}") from None


def unknown_option(name: str, options: Mapping[str, Any]) -> str:
    """What to say of a keyword no option of ``run`` has (``options``: each option by its keyword):
    the keyword a flag's own spelling stands for (``fault`` for ``--fault``: ``faults``), or the
    nearest keyword (a typo), then every keyword."""
    by_flag = {option.flag.lstrip("-").replace("-", "_"): keyword for keyword, option in options.items()}
    if name in by_flag:
        hint = f": {options[by_flag[name]].flag}'s keyword is {by_flag[name]!r}"
    else:
        near = difflib.get_close_matches(name, list(options), n=1, cutoff=0.75)
        hint = f": did you mean {near[0]!r}?" if near else ""
    return f"no run option {name!r}{hint} (options: {', '.join(sorted(options))})"
