"""``python -m orchestrate``: parse the command line, build a config, call the library.

Subcommands:
    run    plan and run a torchrun job across N simulated nodes
    plan   print the plan of a run (same as ``run --dry-run``)
    fault  inject faults into a run that is already going
    image  build the node image
"""
from __future__ import annotations

import argparse
import logging
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, NoReturn, Optional, Sequence

from orchestrate.config import DEFAULT_IMAGE, DEFAULT_MASTER_PORT, RunConfig
from orchestrate.errors import OrchestrateError, UsageError
from orchestrate.faults import FaultSpec, parse_fault
from orchestrate.gpus import GpuLayout, detect_gpus, resolve_gpu_layout
from orchestrate.plan import format_plan, make_plan

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer of ``minimum`` or more."""
    wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def node_range(text: str) -> tuple[int, int]:
    """argparse type: MIN:MAX (or N) node counts."""
    low, _, high = text.partition(":")
    try:
        values = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX, e.g. 1:2, got {text!r}") from None
    if not 1 <= values[0] <= values[1]:
        raise argparse.ArgumentTypeError(f"expected 1 <= MIN <= MAX, got {text!r}")
    return values


def fault_arg(text: str) -> FaultSpec:
    """argparse type: one --fault spec."""
    try:
        return parse_fault(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("invalid --fault ", "")) from None


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``run`` and ``plan``."""
    parser.add_argument("--nodes", type=positive_int, default=2,
                        help="number of simulated nodes (containers) (default: 2)")
    parser.add_argument("--nproc-per-node", type=positive_int, default=None, metavar="P",
                        help="worker processes torchrun starts on each node (default: one per"
                             " GPU of the node, 1 on CPU); with fewer processes than GPUs each"
                             " process spans G/P GPUs")
    parser.add_argument("--cpu", action="store_true",
                        help="force the CPU/Gloo variant: no GPU reservation, even on a GPU host")
    parser.add_argument("--gpus-per-node", type=non_negative_int, default=None, metavar="G",
                        help="GPUs reserved for each node; node i gets host GPUs [i*G, (i+1)*G)"
                             " (default: the engine's GPUs split evenly among the nodes, 0 when"
                             " it has none)")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                        help="collective backend the workers use (default: auto: nccl with"
                             " GPUs, gloo without)")
    parser.add_argument("--workdir", type=Path, default=Path("."), metavar="DIR",
                        help="host directory mounted into every node as its working directory;"
                             " TARGET scripts are relative to it (default: current directory)")
    parser.add_argument("--image", default=DEFAULT_IMAGE,
                        help=f"node image; built on first use if missing (default: {DEFAULT_IMAGE})")
    parser.add_argument("--master-port", type=positive_int, default=DEFAULT_MASTER_PORT,
                        help="rendezvous port on node0, inside the run's private network"
                             f" (default: {DEFAULT_MASTER_PORT})")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                        help="where each run gets a directory of node logs (default: ./runs)")
    parser.add_argument("--ready-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="deadline for the nodes to come up and resolve each other (default: 60)")
    parser.add_argument("--collective-timeout", type=float, default=None, metavar="SECONDS",
                        help="process group timeout given to the workers as DDP_TIMEOUT (app/"
                             " programs use it; a hung peer fails the job after it) (default: the"
                             " program's own, 300 s for app/)")
    parser.add_argument("--rdzv", choices=("static", "c10d"), default="static",
                        help="rendezvous: static (--node-rank i, fixed ranks) or c10d (elastic:"
                             " torchrun's c10d rendezvous on node0; dead nodes are restarted and"
                             " rejoin, workers restart) (default: static)")
    parser.add_argument("--nnodes", type=node_range, default=None, metavar="MIN:MAX",
                        help="elastic mode's node range (default: --nodes:--nodes)")
    parser.add_argument("--max-restarts", type=non_negative_int, default=None, metavar="R",
                        help="worker-group restarts torchrun allows, and node restarts the launcher"
                             " makes, in elastic mode (default: 3 with --rdzv c10d, else 0)")
    parser.add_argument("--rdzv-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long an elastic rendezvous waits for nodes to join (default: 60)")
    parser.add_argument("--fault", action="append", type=fault_arg, default=[], metavar="SPEC",
                        help="inject a fault: ACTION:NODE[@t=SECONDS|@step=N] with ACTION kill"
                             " (node dies), pause (node hangs), disconnect (node cut off the"
                             " network) or restart; e.g. kill:node1@step=20; repeatable")


def build_parser() -> OneLineParser:
    """The whole command line of ``python -m orchestrate``."""
    parser = OneLineParser(
        prog="python -m orchestrate",
        description="Simulate multi-node PyTorch DDP training: N Docker Compose containers,"
                    " one torchrun node each.",
        epilog="TARGET (after --) is what torchrun runs: a script relative to --workdir with"
               " its arguments, or -m MODULE [ARGS]. Default: -m app.toy.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    run = sub.add_parser("run", help="run a torchrun job across N simulated nodes",
                         description="Bring up N nodes, run torchrun on each, stream every"
                                     " rank's output, report how it ended, tear down.",
                         epilog="usage example: python -m orchestrate run --nodes 2"
                                " --nproc-per-node 2 -- -m app.toy --steps 20")
    add_job_options(run)
    run.add_argument("--keep", action="store_true",
                     help="leave the containers, network and volume after the run (for debugging)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the plan (nodes, ranks, commands) and exit; starts nothing, asks"
                          " the engine at most which GPUs it has")
    run.add_argument("--no-build", action="store_true",
                     help="fail instead of building the node image when it is missing")

    plan = sub.add_parser("plan", help="print the plan of a run without starting anything",
                          description="Print nodes, ranks and torchrun commands of a run.")
    add_job_options(plan)

    fault = sub.add_parser("fault", help="inject faults into a run that is already going",
                           description="Kill, pause, cut off or restart nodes of a running run,"
                                       " now. The run id is printed when the run starts (and"
                                       " names its runs/ directory).",
                           epilog="usage example: python -m orchestrate fault 20261121-093012-1f2e3d"
                                  " pause:node1")
    fault.add_argument("run_id", metavar="RUN_ID", help="the run to inject into")
    fault.add_argument("specs", nargs="+", type=fault_arg, metavar="SPEC",
                       help="ACTION:NODE (kill, pause, disconnect, restart); triggers are ignored")

    image = sub.add_parser("image", help="manage the node image")
    image_sub = image.add_subparsers(dest="image_command", metavar="ACTION",
                                     parser_class=OneLineParser)
    build = image_sub.add_parser("build", help="build the node image",
                                 description="Build docker/Dockerfile from an official base image,"
                                             " or offline (debootstrap base + host wheelhouse)"
                                             " when the base cannot be pulled.")
    build.add_argument("--image", default=DEFAULT_IMAGE, help=f"tag to build (default: {DEFAULT_IMAGE})")
    build.add_argument("--base-image", default=None,
                       help="official base image (default: python:3.11-slim-bookworm)")
    mode = build.add_mutually_exclusive_group()
    mode.add_argument("--offline", action="store_true",
                      help="skip the pull: debootstrap a base and install from a host wheelhouse")
    mode.add_argument("--online", action="store_true",
                      help="never fall back to the offline path")
    build.add_argument("--if-missing", action="store_true",
                       help="do nothing when the image already exists")
    return parser


def split_target(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split argv at the first ``--``: options before, torchrun TARGET after."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def config_from_args(args: argparse.Namespace, target: list[str], layout: GpuLayout) -> RunConfig:
    """Translate parsed options and the resolved GPU layout into a validated RunConfig."""
    return RunConfig(
        nodes=args.nodes,
        nproc_per_node=layout.nproc_per_node,
        target=tuple(target),
        workdir=args.workdir,
        image=args.image,
        gpus_per_node=layout.gpus_per_node,
        backend=layout.backend,
        keep=getattr(args, "keep", False),
        master_port=args.master_port,
        runs_dir=args.runs_dir,
        ready_timeout_s=args.ready_timeout,
        collective_timeout_s=args.collective_timeout,
        faults=tuple(args.fault),
        rdzv=args.rdzv,
        min_nodes=args.nnodes[0] if args.nnodes else None,
        max_nodes=args.nnodes[1] if args.nnodes else None,
        max_restarts=(args.max_restarts if args.max_restarts is not None
                      else (3 if args.rdzv == "c10d" else 0)),
        rdzv_timeout_s=args.rdzv_timeout,
    )


def resolve_config(args: argparse.Namespace, target: list[str], client: Any) -> RunConfig:
    """Check the request, then fit it to the engine's GPUs (None: no engine, in a dry run)."""
    # Paths and the target first: a missing script is reported whatever the engine has.
    config_from_args(args, target, GpuLayout(0, args.nproc_per_node or 1, "gloo"))
    available = None if client is None else detect_gpus(client).count
    layout = resolve_gpu_layout(
        nodes=args.nodes, nproc_per_node=args.nproc_per_node, gpus_per_node=args.gpus_per_node,
        available=available, cpu=args.cpu, backend=args.backend,
    )
    return config_from_args(args, target, layout)


def new_run_id() -> str:
    """A run id unique on this host: time for humans, random for two runs in one second."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def command_run(args: argparse.Namespace, target: list[str], out: IO[str]) -> int:
    """``run``: plan, then (unless --dry-run) apply and report."""
    from orchestrate.compose import compose_command
    from orchestrate.engine import connect
    from orchestrate.errors import EngineUnavailableError
    from orchestrate.image import ensure_node_image, image_exists
    from orchestrate.launcher import gpu_topology, launch
    from orchestrate.outcome import format_summary

    if args.dry_run:
        try:
            client = None if args.cpu else connect()
        except EngineUnavailableError:
            client = None  # a dry run needs no engine; GPU availability is then unchecked
        plan = make_plan(resolve_config(args, target, client), new_run_id())
        out.write(format_plan(plan) + "\n")
        if client is not None and plan.config.gpus_per_node and image_exists(client, plan.config.image):
            out.write("\nGPU topology seen from node0 (nvidia-smi topo -m):\n")
            out.write(gpu_topology(client, plan) + "\n")
        return EXIT_OK
    resolve_config(args, target, None)  # bad input is refused before any engine is asked
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM tears down like Ctrl-C
    client = connect()
    plan = make_plan(resolve_config(args, target, client), new_run_id())
    config = plan.config
    compose_command()
    if args.no_build:
        if not image_exists(client, config.image):
            raise_image_missing(config.image)
    else:
        ensure_node_image(client, config.image, progress=lambda s: print(f"[image] {s}", file=out, flush=True))
    outcome = launch(plan, client, out=out)
    out.write(format_summary(outcome) + "\n")
    out.flush()
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.succeeded else EXIT_JOB_FAILED


def raise_image_missing(image: str) -> NoReturn:
    from orchestrate.errors import ImageUnavailableError

    raise ImageUnavailableError(
        f"node image {image} not found and --no-build was given; build it with"
        " `python -m orchestrate image build`"
    )


def command_image_build(args: argparse.Namespace, out: IO[str]) -> int:
    """``image build``: build the node image by the official or the offline path."""
    from orchestrate.engine import connect
    from orchestrate.image import DEFAULT_CPU_BASE, build_node_image, image_exists

    client = connect()
    if args.if_missing and image_exists(client, args.image):
        out.write(f"node image {args.image} already exists\n")
        return EXIT_OK
    offline = True if args.offline else (False if args.online else None)
    build_node_image(
        client, args.image, base_image=args.base_image or DEFAULT_CPU_BASE, offline=offline,
        progress=lambda s: print(f"[image] {s}", file=out, flush=True),
    )
    return EXIT_OK


def command_fault(args: argparse.Namespace, out: IO[str]) -> int:
    """``fault``: inject faults now into the running run ``args.run_id``."""
    from orchestrate.compose import COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, RUN_ID_LABEL, project_network
    from orchestrate.engine import connect
    from orchestrate.faults import FaultAction, apply_fault

    client = connect()
    for spec in args.specs:
        found = client.containers.list(filters={"label": [
            f"{RUN_ID_LABEL}={args.run_id}", f"{COMPOSE_SERVICE_LABEL}={spec.node}"]})
        if len(found) != 1:
            raise UsageError(
                f"no running {spec.node} in run {args.run_id} (found {len(found)} containers"
                f" labelled {RUN_ID_LABEL}={args.run_id})")
        container = found[0]
        network = None
        if spec.action is FaultAction.DISCONNECT:
            network = project_network(client, container.labels[COMPOSE_PROJECT_LABEL])
        apply_fault(client, container, spec.action, network)
        out.write(f"injected {spec.action.value} into {spec.node} of run {args.run_id}\n")
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None, out: IO[str] = sys.stdout) -> int:
    """Run the command line and return its exit code.

    Exit codes: 0 success, 1 the job failed, 2 bad input or an environment problem
    (no engine, no image), 130 interrupted.
    """
    options, target = split_target(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(options)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command in ("run", "plan"):
            if args.command == "plan":
                args.dry_run = True
            return command_run(args, target, out)
        if args.command == "fault":
            return command_fault(args, out)
        if args.command == "image" and args.image_command == "build":
            return command_image_build(args, out)
        parser.print_help(out)
        return EXIT_USAGE
    except OrchestrateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
