"""``ps`` (alias ``list``): every run the engine has, rebuilt from its containers' labels."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.engine.runs import age, list_runs
from orchestrate.text import format_table


def add_parsers(sub: Any) -> None:
    ps = sub.add_parser("ps", aliases=["list"], help="list runs: id, nodes, state, age, work directory",
                        description="Every run the engine has, rebuilt from container labels: running,"
                                    " succeeded, failed, stopped, or orphaned (its launcher is gone).")
    ps.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    runs = list_runs(inv.engine())
    if not runs:
        inv.out.write("no runs\n")
        return 0
    rows = [(r.run_id, f"{len(r.nodes)}" if len(r.nodes) == r.planned_nodes else f"{len(r.nodes)}/{r.planned_nodes}",
             r.state.value, "detached" if r.detached else "foreground", age(r.created), r.workdir) for r in runs]
    inv.out.write("\n".join(format_table(("RUN ID", "NODES", "STATE", "MODE", "AGE", "WORKDIR"), rows)) + "\n")
    return 0
