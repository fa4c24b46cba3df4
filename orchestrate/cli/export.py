"""``export --to slurm|kubernetes``: the same job for a real cluster; starts nothing, needs no engine."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import TARGET_HELP, add_options, request_from_args
from orchestrate.config.options import OPTIONS_BY_DEST
from orchestrate.errors import UsageError
from orchestrate.export.job import export_job
from orchestrate.export.options import CONTAINER_WORKDIR, DEFAULT_RUNTIME, TARGETS
from orchestrate.text import counted

# The run options a real cluster's job has (the simulation's own, such as faults, links or the
# runs directory, mean nothing there).
JOB_DESTS = ("nodes", "nproc_per_node", "gpus_per_node", "backend", "workdir", "image", "master_port", "rdzv",
             "nnodes", "max_restarts", "collective_timeout", "env", "env_file", "copy_env", "cpus_per_node",
             "memory_per_node")
# Where the meaning on a real cluster differs from the simulation's.
HELP = {
    "gpus_per_node": "GPUs per node: #SBATCH --gpus-per-node, nvidia.com/gpu limits (default: 0)",
    "workdir": "your project: a TARGET script is relative to it and must exist there (default: .)",
    "image": "Kubernetes: the container image, pullable by the cluster, holding your code in"
             f" {CONTAINER_WORKDIR} (default: %(default)s)",
    "collective_timeout": "exported as DDP_TIMEOUT (default: not set)",
    "cpus_per_node": "CPUs of every node: Slurm: #SBATCH --cpus-per-task and srun's own, a whole number;"
                     " Kubernetes: cpu request and limit (default: none: the site's default, one CPU per task"
                     " in most Slurm setups)",
    "memory_per_node": "memory of every node, e.g. 64g: Slurm: #SBATCH --mem; Kubernetes: memory request and limit"
                       " (default: none)",
    "master_port": "a static job's rendezvous port on the first node (default: Slurm: 20000 + $SLURM_JOB_ID %% 10000,"
                   " so that two jobs sharing a first host differ; Kubernetes: %(default)s)",
}
# Run options an export refuses, each in one line saying what the cluster has in its place.
NOT_FOR_A_CLUSTER = {
    "--requirements": "a cluster's nodes install nothing for the job: build an image with them and pass it as --image"
                      " (Kubernetes) or --container-image (Slurm)",
    "--mount": "a cluster has its own storage: on Slurm the nodes' shared file systems (--container-mounts with"
               " --container-image), on Kubernetes a volume of the cluster's own in the pod template",
    "--link": "a real cluster's network has its own latency and bandwidth: shape links in a run",
}


def add_parsers(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write the job for a real cluster: an sbatch script or Kubernetes manifests",
        description="The same plan as run, for a real scheduler. slurm: an sbatch script (one srun task per node,"
                    " node rank from $SLURM_NODEID, master from the node list); kubernetes: a headless Service and"
                    " an Indexed Job (node rank from the completion index, master <job>-0.<job>, torchrun's options"
                    " as Kubeflow's PET_* variables), and a Kubeflow Trainer TrainJob with --trainjob. Nothing is"
                    " started.",
        epilog=TARGET_HELP + " Usage example: python -m orchestrate export --to kubernetes --nodes 4 --gpus-per-node 8"
               " --image registry.example.com/me/train:1 -o k8s.yaml -- train.py --epochs 10")
    export.add_argument("--to", choices=TARGETS, required=True,
                        help="slurm: an sbatch script; kubernetes: Service + Indexed Job manifests (YAML)")
    export.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="write here (default: standard output)")
    export.add_argument("--name", default=None,
                        help="job name; names the Kubernetes Job and Service (default: ddp-<script or module>)")
    add_options(export.add_argument_group("the job"), [OPTIONS_BY_DEST[d] for d in JOB_DESTS], help_overrides=HELP)
    slurm = export.add_argument_group("slurm")
    slurm.add_argument("--container-image", default=None, metavar="IMAGE",
                       help="run each task in IMAGE with the cluster's container support (pyxis/enroot: srun"
                            " --container-image) (default: the nodes' own environment)")
    slurm.add_argument("--container-mounts", default=None, metavar="SRC:DST[,...]",
                       help="srun --container-mounts, with --container-image")
    slurm.add_argument("--time", default=None, metavar="LIMIT", help="#SBATCH --time, e.g. 04:00:00")
    slurm.add_argument("--chdir", default=None, metavar="DIR",
                       help="#SBATCH --chdir: your project's directory on the cluster, where the job runs and"
                            " TARGET's path starts (default: the directory sbatch is called from)")
    slurm.add_argument("--partition", default=None, help="#SBATCH --partition")
    kubernetes = export.add_argument_group("kubernetes")
    kubernetes.add_argument("--namespace", default=None, help="namespace of every object (default: none given)")
    kubernetes.add_argument("--trainjob", action="store_true",
                            help="write the job as a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1)"
                                 " instead of the Service and Indexed Job (both applied would train twice)")
    kubernetes.add_argument("--runtime", default=DEFAULT_RUNTIME,
                            help="with --trainjob: the TrainJob's ClusterTrainingRuntime (default: %(default)s)")
    refused = export.add_argument_group("not for a real cluster (refused, saying what to do instead)")
    for flag, why in NOT_FOR_A_CLUSTER.items():
        refused.add_argument(flag, action="append", default=[], metavar="VALUE", dest=refused_dest(flag),
                             help=f"run only: {why}".replace("%", "%%"))
    export.set_defaults(handler=command, takes_target=True)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    """Write the plan for a real cluster."""
    for flag, why in NOT_FOR_A_CLUSTER.items():
        if getattr(args, refused_dest(flag)):
            raise UsageError(f"{flag}: for run only, and an export has no place for it: {why}")
    job = export_job(request_from_args(args, inv.target), args.to, os.environ, name=args.name,
                     container_image=args.container_image, container_mounts=args.container_mounts,
                     time_limit=args.time, chdir=args.chdir, partition=args.partition, namespace=args.namespace,
                     trainjob=args.trainjob, runtime=args.runtime)
    for note in job.notes:
        print(f"note: {note}", file=sys.stderr)
    values = f"the values of {', '.join(job.user_values)} in plain text"
    if args.output is None:
        inv.out.write(job.text)
        if job.user_values:
            print(f"note: the job on standard output holds {values}", file=sys.stderr)
        return 0
    # A job that holds the values of the user's variables (secrets, maybe) is theirs alone to read,
    # as a run's Compose file is; a Slurm script can be run as it is.
    private = 0o700 if args.to == "slurm" else 0o600
    kept_private = False
    try:
        if job.user_values:
            kept_private = write_private(args.output, job.text, private)
        else:
            args.output.write_text(job.text)
            if args.to == "slurm" and args.output.is_file():  # (not -o /dev/stdout's terminal)
                args.output.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"-o {args.output}: {exc.strerror or exc}") from None
    size = f"{counted(job.nodes, 'node')} x {counted(job.nproc_per_node, 'process', 'processes')}"
    print(f"wrote the {job.what} of {size} to {args.output}", file=sys.stderr)
    if job.user_values:
        kept = f": it is readable by you only (mode {private:04o})" if kept_private else ""
        print(f"note: {args.output} holds {values}{kept}", file=sys.stderr)
    return 0


def refused_dest(flag: str) -> str:
    """Where the parser keeps a refused option (not the run option's own name: no request reads it)."""
    return "refused_" + flag.lstrip("-")


def write_private(path: Path, text: str, mode: int) -> bool:
    """``text`` into ``path``, a file readable by its owner only at every moment (one there
    already loses its broader mode before it is emptied and written; one of another user's is
    left as it was, and the error raised); whether ``path`` is such a file (a pipe or a terminal
    keeps its own mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
    with os.fdopen(fd, "w") as file:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        if regular:
            os.fchmod(fd, mode)  # before a byte is lost: another user's file is refused whole
            os.ftruncate(fd, 0)
        file.write(text)
    return regular
