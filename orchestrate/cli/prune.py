"""``prune``: remove every run that ended or whose launcher is gone, and say what went."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.engine.runs import list_runs, remove_run


def add_parsers(sub: Any) -> None:
    prune = sub.add_parser("prune", help="remove every run that has ended or lost its launcher",
                           description="Remove the runs that succeeded, failed, were stopped, or are orphaned"
                                       " (their foreground launcher is gone), and say what was removed.")
    prune.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    pruned = 0
    for run in list_runs(client):
        if run.state.ended:
            removed = remove_run(client, run)
            inv.out.write(f"removed run {run.run_id} ({run.state.value}): {', '.join(removed)}\n")
            pruned += 1
    inv.out.write(f"pruned {pruned} run(s)\n" if pruned else "nothing to prune: every run is still running\n")
    return 0
