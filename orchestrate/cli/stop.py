"""``stop RUN``: stop a run's nodes; their containers, logs and state stay."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import ONE_RUN_RUNS_DIR_HELP, RUN_ID_HELP, argparse_type
from orchestrate.config.options import non_negative_seconds
from orchestrate.engine.owners import caller_uid, others_note
from orchestrate.launch.recorded_runs import ended_as_recorded, find_run_in, run_as_recorded
from orchestrate.launch.stop import stop_nodes, stop_timeout
from orchestrate.supervise.look_before_stop import QUIET_BEFORE_LOOK_S


def add_parsers(sub: Any) -> None:
    stop = sub.add_parser("stop", help="stop a run's nodes (SIGTERM, then SIGKILL); keep their logs",
                          description="SIGTERM every node of the run (SIGKILL after --timeout: by default the"
                                      " run's own --stop-grace); the containers, logs and state stay until down or"
                                      " prune. A Slurm run's job is stopped through Slurm (scancel --signal=TERM,"
                                      " then SIGKILL after --timeout), and its launcher tears the cluster down."
                                      " A Compose job whose workers have printed nothing for"
                                      f" {QUIET_BEFORE_LOOK_S:g} s or more is looked at first (a few seconds):"
                                      " where every rank waits is said here and kept in the run's summary, so a"
                                      " hung job stopped by hand still says where it hung; Ctrl-C cuts that look"
                                      " short.")
    stop.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps): {RUN_ID_HELP}")
    stop.add_argument("--timeout", type=argparse_type(non_negative_seconds, "--timeout"), default=None,
                      metavar="SECONDS", help="seconds between SIGTERM and SIGKILL, a fraction rounded up to a whole"
                                              " second as the engine's stop takes them (default: the run's own"
                                              " --stop-grace, as its launcher would give)")
    stop.add_argument("--runs-dir", type=Path, default=None, metavar="DIR", help=ONE_RUN_RUNS_DIR_HELP)
    stop.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    run = find_run_in(client, args.run_id, args.runs_dir)
    named = run.run_id + others_note(run, caller_uid())  # (by its id: another user's run is stopped as named)
    ended = ended_as_recorded(run)  # before the stop, which would make it look stopped
    stopped = stop_nodes(client, run, stop_timeout(run, args.timeout), say=inv.say)
    if stopped and ended is not None:  # its nodes outlived its job: a kept Slurm run's cluster
        inv.out.write(f"run {named} had already ended ({ended.value}); stopped {', '.join(stopped)}, which"
                      f" outlived its job; logs and state kept (remove it with: python -m orchestrate down"
                      f" {run.run_id})\n")
    elif stopped and run.launcher_alive and not run.detached:  # its launcher reports the end and tears down
        inv.out.write(f"stopped {', '.join(stopped)} of run {named}; its launcher says how it ended"
                      f" (logs stay in {run.run_dir})\n")
    elif stopped:
        inv.out.write(f"stopped {', '.join(stopped)} of run {named}; logs and state kept"
                      f" (remove it with: python -m orchestrate down {run.run_id})\n")
    else:
        ended = run_as_recorded(run).state.value
        inv.out.write(f"run {named} has already ended ({ended}); nothing to stop\n")
    return 0
