"""``debug RUN [RANK]``: this terminal becomes the pdb of a rank that stopped in its debugger (a
script's ``breakpoint()``, ``pdb.set_trace()`` or ``torch.distributed.breakpoint()``, or with
``run --pdb`` an error it did not catch)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import RUN_ID_HELP
from orchestrate.debugger.session import connect, socket_path, talk
from orchestrate.debugger.states import choose
from orchestrate.engine.runs import find_run, node_plans
from orchestrate.errors import OrchestrateError, UsageError
from orchestrate.launch.recorded_runs import run_as_recorded
from orchestrate.node.remote_debugger import POST_MORTEM_CALL, USER_POST_MORTEM_CALL
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.supervise.progress import DebuggerWatch

# How often --wait looks again for the rank.
WAIT_POLL_S = 0.25
# How a session ends, said as it starts: at a breakpoint, and in a post-mortem (run --pdb's, or the
# script's own pdb.post_mortem()).
AT_A_BREAKPOINT = "pdb's commands work here; `continue` or Ctrl-D lets the rank go on, `quit` ends its script"
IN_A_POST_MORTEM = ("pdb's commands look at the frames the error left (`up`, `down`, `p`); `continue`, `quit` or"
                    " Ctrl-D {then}")
ENDINGS = {POST_MORTEM_CALL: IN_A_POST_MORTEM.format(then="let the rank end with its error"),
           USER_POST_MORTEM_CALL: IN_A_POST_MORTEM.format(then="let its script go on")}


def add_parsers(sub: Any) -> None:
    debug = sub.add_parser(
        "debug", help="debug a rank stopped at breakpoint() from this terminal (pdb)",
        description="A rank whose script calls breakpoint(), pdb.set_trace(), torch.distributed.breakpoint() or"
                    " pdb.post_mortem()"
                    " stops there and waits for a terminal (the run says so, with this command). This terminal"
                    " then is its pdb: all its commands work but interact (run a statement with ! instead)."
                    " `continue` with no breakpoint left, or Ctrl-D, lets the rank go on and ends the session; `quit` ends the"
                    " rank's script (bdb.BdbQuit), as pdb does. The other ranks wait for it in their next"
                    " collective, up to its timeout. One terminal at a time per rank. With run --pdb, a rank"
                    " whose script raised an error it did not catch waits here too, in pdb's post-mortem of it.",
        epilog="usage example: python -m orchestrate debug 20261121-093012-1f2e3d 1")
    debug.add_argument("run_id", metavar="RUN_ID", help=f"the run (see ps), foreground or detached: {RUN_ID_HELP}")
    debug.add_argument("rank", metavar="RANK", nargs="?", type=int,
                       help="the global rank to debug (default: the one rank in its debugger)")
    debug.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                       help="wait up to this long for the rank to stop in its debugger (default: %(default)s,"
                            " it must be there now)")
    debug.set_defaults(handler=command)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    if not args.wait >= 0:
        raise UsageError(f"--wait must be 0 or more seconds, got {args.wait:g}")
    if args.rank is not None and args.rank < 0:
        raise UsageError(f"RANK must be 0 or more, got {args.rank}")
    client = inv.engine()
    run = find_run(client, args.run_id)
    run.require_live_nodes("debug")
    run.require_run_dir("debug")  # a stopped rank's socket is in it
    world_size = sum(len(node.global_ranks) for node in node_plans(run))  # 0: an elastic run's ranks are its rounds'
    if args.rank is not None and world_size and args.rank >= world_size:
        raise UsageError(f"no rank {args.rank} in run {run.run_id} (ranks 0-{world_size - 1})")
    deadline = time.monotonic() + args.wait
    watch = DebuggerWatch(run.run_dir / PROGRESS_SUBDIR)
    while True:
        try:
            stopped = choose(watch.ranks(), args.rank, run.run_id)
            connection = connect(socket_path(run.run_dir, stopped.rank))
            break
        except OrchestrateError:
            if time.monotonic() >= deadline:
                raise
            now = find_run(client, run.run_id)  # the run found first, not a part of its id that may name another now
            if not now.live_nodes:
                raise UsageError(f"run {run.run_id} ended ({run_as_recorded(now).state.value}) while no rank was in its"
                                 f" debugger; its output: python -m orchestrate logs {run.run_id}")
            time.sleep(WAIT_POLL_S)
    say = lambda text: print(f"[orchestrate] {text}", file=sys.stderr)  # noqa: E731 (stderr: line-buffered)
    node = f" ({stopped.node})" if stopped.node else ""
    say(f"rank {stopped.rank}{node} stopped at {stopped.where()}: {stopped.what()}")
    say(ENDINGS.get(stopped.call, AT_A_BREAKPOINT))
    try:
        heard = talk(connection, sys.stdin, inv.out)
    except KeyboardInterrupt:
        sys.stderr.write("\n")  # past the ^C on pdb's prompt line
        say(f"interrupted: rank {stopped.rank} goes on without its debugger")
        raise
    if not heard:  # another terminal's `debug` connected first
        raise OrchestrateError(f"rank {stopped.rank} of run {run.run_id} is in a debugging session already (another"
                               " terminal's debug); one terminal at a time")
    say(f"the session with rank {stopped.rank} ended")
    return 0
