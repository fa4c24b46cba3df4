"""Runs found in the engine, with what their own record says that the engine cannot: the nodes
a ``lose`` fault took for good (the engine sees a node killed, and the job went on without it),
and the exit code the launcher ended with (a job whose nodes all exited 0 still failed where a
fault asked for never fired). ``ps`` and ``stop`` name a run's state by them, as its summary did."""
from __future__ import annotations

from dataclasses import replace

from orchestrate.engine.runs import RunInfo
from orchestrate.faults.in_effect import lost_nodes
from orchestrate.outcome.events import launcher_exit_code


def runs_as_recorded(runs: list[RunInfo]) -> list[RunInfo]:
    """The runs, each ended one with its record's lost nodes and launcher's exit code (a run that
    still runs needs neither: it is running, whatever they say; one with no directory has none)."""
    return [replace(run, lost=lost_nodes(run.run_dir), launcher_exit=launcher_exit_code(run.run_dir))
            if run.state.ended and run.run_dir.name else run for run in runs]
