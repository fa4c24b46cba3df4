"""A run's directory on the host: created before bring-up, with the plan (``run.json``)."""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from orchestrate.errors import RunDirError, UsageError
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
        RunDirError: Where the directory cannot be made or written (what :func:`check_runs_dir`
            cannot foresee: a full disk, a path the system refuses); nothing of it is left.
    """
    run_dir = plan.run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise RunDirError(f"cannot make the run's directory {run_dir}: {exc.strerror or exc}"
                          f" (--runs-dir {run_dir.parent})") from None
    with writing_run_dir(run_dir):
        (run_dir / PROGRESS_SUBDIR).mkdir()
        (run_dir / DEBUG_SUBDIR).mkdir()
        for node in plan.nodes:
            (run_dir / node.name).mkdir()
        write_triggers(run_dir / PROGRESS_SUBDIR, job_step_triggers(plan.config.faults))
        (run_dir / "run.json").write_text(json.dumps({
            "run_id": plan.run_id, "command": plan.command_line, "created": plan.created, "image": plan.image,
            "backend": plan.backend, "world_size": plan.world_size, "detached": plan.detached,
            "faults": [str(f) for f in plan.config.faults],
            # the conditions the nodes ran in (None: the bridge as it is, no limit), for report and attach
            "link": str(plan.config.link) if plan.config.link else None,
            "cpus_per_node": plan.config.cpus_per_node, "memory_per_node": plan.config.memory_per_node,
            "nodes": [{"name": n.name, "node_rank": n.node_rank, "global_ranks": list(n.global_ranks),
                       "gpus": list(n.gpu_ids), "torchrun": list(n.torchrun_argv)} for n in plan.nodes],
        }, indent=2) + "\n")
    return run_dir


@contextmanager
def writing_run_dir(run_dir: Path) -> Iterator[None]:
    """Writes into a run's new directory, before anything of the run has started: one that fails
    (a full disk, a read-only file system) is said in one line, and the directory removed, as it
    would record a run that never was.

    Raises:
        RunDirError: Saying what the system refused.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno is None:  # not the file system's (an engine connection's error is an OSError too)
            raise
        shutil.rmtree(run_dir, ignore_errors=True)
        raise RunDirError(f"cannot write the run's directory {run_dir}: {exc.strerror or exc}"
                          f" (--runs-dir {run_dir.parent})") from None
