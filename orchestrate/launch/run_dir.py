"""A run's directory on the host: created before bring-up, with the plan (``run.json``)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrate.errors import UsageError
from orchestrate.faults.scheduler import job_step_triggers, write_triggers
from orchestrate.plan.layout import DEBUG_SUBDIR, PROGRESS_SUBDIR
from orchestrate.plan.model import JobPlan


def runs_dir_problem(runs_dir: Path) -> str:
    """Why no run's directory can be made in ``runs_dir`` ("" where one can, as far as can be told
    without making it): the nearest part of it that exists is a file, or not writable."""
    existing = runs_dir
    while not os.path.exists(existing) and existing != existing.parent:  # (False too where it may not be looked at)
        existing = existing.parent
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return ""


def check_runs_dir(runs_dir: Path) -> None:
    """Refuse a ``--runs-dir`` no run's directory can be made in, in one line.

    Raises:
        UsageError: Saying why.
    """
    problem = runs_dir_problem(runs_dir)
    if problem:
        raise UsageError(f"--runs-dir {runs_dir}: no run's directory can be made there: {problem}")


def prepare_run_dir(plan: JobPlan) -> Path:
    """Create the run's directory: Compose file, plan, fault triggers, progress directory.

    Raises:
        UsageError: Where the directory cannot be made (what :func:`check_runs_dir` cannot foresee).
    """
    run_dir = plan.run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise UsageError(f"cannot make the run's directory {run_dir}: {exc.strerror or exc}"
                         f" (--runs-dir {run_dir.parent})") from None
    (run_dir / PROGRESS_SUBDIR).mkdir()
    (run_dir / DEBUG_SUBDIR).mkdir()
    for node in plan.nodes:
        (run_dir / node.name).mkdir()
    write_triggers(run_dir / PROGRESS_SUBDIR, job_step_triggers(plan.config.faults))
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": plan.run_id, "command": plan.command_line, "created": plan.created, "image": plan.image,
        "backend": plan.backend, "world_size": plan.world_size, "detached": plan.detached,
        "faults": [str(f) for f in plan.config.faults],
        "nodes": [{"name": n.name, "node_rank": n.node_rank, "global_ranks": list(n.global_ranks),
                   "gpus": list(n.gpu_ids), "torchrun": list(n.torchrun_argv)} for n in plan.nodes],
    }, indent=2) + "\n")
    return run_dir
