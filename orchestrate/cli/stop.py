"""``stop RUN``: stop a run's nodes; their containers, logs and state stay."""
from __future__ import annotations

import argparse
import math
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import argparse_type
from orchestrate.config.options import non_negative_int
from orchestrate.engine.runs import find_run, stop_run


def add_parsers(sub: Any) -> None:
    stop = sub.add_parser("stop", help="stop a run's nodes; keep their logs and state",
                          description="SIGTERM every node of the run (SIGKILL after --timeout: by default the"
                                      " run's own --stop-grace); the containers, logs and state stay until down or"
                                      " prune.")
    stop.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")
    stop.add_argument("--timeout", type=argparse_type(non_negative_int, "--timeout"), default=None, metavar="SECONDS",
                      help="seconds between SIGTERM and SIGKILL (default: the run's own --stop-grace, as its"
                           " launcher would give)")
    stop.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    run = find_run(inv.engine(), args.run_id)
    stopped = stop_run(run, args.timeout if args.timeout is not None else math.ceil(run.stop_grace_s))
    if stopped:
        inv.out.write(f"stopped {', '.join(stopped)} of run {run.run_id}; logs and state kept"
                      f" (remove it with: python -m orchestrate down {run.run_id})\n")
    else:
        inv.out.write(f"run {run.run_id} has already ended ({run.state.value}); nothing to stop\n")
    return 0
