"""``python -m orchestrate``: parse the command line, build a config, call the library.

Subcommands:
    run     plan and run a torchrun job across N simulated nodes (--detach: leave it running)
    plan    print the plan of a run (same as ``run --dry-run``)
    ps      list runs (alias: list)
    logs    print a run's output (-f: follow it)
    attach  follow a run to its end and print its summary
    stop    stop a run's nodes, keep their logs and state
    down    remove a run
    prune   remove every run that ended or lost its launcher
    fault   inject faults into a run that is already going
    image   build the node image
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shlex
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, NoReturn, Optional, Sequence

from orchestrate.config.gpu_layout import GpuLayout, check_lease, free_gpus, resolve_gpu_layout
from orchestrate.config.link import PRESETS, netem_missing_message, parse_link
from orchestrate.config.run_config import DEFAULT_IMAGE, DEFAULT_MASTER_PORT, DEFAULT_TARGET, RunConfig, parse_memory
from orchestrate.config.torch_versions import DEFAULT_TORCH, torchvision_for
from orchestrate.config.user_env import copy_env, merge_user_env, parse_assignment, parse_env_file
from orchestrate.engine.gpus import detect_gpus
from orchestrate.engine.locks import host_lock, try_lock
from orchestrate.engine.netem import probe_netem
from orchestrate.engine.user_image import derived_image_spec
from orchestrate.errors import EngineError, OrchestrateError, UsageError
from orchestrate.export.options import CONTAINER_WORKDIR, TARGETS
from orchestrate.faults.spec import FaultSpec, parse_fault
from orchestrate.plan.layout import RUN_DIR_MOUNT
from orchestrate.plan.make import make_plan
from orchestrate.plan.model import JobPlan
from orchestrate.plan.show import format_plan
from orchestrate.report.helper import ReportHelper
from orchestrate.text import format_table

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE = 0, 1, 2
# Signals that stop a run the way Ctrl-C does: a closed terminal (HUP), kill (TERM), Ctrl-\ (QUIT).
TEARDOWN_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT")


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


def usage_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse type from a parser that raises UsageError: the message without the option name
    (argparse adds it)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None

    return convert


def positive_float(text: str) -> float:
    """argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, e.g. 1 or 0.5, got {text!r}")
    return value


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """What the user brings into every node: environment, dependencies, sizes."""
    group = parser.add_argument_group("the user's environment, dependencies and node sizes")
    group.add_argument("--env", action="append", type=usage_type(parse_assignment), default=[],
                       metavar="KEY=VALUE",
                       help="set a variable in every node (repeatable); wins over --copy-env and"
                            " --env-file; e.g. --env WANDB_MODE=offline")
    group.add_argument("--env-file", type=Path, default=None, metavar="FILE",
                       help="variables for every node from a file of KEY=VALUE lines (# comments,"
                            " optional 'export ' and quotes)")
    group.add_argument("--copy-env", action="append", default=[], metavar="PATTERN",
                       help="copy the host's variables matching a shell pattern into every node"
                            " (repeatable), e.g. --copy-env 'NCCL_*' --copy-env 'WANDB_*'")
    group.add_argument("--requirements", type=Path, default=None, metavar="FILE",
                       help="pip requirements installed into a node image derived from --image;"
                            " built once, reused while nothing changed (offline from a host"
                            " wheelhouse when the nodes cannot reach the package index)")
    group.add_argument("--dockerfile", type=Path, default=None, metavar="FILE",
                       help="a Dockerfile built on the node image (it starts with ARG BASE_IMAGE and"
                            " FROM ${BASE_IMAGE}); default: DIR/Dockerfile of --workdir when present")
    group.add_argument("--no-dockerfile", action="store_true",
                       help="ignore a Dockerfile in the work directory")
    group.add_argument("--link", type=usage_type(parse_link), default=None, metavar="SPEC",
                       help="shape every node's link with Linux traffic control: rate=10gbit[,delay=5ms]"
                            "[,loss=0.1%%] or a preset (" + ", ".join(PRESETS) + "); delay and loss need the"
                            " kernel's netem, refused where it is missing")
    group.add_argument("--cpus-per-node", type=positive_float, default=None, metavar="CPUS",
                       help="CPU limit of every node container, e.g. 1 or 0.5 (default: none)")
    group.add_argument("--memory-per-node", type=usage_type(parse_memory), default=None, metavar="SIZE",
                       help="memory limit of every node container, e.g. 512m or 2g; a node past it is"
                            " OOM-killed and named as such (default: none)")


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
                        help=f"node image: used if present, else pulled, else refused (exit 2); only"
                             f" the default is built on first use (default: {DEFAULT_IMAGE})")
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
    parser.add_argument("--scheduler", choices=("compose", "slurm"), default="compose",
                        help="compose: torchrun in every node (default); slurm: the nodes form a real Slurm"
                             " cluster (slurmctld, slurmd, munge) and the job goes through sbatch and srun")
    parser.add_argument("--sbatch", type=Path, default=None, metavar="FILE",
                        help="with --scheduler slurm: submit your own batch script unchanged instead of the"
                             " generated one (TARGET is then unused)")
    parser.add_argument("--fault", action="append", type=fault_arg, default=[], metavar="SPEC",
                        help="inject a fault: ACTION:NODE[@t=SECONDS|@step=N] with ACTION kill"
                             " (node dies), pause (node hangs), disconnect (node cut off the"
                             " network) or restart; e.g. kill:node1@step=20; repeatable")
    add_node_options(parser)


