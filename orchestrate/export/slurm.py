"""``export --to slurm``: the sbatch script for a real cluster (pure)."""
from __future__ import annotations

from orchestrate.export.options import ExportOptions, job_env
from orchestrate.plan.model import JobPlan
from orchestrate.slurm.script import BatchOptions, render_sbatch


def export_slurm(plan: JobPlan, options: ExportOptions) -> str:
    """The sbatch script for a real cluster. It runs where sbatch is called from, or in
    ``--chdir``: this machine's path to the project is none of the cluster's business (a clone
    there has its own). A script target is looked for there first, so that a job submitted from
    elsewhere ends at once saying where to submit from, not with every node's traceback."""
    return render_sbatch(plan, BatchOptions(
        job_name=options.name, chdir=options.chdir, env=job_env(plan), checks_the_script=True,
        container_image=options.container_image,
        container_mounts=options.container_mounts, time_limit=options.time_limit, partition=options.partition))
