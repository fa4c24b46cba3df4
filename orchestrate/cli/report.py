"""``report RUN``: (re)build a run's report page from its recorded files and print its path."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP
from orchestrate.config.run_config import DEFAULT_RUNS_DIR
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import OrchestrateError
from orchestrate.launch.recorded_runs import run_dir_named
from orchestrate.outcome.record import OUTCOME_FILE
from orchestrate.report.model import NOT_ASKED
from orchestrate.report.page import write_report

log = logging.getLogger(__name__)


def add_parsers(sub: Any) -> None:
    report = sub.add_parser("report", help="(re)build a run's report page and print its path",
                            description="Write runs/<id>/report.html from the run's recorded files (plan, events,"
                                        " progress, outcome): a timeline of nodes and ranks, faults, recoveries,"
                                        " progress and the root cause, in one self-contained page that opens"
                                        " offline. Works for a running or an ended run: for one whose outcome is not"
                                        " recorded, the engine is asked how it stands (an ended run nobody"
                                        " followed has its lines kept first, as down keeps them). A run still in the"
                                        " engine is found where it keeps its directory (wherever run --runs-dir put"
                                        " it); one no longer there, in --runs-dir.",
                            epilog="usage example: python -m orchestrate report 20261121-093012-1f2e3d")
    report.add_argument("run_id", metavar="RUN", help=f"the run: {RUN_ID_HELP}; or its directory")
    report.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                        help="where to look for a run the engine no longer has: as `run --runs-dir` named it"
                             f" (default: ./{DEFAULT_RUNS_DIR})")
    report.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    given = args.runs_dir is not None
    run_dir = run_dir_named(inv.engine, args.run_id, args.runs_dir if given else DEFAULT_RUNS_DIR, runs_dir_given=given)
    path = write_report(run_dir, engine_state=asked_of_the_engine(inv, run_dir))
    inv.out.write(f"{path.resolve()}\n")
    return 0


def asked_of_the_engine(inv: Invocation, run_dir: Path) -> str:
    """For a run whose outcome is not recorded, what the engine says of it (see
    :func:`~orchestrate.launch.unfollowed.ending_for_report`); "not asked" where the engine cannot
    be reached or fails meanwhile: the page then says it shows what the files say. What it does
    meanwhile is said on standard error (standard output is the page's path alone)."""
    from orchestrate.launch.unfollowed import ending_for_report

    if (run_dir / OUTCOME_FILE).is_file():
        return ""
    try:
        return ending_for_report(inv.engine(), run_dir, lambda line: print(line, file=sys.stderr, flush=True))
    except (OSError, OrchestrateError, *engine_errors()) as exc:
        log.debug("report %s without the engine: %s", run_dir.name, describe(exc))
        return NOT_ASKED
