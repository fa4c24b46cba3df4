"""Every option of a run, defined once: its flag, help, parser and group.

The same definitions make ``run``'s, ``plan``'s, ``bench``'s and ``export``'s command lines
(:func:`orchestrate.cli.options.add_options`) and read keyword options in the library
(:meth:`orchestrate.config.request.RunRequest.from_options`).
Defaults are :class:`~orchestrate.config.request.RunRequest`'s own, so they cannot drift.
Parsers take the text a user types and raise :class:`~orchestrate.errors.UsageError`.
"""
from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from orchestrate.config.fault_spec import parse_fault
from orchestrate.config.link import PRESETS, parse_link
from orchestrate.config.mounts import parse_mount
from orchestrate.config.run_config import (
    DEFAULT_ELASTIC_RESTARTS,
    DEFAULT_HANG_DIAGNOSE_AFTER_S,
    DEFAULT_IMAGE,
    DEFAULT_MASTER_PORT,
    DEFAULT_RDZV_TIMEOUT_S,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_STOP_GRACE_S,
    ELASTIC_RDZV_PORT,
    parse_memory,
)
from orchestrate.config.user_env import parse_assignment
from orchestrate.errors import UsageError


# The least CPU limit the engine takes: a CFS quota of 1 ms in its 100 ms period.
MIN_CPUS = 0.01

