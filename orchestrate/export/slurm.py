"""``export --to slurm``: the sbatch script for a real cluster (pure)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from orchestrate.config.run_config import DEFAULT_MASTER_PORT, module_file
from orchestrate.export.options import ExportOptions, job_env
from orchestrate.plan.model import JobPlan
from orchestrate.slurm.script import BatchOptions, render_sbatch


def export_slurm(plan: JobPlan, options: ExportOptions) -> str:
    """The sbatch script for a real cluster. It runs where sbatch is called from, or in
    ``--chdir``: this machine's path to the project is none of the cluster's business (a clone
    there has its own). A script target, or a module target's top level found in the project, is
    looked for there first, so that a job submitted from elsewhere ends at once saying where to
    submit from, not with every node's traceback. Each node's task gets the run's
    ``--cpus-per-node`` and ``--memory-per-node`` (none given: the site's defaults), and the
    rendezvous port comes from the job's id unless ``--master-port`` names one: two jobs whose
    first host is the same node would otherwise meet on 29500."""
    cfg = plan.config
    return render_sbatch(plan, BatchOptions(
        job_name=options.name, chdir=options.chdir, env=job_env(plan), checks_the_script=True,
        module_file=module_top_file(cfg.target, cfg.workdir), cpus_per_task=whole_cpus(cfg.cpus_per_node),
        memory_mb=cfg.memory_per_node // 2**20 if cfg.memory_per_node else None,
        port_from_job_id=cfg.elastic or cfg.master_port == DEFAULT_MASTER_PORT,
        container_image=options.container_image,
        container_mounts=options.container_mounts, time_limit=options.time_limit, partition=options.partition))


def whole_cpus(cpus: Optional[float]) -> Optional[int]:
    """``--cpus-per-node`` as Slurm's whole CPUs (the request refused a fraction before)."""
    return int(cpus) if cpus else None


def module_top_file(target: tuple[str, ...], workdir: Path) -> Optional[str]:
    """The file, relative to ``workdir``, of a ``-m`` target's top-level package or module where
    the project holds it (``mytrain/__init__.py``, ``mytrain.py``; of a namespace package, a
    directory with no ``__init__.py``, the target's own file, ``mytrain/train.py``); None for a
    script, or a module the project does not hold (one installed in the cluster's Python, or the
    image's)."""
    if target[:1] != ("-m",) or len(target) < 2:
        return None
    top = target[1].split(".")[0]
    if (workdir / top / "__init__.py").is_file():
        return f"{top}/__init__.py"
    found = module_file(workdir, top)
    if found is not None:
        return found.name
    own = "/".join(target[1].split("."))
    return next((path for path in (f"{own}.py", f"{own}/__main__.py") if (workdir / path).is_file()), None)
