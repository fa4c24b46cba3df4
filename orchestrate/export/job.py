"""The library's entry point of ``export``: a run request becomes the job for a real cluster, as
text, with no engine (the GPUs asked for are what the cluster's nodes have)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from orchestrate.config.request import (SLURM_NODES_ARE_FIXED, HostFacts, RunRequest, refuse_a_range_past_its_nodes,
                                        resolve_config)
from orchestrate.config.run_config import DEFAULT_IMAGE, RunConfig
from orchestrate.config.user_env import copy_env_notes
from orchestrate.errors import UsageError
from orchestrate.export.kubernetes import export_kubernetes, to_yaml
from orchestrate.export.options import (CONTAINER_WORKDIR, ExportOptions, default_job_name, given_flags,
                                        refuse_what_the_target_leaves_out)
from orchestrate.export.slurm import export_slurm, module_top_file
from orchestrate.plan.make import make_plan


@dataclass(frozen=True)
class ExportedJob:
    """The job as a real scheduler takes it: ``text`` (an sbatch script, or Kubernetes
    manifests), for ``nodes`` nodes of ``nproc_per_node`` workers; ``notes`` say what the user
    must still do for it to run there; ``user_values`` names the user's variables whose values
    the text holds (``--env``, ``--env-file``, ``--copy-env``), which may be secrets."""

    to: str
    text: str
    nodes: int
    nproc_per_node: int
    notes: tuple[str, ...] = ()
    user_values: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        return "sbatch script" if self.to == "slurm" else "Kubernetes manifests"


def export_job(request: RunRequest, to: str, environ: Mapping[str, str], *, name: Optional[str] = None,
               **options: Any) -> ExportedJob:
    """``request`` for ``to`` (``slurm`` or ``kubernetes``), named ``name`` (default: after the
    script or module); ``options`` are :class:`~orchestrate.export.options.ExportOptions`'s.

    Raises:
        UsageError: For a request a run would refuse too, a bad option, or one the job for ``to``
            has no place for.
    """
    refuse_what_the_target_leaves_out(to, given_flags(options) | request_flags(request))
    refuse_gpus_a_cluster_node_lacks(request)
    refuse_a_range_past_its_nodes(request.nodes, request.nnodes, SLURM_NODES_ARE_FIXED if to == "slurm" else
                                  "the Indexed Job runs --nodes pods and never more")
    config = resolve_config(request.replace(cpu=not request.gpus_per_node), HostFacts(environ=dict(environ)))
    if to == "slurm" and config.cpus_per_node and config.cpus_per_node != int(config.cpus_per_node):
        raise UsageError(f"--cpus-per-node {config.cpus_per_node:g}: Slurm allocates whole CPUs: give a whole number,"
                         f" e.g. --cpus-per-node {max(1, round(config.cpus_per_node))}")
    if config.node_nprocs:
        why = ("one srun starts the same torchrun on every node" if to == "slurm"
               else "a PyTorchJob gives every replica the same nprocPerNode")
        raise UsageError(f"--nproc-per-node {config.nprocs_text}: uneven nodes cannot be exported to {to}: {why}")
    options = ExportOptions(name=name or default_job_name(config.target), **options)
    plan = make_plan(config, options.name)
    text = export_slurm(plan, options) if to == "slurm" else to_yaml(export_kubernetes(plan, options))
    notes = tuple(copy_env_notes(request.copy_env, environ))
    if to == "slurm":
        notes += slurm_notes(config, options)
    if to == "kubernetes":
        notes += (kept_nothing_note(options.trainjob),)
    if to == "kubernetes" and config.image == DEFAULT_IMAGE:
        notes += (f"the manifests name {DEFAULT_IMAGE}, this machine's node image, which holds none of your code:"
                 f" give --image an image your cluster can pull, with your code in {CONTAINER_WORKDIR}",)
    if config.collective_timeout_s is not None:
        notes += (f"--collective-timeout {config.collective_timeout_s:g} reaches the workers as DDP_TIMEOUT only"
                  " (app/ reads it; a script must pass it to init_process_group itself): the exported job starts"
                  " them without the start-up hook that gives it to init_process_group in a run",)
    if to == "kubernetes" and config.elastic and not options.trainjob:  # (a TrainJob alone: no Indexed Job)
        notes += (elastic_job_note(options.name, config.max_restarts),)
    if to == "slurm" and config.elastic:
        notes += (elastic_batch_note(config.max_restarts),)
    if options.trainjob and config.elastic:
        notes += (f"the TrainJob is not elastic: Kubeflow Trainer's TrainJob has no place for --nnodes"
                  f" {config.min_nodes}:{config.max_nodes} or --max-restarts, so it runs {config.nodes} nodes as its"
                  f" runtime ({options.runtime}) starts them; without --trainjob, the Indexed Job is the elastic one",)
    return ExportedJob(to, text, config.nodes, config.nproc_per_node, notes, tuple(sorted(config.user_env)))


def slurm_notes(config: RunConfig, options: ExportOptions) -> tuple[str, ...]:
    """What an sbatch script leaves to the site: the CPUs of each node's task where none were
    asked for, and a module the project does not hold."""
    notes: tuple[str, ...] = ()
    if not config.cpus_per_node:
        notes += ("the script asks for no CPUs: most sites then give each node's one task (torchrun, all its"
                  " workers and their DataLoader workers) a single CPU: export with --cpus-per-node N for"
                  " #SBATCH --cpus-per-task=N (and srun's own, which Slurm 22.05 and newer no longer inherits)",)
    target = config.target
    top = target[1].split(".")[0] if target[:1] == ("-m",) and len(target) > 1 else ""
    if top and not options.container_image and module_top_file(target, config.workdir) is None \
            and not (config.workdir / top).is_dir():  # (a namespace package's own file may be elsewhere)
        notes += (f"-m {target[1]}: neither {top}/ nor {top}.py is in the work directory {config.workdir}: the job"
                  " finds it only where the cluster's Python has it installed; export from your project's directory"
                  " (or give --workdir) for the script to look for it where sbatch is called",)
    return notes


def kept_nothing_note(trainjob: bool) -> str:
    """What becomes of the files the job writes in its pods, which the manifests cannot say."""
    job = "TrainJob" if trainjob else "Job"
    return (f"nothing the job writes is kept: its pods' files (a checkpoint in {CONTAINER_WORKDIR} too) go with"
            f" them when the {job} ends, a successful one too: write them to a volume of your cluster's own"
            " (a PersistentVolumeClaim mounted in the pod template) or to object storage")


def elastic_job_note(name: str, max_restarts: int) -> str:
    """What an elastic Indexed Job does with a lost pod, which the manifests cannot say."""
    if not max_restarts:
        replaced = "a lost pod is not replaced (--max-restarts 0)"
    else:
        replaced = (f"a lost pod is replaced as the same index up to --max-restarts ({max_restarts}) times (the Job's"
                    " backoffLimitPerIndex: Kubernetes 1.29 or newer), so losing pod 0 restarts the job as a whole,"
                    " each index using a retry")
    return (f"pod {name}-0's torchrun agent hosts the elastic rendezvous: losing that pod makes every other pod's"
            f" agent fail too (run --rdzv c10d --restart node shows it on the nodes); {replaced}; and the Job ends"
            " Failed when any index failed for good, even if training finished on the others")


def elastic_batch_note(max_restarts: int) -> str:
    """What an elastic sbatch job does with a lost node, and why it has no ``--no-kill``."""
    return (f"Slurm ends the job when one of its nodes fails (NODE_FAIL), and replaces none: torchrun's"
            f" --max-restarts ({max_restarts}) covers failed workers within the allocation, not lost nodes;"
            " #SBATCH --no-kill would keep the job on the other nodes, but losing the first host, which runs the"
            " batch script and hosts the rendezvous, would then leave the job running until its time limit")


def request_flags(request: RunRequest) -> set[str]:
    """The job options of ``request`` that only one target has a place for and that were given."""
    given = {"--image": request.image != DEFAULT_IMAGE, "--cpus-per-node": request.cpus_per_node is not None,
             "--memory-per-node": request.memory_per_node is not None}
    return {flag for flag, is_given in given.items() if is_given}


def refuse_gpus_a_cluster_node_lacks(request: RunRequest) -> None:
    """UsageError, in the export's own terms (``--gpus-per-node`` is what each of the cluster's
    nodes has; a run's ``--cpu`` and ``--share-gpus`` are not export's), for NCCL without GPUs
    and for more processes on a node than it has GPUs."""
    gpus = request.gpus_per_node or 0
    counts = request.nproc_per_node
    nproc = max(counts) if isinstance(counts, tuple) else counts
    if request.backend == "nccl" and not gpus:
        raise UsageError("--backend nccl needs GPUs: give --gpus-per-node, the GPUs each of the cluster's nodes has"
                         " for the job, or --backend gloo")
    if gpus and nproc is not None and nproc > gpus:
        raise UsageError(f"--nproc-per-node {nproc} is more than --gpus-per-node {gpus}: each process needs a GPU of"
                         f" its own (NCCL refuses two ranks on one): give --nproc-per-node {gpus} or fewer, or more"
                         " --gpus-per-node")
