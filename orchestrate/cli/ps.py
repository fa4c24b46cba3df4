"""``ps`` (alias ``list``): every run the engine has, rebuilt from its containers' labels."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from orchestrate.cli.invocation import Invocation
from orchestrate.engine.client import engine_now
from orchestrate.engine.owners import caller_uid, others_note, run_owner
from orchestrate.engine.remains import list_remains
from orchestrate.engine.runs import RunInfo, RunState, age, list_runs
from orchestrate.launch.recorded_runs import check_runs_dir_named, in_runs_dir, runs_as_recorded
from orchestrate.supervise.worker_quiet import quiet_note, seconds_quiet
from orchestrate.text import format_table, short_duration


def add_parsers(sub: Any) -> None:
    ps = sub.add_parser("ps", aliases=["list"], help="list runs: id, nodes, state, age, quiet time, work directory",
                        description="Every run the engine has, every user's, rebuilt from container labels: running,"
                                    " succeeded, failed, stopped, or orphaned (its launcher is gone). An ended run's"
                                    " state is its launcher's word where it said one, and a node a lose fault"
                                    " took for good does not count: the job went on without it. QUIET: how long"
                                    " no worker of a running run has printed (torch's own warnings do not count;"
                                    " '-' for a run not running, or a Slurm job); a run quiet for its"
                                    " --hang-diagnose-after or longer is named below the list, with the command that"
                                    " shows where every rank is. OWNER, the user who launched the run, is shown"
                                    " where a listed run is not yours (another user's, or one of an unknown user:"
                                    " started before runs were labelled with their owner, in a directory you"
                                    " cannot look at). A run's network and volume left with no container (its"
                                    " launcher was killed before Compose made its nodes) are"
                                    " named below the list, with the command that removes them.",
                        epilog="usage example: python -m orchestrate ps -q --mine --state failed | xargs -r -n1"
                               " python -m orchestrate down")
    ps.add_argument("-q", "--quiet", action="store_true",
                    help="print the run ids alone, one per line, and nothing when there is none (for scripts)")
    # docker ps -a's habit: ps already lists ended and stopped runs, so -a asks for no more
    ps.add_argument("-a", "--all", action="store_true",
                    help="every run, ended and stopped ones too, as without it (docker ps -a's habit; use --state to"
                         " narrow the list)")
    ps.add_argument("--mine", action="store_true",
                    help="only the runs you launched (default: every user's; with -q too)")
    ps.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                    help="only the runs whose directory is in DIR (as `run --runs-dir` named it): one project's;"
                         " refused where DIR is no directory and no run in the engine names it (default: every run)")
    ps.add_argument("--state", action="append", choices=[s.value for s in RunState], metavar="STATE",
                    help="only the runs in this state (repeatable): "
                         + ", ".join(s.value for s in RunState) + " (default: every run)")
    ps.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    runs = runs_as_recorded(list_runs(inv.engine()))
    check_runs_dir_named(args.runs_dir, runs)
    runs = [r for r in runs if (not args.state or r.state.value in args.state) and in_runs_dir(r, args.runs_dir)]
    caller = caller_uid()
    owners = {r.run_id: run_owner(r) for r in runs}
    if args.mine:
        runs = [r for r in runs if owners[r.run_id].launched_by(caller)]
    if args.quiet:
        inv.out.write("".join(f"{r.run_id}\n" for r in runs))
        return 0
    if not runs:
        states = f"{' or '.join(args.state)} " if args.state else ""
        where = f" in {args.runs_dir}" if args.runs_dir else ""
        inv.out.write(f"no {states}runs{' of yours' if args.mine else ''}{where}\n")
        write_remains(args, inv, caller)
        return 0
    running = [r for r in runs if r.state is RunState.RUNNING]
    now = engine_now(inv.engine()) if running else 0.0  # the clock of the engine's log stamps
    quiet = {r.run_id: quiet_for(r, now) for r in running}
    # OWNER only where it tells something: on an engine of one user's runs it would repeat their name
    with_owner = not all(owners[r.run_id].launched_by(caller) for r in runs)
    rows = [(r.run_id, f"{len(r.nodes)}" if len(r.nodes) == r.planned_nodes else f"{len(r.nodes)}/{r.planned_nodes}",
             r.state.value, "detached" if r.detached else "foreground", age(r.created),
             "-" if quiet.get(r.run_id) is None else short_duration(quiet[r.run_id]),
             *((owners[r.run_id].shown,) if with_owner else ()), r.workdir) for r in runs]
    header = ("RUN ID", "NODES", "STATE", "MODE", "AGE", "QUIET", *(("OWNER",) if with_owner else ()), "WORKDIR")
    inv.out.write("\n".join(format_table(header, rows)) + "\n")
    for r in running:
        if note := quiet_note(r, quiet[r.run_id]):
            inv.out.write(note + "\n")
    write_remains(args, inv, caller)
    return 0


def write_remains(args: argparse.Namespace, inv: Invocation, caller: Optional[int]) -> None:
    """Under the list: each run's network and volume left with no container, among those the
    options keep (they have no state: none where --state is given), and what removes them."""
    if args.state:
        return
    for remains in list_remains(inv.engine()):
        mine = run_owner(remains).launched_by(caller)
        if not in_runs_dir(remains, args.runs_dir) or (args.mine and not mine):
            continue
        prune = "prune" if mine else "prune --all-users"
        inv.out.write(f"run {remains.run_id}{others_note(remains, caller)} left {remains.described} with no container"
                      f" (its launcher ended before Compose made its nodes): python -m orchestrate down"
                      f" {remains.run_id}, or {prune}, removes {remains.them}\n")


def quiet_for(run: RunInfo, now: float) -> Optional[float]:
    """How long no worker of a running Compose ``run`` has printed, by the engine's clock ``now``;
    None for a Slurm job (its workers' lines are Slurm's), or where the engine cannot say (a run
    that went while being listed)."""
    return seconds_quiet(run, now) if run.scheduler == "compose" else None