def add_export_options(parser: argparse.ArgumentParser) -> None:
    """``export``: the job (as for run) and what only a real cluster needs."""
    parser.add_argument("--to", choices=TARGETS, required=True,
                        help="slurm: an sbatch script; kubernetes: Service + Indexed Job manifests (YAML)")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="write here (default: standard output)")
    parser.add_argument("--name", default=None,
                        help="job name; names the Kubernetes Job and Service (default: ddp-<script or module>)")
    job = parser.add_argument_group("the job")
    job.add_argument("--nodes", type=positive_int, default=2, help="number of nodes (default: 2)")
    job.add_argument("--nproc-per-node", type=positive_int, default=None, metavar="P",
                     help="processes per node (default: one per GPU, 1 without GPUs)")
    job.add_argument("--gpus-per-node", type=non_negative_int, default=0, metavar="G",
                     help="GPUs per node: #SBATCH --gpus-per-node, nvidia.com/gpu limits (default: 0)")
    job.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                     help="what the workers are told to use as DDP_BACKEND (default: nccl with GPUs, else gloo)")
    job.add_argument("--workdir", type=Path, default=Path("."), metavar="DIR",
                     help="your project: a TARGET script is relative to it and must exist there (default: .)")
    job.add_argument("--image", default=DEFAULT_IMAGE,
                     help="Kubernetes: the container image, pullable by the cluster, holding your code in"
                          f" {CONTAINER_WORKDIR} (default: {DEFAULT_IMAGE})")
    job.add_argument("--master-port", type=positive_int, default=DEFAULT_MASTER_PORT,
                     help=f"static rendezvous port on the first node (default: {DEFAULT_MASTER_PORT})")
    job.add_argument("--rdzv", choices=("static", "c10d"), default="static",
                     help="static (node ranks) or c10d (elastic) rendezvous (default: static)")
    job.add_argument("--nnodes", type=node_range, default=None, metavar="MIN:MAX",
                     help="elastic node range (default: --nodes:--nodes)")
    job.add_argument("--max-restarts", type=non_negative_int, default=None, metavar="R",
                     help="torchrun's worker restarts in elastic mode (default: 3 with c10d, else 0)")
    job.add_argument("--collective-timeout", type=float, default=None, metavar="SECONDS",
                     help="exported as DDP_TIMEOUT (default: not set)")
    job.add_argument("--env", action="append", type=usage_type(parse_assignment), default=[],
                     metavar="KEY=VALUE", help="a variable for every node (repeatable)")
    job.add_argument("--env-file", type=Path, default=None, metavar="FILE",
                     help="variables for every node from a file of KEY=VALUE lines")
    job.add_argument("--copy-env", action="append", default=[], metavar="PATTERN",
                     help="copy the host's variables matching a shell pattern (repeatable)")
    job.add_argument("--cpus-per-node", type=positive_float, default=None, metavar="CPUS",
                     help="Kubernetes: cpu request and limit of every node (default: none)")
    job.add_argument("--memory-per-node", type=usage_type(parse_memory), default=None, metavar="SIZE",
                     help="Kubernetes: memory request and limit of every node, e.g. 64g (default: none)")
    slurm = parser.add_argument_group("slurm")
    slurm.add_argument("--container-image", default=None, metavar="IMAGE",
                       help="run each task in IMAGE with the cluster's container support (pyxis/enroot:"
                            " srun --container-image) (default: the nodes' own environment)")
    slurm.add_argument("--container-mounts", default=None, metavar="SRC:DST[,...]",
                       help="srun --container-mounts, with --container-image")
    slurm.add_argument("--time", default=None, metavar="LIMIT", help="#SBATCH --time, e.g. 04:00:00")
    slurm.add_argument("--partition", default=None, help="#SBATCH --partition")
    kubernetes = parser.add_argument_group("kubernetes")
    kubernetes.add_argument("--namespace", default=None, help="namespace of every object (default: none given)")
    kubernetes.add_argument("--trainjob", action="store_true",
                            help="also write a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1)")
    kubernetes.add_argument("--runtime", default="torch-distributed",
                            help="the TrainJob's ClusterTrainingRuntime (default: torch-distributed)")


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
    run.add_argument("-d", "--detach", action="store_true",
                     help="print the run id and return once the nodes run; the engine keeps the run"
                          " (follow it with logs/attach, end it with stop/down)")

    plan = sub.add_parser("plan", help="print the plan of a run without starting anything",
                          description="Print nodes, ranks and torchrun commands of a run.")
    add_job_options(plan)

    ps = sub.add_parser("ps", aliases=["list"], help="list runs: id, nodes, state, age, work directory",
                        description="Every run the engine has, rebuilt from container labels: running,"
                                    " succeeded, failed, stopped, or orphaned (its launcher is gone).")
    ps.set_defaults(command="ps")

    logs = sub.add_parser("logs", help="print a run's rank-prefixed output",
                          description="The output of a run's nodes from the engine, merged in time.",
                          epilog="usage example: python -m orchestrate logs 20261121-093012-1f2e3d --node node1 -f")
    logs.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")
    logs.add_argument("--node", default=None, metavar="NAME", help="one node only, e.g. node1")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the nodes end")

    attach = sub.add_parser("attach", help="follow a run to its end and print its summary",
                            description="Re-stream a run's output from the start and end with the same"
                                        " summary as run, from any terminal, even after the launcher that"
                                        " started it is gone. For a detached run, attach also acts as its"
                                        " launcher (ends it on a failure, restarts elastic nodes); Ctrl-C"
                                        " detaches and leaves the run going.")
    attach.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")

    stop = sub.add_parser("stop", help="stop a run's nodes; keep their logs and state",
                          description="SIGTERM every node of the run (SIGKILL after --timeout); the"
                                      " containers, logs and state stay until down or prune.")
    stop.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")
    stop.add_argument("--timeout", type=non_negative_int, default=10, metavar="SECONDS",
                      help="seconds between SIGTERM and SIGKILL (default: 10)")

    down = sub.add_parser("down", help="remove a run: containers, network, volume",
                          description="Remove everything the run has in the engine (its log files in"
                                      " the runs directory stay).")
    down.add_argument("run_id", metavar="RUN_ID", help="the run (see ps)")

    sub.add_parser("prune", help="remove every run that has ended or lost its launcher",
                   description="Remove the runs that succeeded, failed, were stopped, or are orphaned"
                               " (their foreground launcher is gone), and say what was removed.")

    bench = sub.add_parser("bench", help="benchmarks across simulated nodes (tables, JSON, PNG plots)",
                           description="Measure communication against the wire, DDP's overhead, and the"
                                       " launcher's own cost. Each prints a table and writes JSON and a PNG"
                                       " plot into the run's directory.")
    bench_sub = bench.add_subparsers(dest="bench_kind", metavar="KIND", parser_class=OneLineParser)
    collectives = bench_sub.add_parser(
        "collectives", help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all against the wire",
        description="nccl-tests-style time, algbw and busbw of every collective from --min-size to"
                    " --max-size, each result checked, next to the raw TCP limit between the nodes.",
        epilog="usage example: python -m orchestrate bench collectives --nodes 2 --link rate=1gbit")
    add_job_options(collectives)
    collectives.add_argument("--ops", nargs="+", default=None, metavar="OP",
                             help="operations (default: all_reduce all_gather reduce_scatter broadcast all_to_all)")
    collectives.add_argument("--min-size", default="4", help="smallest message, e.g. 4, 1K (default: 4)")
    collectives.add_argument("--max-size", default="256M", help="largest message, e.g. 64M (default: 256M)")
    collectives.add_argument("--min-time", type=float, default=0.3, metavar="SECONDS",
                             help="timed calls per size last about this long (default: 0.3)")
    collectives.add_argument("--wire-bytes", default="256M",
                             help="bytes per TCP stream when measuring the wire (0: skip) (default: 256M)")
    ddp = bench_sub.add_parser(
        "ddp", help="step time without DDP, with DDP (bucket sizes), with one all_reduce per parameter",
        description="ResNet-50 (161 parameter tensors) on synthetic images, on every node count of"
                    " --node-counts: overhead, scaling efficiency and DDP's speed-up over the naive form.",
        epilog="usage example: python -m orchestrate bench ddp --node-counts 2 4")
    add_job_options(ddp)
    ddp.add_argument("--node-counts", type=positive_int, nargs="+", default=[2, 4], metavar="N",
                     help="node counts to run on, one run each (default: 2 4; --nodes is ignored)")
    ddp.add_argument("--buckets", type=float, nargs="+", default=[1.0, 25.0, 100.0], metavar="MB",
                     help="DDP bucket sizes to try (default: 1 25 100)")
    ddp.add_argument("--steps", type=positive_int, default=5, help="timed steps per form (default: 5)")
    ddp.add_argument("--batch-size", type=positive_int, default=8, help="images per rank and step (default: 8)")
    ddp.add_argument("--image-size", type=positive_int, default=64, help="image side in pixels (default: 64)")
    launcher_bench = bench_sub.add_parser(
        "launcher", help="wall time of a trivial 2x2 job against a hand-made compose + exec baseline",
        description="The launcher, a hand-made `docker compose up` + `docker exec torchrun` and TorchX"
                    " local_docker (when installed), alternating; then a scaling series of node counts.",
        epilog="usage example: python -m orchestrate bench launcher --repeats 5 --scaling 1 2 4 8")
    launcher_bench.add_argument("--repeats", type=positive_int, default=5, help="rounds side by side (default: 5)")
    launcher_bench.add_argument("--scaling", type=positive_int, nargs="*", default=[1, 2, 4, 8], metavar="N",
                                help="node counts of the scaling series (default: 1 2 4 8; none: skip)")
    launcher_bench.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                                help="where the runs and the results go (default: ./runs)")
    launcher_bench.add_argument("--image", default=DEFAULT_IMAGE, help=f"node image (default: {DEFAULT_IMAGE})")
    for kind in (collectives, ddp):
        kind.set_defaults(keep=False, dry_run=False, detach=False, no_build=False)

    fault = sub.add_parser("fault", help="inject faults into a run that is already going",
                           description="Kill, pause, cut off or restart nodes of a running run,"
                                       " now. The run id is printed when the run starts (and"
                                       " names its runs/ directory).",
                           epilog="usage example: python -m orchestrate fault 20261121-093012-1f2e3d"
                                  " pause:node1")
    fault.add_argument("run_id", metavar="RUN_ID", help="the run to inject into")
    fault.add_argument("specs", nargs="+", type=fault_arg, metavar="SPEC",
                       help="ACTION:NODE (kill, pause, disconnect, restart); triggers are ignored")

    export = sub.add_parser(
        "export", help="write the job for a real cluster: an sbatch script or Kubernetes manifests",
        description="The same plan as run, for a real scheduler. slurm: an sbatch script (one srun task"
                    " per node, node rank from $SLURM_NODEID, master from the node list); kubernetes: a"
                    " headless Service and an Indexed Job (node rank from the completion index, master"
                    " <job>-0.<job>, torchrun's options as Kubeflow's PET_* variables), and a Kubeflow"
                    " Trainer TrainJob with --trainjob. Nothing is started.",
        epilog="usage example: python -m orchestrate export --to kubernetes --nodes 4 --gpus-per-node 8"
               " --image registry.example.com/me/train:1 -o k8s.yaml -- train.py --epochs 10")
    add_export_options(export)

    report = sub.add_parser("report", help="(re)build a run's report page and print its path",
                            description="Write runs/<id>/report.html from the run's recorded files (plan,"
                                        " events, progress, outcome): a timeline of nodes and ranks, faults,"
                                        " recoveries, progress and the root cause, in one self-contained page"
                                        " that opens offline. Works for a running or an ended run.",
                            epilog="usage example: python -m orchestrate report 20261121-093012-1f2e3d")
    report.add_argument("run_id", metavar="RUN", help="the run id (or a unique prefix), or its directory")
    report.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                        help="where the runs' directories are (default: ./runs)")

    image = sub.add_parser("image", help="manage the node image")
    image_sub = image.add_subparsers(dest="image_command", metavar="ACTION",
                                     parser_class=OneLineParser)
    build = image_sub.add_parser("build", help="build the node image",
                                 description="Build docker/Dockerfile from an official base image,"
                                             " or offline (debootstrap base + host wheelhouse)"
                                             " when the base cannot be pulled.",
                                 epilog="usage example: python -m orchestrate image build --torch 2.14.1"
                                        " (tagged ddp-compose-node:torch-2.14.1; run it with --image)")
    build.add_argument("--torch", default=DEFAULT_TORCH, metavar="VERSION",
                       help=f"torch release to install, with its matching torchvision (default:"
                            f" {DEFAULT_TORCH}, the release the exit-soundness benchmark proved sound)")
    build.add_argument("--image", default=None,
                       help=f"tag to build (default: {DEFAULT_IMAGE} for torch {DEFAULT_TORCH},"
                            " else ddp-compose-node:torch-VERSION)")
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


