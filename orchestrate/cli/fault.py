"""``fault RUN SPEC...``: inject faults now into a run that is already going; a fault given an
end (``slow:node1,cpus=0.2@t=0..30``) is held that long, then undone (Ctrl-C undoes it at once)."""
from __future__ import annotations

import argparse
import time
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import argparse_type
from orchestrate.config.fault_spec import FaultAction, FaultSpec, parse_fault
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.runs import LIVE_STATUSES, RunInfo, find_run
from orchestrate.errors import EngineError, UsageError
from orchestrate.faults.inject import do_fault, end_fault
from orchestrate.interrupts import uninterrupted


def add_parsers(sub: Any) -> None:
    fault = sub.add_parser(
        "fault", help="inject faults into a run that is already going",
        description="Do faults to nodes or workers of a running run, now: kill, pause, disconnect, restart or"
                    " preempt a node, slow it (cpus=F) or degrade its link (rate=R), kill or hang one rank. A"
                    " fault given an end (@t=START..END) is held for END-START seconds, then undone. The run id"
                    " is printed when the run starts (and names its runs/ directory).",
        epilog="usage examples: python -m orchestrate fault 20261121-093012-1f2e3d pause:node1;"
               " python -m orchestrate fault 20261121-093012 slow:node1,cpus=0.2@t=0..30")
    fault.add_argument("run_id", metavar="RUN_ID", help="the run to inject into (its id, as `ps` lists it)")
    fault.add_argument("specs", nargs="+", type=argparse_type(parse_fault, "--fault"), metavar="SPEC",
                       help="KIND:TARGET[,KEY=VALUE] as --fault takes it (see `run --help`); a start is ignored, an"
                            " end is held from now")
    fault.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    for spec in args.specs:
        if spec.until_step is not None:
            raise UsageError(f"{spec}: an end at a step needs the run's launcher (give it to run --fault); here"
                             " give an end in seconds, e.g. @t=0..30")
    client = inv.engine()
    run = find_run(client, args.run_id)
    live = {n.name: n.container for n in run.nodes if n.status in LIVE_STATUSES}
    for spec in args.specs:  # every target first: nothing is done when one cannot be
        if not spec.action.on_rank and spec.node not in live:
            raise UsageError(f"no running {spec.node} in run {run.run_id} (see `python -m orchestrate ps`)")
    held: list[tuple[FaultSpec, str]] = []
    try:
        for spec in args.specs:
            node = inject_now(client, run, live, spec)
            inv.out.write(f"injected {spec.action.value} into {node if spec.rank is None else f'rank {spec.rank} on {node}'}"
                          f" of run {run.run_id}\n")
            inv.out.flush()
            if spec.has_end:
                held.append((spec, node))
        hold(inv, client, run, held)
    finally:  # an interrupt, or an error: what is still held is undone, wholly
        for spec, node in held:
            uninterrupted(end_one, inv, client, run, spec, node)
    return 0


def inject_now(client: Any, run: RunInfo, live: dict[str, Any], spec: FaultSpec) -> str:
    """Do one fault now; return the node it landed on."""
    try:
        if spec.action is FaultAction.PREEMPT:  # SIGTERM, then SIGKILL after the run's grace
            live[spec.node].stop(timeout=int(round(run.stop_grace_s)))
            return spec.node
        return do_fault(client, run.project, live, spec)
    except engine_errors() as exc:
        raise EngineError(f"cannot {spec.action.value} {spec.target} of run {run.run_id}: {describe(exc)}") from None


def hold(inv: Invocation, client: Any, run: RunInfo, held: list[tuple[FaultSpec, str]]) -> None:
    """Keep the faults with an end for their duration (from now), then undo each and take it
    off ``held``; what an interrupt leaves in ``held`` is the caller's to undo."""
    if not held:
        return
    started = time.monotonic()
    held.sort(key=lambda item: duration_s(item[0]))
    inv.out.write(f"holding {', '.join(str(s) for s, _ in held)} for up to {duration_s(held[-1][0]):g} s;"
                  " Ctrl-C ends them now\n")
    inv.out.flush()
    while held:
        spec, node = held[0]
        time.sleep(max(0.0, started + duration_s(spec) - time.monotonic()))
        end_one(inv, client, run, spec, node)
        held.pop(0)


def duration_s(spec: FaultSpec) -> float:
    """How long a fault with an end in seconds lasts."""
    assert spec.until_seconds is not None
    return spec.until_seconds - (spec.at_seconds or 0.0)


def end_one(inv: Invocation, client: Any, run: RunInfo, spec: FaultSpec, node: str) -> None:
    container = next(n.container for n in run.nodes if n.name == node)
    try:
        end_fault(client, run.project, container, spec, node=node, cpus_per_node=run.cpus_per_node, link=run.link)
    except (*engine_errors(), EngineError) as exc:
        inv.out.write(f"could not end {spec} on {node}: {describe(exc)}\n")
        return
    inv.out.write(f"ended {spec} on {node} of run {run.run_id}\n")
    inv.out.flush()