def int_at_least(minimum: int) -> Callable[[str], int]:
    """A parser of integers of ``minimum`` or more."""
    wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise UsageError(f"expected {wanted}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def nproc_counts(text: str) -> Union[int, tuple[int, ...]]:
    """``P`` (every node), or ``P0,P1,...`` (node i runs Pi workers)."""
    counts = tuple(positive_int(part.strip()) for part in text.split(","))
    return counts[0] if len(counts) == 1 else counts


def finite(text: str) -> float:
    """``text`` as a number; ValueError for one that is not, or is infinite or not a number
    (``inf``, ``nan``: float() takes them, and no count or duration is one)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def positive_float(text: str) -> float:
    """A number above 0."""
    try:
        value = finite(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise UsageError(f"expected a positive number, e.g. 1 or 0.5, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds (a number)."""
    try:
        return finite(text)
    except ValueError:
        raise UsageError(f"expected seconds, e.g. 60, got {text!r}") from None


def positive_seconds(text: str) -> float:
    """A duration above 0 seconds (a deadline: one of 0 or less never lets anything come)."""
    value = seconds(text)
    if not value > 0:
        raise UsageError(f"expected seconds above 0, e.g. 60, got {text!r}")
    return value


def cpus(text: str) -> float:
    """A CPU limit the engine takes: 0.01 CPUs or more (a CFS quota of 1 ms in its 100 ms period)."""
    value = positive_float(text)
    if value < MIN_CPUS:
        raise UsageError(f"expected {MIN_CPUS:g} CPUs or more (the engine's least CPU limit), got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A number of 0 or more."""
    try:
        value = finite(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(f"expected a number of 0 or more, e.g. 1e-6, got {text!r}")
    return value


def non_negative_seconds(text: str) -> float:
    """A duration of 0 seconds or more."""
    value = seconds(text)
    if value < 0:
        raise UsageError(f"expected seconds, 0 or more, got {text!r}")
    return value


# An image reference as the engine takes it (the distribution project's grammar): a registry host
# (with its port) or none, lower-case path components, then a tag, a digest, or both.
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IPV6_HOST = r"\[[0-9a-fA-F:]+\]"  # [::1]:5000/img, as the distribution grammar allows
IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_HOST_PART}(?:\.{_HOST_PART})*|{_IPV6_HOST})(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


def image_reference(text: str) -> str:
    """An image name the engine can take (``ddp-compose-node:latest``, ``registry:5000/team/img:tag``).

    Raises:
        UsageError: For one it would refuse (``Bad:Tag::``), before anything is asked of it.
    """
    if not IMAGE_REFERENCE.fullmatch(text) or len(text.split("@")[0].rsplit(":", 1)[0]) > 255:
        raise UsageError(f"expected an image name like ddp-compose-node:latest or registry:5000/team/image:tag"
                         f" (lower-case, then :TAG), got {text!r}")
    return text


def image_tag(text: str) -> str:
    """An image name a build can tag: :func:`image_reference` without a digest.

    Raises:
        UsageError: For a digest (``img@sha256:...``): a build makes an image, its digest is the
            engine's to give.
    """
    if "@" in image_reference(text):
        raise UsageError(f"a build tags a name, not a digest (the engine gives the digest): give a name like"
                         f" {text.split('@')[0]}:TAG, got {text!r}")
    return text


def node_range(text: str) -> tuple[int, int]:
    """``MIN:MAX`` (or ``N``) node counts."""
    low, _, high = text.partition(":")
    try:
        values = (int(low), int(high or low))
    except ValueError:
        raise UsageError(f"expected MIN:MAX, e.g. 1:2, got {text!r}") from None
    if not 1 <= values[0] <= values[1]:
        raise UsageError(f"expected 1 <= MIN <= MAX, got {text!r}")
    return values


@dataclass(frozen=True)
class Option:
    """One option of a run.

    Attributes:
        dest: Its field in :class:`~orchestrate.config.request.RunRequest` (and argparse dest).
        flag: The command-line flag.
        help: What it does (argparse adds the default where it says ``%(default)s``).
        parse: Text to value; None for a flag (a switch) and for plain strings.
        metavar: What the help calls its value.
        choices: The values it allows.
        repeat: Given several times, each value is kept (``--env``, ``--fault``).
        switch: A flag without a value.
        aliases: Other flags for it (``-d``).
    """

    dest: str
    flag: str
    help: str
    parse: Optional[Callable[[str], Any]] = None
    metavar: Optional[str] = None
    choices: Optional[tuple[str, ...]] = None
    repeat: bool = False
    switch: bool = False
    aliases: tuple[str, ...] = ()

    def value(self, given: Any) -> Any:
        """A keyword option's value: text or a number goes through the parser, like the command
        line's text, so that a number meets the same rule in the same words."""
        if self.repeat:  # one value given alone is one of them; None, none
            if given is None:
                return ()
            one = isinstance(given, (str, bytes, os.PathLike, numbers.Number))
            return tuple(self.value_of_one(item) for item in ((given,) if one else given))
        return self.value_of_one(given)

    def value_of_one(self, given: Any) -> Any:
        """One value: text, or a number taken as its text (``nodes=0`` is ``--nodes 0``, refused in
        the parser's words; numpy's too), goes through the parser; a value of its own kind (a path, a
        parsed link) is taken as it is."""
        if self.choices and given not in self.choices:
            raise UsageError(f"{self.flag} must be one of {', '.join(self.choices)}, got {given!r}")
        if isinstance(given, numbers.Number) and self.parse is not None:  # (a bool too: True is no count)
            given = str(given)
        if not isinstance(given, str) or self.parse is None:
            return given
        try:
            return self.parse(given)
        except UsageError as exc:
            message = str(exc)
            raise UsageError(message if self.flag in message else f"{self.flag}: {message}") from None


_LINK_HELP = ("shape every node's link with Linux traffic control: rate=10gbit[,delay=5ms][,loss=0.1%%] or a preset ("
              + ", ".join(PRESETS) + "); a delay needs the kernel's netem (refused where it is missing), a loss is"
              " dropped by iptables where netem is missing")

# The job: its shape, rendezvous and image; what run, plan, bench and export share.
JOB_OPTIONS = (
    Option("nodes", "--nodes", "number of simulated nodes (containers) (default: %(default)s)", positive_int),
    Option("nproc_per_node", "--nproc-per-node", "worker processes torchrun starts on each node (default: one per"
           " GPU of the node, 1 on CPU); with fewer processes than GPUs each process spans G/P GPUs. P0,P1,... gives"
           " node i Pi workers (uneven nodes, one count per node of --nodes), e.g. 2,1,1",
           nproc_counts, metavar="P[,P...]"),
    Option("cpu", "--cpu", "force the CPU/Gloo variant: no GPU reservation, even on a GPU host", switch=True),
    Option("gpus_per_node", "--gpus-per-node", "GPUs reserved for each node; node i gets host GPUs [i*G, (i+1)*G)"
           " (default: the engine's GPUs split evenly among the nodes, 0 when it has none)",
           non_negative_int, metavar="G"),
    Option("share_gpus", "--share-gpus", "let nodes, and the processes of a node, share GPUs when there are"
           " fewer than they need (one GPU, two nodes): node i takes its GPUs in turn, wrapping around; local rank l"
           " uses its node's GPU l mod G, with its own NCCL_HOSTID. Shows correctness and NCCL's control flow, not"
           " its speed (the transport is sockets)", switch=True),
    Option("backend", "--backend", "collective backend the workers use (default: auto: nccl with GPUs, gloo"
           " without)", choices=("auto", "nccl", "gloo")),
    Option("nccl_as_gloo", "--nccl-as-gloo", "with --backend gloo: give scripts that ask init_process_group or"
           " new_group for nccl gloo instead (on CUDA tensors too), by a start-up hook in every worker", switch=True),
    Option("workdir", "--workdir", "host directory mounted into every node as its working directory; TARGET"
           " scripts are relative to it (default: current directory)", Path, metavar="DIR"),
    Option("image", "--image", "node image: used if present, else pulled, else refused (exit 2); only the"
           f" default is built on first use (default: {DEFAULT_IMAGE})", image_reference),
    Option("master_port", "--master-port", "a static job's rendezvous port on node0, inside the run's private"
           f" network (default: {DEFAULT_MASTER_PORT}; an elastic job's c10d rendezvous has {ELASTIC_RDZV_PORT})",
           positive_int),
    Option("collective_timeout", "--collective-timeout", "process group timeout of every worker: init_process_group"
           " and new_group get it where the script gives none (and app/ reads it as DDP_TIMEOUT); a collective that"
           " waits longer fails the job, which then ends as HUNG with where every rank waited (default: the"
           " script's own, else torch's 10-30 min)", positive_float, metavar="SECONDS"),
    Option("hang_timeout", "--hang-timeout", "end the run as failed (HUNG) when no rank has made progress (a"
           " worker line other than torch's own log lines, a progress report, a finished collective, CPU"
           " work) for this long, with where every rank waits as its root cause (default: never)", positive_float, metavar="SECONDS"),
    Option("hang_diagnose_after", "--hang-diagnose-after", "say where every rank waits, once, after this long"
           f" without progress; 0: never (default: {DEFAULT_HANG_DIAGNOSE_AFTER_S:g})", non_negative_seconds,
           metavar="SECONDS"),
    Option("debug_collectives", "--debug-collectives", "run the workers with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch"
           " checks every collective across ranks and fails at the first mismatch, naming both (costs a check per"
           " collective)", switch=True),
    Option("post_mortem", "--pdb", "a rank whose script raises an error it does not catch stops in pdb where it"
           " raised (post-mortem, at the innermost frame of your own code) after its traceback, and waits for"
           " `python -m orchestrate debug RUN RANK`, which the run prints; the rank then ends with its error",
           switch=True),
    Option("rdzv", "--rdzv", "rendezvous: static (--node-rank i, fixed ranks) or c10d (elastic: torchrun's c10d"
           " rendezvous on node0; dead nodes are restarted and rejoin, workers restart) (default: static)",
           choices=("static", "c10d")),
    Option("nnodes", "--nnodes", "elastic mode's node range (default: --nodes:--nodes)", node_range,
           metavar="MIN:MAX"),
    Option("max_restarts", "--max-restarts", "worker-group restarts torchrun allows, and node restarts the launcher"
           f" makes, in elastic mode (default: {DEFAULT_ELASTIC_RESTARTS}; --rdzv c10d only)", non_negative_int,
           metavar="R"),
    Option("rdzv_timeout", "--rdzv-timeout", "how long an elastic rendezvous waits for nodes to join"
           f" (default: {DEFAULT_RDZV_TIMEOUT_S:g}; --rdzv c10d only)", positive_seconds, metavar="SECONDS"),
    Option("restart", "--restart", "what the launcher restarts when a node of an elastic job dies: all (every"
           " node, as a Slurm requeue or a JobSet's recreate-all does) or node (the dead node only, as Kubernetes"
           " restarts one pod of a PyTorchJob; losing the node that holds the rendezvous store then ends the job,"
           " as on a real cluster) (default: all)", choices=("all", "node")),
    Option("rdzv_store", "--rdzv-store", "where the elastic rendezvous's store lives: node0 (torchrun's agent on"
           " node0 hosts it) or container (a store container of the run's own, the --rdzv-endpoint a real cluster"
           " gives, which survives any node) (default: node0)", choices=("node0", "container")),
)

# What the user brings into every node.
NODE_OPTIONS = (
    Option("env", "--env", "set a variable in every node (repeatable); wins over --copy-env and --env-file;"
           " e.g. --env WANDB_MODE=offline", parse_assignment, metavar="KEY=VALUE", repeat=True),
    Option("env_file", "--env-file", "variables for every node from a file of KEY=VALUE lines (# comments,"
           " optional 'export ' and quotes, as Compose's env files) (repeatable; a later file wins)", Path,
           metavar="FILE", repeat=True),
    Option("copy_env", "--copy-env", "copy the host's variables matching a shell pattern into every node"
           " (repeatable), e.g. --copy-env 'NCCL_*' --copy-env 'WANDB_*'", metavar="PATTERN", repeat=True),
    Option("mounts", "--mount", "mount a host file or directory into every node (repeatable): HOST[:NODE][:ro];"
           " NODE defaults to HOST's own absolute path, so a script's /data/... reads the same in the nodes; ro:"
           " read-only. e.g. --mount ~/datasets:/data:ro", parse_mount, metavar="HOST[:NODE][:ro]", repeat=True),
    Option("requirements", "--requirements", "pip requirements installed into a node image derived from --image;"
           " built once, reused while nothing changed (offline from a host wheelhouse when the nodes cannot reach"
           " the package index); a requirements.txt in --workdir is not installed without it (the run says so)", Path,
           metavar="FILE"),
    Option("dockerfile", "--dockerfile", "a Dockerfile built on the node image (it starts with ARG BASE_IMAGE and"
           " FROM ${BASE_IMAGE}); default: DIR/Dockerfile of --workdir when present", Path, metavar="FILE"),
    Option("no_dockerfile", "--no-dockerfile", "ignore a Dockerfile in the work directory", switch=True),
    Option("link", "--link", _LINK_HELP, parse_link, metavar="SPEC"),
    Option("cpus_per_node", "--cpus-per-node", "CPU limit of every node container, e.g. 1 or 0.5 (default: none)",
           cpus, metavar="CPUS"),
    Option("memory_per_node", "--memory-per-node", "memory limit of every node container, e.g. 512m or 2g; a node"
           " past it is OOM-killed and named as such (default: none)", parse_memory, metavar="SIZE"),
)

# How a run is carried out here: where its records go, its faults, its scheduler.
RUN_OPTIONS = (
    Option("runs_dir", "--runs-dir", "where each run gets a directory of node logs (default: ./%(default)s)", Path,
           metavar="DIR"),
    Option("ready_timeout", "--ready-timeout", "deadline for the nodes to come up and resolve each other"
           f" (default: {DEFAULT_READY_TIMEOUT_S:g})", positive_seconds, metavar="SECONDS"),
    Option("scheduler", "--scheduler", "compose: torchrun in every node (default); slurm: the nodes form a real"
           " Slurm cluster (slurmctld, slurmd, munge) and the job goes through sbatch and srun",
           choices=("compose", "slurm")),
    Option("sbatch", "--sbatch", "with --scheduler slurm: submit your own batch script unchanged instead of the"
           " generated one (it names the job, none goes after --, and starts torchrun its own way: --nodes sizes the"
           " cluster, the rendezvous options are refused)", Path, metavar="FILE"),
    Option("stop_grace", "--stop-grace", "seconds the workers get between SIGTERM and SIGKILL when the run is"
           f" stopped: Ctrl-C, SIGTERM, the end of a failure's grace, a preempt fault (default: {DEFAULT_STOP_GRACE_S:g})",
           non_negative_seconds, metavar="SECONDS"),
    Option("faults", "--fault", "inject a fault: KIND:TARGET[,KEY=VALUE][@t=S[..END]|@step=N[..END]|@step=+N] (+N: the"
           " Nth step of the first attempt that began after the fault before it fired). Node faults"
           " (TARGET nodeN): kill (dies), lose (dies for good: an elastic job with --nnodes MIN:MAX goes on"
           " without it), pause (hangs), disconnect (cut off the network), restart (reboots),"
           " preempt (SIGTERM, then SIGKILL after --stop-grace), slow[,cpus=F] (a straggler: CPU quota cut to F,"
           " default 0.25), degrade[,rate=R] (its link drops to R, default 10mbit), lossy[,p=P] (P%% of its incoming"
           " packets dropped, default 1%%). Rank faults (TARGET a global"
           " rank): kill-rank (the worker dies, its node lives), hang-rank (the worker is stopped). Storage faults"
           " (TARGET nodeN, path=GLOB under the work directory): torn-write (its next save cut short, the node"
           " killed), disk-full (writes fail with ENOSPC). partition:NODES|NODES splits the network in two."
           " kill, pause and disconnect may aim at the rendezvous store (TARGET store, with --rdzv-store"
           " container): its host lost, hung or cut off."
           " pause, disconnect, slow, degrade, lossy, hang-rank, disk-full and partition may end (..END). A fault that"
           " never fires fails the run. e.g. kill:node1@step=20, slow:node1,cpus=0.2@t=5..20, hang-rank:3@t=10,"
           " torn-write:node0@step=5, 'partition:node0|node1@t=5..20'; repeatable",
           parse_fault, metavar="SPEC", repeat=True),
)

# What only a foreground or detached launch does.
LAUNCH_OPTIONS = (
    Option("keep", "--keep", "leave the containers, network and volume after the run (for debugging)", switch=True),
    Option("no_build", "--no-build", "fail instead of building the node image when it is missing (the image"
           " derived from it for --requirements or --dockerfile, and a Slurm run's image, are built as ever)",
           switch=True),
    Option("detach", "--detach", "print the run id and return once the nodes run; the engine keeps the run"
           " (follow it with logs/attach, end it with stop/down)", switch=True, aliases=("-d",)),
)

ALL_OPTIONS = JOB_OPTIONS + NODE_OPTIONS + RUN_OPTIONS + LAUNCH_OPTIONS
OPTIONS_BY_DEST = {option.dest: option for option in ALL_OPTIONS}
# The order ``--help`` lists a job's options in (the node options follow, in a group).
JOB_HELP_ORDER = ("nodes", "nproc_per_node", "cpu", "gpus_per_node", "share_gpus", "backend", "nccl_as_gloo", "workdir", "image", "master_port",
                  "runs_dir", "ready_timeout", "collective_timeout", "hang_timeout",
                  "hang_diagnose_after", "debug_collectives", "post_mortem", "rdzv", "nnodes", "max_restarts",
                  "rdzv_timeout", "restart", "rdzv_store", "scheduler", "sbatch", "stop_grace", "faults")
