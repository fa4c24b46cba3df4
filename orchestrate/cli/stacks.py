"""``stacks RUN``: where every rank of a running run is now, ranks with the same stack grouped
(odd ones out first), and the first divergence of their collectives."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import ONE_RUN_RUNS_DIR_HELP, RUN_ID_HELP
from orchestrate.config.fault_spec import STORE_TARGET
from orchestrate.errors import UsageError
from orchestrate.faults.in_effect import faults_now
from orchestrate.hangs.diagnosis import SILENT_STATES
from orchestrate.launch.recorded_runs import find_run_in
from orchestrate.supervise.rank_probe import STACKS_FILE, rank_hosts, stack_lines, store_state, where_ranks_are
from orchestrate.text import for_terminal


def add_parsers(sub: Any) -> None:
    stacks = sub.add_parser(
        "stacks", help="print where every rank of a running run is now",
        description="Every rank's Python stack, taken by the workers themselves (no privileges needed), grouped:"
                    " ranks with the same stack share a line, the odd ones out come first. Each rank's last"
                    " collectives are compared and their first divergence named. Ranks that cannot answer are said"
                    " with why (a paused node, a stopped process, and the injected fault that did it). Also written"
                    " to the run's stacks.json.",
        epilog="usage example: python -m orchestrate stacks 20261121-093012-1f2e3d")
    stacks.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps), foreground or detached: {RUN_ID_HELP}")
    stacks.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between the two looks that tell computing ranks from waiting ones"
                             " (default: %(default)s)")
    stacks.add_argument("--runs-dir", type=Path, default=None, metavar="DIR", help=ONE_RUN_RUNS_DIR_HELP)
    stacks.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    if not args.interval >= 0:
        raise UsageError(f"--interval must be 0 or more seconds, got {args.interval:g}")
    client = inv.engine()
    run = find_run_in(client, args.run_id, args.runs_dir)
    run.require_live_nodes("look at")
    run.require_run_dir("look at")  # the ranks answer in it
    hosts = rank_hosts(run)
    found = where_ranks_are(client, run.run_dir, hosts, args.interval)
    found.run_id = run.run_id
    answered = sum(1 for a in found.activities if a.state not in SILENT_STATES)
    ranks = max(len(found.activities), sum(host.nproc for host in hosts))  # elastic: some never said who they are
    inv.out.write(f"run {run.run_id}: {answered} of {ranks} ranks answered\n")
    try:
        store = run.store_container(client)  # its own rendezvous store (None: node0's agent holds it)
    except UsageError as gone:  # removed by hand: said, and the ranks' stacks all the same
        inv.out.write(f"{gone}\n")
    else:
        if store is not None:
            faults = faults_now(run.run_dir, {STORE_TARGET: store}).get(STORE_TARGET, ())
            inv.out.write(store_state(store, faults) + "\n")
    for line in stack_lines(found):
        inv.out.write(for_terminal(line, inv.out) + "\n")
    inv.out.write(f"(written to {run.run_dir / STACKS_FILE})\n")
    return 0 if answered else 1
