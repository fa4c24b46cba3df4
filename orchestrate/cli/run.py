"""``run``: a torchrun job across N simulated nodes, followed to its end or left running
(``--detach``); ``plan``: its plan only (the same as ``run --dry-run``)."""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, Optional

from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import TARGET_HELP, add_options, request_from_args
from orchestrate.cli.signals import install_teardown_signals
from orchestrate.config.options import JOB_HELP_ORDER, NODE_OPTIONS, OPTIONS_BY_DEST
from orchestrate.config.request import RunRequest
from orchestrate.launch.run import Run, run_and_report, unwatched_while_detached
from orchestrate.outcome.model import RunResult
from orchestrate.plan.show import format_plan
from orchestrate.slurm.show import format_slurm_plan

EXIT_OK = 0


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options of a job: its shape and how it runs here (top level), and what the user
    brings into the nodes (a group of its own)."""
    add_options(parser, [OPTIONS_BY_DEST[dest] for dest in JOB_HELP_ORDER])
    add_options(parser.add_argument_group("the user's environment, dependencies and node sizes"), NODE_OPTIONS)


def add_parsers(sub: Any) -> None:
    run = sub.add_parser("run", help="run a torchrun job across N simulated nodes",
                         description="Bring up N nodes, run torchrun on each, stream every rank's output, report"
                                     " how it ended, tear down.",
                         epilog=TARGET_HELP + " Usage example: python -m orchestrate run --nodes 2 --nproc-per-node 2 --"
                                " -m app.toy --steps 20")
    add_job_options(run)
    add_options(run, [OPTIONS_BY_DEST["keep"]])
    run.add_argument("--dry-run", action="store_true",
                     help="print the plan (nodes, ranks, commands) and exit; asks the engine at most which GPUs,"
                          " CPUs and memory it has, and starts nothing but the throwaway container that"
                          " probes its kernel's netem for a --link delay or loss")
    add_options(run, [OPTIONS_BY_DEST["no_build"], OPTIONS_BY_DEST["detach"]])
    run.set_defaults(handler=command_run, takes_target=True)
    plan = sub.add_parser("plan", help="print the plan of a run without starting it (a --link delay or loss"
                                       " starts one throwaway container, which probes the kernel's netem)",
                          description="Print nodes, ranks and torchrun commands of a run (under --scheduler slurm: its"
                                      " cluster, ranks and the batch script sbatch gets).",
                          epilog=TARGET_HELP)
    add_job_options(plan)
    plan.set_defaults(handler=command_plan, takes_target=True)


def command_run(args: argparse.Namespace, inv: Invocation) -> int:
    """``run``: plan, then (unless --dry-run) run: follow to the end, or return (--detach)."""
    request = request_from_args(args, inv.target)
    if args.dry_run:
        return show_plan(request, inv)
    return run_request(request, inv)[0]


def command_plan(args: argparse.Namespace, inv: Invocation) -> int:
    return show_plan(request_from_args(args, inv.target), inv)


def show_plan(request: RunRequest, inv: Invocation) -> int:
    """Print the plan; with GPUs and an engine, the topology node0 would see."""
    from orchestrate.engine.gpus import gpu_topology
    from orchestrate.engine.images import image_exists

    run = Run(request, out=inv.out, client=inv.client)  # a plan printed, never recorded: who asked is no matter
    plan = run.dry_plan()
    if request.scheduler == "slurm":
        inv.out.write(format_slurm_plan(plan, request.sbatch) + "\n")
        return EXIT_OK
    inv.out.write(format_plan(plan) + "\n")
    if run.client is not None and plan.config.gpus_per_node and image_exists(run.client, plan.config.image):
        inv.out.write("\nGPU topology seen from node0 (nvidia-smi topo -m):\n")
        inv.out.write(gpu_topology(run.client, plan) + "\n")
    return EXIT_OK


def run_request(request: RunRequest, inv: Invocation) -> tuple[int, Optional[RunResult]]:
    """Run a request as the ``run`` command does; return its exit code and, for a run followed
    to its end, its result."""
    run = Run(request, out=inv.out, client=inv.client, command_line=inv.command_line, verbose=inv.verbose)
    install_teardown_signals()
    if request.detach:
        run.start()
        run.say(f"run {run.run_id} is running detached; follow it with:\n"
                f"  python -m orchestrate logs {run.run_id} -f      # its output\n"
                f"  python -m orchestrate attach {run.run_id}       # its output and summary\n"
                f"  python -m orchestrate stacks {run.run_id}       # where every rank is, if it goes quiet\n"
                f"  python -m orchestrate stop {run.run_id} / down {run.run_id}")
        caveat = unwatched_while_detached(run.check())
        if caveat:
            run.say(caveat)
        inv.out.write(f"{run.run_id}\n")
        return EXIT_OK, None
    result = run_and_report(run, raise_interrupt=False)
    if result.interrupted and result.signal_number == signal.SIGPIPE:  # its output is gone: say it here
        print(f"run {result.run_id} stopped: whoever read its output went away; its summary and logs are in"
              f" {result.run_dir}", file=sys.stderr)
    return result.exit_code, result
