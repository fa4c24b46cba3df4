"""``fault RUN SPEC...``: inject faults now into a run that is already going; a fault given an
end (``slow:node1,cpus=0.2@t=0..30``) is held that long, then undone (Ctrl-C undoes it at once)."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP, argparse_type
from orchestrate.config.fault_spec import parse_fault
from orchestrate.engine.runs import find_run
from orchestrate.faults.live import LiveFaults
from orchestrate.interrupts import uninterrupted


def add_parsers(sub: Any) -> None:
    fault = sub.add_parser(
        "fault", help="inject faults into a run that is already going",
        description="Do faults to nodes or workers of a running run, now: kill, lose (for good), pause, disconnect,"
                    " restart or preempt a node, slow it (cpus=F), degrade its link (rate=R) or drop its incoming"
                    " packets (lossy, p=P%), split the nodes in two (partition:node0|node1; these three need the"
                    " nodes' NET_ADMIN, which a run started with --link or such a --fault has),"
                    " kill or hang one rank, tear a node's next write (torn-write: waits for it, then kills the"
                    " node) or fill its disk; kill, pause or disconnect the run's own rendezvous store (kill:store,"
                    " in a run with --rdzv-store container). A fault is injected now, so it takes no start; one"
                    " given an end (@t=0..SECONDS) is held that long, then undone; a pause, disconnect, slow,"
                    " degrade, lossy, partition, hang-rank or disk-full without one holds for the rest of the run: no"
                    " command of this tool undoes it, though a restart of its node (restart:NODE) ends a pause, a"
                    " hang-rank, a degrade or a lossy link (its workers start anew; a slow, a disconnect and a"
                    " disk-full outlast it). The run id is printed when the run starts (and names its runs/"
                    " directory).",
        epilog="usage examples: python -m orchestrate fault 20261121-093012-1f2e3d pause:node1;"
               " python -m orchestrate fault 20261121-093012 slow:node1,cpus=0.2@t=0..30")
    fault.add_argument("run_id", metavar="RUN_ID", help=f"the run to inject into (see ps): {RUN_ID_HELP}")
    fault.add_argument("specs", nargs="+", type=argparse_type(parse_fault, "--fault"), metavar="SPEC",
                       help="KIND:TARGET[,KEY=VALUE][@t=0..SECONDS] as --fault takes it (see `run --help`), with no"
                            " start: an end is held from now")
    fault.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    run = find_run(client, args.run_id)
    run.require_live_nodes("inject a fault into")
    faults = LiveFaults(client, run.run_id, run.project, {n.name: n.container for n in run.live_nodes},
                        stop_grace_s=run.stop_grace_s, cpus_per_node=run.cpus_per_node, link=run.link,
                        run_dir=run.run_dir, min_nodes=run.min_nodes, max_restarts=run.max_restarts,
                        store=run.store_container(client) if any(s.on_store for s in args.specs) else None,
                        say=inv.say)
    faults.check(args.specs)
    try:
        for spec in args.specs:
            faults.inject(spec)
        faults.hold()
    finally:  # an interrupt, or an error: what is still held is undone, wholly
        uninterrupted(faults.end_all)
    return 0
