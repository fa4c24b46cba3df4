"""``bench KIND``: benchmarks across simulated nodes; each prints a table and writes its JSON
and plot into the run's directory."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrate.bench import launcher, plots
from orchestrate.bench.artifacts import write_artifacts
from orchestrate.bench.jobs import (COLLECTIVE_OPS, check_bench_request, collectives_target, ddp_target,
                                    message_bytes, report_collectives, report_ddp, wire_test_note)
from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import argparse_type, request_from_args
from orchestrate.cli.run import add_job_options, run_request
from orchestrate.cli.signals import install_teardown_signals
from orchestrate.config.options import image_reference, positive_int
from orchestrate.config.run_config import DEFAULT_IMAGE, DEFAULT_RUNS_DIR
from orchestrate.errors import UsageError


def add_parsers(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks across simulated nodes (tables, JSON, PNG plots)",
                           description="Measure communication against the wire, DDP's overhead, and the launcher's"
                                       " own cost. Each prints a table and writes JSON and a PNG plot into the run's"
                                       " directory.")
    bench.set_defaults(handler=command, bench_kind=None)
    kinds = bench.add_subparsers(dest="bench_kind", metavar="KIND", parser_class=type(bench))
    count = argparse_type(positive_int, "a count")
    coll = kinds.add_parser(
        "collectives", help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all against the wire",
        description="nccl-tests-style time, algbw and busbw of every collective from --min-size to --max-size, each"
                    " result checked, next to the raw TCP limit between the nodes.",
        epilog="usage example: python -m orchestrate bench collectives --nodes 2 --link rate=1gbit")
    add_job_options(coll)
    coll.add_argument("--ops", nargs="+", default=None, metavar="OP", choices=COLLECTIVE_OPS,
                      help=f"operations (default: {' '.join(COLLECTIVE_OPS)})")
    coll.add_argument("--min-size", default="4", help="smallest message, e.g. 4, 1K (default: 4)")
    coll.add_argument("--max-size", default="256M", help="largest message, e.g. 64M (default: 256M)")
    coll.add_argument("--min-time", type=float, default=0.3, metavar="SECONDS",
                      help="timed calls per size last about this long (default: 0.3)")
    coll.add_argument("--wire-bytes", default="256M",
                      help="bytes per TCP stream when measuring the wire, 3 rounds of 3 measures, said with their time at"
                           " a --link rate= as they start (0: skip) (default: 256M)")
    ddp_parser = kinds.add_parser(
        "ddp", help="DDP's overhead per form (defaults, tuned knobs, no-op hook) and regime, and its speed-up",
        description="ResNet-50 (161 parameter tensors) on synthetic images, on every node count of --node-counts:"
                    " the step without DDP, with DDP's defaults (per bucket size), with its three knobs"
                    " (gradient_as_bucket_view, broadcast_buffers=False, static_graph), with a no-op communication"
                    " hook (DDP's bookkeeping alone), and with one all_reduce per parameter; each batch size's regime"
                    " (GPU-bound or CPU launch-bound; on GPUs the batch is swept until the step is GPU-bound);"
                    " overhead per form, scaling efficiency, and the <=3% overhead goal at world size 1.",
        epilog="usage examples: python -m orchestrate bench ddp --node-counts 2 4;"
               " python -m orchestrate bench ddp --node-counts 1 2 --share-gpus --image-size 224 --batch-size 16")
    add_job_options(ddp_parser)
    ddp_parser.add_argument("--node-counts", type=count, nargs="+", default=[2, 4], metavar="N",
                            help="node counts to run on, one run each (default: 2 4; --nodes is ignored)")
    ddp_parser.add_argument("--buckets", type=float, nargs="+", default=[25.0], metavar="MB",
                            help="DDP bucket sizes to try with its defaults (default: 25, DDP's own)")
    ddp_parser.add_argument("--steps", type=count, default=5, help="timed steps per form (default: 5)")
    ddp_parser.add_argument("--batch-size", type=count, default=8,
                            help="images per rank and step; where a sweep starts (default: 8)")
    ddp_parser.add_argument("--batch-sizes", type=count, nargs="+", default=None, metavar="N",
                            help="measure at these batch sizes instead (no sweep)")
    sweep = ddp_parser.add_mutually_exclusive_group()
    sweep.add_argument("--sweep", dest="sweep", action="store_true", default=None,
                       help="double the batch until the step is GPU-bound (default on GPUs, where a small batch's step"
                            " is bound by kernel launches)")
    sweep.add_argument("--no-sweep", dest="sweep", action="store_false", help="measure at --batch-size only")
    ddp_parser.add_argument("--image-size", type=count, default=64, help="image side in pixels (default: 64)")
    launch = kinds.add_parser(
        "launcher", help="wall time of a trivial 2x2 job against a hand-made compose + exec baseline",
        description="The launcher, a hand-made `docker compose up` + `docker exec torchrun` and TorchX"
                    " local_docker (when installed), alternating; then a scaling series of node counts.",
        epilog="usage example: python -m orchestrate bench launcher --repeats 5 --scaling 1 2 4 8")
    launch.add_argument("--repeats", type=count, default=5, help="rounds side by side (default: 5)")
    launch.add_argument("--scaling", type=count, nargs="*", default=[1, 2, 4, 8], metavar="N",
                        help="node counts of the scaling series (default: 1 2 4 8; none: skip)")
    launch.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, metavar="DIR",
                        help="where the runs and the results go (default: ./%(default)s)")
    launch.add_argument("--image", default=DEFAULT_IMAGE, type=argparse_type(image_reference, "--image"),
                        help=f"node image (default: {DEFAULT_IMAGE})")


def command(args: argparse.Namespace, inv: Invocation) -> int:
    if args.bench_kind == "launcher":
        return bench_launcher(args, inv)
    if args.bench_kind == "collectives":
        return bench_collectives(args, inv)
    if args.bench_kind == "ddp":
        return bench_ddp(args, inv)
    raise UsageError("bench needs a KIND: collectives, ddp or launcher (see python -m orchestrate bench --help)")


def bench_launcher(args: argparse.Namespace, inv: Invocation) -> int:
    from orchestrate.engine.images import ensure_image
    from orchestrate.launch.run import new_run_id
    from orchestrate.launch.run_dir import check_runs_dir

    check_runs_dir(args.runs_dir.resolve())  # one line, before the image or any run
    install_teardown_signals()  # SIGTERM, SIGHUP: the baseline's project is taken down, as on Ctrl-C
    directory = args.runs_dir.resolve() / f"bench-launcher-{new_run_id()}"
    with launcher.unmeasured_directory(directory):  # removed again where the image cannot be had
        ensure_image(inv.engine(), args.image, progress=lambda t: print(f"[image] {t}", file=inv.out, flush=True))
    summary = launcher.run_launcher_bench(directory, args.repeats, args.scaling, inv.out, args.image)
    data, plot = write_artifacts(directory, "bench", summary, plots.plot_launcher, summary)
    inv.out.write(launcher.format_launcher(summary) + f"\nresults: {data}\nplot: {plot}\n")
    return 0


def bench_collectives(args: argparse.Namespace, inv: Invocation) -> int:
    target = collectives_target(min_size=args.min_size, max_size=args.max_size, min_time_s=args.min_time,
                                wire_bytes=args.wire_bytes, ops=args.ops)
    request = request_from_args(args, target)
    check_bench_request("collectives", request)
    pairs = request.nproc_per_node if isinstance(request.nproc_per_node, int) else 1  # (one process a node: auto)
    wire_bytes = message_bytes(args.wire_bytes, allow_zero=True)  # (checked by collectives_target above)
    if note := wire_test_note(wire_bytes, args.link.rate_bits if args.link else None, pairs):
        inv.say(f"[bench] {note}")
    code, result = run_request(request, inv)
    if result is None or not result.succeeded:
        return code
    inv.out.write(report_collectives(result.run_dir, str(args.link or "")).format() + "\n")
    return code


def bench_ddp(args: argparse.Namespace, inv: Invocation) -> int:
    target = ddp_target(steps=args.steps, batch_size=args.batch_size, image_size=args.image_size,
                        buckets_mb=args.buckets, batch_sizes=args.batch_sizes, sweep=args.sweep)
    check_bench_request("ddp", request_from_args(args, target))
    run_dirs = []
    for nodes in args.node_counts:
        code, result = run_request(request_from_args(args, target, nodes=nodes), inv)
        if result is None or not result.succeeded:
            return code
        run_dirs.append(result.run_dir)
    inv.out.write(report_ddp(run_dirs, str(args.link or "")).format() + "\n")
    return 0
