"""``down RUN``: remove a run's containers, network and volume (its logs stay)."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.engine.runs import find_run, remove_run


def add_parsers(sub: Any) -> None:
    down = sub.add_parser("down", help="remove a run: containers, network, volume",
                          description="Remove everything the run has in the engine (its log files in the runs"
                                      " directory stay).")
    down.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")
    down.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    run = find_run(client, args.run_id)
    removed = remove_run(client, run)
    inv.out.write(f"removed run {run.run_id}: {what_was_removed(removed)}\n")
    if run.run_dir.is_dir():
        inv.out.write(f"its logs stay in {run.run_dir}\n")
    return 0


def what_was_removed(removed: list[str]) -> str:
    """The containers, network and volume removed, or why none was (another `down` or `prune`
    of the run came first)."""
    return ", ".join(removed) or "nothing left: another command removed it meanwhile"