def user_env_from_args(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """The variables of --env-file, --copy-env and --env, in that order of precedence."""
    from_file: dict[str, str] = {}
    if args.env_file is not None:
        try:
            text = args.env_file.read_text()
        except OSError as exc:
            raise UsageError(f"--env-file {args.env_file}: {exc.strerror or exc}") from None
        from_file = parse_env_file(text, str(args.env_file))
    return merge_user_env(from_file, copy_env(args.copy_env, environ), args.env)


def dockerfile_from_args(args: argparse.Namespace) -> Optional[Path]:
    """--dockerfile, else the work directory's Dockerfile unless --no-dockerfile."""
    if args.dockerfile is not None:
        return args.dockerfile
    found = Path(args.workdir) / "Dockerfile"
    return found if not args.no_dockerfile and found.is_file() else None


def invoking_user() -> Optional[str]:
    """``UID:GID`` of whoever runs the launcher (None where the OS has no uids)."""
    if not hasattr(os, "getuid"):
        return None
    return f"{os.getuid()}:{os.getgid()}"


def invoking_user_name() -> str:
    """The login name of whoever runs the launcher: its uid's, not a USER it may have
    inherited (setpriv, su); "" where it has none."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no uids (Windows), or a uid without a name
        return ""


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
        user_env=user_env_from_args(args, dict(os.environ)),
        run_as=invoking_user(),
        user_name=invoking_user_name(),
        cpus_per_node=args.cpus_per_node,
        memory_per_node=args.memory_per_node,
        requirements=args.requirements,
        dockerfile=dockerfile_from_args(args),
        link=args.link,
    )


def resolve_config(args: argparse.Namespace, target: list[str], client: Any) -> tuple[RunConfig, tuple[str, ...]]:
    """Check the request, then fit it to the engine's free GPUs (client None: no engine, in a
    dry run or before the engine is asked).

    Returns:
        The config and the host GPUs the run may use, in order (the free ones).
    """
    # Paths and the target first: a missing script is reported whatever the engine has.
    derived_image_spec(config_from_args(args, target, GpuLayout(0, args.nproc_per_node or 1, "gloo")))
    available: Optional[int] = None
    free: tuple[str, ...] = ()
    if client is not None and not args.cpu:
        from orchestrate.engine.runs import gpus_in_use, list_runs

        inventory = detect_gpus(client)
        held = gpus_in_use(list_runs(client)) if inventory.count else {}
        if held and args.gpus_per_node:
            check_lease(args.nodes * args.gpus_per_node, inventory.indices, held)
        free = free_gpus(inventory.indices if inventory.count else (), held)
        available = len(free)
    layout = resolve_gpu_layout(
        nodes=args.nodes, nproc_per_node=args.nproc_per_node, gpus_per_node=args.gpus_per_node,
        available=available, cpu=args.cpu, backend=args.backend,
    )
    return config_from_args(args, target, layout), free


def check_scheduler_options(args: argparse.Namespace) -> None:
    """Refuse what the simulated Slurm cluster does not do, before anything starts."""
    if args.sbatch is not None and args.scheduler != "slurm":
        raise UsageError("--sbatch needs --scheduler slurm")
    if args.scheduler != "slurm":
        return
    if args.sbatch is not None and not args.sbatch.is_file():
        raise UsageError(f"--sbatch file {str(args.sbatch)!r} not found")
    if args.detach:
        raise UsageError("--detach is for --scheduler compose; a Slurm run stays attached (Slurm keeps the queue)")
    if not args.cpu and (args.gpus_per_node or 0) > 0:
        raise UsageError("the simulated Slurm cluster runs CPU/Gloo nodes: use --cpu (export --to slurm writes"
                         " #SBATCH --gpus-per-node for a real cluster)")


def run_on_slurm(args: argparse.Namespace, plan: JobPlan, client: Any, out: IO[str]) -> tuple[int, None]:
    """The plan through sbatch on a simulated Slurm cluster."""
    from orchestrate.slurm.runner import SlurmRun, format_slurm_summary, slurm_image

    image = slurm_image(client, plan.image, lambda text: print(f"[image] {text}", file=out, flush=True))
    outcome = SlurmRun(plan, client, out, run_as=plan.config.run_as or "0:0",
                       sbatch=args.sbatch.resolve() if args.sbatch else None).run(image)
    out.write(format_slurm_summary(outcome) + "\n")
    return outcome.exit_code(), None


def check_node_size(config: RunConfig, engine_info: dict) -> None:
    """Refuse node sizes the engine cannot give (it would fail every container at start)."""
    cpus = engine_info.get("NCPU")
    if config.cpus_per_node and cpus and config.cpus_per_node > cpus:
        raise UsageError(f"--cpus-per-node {config.cpus_per_node:g} is more than the engine's {cpus} CPUs")
    memory = engine_info.get("MemTotal")
    if config.memory_per_node and memory and config.memory_per_node > memory:
        raise UsageError(f"--memory-per-node {config.memory_per_node // 2**20}m is more than the"
                         f" engine's {memory // 2**20}m of memory")


def new_run_id() -> str:
    """A run id unique on this host: time for humans, random for two runs in one second."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class SignalInterrupt(KeyboardInterrupt):
    """Raised in the main thread when a teardown signal arrives, to unwind like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupt(signum: int, frame: object) -> None:
    raise SignalInterrupt(signum)


def install_teardown_signals() -> None:
    """SIGTERM, SIGHUP and SIGQUIT tear down like Ctrl-C (main thread only). SIGINT itself is
    set too: a launcher started in the background of a script (``cmd &``, no job control)
    inherits SIGINT ignored, and Python then leaves it ignored, so that ``kill -INT`` would
    be lost instead of tearing the run down."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in TEARDOWN_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise_interrupt)


