"""``logs RUN``: a run's rank-prefixed output from the engine, merged in time (``-f``: followed), or
from its directory once the engine no longer has it."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP, argparse_type
from orchestrate.config.options import non_negative_int
from orchestrate.config.run_config import DEFAULT_RUNS_DIR
from orchestrate.supervise.logs import print_run_logs


def add_parsers(sub: Any) -> None:
    logs = sub.add_parser("logs", help="print a run's rank-prefixed output",
                          description="The output of a run's nodes from the engine, merged in time. A run"
                                      " the engine no longer has (a foreground run tears its nodes down as it"
                                      " ends) is read from its directory in --runs-dir, node by node. A run"
                                      " that has printed nothing yet is said so on standard error.",
                          epilog="usage example: python -m orchestrate logs 20261121-093012-1f2e3d --rank 3 -f")
    logs.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps): {RUN_ID_HELP}")
    logs.add_argument("--node", default=None, metavar="NAME", help="one node only, e.g. node1")
    logs.add_argument("--rank", action="append", type=argparse_type(non_negative_int, "--rank"), default=[], metavar="N",
                      help="only the lines of this global rank (repeatable); the nodes' own lines (torchrun's) are"
                           " left out")
    logs.add_argument("-n", "--tail", type=argparse_type(non_negative_int, "--tail"), default=None, metavar="N",
                      help="only the last N lines printed so far (with -f: then the new ones; 0: the new ones only)"
                           " (default: every line)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing until the run ends: a node started again (a restart, an elastic recovery)"
                           " is followed into its new run; a run quiet for its --hang-diagnose-after is said on"
                           " standard error, once per quiet spell, with the command that shows where every rank is")
    logs.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                      help="where to look for a run the engine no longer has: as `run --runs-dir` named it"
                           f" (default: ./{DEFAULT_RUNS_DIR})")
    logs.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    given = args.runs_dir is not None
    print_run_logs(inv.engine, args.run_id, args.runs_dir if given else DEFAULT_RUNS_DIR, inv.out, node=args.node,
                   ranks=args.rank, tail=args.tail, follow_live=args.follow, runs_dir_given=given,
                   say=lambda text: print(f"[orchestrate] {text}", file=sys.stderr))
    return 0
