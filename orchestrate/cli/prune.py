"""``prune``: remove the caller's runs that ended or whose launcher is gone (every user's with
``--all-users``), and say what went and what it left."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from orchestrate.cli.down import kept_first, what_was_removed
from orchestrate.cli.invocation import Invocation
from orchestrate.engine.owners import RunOwner, caller_uid, run_owner
from orchestrate.engine.remains import list_remains, list_wheel_servers_left, remove_left
from orchestrate.engine.runs import list_runs, remove_run
from orchestrate.launch.recorded_runs import check_runs_dir_named, in_runs_dir, runs_as_recorded


def add_parsers(sub: Any) -> None:
    prune = sub.add_parser("prune", help="remove your runs that have ended or lost their launcher",
                           description="Remove the runs that succeeded, failed, were stopped, or are orphaned"
                                       " (their foreground launcher is gone), and say what was removed."
                                       " Only the runs you launched, unless --all-users; every such run of yours in"
                                       " the engine, unless --runs-dir names whose. The ended runs of other users"
                                       " it leaves are counted. A run's network and volume left with no container"
                                       " (its launcher was killed before Compose made its nodes)"
                                       " go too, by the same rules, and so does the wheel server of an image build"
                                       " that was killed (not with --runs-dir: a build is no project's).",
                           epilog="usage example: python -m orchestrate prune --runs-dir runs")
    prune.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                       help="remove only the runs whose directory is in DIR (as `run --runs-dir` named it),"
                            " leaving other projects' and other users' runs alone; refused where DIR is no directory"
                            " and no run in the engine names it (default: every directory)")
    prune.add_argument("--all-users", action="store_true",
                       help="remove other users' ended runs too (default: only the runs you launched; a run started"
                            " before runs were labelled with their owner is yours where its run directory is yours,"
                            " else another user's, or of an unknown user where you cannot look at it)")
    prune.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    client = inv.engine()
    runs = runs_as_recorded(list_runs(client))
    check_runs_dir_named(args.runs_dir, runs)
    caller = caller_uid()
    pruned, running, others_left, unknown_left = 0, 0, 0, 0
    for run in runs:
        if not in_runs_dir(run, args.runs_dir):
            continue
        owner = run_owner(run)
        if left_to_its_owner(owner, caller, args.all_users):
            others_left += run.state.ended
            unknown_left += run.state.ended and owner.uid is None
            continue
        if not run.state.ended:
            running += 1
            continue
        kept_first(inv, client, run)
        removed = remove_run(client, run)
        whose = "" if owner.launched_by(caller) else f", run of {owner.described}"
        inv.out.write(f"removed run {run.run_id} ({run.state.value}{whose}): {what_was_removed(removed)}\n")
        pruned += 1
    for remains in list_remains(client):
        if not in_runs_dir(remains, args.runs_dir):
            continue
        owner = run_owner(remains)
        if left_to_its_owner(owner, caller, args.all_users):
            others_left += 1
            unknown_left += owner.uid is None
            continue
        whose = "" if owner.launched_by(caller) else f" (run of {owner.described})"
        removed = remove_left(client, remains)
        inv.out.write(f"removed what run {remains.run_id}{whose} left with no container: {what_was_removed(removed)}\n")
        pruned += 1
    servers_left = 0 if args.runs_dir else prune_wheel_servers(inv, client, caller, args.all_users)
    where = f" in {args.runs_dir}" if args.runs_dir else " in the engine"
    if args.runs_dir and not args.runs_dir.is_dir():
        where += " (not a directory)" if args.runs_dir.exists() else " (no such directory here)"
    left = f" ({running} still running)" if running else ""
    of_whom = "" if args.all_users else " of yours"
    # (not that one has not ended, where none is)
    none = f"no run{of_whom} there has ended" if running else f"no run{of_whom} there"
    inv.out.write(f"pruned {pruned} run(s){where}{left}\n" if pruned else f"nothing to prune{where}: {none}{left}\n")
    if others_left:
        unknown = f" ({unknown_left} of an unknown user)" if unknown_left else ""
        inv.out.write(f"left {others_left} ended run(s) of other users{unknown}: --all-users removes them\n")
    if servers_left:
        inv.out.write(f"left {servers_left} wheel server(s) of other users' killed image builds: --all-users removes"
                      " them\n")
    return 0


def prune_wheel_servers(inv: Invocation, client: Any, caller: Optional[int], all_users: bool) -> int:
    """Remove the wheel servers that killed image builds left running (the caller's, every user's
    with --all-users), saying each; return how many of other users' it left."""
    others = 0
    for server in list_wheel_servers_left(client):
        owner = run_owner(server)
        if left_to_its_owner(owner, caller, all_users):
            others += 1
            continue
        whose = "" if owner.launched_by(caller) else f" (of {owner.described})"
        removed = remove_left(client, server)
        inv.out.write(f"removed the wheel server of an image build that was killed{whose}:"
                      f" {what_was_removed(removed)}\n")
    return others


def left_to_its_owner(owner: RunOwner, caller: Optional[int], all_users: bool) -> bool:
    """Whether prune leaves what ``owner`` launched: another user's (or an unknown one's), unless
    --all-users."""
    return not all_users and not owner.launched_by(caller)