def interrupt_exit_code(exc: BaseException) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def plan_run(args: argparse.Namespace, target: list[str], client: Any, command_line: str,
             engine_cpus: Optional[int]) -> JobPlan:
    """Resolve the config against the engine and plan the run, recording who asked for it.
    The nodes share the engine's ``engine_cpus`` cores (this machine's when it is unknown)."""
    from orchestrate.engine.runs import launcher_identity

    config, gpu_ids = resolve_config(args, target, client)
    detached = bool(getattr(args, "detach", False))
    host_cpus = engine_cpus or os.cpu_count()
    return make_plan(config, new_run_id(), detached=detached, gpu_ids=gpu_ids,
                     launcher="" if detached else launcher_identity(), command_line=command_line,
                     created=datetime.now(timezone.utc).isoformat(timespec="seconds"), host_cpus=host_cpus)


def command_run(args: argparse.Namespace, target: list[str], out: IO[str], command_line: str = "") -> int:
    """``run``: plan, then (unless --dry-run) apply: follow to the end, or return (--detach)."""
    return run_job(args, target, out, command_line)[0]


def run_job(args: argparse.Namespace, target: list[str], out: IO[str],
            command_line: str = "") -> tuple[int, Optional[Any]]:
    """Plan and apply a run; return its exit code and, for a run followed to its end, its outcome."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.gpus import gpu_topology
    from orchestrate.engine.images import image_exists
    from orchestrate.errors import EngineUnavailableError

    if args.dry_run:
        try:
            client = None if args.cpu else connect()
        except EngineUnavailableError:
            client = None  # a dry run needs no engine; GPU availability is then unchecked
        plan = plan_run(args, target, client, command_line,
                        client.info().get("NCPU") if client is not None else None)
        out.write(format_plan(plan) + "\n")
        if client is not None and plan.config.gpus_per_node and image_exists(client, plan.config.image):
            out.write("\nGPU topology seen from node0 (nvidia-smi topo -m):\n")
            out.write(gpu_topology(client, plan) + "\n")
        return EXIT_OK, None
    config, _ = resolve_config(args, target, None)  # bad input is refused before any engine is asked
    check_scheduler_options(args)
    if args.detach and (args.fault or args.keep):
        raise UsageError("--fault and --keep need the launcher attached: drop --detach (inject faults into"
                         " a detached run with `python -m orchestrate fault RUN SPEC`)")
    install_teardown_signals()
    # A run followed here to its end has a report page to write: its helper starts now (see
    # orchestrate/report/helper.py), and goes whatever happens.
    followed = not args.detach and args.scheduler != "slurm"
    with ReportHelper.start() if followed else contextlib.nullcontext(None) as report_helper:
        return apply_run(args, target, out, command_line, config, report_helper)


def apply_run(args: argparse.Namespace, target: list[str], out: IO[str], command_line: str, config: RunConfig,
              report_helper: Optional[ReportHelper]) -> tuple[int, Optional[Any]]:
    """:func:`run_job` once the input is checked: the engine's part."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.compose_cli import find_compose_meanwhile
    from orchestrate.engine.images import ensure_image
    from orchestrate.engine.user_image import ensure_derived_image
    from orchestrate.launch.run import launch, start_run
    from orchestrate.outcome.summary import format_summary

    compose_found = find_compose_meanwhile()
    client = connect()
    engine_info = client.info()
    check_node_size(config, engine_info)
    compose_found()

    # Detached, stdout carries only the run id (RUN=$(python -m orchestrate run -d ...)).
    chatter = sys.stderr if args.detach else out

    def progress(text: str) -> None:
        print(f"[image] {text}", file=chatter, flush=True)

    ensure_image(client, config.image, build_default=not args.no_build, progress=progress)
    if config.link is not None and config.link.needs_netem:
        missing = probe_netem(client, config.image)
        if missing is not None:
            raise UsageError(netem_missing_message(config.link, missing))
    spec = derived_image_spec(config)
    image = ensure_derived_image(client, spec, progress) if spec is not None else config.image
    # GPUs are leased by labels on the containers: plan and start under one host lock, so
    # that two launches never take the same free GPUs.
    lock = host_lock("gpu-lease") if not args.cpu and args.gpus_per_node != 0 else contextlib.nullcontext()
    with lock:
        plan = dataclasses.replace(plan_run(args, target, client, command_line, engine_info.get("NCPU")),
                                   image=image)
        if args.detach:
            start_run(plan, client, say=lambda text: print(f"[orchestrate] {text}", file=chatter, flush=True))
    if args.scheduler == "slurm":
        return run_on_slurm(args, plan, client, out)
    if args.detach:
        run = plan.run_id
        chatter.write(f"[orchestrate] run {run} is running detached; follow it with:\n"
                      f"  python -m orchestrate logs {run} -f      # its output\n"
                      f"  python -m orchestrate attach {run}       # its output and summary\n"
                      f"  python -m orchestrate stop {run} / down {run}\n")
        out.write(f"{run}\n")
        return EXIT_OK, None
    outcome = launch(plan, client, out=out, report_helper=report_helper)
    out.write(format_summary(outcome) + "\n")
    out.flush()
    return outcome.exit_code, outcome


