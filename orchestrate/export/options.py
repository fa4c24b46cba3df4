"""What an export needs beyond the job: names, images, limits of the real cluster."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from orchestrate.errors import UsageError
from orchestrate.plan.model import JobPlan
from orchestrate.plan.torchrun import STORE_PER_ROUND_ENV

TARGETS = ("slurm", "kubernetes")


# Where the job's code is inside the image on a cluster (the nodes mount --workdir there).
CONTAINER_WORKDIR = "/workspace"


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


# Pod hostnames are <job>-<index>: the name leaves room for the index within 63 characters.
MAX_JOB_NAME = 50

# The Kubeflow Trainer runtime a TrainJob refers to unless told.
DEFAULT_RUNTIME = "torch-distributed"


# ``#SBATCH --time``'s forms (sbatch(1)); a value is one line's word, so nothing can follow it.
_SLURM_TIME = re.compile(r"(?:\d+(?::\d{1,2}){0,2}|\d+-\d{1,2}(?::\d{1,2}){0,2}|(?i:unlimited|infinite))\Z")
_SLURM_PARTITIONS = re.compile(r"[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*\Z")
# A Kubernetes namespace: an RFC 1123 label (a digit may start it, unlike a Service's name).
_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\Z")


@dataclass(frozen=True)
class ExportOptions:
    """What only a real cluster needs.

    Attributes:
        name: The job's name (Slurm job name; Kubernetes Job and Service name).
        container_image: Slurm: run each task in this image (pyxis/enroot ``--container-image``).
        container_mounts: Slurm: ``--container-mounts`` with ``container_image``.
        time_limit: Slurm: ``#SBATCH --time``.
        chdir: Slurm: ``#SBATCH --chdir``, the project's directory on the cluster (None: where sbatch
            is called from).
        partition: Slurm: ``#SBATCH --partition``.
        namespace: Kubernetes: the namespace of every object (None: the current one).
        trainjob: Kubernetes: the job as a Kubeflow Trainer ``TrainJob``, instead of the Service and
            Indexed Job.
        runtime: Kubernetes: the ``ClusterTrainingRuntime`` the TrainJob refers to.
    """

    name: str = "ddp-job"
    container_image: Optional[str] = None
    container_mounts: Optional[str] = None
    time_limit: Optional[str] = None
    chdir: Optional[str] = None
    partition: Optional[str] = None
    namespace: Optional[str] = None
    trainjob: bool = False
    runtime: str = DEFAULT_RUNTIME

    def __post_init__(self) -> None:
        if not _DNS_LABEL.match(self.name) or len(self.name) > MAX_JOB_NAME:
            raise UsageError(f"--name {self.name!r} must be lower-case letters, digits and '-', start with a"
                             f" letter and be at most {MAX_JOB_NAME} characters (it names Kubernetes objects)")
        if self.container_mounts and not self.container_image:
            raise UsageError("--container-mounts needs --container-image")
        if self.time_limit is not None and not _SLURM_TIME.match(self.time_limit):
            raise UsageError(f"--time {self.time_limit!r} is not a Slurm time: MINUTES, MINUTES:SECONDS,"
                             " HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]] or UNLIMITED, e.g. 04:00:00")
        if self.chdir is not None and (not self.chdir.strip() or "\n" in self.chdir):
            raise UsageError(f"--chdir {self.chdir!r} must name a directory on the cluster, on one line")
        if self.chdir is not None and (self.chdir.startswith("~") or "$" in self.chdir):
            raise UsageError(f"--chdir {self.chdir!r}: sbatch expands no ~ or $VARIABLE in it: give an absolute"
                             " path, or one relative to where sbatch is called")
        if self.partition is not None and not _SLURM_PARTITIONS.match(self.partition):
            raise UsageError(f"--partition {self.partition!r} must be a partition's name, or several separated by"
                             " commas (letters, digits, '_', '-', '.'), e.g. gpu or gpu,debug")
        if self.namespace is not None and not (_NAMESPACE.match(self.namespace) and len(self.namespace) <= 63):
            raise UsageError(f"--namespace {self.namespace!r} must be lower-case letters, digits and '-', start and"
                             " end with a letter or digit, and be at most 63 characters (a Kubernetes namespace)")


def given_flags(options: Mapping[str, Any]) -> set[str]:
    """Which of :class:`ExportOptions`' ``options`` have a value other than their default, as the
    command line spells them."""
    defaults = ExportOptions()
    return {flag for field, flag in _FLAGS.items() if field in options and options[field] != getattr(defaults, field)}


_FLAGS = {"container_image": "--container-image", "container_mounts": "--container-mounts",
          "time_limit": "--time", "chdir": "--chdir", "partition": "--partition", "namespace": "--namespace",
          "trainjob": "--trainjob", "runtime": "--runtime"}
# The options (run's, and export's own) that only one target has a place for.
ONLY_FOR = {"slurm": ("--container-image", "--container-mounts", "--time", "--chdir", "--partition"),
            "kubernetes": ("--image", "--namespace", "--trainjob", "--runtime")}
# What the other target takes in an option's place.
INSTEAD = {"--image": "--container-image runs Slurm's tasks in an image",
           "--container-image": "--image names the pods' image"}


def refuse_what_the_target_leaves_out(to: str, given: set[str]) -> None:
    """UsageError for an option ``given`` that the job for ``to`` would leave out without a word:
    one that only the other target has a place for, or ``--runtime`` without ``--trainjob``."""
    for other, flags in ONLY_FOR.items():
        stray = [flag for flag in flags if flag in given]
        if other != to and stray:
            instead = "".join(f"; {INSTEAD[flag]}" for flag in stray if flag in INSTEAD)
            raise UsageError(f"{', '.join(stray)}: for --to {other} only, and an export --to {to} has no place"
                             f" for {'it' if len(stray) == 1 else 'them'}{instead}")
    if "--runtime" in given and "--trainjob" not in given:
        raise UsageError("--runtime names the TrainJob's runtime: it needs --trainjob")


def default_job_name(target: tuple[str, ...]) -> str:
    """``ddp-<script or module>``: ``-m app.train`` gives ddp-train, ``train.py`` ddp-train."""
    if target[:1] == ("-m",) and len(target) > 1:
        stem = target[1].rsplit(".", 1)[-1]
    else:
        stem = target[0].rsplit("/", 1)[-1].removesuffix(".py") if target else "job"
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "job"
    return f"ddp-{stem}"[:MAX_JOB_NAME].rstrip("-")


def job_env(plan: JobPlan) -> dict[str, str]:
    """The variables a cluster job needs: the backend, the collective timeout, an elastic job's
    store per rendezvous round, the user's; none of the simulation's own (its shared volume,
    progress channel, interfaces)."""
    cfg = plan.config
    env = {"PYTHONUNBUFFERED": "1", "DDP_BACKEND": cfg.backend}
    if cfg.collective_timeout_s is not None:
        env["DDP_TIMEOUT"] = f"{cfg.collective_timeout_s:g}"
    if cfg.elastic:  # torchrun's restarts on a cluster meet the same store as on the nodes
        env.update(STORE_PER_ROUND_ENV)
    env.update(cfg.user_env)
    return env
