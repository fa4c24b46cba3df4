"""A run's directory on the host: created before bring-up, with the plan (``run.json``)."""
from __future__ import annotations

import json
from pathlib import Path

from orchestrate.faults.scheduler import job_step_triggers, write_triggers
from orchestrate.plan.layout import DEBUG_SUBDIR, PROGRESS_SUBDIR
from orchestrate.plan.model import JobPlan


def prepare_run_dir(plan: JobPlan) -> Path:
    """Create the run's directory: Compose file, plan, fault triggers, progress directory."""
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=False)
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