def image_tag_for(torch_version: str) -> str:
    """The tag ``image build --torch VERSION`` uses when no --image is given."""
    if torch_version == DEFAULT_TORCH:
        return DEFAULT_IMAGE
    return f"{DEFAULT_IMAGE.partition(':')[0]}:torch-{torch_version}"


def command_image_build(args: argparse.Namespace, out: IO[str]) -> int:
    """``image build``: build the node image by the official or the offline path."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.images import DEFAULT_CPU_BASE, build_node_image, image_exists

    torchvision_for(args.torch)  # a bad version is refused before the engine is asked
    tag = args.image or image_tag_for(args.torch)
    client = connect()
    if args.if_missing and image_exists(client, tag):
        out.write(f"node image {tag} already exists\n")
        return EXIT_OK
    offline = True if args.offline else (False if args.online else None)
    build_node_image(
        client, tag, torch_version=args.torch, base_image=args.base_image or DEFAULT_CPU_BASE,
        offline=offline, progress=lambda s: print(f"[image] {s}", file=out, flush=True),
    )
    if tag != DEFAULT_IMAGE:
        out.write(f"run jobs on it with: python -m orchestrate run --image {tag} ...\n")
    return EXIT_OK


def command_fault(args: argparse.Namespace, out: IO[str]) -> int:
    """``fault``: inject faults now into the running run ``args.run_id``."""
    import docker.errors

    from orchestrate.engine.client import connect
    from orchestrate.engine.labels import COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, RUN_ID_LABEL, project_network
    from orchestrate.faults.inject import apply_fault
    from orchestrate.faults.spec import FaultAction

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
        try:
            if spec.action is FaultAction.DISCONNECT:
                network = project_network(client, container.labels[COMPOSE_PROJECT_LABEL])
            apply_fault(client, container, spec.action, network)
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot {spec.action.value} {spec.node} of run {args.run_id}:"
                              f" {exc.explanation or exc}") from None
        out.write(f"injected {spec.action.value} into {spec.node} of run {args.run_id}\n")
    return EXIT_OK


def command_ps(out: IO[str]) -> int:
    """``ps``: every run with its id, nodes, state, age and work directory."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import age, list_runs

    runs = list_runs(connect())
    if not runs:
        out.write("no runs\n")
        return EXIT_OK
    rows = [(r.run_id, f"{len(r.nodes)}" if len(r.nodes) == r.planned_nodes else f"{len(r.nodes)}/{r.planned_nodes}",
             r.state.value, "detached" if r.detached else "foreground", age(r.created), r.workdir) for r in runs]
    out.write("\n".join(format_table(("RUN ID", "NODES", "STATE", "MODE", "AGE", "WORKDIR"), rows)) + "\n")
    return EXIT_OK


