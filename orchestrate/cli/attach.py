"""``attach RUN``: follow a run to its end, from any terminal, and print its summary."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP
from orchestrate.cli.signals import install_teardown_signals, interrupt_exit_code
from orchestrate.engine.runs import REMOVED_BY
from orchestrate.launch.run import Run
from orchestrate.outcome.summary import format_summary
from orchestrate.text import for_terminal


def add_parsers(sub: Any) -> None:
    attach = sub.add_parser("attach", help="follow a run to its end and print its summary",
                            description="Re-stream a run's output from the start and end with the same summary"
                                        " as run, from any terminal, even after the launcher that started it is"
                                        " gone. For a detached run, attach also acts as its launcher (ends it on a"
                                        " failure, restarts elastic nodes, and its hang watchdog counts from the run's"
                                        " last output, as ps counts QUIET); Ctrl-C (or SIGTERM, SIGHUP) detaches and"
                                        " leaves the run going. The first attach after a detached run ended with no"
                                        " one following it records that summary, so that ps names the run as it"
                                        " did.")
    attach.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps): {RUN_ID_HELP}")
    attach.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    install_teardown_signals()  # a closed terminal (SIGHUP) or a kill (SIGTERM) detaches as Ctrl-C does
    run = Run.attach(args.run_id, out=inv.out, client=inv.client, verbose=inv.verbose)
    try:
        result = run.follow()
    except KeyboardInterrupt as exc:
        inv.out.write(f"\n[orchestrate] detached from run {run.run_id}; it keeps running (stop it with:"
                      f" python -m orchestrate stop {run.run_id})\n")
        return interrupt_exit_code(exc)
    inv.out.write(for_terminal(format_summary(result), inv.out) + "\n")
    if run.attached is not None and run.attached.detached and result.stopped_by != REMOVED_BY:  # down removes it
        inv.out.write(f"remove it with: python -m orchestrate down {run.run_id}\n")
    return result.exit_code
