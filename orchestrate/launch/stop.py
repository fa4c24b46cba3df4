"""Stopping a run from another terminal (``stop RUN``, and ``down RUN`` of a live run), whichever
its scheduler: a Compose run's nodes get SIGTERM, then SIGKILL after the grace, all at once; a
Slurm run's job is stopped through Slurm. The run's directory says who asked, so the launcher that
follows the run says STOPPED by that command, not a failure."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from orchestrate.engine.runs import STOPPED_BY, RunInfo, stop_run
from orchestrate.slurm.stop import stop_slurm_run


def stop_timeout(run: RunInfo, asked_s: Optional[int]) -> int:
    """Seconds between SIGTERM and SIGKILL: what was asked, else the run's own stop grace (what
    its launcher would give)."""
    return asked_s if asked_s is not None else math.ceil(run.stop_grace_s)


def stop_nodes(client: Any, run: RunInfo, timeout_s: int, say: Callable[[str], None],
               by: str = STOPPED_BY) -> list[str]:
    """Stop the run's live nodes (its Slurm job, through Slurm); return the nodes that were live.

    Raises:
        EngineError: When the engine or Slurm refused.
    """
    if run.scheduler == "slurm":  # its job is stopped through Slurm, as on a cluster
        return stop_slurm_run(client, run, timeout_s, say=say, by=by)
    return stop_run(run, timeout_s, by)