def command_logs(args: argparse.Namespace, out: IO[str]) -> int:
    """``logs RUN``: the run's output, all nodes or one, then followed with -f."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import find_run
    from orchestrate.supervise.logs import print_logs

    print_logs(find_run(connect(), args.run_id), out, node=args.node, follow_live=args.follow)
    return EXIT_OK


def command_attach(args: argparse.Namespace, out: IO[str]) -> int:
    """``attach RUN``: follow a run to its end (acting for a detached one) and summarise it."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import find_run
    from orchestrate.launch.run import spec_for_run
    from orchestrate.outcome.summary import format_summary
    from orchestrate.supervise.supervisor import Supervisor

    client = connect()
    run = find_run(client, args.run_id)
    spec = spec_for_run(run)
    with try_lock(spec.run_dir / "supervisor.lock") as holds_lock:
        active = run.detached and holds_lock and not run.state.ended
        role = "acting as its launcher" if active else "watching"
        out.write(f"[orchestrate] attached to run {run.run_id} ({run.state.value}, {role}); Ctrl-C detaches\n")
        supervisor = Supervisor(spec, client, out, active=active,
                                containers={n.name: n.container for n in run.nodes})
        try:
            outcome = supervisor.follow()
        except KeyboardInterrupt as exc:
            out.write(f"\n[orchestrate] detached from run {run.run_id}; it keeps running (stop it with:"
                      f" python -m orchestrate stop {run.run_id})\n")
            return interrupt_exit_code(exc)
    outcome.image_torch = image_torch_of(client, run)
    if active:  # the run's launcher: its record is ours to finish
        from orchestrate.launch.run import finish_record
        from orchestrate.outcome.record import write_outcome

        write_outcome(outcome)
        finish_record(outcome)
    out.write(format_summary(outcome) + "\n")
    if run.detached:
        out.write(f"remove it with: python -m orchestrate down {run.run_id}\n")
    return outcome.exit_code


