"""``report RUN``: (re)build a run's report page from its recorded files and print its path."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP
from orchestrate.config.run_config import DEFAULT_RUNS_DIR
from orchestrate.outcome.run_dirs import find_run_dir
from orchestrate.report.page import write_report


def add_parsers(sub: Any) -> None:
    report = sub.add_parser("report", help="(re)build a run's report page and print its path",
                            description="Write runs/<id>/report.html from the run's recorded files (plan, events,"
                                        " progress, outcome): a timeline of nodes and ranks, faults, recoveries,"
                                        " progress and the root cause, in one self-contained page that opens"
                                        " offline. Works for a running or an ended run.",
                            epilog="usage example: python -m orchestrate report 20261121-093012-1f2e3d")
    report.add_argument("run_id", metavar="RUN", help=f"the run: {RUN_ID_HELP}; or its directory")
    report.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, metavar="DIR",
                        help="where the runs' directories are (default: ./%(default)s)")
    report.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    path = write_report(find_run_dir(args.runs_dir, args.run_id))
    inv.out.write(f"{path.resolve()}\n")
    return 0
