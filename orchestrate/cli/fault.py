"""``fault RUN SPEC...``: inject faults now into a run that is already going."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import argparse_type
from orchestrate.config.fault_spec import FaultAction, parse_fault
from orchestrate.engine.runs import LIVE_STATUSES, list_runs
from orchestrate.errors import EngineError, UsageError
from orchestrate.faults.inject import inject


def add_parsers(sub: Any) -> None:
    fault = sub.add_parser("fault", help="inject faults into a run that is already going",
                           description="Kill, pause, cut off or restart nodes of a running run, now. The run id is"
                                       " printed when the run starts (and names its runs/ directory).",
                           epilog="usage example: python -m orchestrate fault 20261121-093012-1f2e3d pause:node1")
    fault.add_argument("run_id", metavar="RUN_ID", help="the run to inject into")
    fault.add_argument("specs", nargs="+", type=argparse_type(parse_fault, "--fault"), metavar="SPEC",
                       help="ACTION:NODE (kill, pause, disconnect, restart, preempt); triggers are ignored")
    fault.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    import docker.errors

    client = inv.engine()
    runs = list_runs(client, args.run_id)
    for spec in args.specs:
        nodes = [n for run in runs for n in run.nodes if n.name == spec.node and n.status in LIVE_STATUSES]
        if len(nodes) != 1:
            raise UsageError(f"no running {spec.node} in run {args.run_id} (see `python -m orchestrate ps`)")
        try:
            if spec.action is FaultAction.PREEMPT:  # SIGTERM, then SIGKILL after the run's grace
                nodes[0].container.stop(timeout=int(round(runs[0].stop_grace_s)))
            else:
                inject(client, runs[0].project, nodes[0].container, spec.action)
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot {spec.action.value} {spec.node} of run {args.run_id}:"
                              f" {exc.explanation or exc}") from None
        inv.out.write(f"injected {spec.action.value} into {spec.node} of run {args.run_id}\n")
    return 0