def image_torch_of(client: Any, run: Any) -> str:
    from orchestrate.engine.images import TORCH_LABEL, image_label

    image = run.nodes[0].container.attrs.get("Config", {}).get("Image", "") if run.nodes else ""
    return image_label(client, image, TORCH_LABEL) if image else ""


def command_stop(args: argparse.Namespace, out: IO[str]) -> int:
    """``stop RUN``: stop its nodes, keep their containers, logs and state."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import find_run, stop_run

    run = find_run(connect(), args.run_id)
    stopped = stop_run(run, args.timeout)
    if stopped:
        out.write(f"stopped {', '.join(stopped)} of run {run.run_id}; logs and state kept"
                  f" (remove it with: python -m orchestrate down {run.run_id})\n")
    else:
        out.write(f"run {run.run_id} has already ended ({run.state.value}); nothing to stop\n")
    return EXIT_OK


def command_down(args: argparse.Namespace, out: IO[str]) -> int:
    """``down RUN``: remove the run's containers, network and volume."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import find_run, remove_run

    client = connect()
    run = find_run(client, args.run_id)
    removed = remove_run(client, run)
    out.write(f"removed run {run.run_id}: {', '.join(removed)}\n")
    if run.run_dir.is_dir():
        out.write(f"its logs stay in {run.run_dir}\n")
    return EXIT_OK


def command_prune(out: IO[str]) -> int:
    """``prune``: remove every run that ended or whose launcher is gone; say what went."""
    from orchestrate.engine.client import connect
    from orchestrate.engine.runs import list_runs, remove_run

    client = connect()
    pruned = 0
    for run in list_runs(client):
        if run.state.ended:
            removed = remove_run(client, run)
            out.write(f"removed run {run.run_id} ({run.state.value}): {', '.join(removed)}\n")
            pruned += 1
    out.write(f"pruned {pruned} run(s)\n" if pruned else "nothing to prune: every run is still running\n")
    return EXIT_OK


