"""``export --to slurm``: the sbatch script for a real cluster (pure)."""
from __future__ import annotations

from orchestrate.export.options import ExportOptions, job_env
from orchestrate.plan.model import JobPlan
from orchestrate.slurm.script import BatchOptions, render_sbatch


def export_slurm(plan: JobPlan, options: ExportOptions) -> str:
    """The sbatch script for a real cluster. It runs in the work directory (``#SBATCH --chdir``,
    its absolute path, which a cluster's shared file system has as the login node does): the job
    otherwise runs where sbatch was called from, and a script's path relative to the work
    directory names nothing there."""
    return render_sbatch(plan, BatchOptions(
        job_name=options.name, chdir=str(plan.config.workdir), env=job_env(plan),
        container_image=options.container_image,
        container_mounts=options.container_mounts, time_limit=options.time_limit, partition=options.partition))
