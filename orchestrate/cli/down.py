"""``down RUN``: remove a run's containers, network and volume (its logs stay); a live run's nodes
are stopped first, as ``stop`` stops them, so that its job may save and its launcher says why."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import ONE_RUN_RUNS_DIR_HELP, RUN_ID_HELP, argparse_type
from orchestrate.config.options import non_negative_seconds
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.owners import caller_uid, others_note
from orchestrate.engine.remains import list_remains, remains_named, remove_left
from orchestrate.engine.runs import REMOVED_BY, RunInfo, find_run, remove_run
from orchestrate.errors import EngineError, NoSuchRunError
from orchestrate.launch.recorded_runs import find_run_in, in_runs_dir
from orchestrate.launch.stop import stop_nodes, stop_timeout, wait_for_launchers_teardown
from orchestrate.launch.unfollowed import record_before_removal
from orchestrate.supervise.look_before_stop import QUIET_BEFORE_LOOK_S


def add_parsers(sub: Any) -> None:
    down = sub.add_parser("down", help="remove a run: containers, network, volume",
                          description="Remove everything the run has in the engine (its log files in the runs"
                                      " directory stay). A run that still runs is stopped first, as stop does"
                                      " (SIGTERM, then SIGKILL after --timeout), a Compose job quiet for"
                                      f" {QUIET_BEFORE_LOOK_S:g} s or more looked at first: where every rank waits"
                                      " is said here and kept in the run's summary; its launcher then says it was"
                                      " stopped by down. A run that left only its network and volume (its launcher"
                                      " was killed before Compose made its nodes: ps names it)"
                                      " has those removed.")
    down.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps): {RUN_ID_HELP}")
    down.add_argument("--timeout", type=argparse_type(non_negative_seconds, "--timeout"), default=None,
                      metavar="SECONDS", help="for a run that still runs: seconds between SIGTERM and SIGKILL, a"
                                              " fraction rounded up to a whole second as the engine's stop takes them"
                                              " (default: the run's own --stop-grace, as its launcher would give)")
    down.add_argument("--runs-dir", type=Path, default=None, metavar="DIR", help=ONE_RUN_RUNS_DIR_HELP)
    down.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    try:
        run = find_run_in(client, args.run_id, args.runs_dir)
    except NoSuchRunError:
        if not down_remains(args, inv, client):
            raise
        return 0
    named = run.run_id + others_note(run, caller_uid())  # (by its id: another user's run is removed as named)
    torn_down = False  # by its own launcher, after the stop below
    if run.live_nodes:
        timeout = stop_timeout(run, args.timeout)
        stopped = stop_nodes(client, run, timeout, say=inv.say, by=REMOVED_BY)
        if stopped:
            inv.out.write(f"stopped {', '.join(stopped)} of run {named} first (SIGTERM, SIGKILL after"
                          f" {timeout} s)\n")
        if stopped and run.launcher_alive and not run.detached and not run.kept:
            inv.say("its launcher says how it ended and tears it down")
            why_not = wait_for_launchers_teardown(client, run)
            if why_not:
                inv.out.write(f"{why_not}: removing it here\n")
            torn_down = not why_not
    if not torn_down:
        kept_first(inv, client, run)
    removed = remove_run(client, run)
    if removed or not torn_down:
        inv.out.write(f"removed run {named}: {what_was_removed(removed)}\n")
    else:
        inv.out.write(f"run {run.run_id} is gone: its launcher tore it down\n")
    if run.run_dir.is_dir():
        inv.out.write(f"its logs stay in {run.run_dir}\n")
    return 0


def down_remains(args: argparse.Namespace, inv: Invocation, client: Any) -> bool:
    """Remove the network and volume that the run ``args.run_id`` names left with no container, and
    say so; False where it left none."""
    remains = remains_named(args.run_id, [r for r in list_remains(client) if in_runs_dir(r, args.runs_dir)])
    if remains is None:
        return False
    removed = remove_left(client, remains)
    inv.out.write(f"removed what run {remains.run_id}{others_note(remains, caller_uid())} left with no container:"
                  f" {what_was_removed(removed)}\n")
    return True


def kept_first(inv: Invocation, client: Any, run: RunInfo) -> None:
    """Before the run goes: a run nobody followed to its end gets its node logs (and a detached
    one its summary and report page) written into its directory from the engine, and says so;
    where that fails, it says why, and the run is removed all the same."""
    say = lambda text: inv.out.write(text + "\n")  # noqa: E731
    try:
        now = find_run(client, run.run_id)  # (its nodes as they are after the stop above)
        record_before_removal(client, now, say)
    except NoSuchRunError:
        return  # another command removed it meanwhile
    except (OSError, EngineError, *engine_errors()) as exc:
        say(f"run {run.run_id}: could not keep its lines from the engine ({describe(exc)}); removing it all the same")


def what_was_removed(removed: list[str]) -> str:
    """The containers, network and volume removed, or why none was (another `down` or `prune`
    of the run came first)."""
    return ", ".join(removed) or "nothing left: another command removed it meanwhile"