def command_bench(args: argparse.Namespace, out: IO[str], command_line: str) -> int:
    """``bench KIND``: run the benchmark, then print its table and write its JSON and plot."""
    from orchestrate import bench, plots
    from orchestrate.report.page import write_report_quietly

    if args.bench_kind == "launcher":
        from orchestrate.engine.client import connect
        from orchestrate.engine.images import ensure_image

        ensure_image(connect(), args.image, progress=lambda t: print(f"[image] {t}", file=out, flush=True))
        directory = args.runs_dir.resolve() / f"bench-launcher-{new_run_id()}"
        directory.mkdir(parents=True)
        summary = bench.run_launcher_bench(directory, args.repeats, args.scaling, out, args.image)
        data, plot = bench.write_artifacts(directory, "bench", summary, plots.plot_launcher, summary)
        out.write(bench.format_launcher(summary) + f"\nresults: {data}\nplot: {plot}\n")
        return EXIT_OK
    if args.bench_kind == "collectives":
        target = ["-m", "app.bench_collectives", "--out", f"{RUN_DIR_MOUNT}/{bench.BENCH_FILE}",
                  "--min-size", args.min_size, "--max-size", args.max_size, "--min-time", f"{args.min_time:g}",
                  "--wire-bytes", args.wire_bytes, *(["--ops", *args.ops] if args.ops else [])]
        code, outcome = run_job(args, target, out, command_line)
        if outcome is None or not outcome.succeeded:
            return code
        results = json.loads((outcome.run_dir / bench.BENCH_FILE).read_text())
        summary = bench.collectives_summary(results, str(args.link or ""))
        data, plot = bench.write_artifacts(outcome.run_dir, "bench", summary, plots.plot_collectives, summary)
        write_report_quietly(outcome.run_dir)  # again, with the benchmark's table and plot
        out.write(bench.format_collectives(summary) + f"\nresults: {data}\nplot: {plot}\n")
        return code
    if args.bench_kind == "ddp":
        summaries, last_dir = [], None
        for nodes in args.node_counts:
            args.nodes = nodes
            target = ["-m", "app.bench_ddp", "--out", f"{RUN_DIR_MOUNT}/{bench.BENCH_FILE}",
                      "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                      "--image-size", str(args.image_size), "--buckets", *[f"{b:g}" for b in args.buckets]]
            code, outcome = run_job(args, target, out, command_line)
            if outcome is None or not outcome.succeeded:
                return code
            summaries.append(bench.ddp_summary(json.loads((outcome.run_dir / bench.BENCH_FILE).read_text())))
            last_dir = outcome.run_dir
        data, plot = bench.write_artifacts(last_dir, "bench", {"runs": summaries}, plots.plot_ddp, summaries)
        write_report_quietly(last_dir)
        out.write(bench.format_ddp(summaries) + f"\nresults: {data}\nplot: {plot}\n")
        return EXIT_OK
    raise UsageError("bench needs a KIND: collectives, ddp or launcher (see python -m orchestrate bench --help)")


def command_report(args: argparse.Namespace, out: IO[str]) -> int:
    """``report RUN``: rebuild the run's page and print where it is."""
    from orchestrate.report.page import find_run_dir, write_report

    path = write_report(find_run_dir(args.runs_dir, args.run_id))
    out.write(f"{path.resolve()}\n")
    return 0


def command_export(args: argparse.Namespace, target: list[str], out: IO[str]) -> int:
    """Write the plan for a real cluster; starts nothing and needs no engine."""
    from orchestrate.export.kubernetes import export_kubernetes, to_yaml
    from orchestrate.export.options import ExportOptions, default_job_name
    from orchestrate.export.slurm import export_slurm

    target = target or list(DEFAULT_TARGET)
    layout = resolve_gpu_layout(nodes=args.nodes, nproc_per_node=args.nproc_per_node,
                                gpus_per_node=args.gpus_per_node, available=None,
                                cpu=not args.gpus_per_node, backend=args.backend)
    config = RunConfig(
        nodes=args.nodes, nproc_per_node=layout.nproc_per_node, target=tuple(target), workdir=args.workdir,
        image=args.image, gpus_per_node=layout.gpus_per_node, backend=layout.backend, master_port=args.master_port,
        collective_timeout_s=args.collective_timeout, rdzv=args.rdzv,
        min_nodes=args.nnodes[0] if args.nnodes else None, max_nodes=args.nnodes[1] if args.nnodes else None,
        max_restarts=args.max_restarts if args.max_restarts is not None else (3 if args.rdzv == "c10d" else 0),
        user_env=user_env_from_args(args, dict(os.environ)), cpus_per_node=args.cpus_per_node,
        memory_per_node=args.memory_per_node)
    options = ExportOptions(name=args.name or default_job_name(config.target),
                            container_image=args.container_image, container_mounts=args.container_mounts,
                            time_limit=args.time, partition=args.partition, namespace=args.namespace,
                            trainjob=args.trainjob, runtime=args.runtime)
    plan = make_plan(config, options.name)
    text = export_slurm(plan, options) if args.to == "slurm" else to_yaml(export_kubernetes(plan, options))
    if args.output is None:
        out.write(text)
        return 0
    try:
        args.output.write_text(text)
        if args.to == "slurm":
            args.output.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"-o {args.output}: {exc.strerror or exc}") from None
    what = "sbatch script" if args.to == "slurm" else "Kubernetes manifests"
    print(f"wrote the {what} of {config.nodes} nodes x {config.nproc_per_node} processes to {args.output}",
          file=sys.stderr)
    return 0


def main(argv: Optional[Sequence[str]] = None, out: IO[str] = sys.stdout) -> int:
    """Run the command line and return its exit code.

    Exit codes: 0 success, 1 the job failed, 2 bad input or an environment problem
    (no engine, no image), 130 interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    options, target = split_target(argv)
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
            return command_run(args, target, out, "python -m orchestrate " + shlex.join(argv))
        if args.command == "ps":
            return command_ps(out)
        if args.command == "logs":
            return command_logs(args, out)
        if args.command == "attach":
            return command_attach(args, out)
        if args.command == "stop":
            return command_stop(args, out)
        if args.command == "down":
            return command_down(args, out)
        if args.command == "prune":
            return command_prune(out)
        if args.command == "fault":
            return command_fault(args, out)
        if args.command == "report":
            return command_report(args, out)
        if args.command == "export":
            return command_export(args, target, out)
        if args.command == "bench":
            return command_bench(args, out, "python -m orchestrate " + shlex.join(argv))
        if args.command == "image" and args.image_command == "build":
            return command_image_build(args, out)
        parser.print_help(out)
        return EXIT_USAGE
    except OrchestrateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("interrupted", file=sys.stderr)
        return interrupt_exit_code(exc)
    except Exception as exc:
        if type(exc).__module__.startswith("docker"):  # an engine error: the environment, not the job
            print(f"error: engine error: {str(exc).splitlines()[0][:300]}", file=sys.stderr)
            return EXIT_USAGE
        raise
