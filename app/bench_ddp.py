"""Step time of one model in several forms, measured side by side:

- ``local``: without DDP (every rank on its own, at once, so that it sees the same contention);
- ``ddp-<B>MB``: DDP with its defaults, at each bucket size of ``--buckets``;
- ``ddp-tuned``: DDP (25 MB buckets) with ``gradient_as_bucket_view=True`` (gradients are views
  into the buckets: no copy in or out), ``broadcast_buffers=False`` (no broadcast of the
  buffers before every forward) and ``static_graph=True`` (the graph is traced once, not
  searched every step);
- ``ddp-noop``: DDP whose communication hook does nothing (torch's ``debugging_hooks.noop_hook``):
  DDP's bookkeeping alone, as PyTorch's docs suggest for headroom analysis;
- ``naive``: one blocking all_reduce per parameter after backward.

    torchrun --standalone --nproc-per-node 2 -m app.bench_ddp --buckets 25 --out ddp.json
    torchrun --standalone --nproc-per-node 1 -m app.bench_ddp --sweep --image-size 224

The model is torchvision's ResNet-50 (161 parameter tensors, 25.6 M parameters) on synthetic
images; every rank keeps its batch (weak scaling), so the ideal step time with DDP is the
step time without it. Every round runs one step of each form, in turn, so that warm-up, drift
and the machine's load hit them alike; a step's time is the slowest rank's, a form's is the
median over the timed rounds. After the DDP and naive forms every replica must be identical.

**The regime.** On a GPU a small batch's step is bound by the CPU launching kernels: its time
hardly grows with the batch, and DDP's extra launches count in full, though a GPU-bound step
would hide them. So each batch size's regime is measured: ``--sweep`` doubles the batch from
``--batch-size`` (the default on GPUs) until the step time grows with it (doubling the batch
makes the step at least 1.6x slower: GPU-bound), and every form is measured at each batch
size of the sweep, each row saying its regime. On the CPU the step is compute-bound at any
batch: one batch size, regime ``cpu``. Rank 0 prints a row per batch size and form and
writes the results as JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from app.distenv import (
    WorkerEnv,
    add_timeout_option,
    file_to_write,
    log0,
    non_negative_int,
    positive_int,
    process_group,
    refuse,
    select_device,
)
from app.toy import parameter_checksum, replicas_agree

# Doubling the batch makes a GPU-bound step at least this much slower (its time grows with
# the batch); a launch-bound step barely slows.
GPU_BOUND_ELASTICITY = 0.7  # log(t2/t1) / log(b2/b1): 1 = time proportional to the batch
SWEEP_MAX_DOUBLINGS = 4


def step_elasticity(batch_1: int, time_1: float, batch_2: int, time_2: float) -> float:
    """How a step's time grows with the batch: 1 when proportional, 0 when flat."""
    return math.log(time_2 / time_1) / math.log(batch_2 / batch_1)


def batch_regimes(step_times: dict[int, float], device_type: str) -> dict[int, str]:
    """Each batch size's regime from the step times without DDP (pure): ``gpu-bound`` when the
    step's time grows with the batch from it to the next size (the last size: from the one
    before), else ``launch-bound``; ``cpu`` on the CPU; ``unknown`` for a lone GPU batch size."""
    batches = sorted(step_times)
    if device_type == "cpu":
        return {b: "cpu" for b in batches}
    if len(batches) < 2:
        return {b: "unknown" for b in batches}
    regimes = {}
    for i, batch in enumerate(batches):
        j, k = (i, i + 1) if i + 1 < len(batches) else (i - 1, i)
        growth = step_elasticity(batches[j], step_times[batches[j]], batches[k], step_times[batches[k]])
        regimes[batch] = "gpu-bound" if growth >= GPU_BOUND_ELASTICITY else "launch-bound"
    return regimes


def make_model(name: str, device: torch.device) -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).to(device)


class Form:
    """One way to train the model: its own replica, optimizer and gradient synchronisation."""

    def __init__(self, name: str, model: nn.Module, sync: Callable[[], None], device: torch.device,
                 args: argparse.Namespace, batch: int, replica: Optional[nn.Module] = None, **extra: object) -> None:
        self.name, self.model, self.sync, self.device = name, model, sync, device
        self.replica = replica  # the module whose parameters must agree across ranks
        self.extra = extra
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(1 + dist.get_rank())
        self.images = torch.randn(batch, 3, args.image_size, args.image_size, generator=generator).to(device)
        self.labels = torch.randint(0, 1000, (batch,), generator=generator).to(device)
        self.times: list[float] = []

    def step(self, timed: bool) -> None:
        """One training step; its time is the slowest rank's."""
        dist.barrier()
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(self.images), self.labels).backward()
        self.sync()
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=self.device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if timed:
            self.times.append(float(elapsed.item()))


def naive_sync(model: nn.Module, world: int) -> Callable[[], None]:
    """After backward: one blocking all_reduce per parameter, then the mean."""
    def sync() -> None:
        for param in model.parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad)
                param.grad.div_(world)
    return sync


def ddp_of(model: nn.Module, device: torch.device, **knobs: object) -> DDP:
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **knobs)


def no_sync() -> None:
    """DDP synchronises in backward: nothing left to do after it."""


def make_forms(args: argparse.Namespace, device: torch.device, batch: int) -> list[Form]:
    """Every form, at ``batch`` images per rank; ``local`` first."""
    forms = [Form("local", make_model(args.model, device), no_sync, device, args, batch)]
    for bucket in args.buckets:
        ddp = ddp_of(make_model(args.model, device), device, bucket_cap_mb=bucket)
        forms.append(Form(f"ddp-{bucket:g}MB", ddp, no_sync, device, args, batch, replica=ddp.module, bucket_mb=bucket))
    tuned = ddp_of(make_model(args.model, device), device, gradient_as_bucket_view=True, broadcast_buffers=False,
                   static_graph=True)
    forms.append(Form("ddp-tuned", tuned, no_sync, device, args, batch, replica=tuned.module, bucket_mb=25.0,
                      knobs="gradient_as_bucket_view, broadcast_buffers=False, static_graph"))
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks

    noop = ddp_of(make_model(args.model, device), device)
    noop.register_comm_hook(None, debugging_hooks.noop_hook)  # no communication: replicas drift apart
    forms.append(Form("ddp-noop", noop, no_sync, device, args, batch, knobs="noop_hook: DDP without communication"))
    naive = make_model(args.model, device)
    for tensor in naive.state_dict().values():  # the same start on every rank, as DDP guarantees
        dist.broadcast(tensor, src=0)
    forms.append(Form("naive", naive, naive_sync(naive, dist.get_world_size()), device, args, batch, replica=naive))
    return forms


def measure(forms: list[Form], args: argparse.Namespace, label: str) -> None:
    """Warm-up and timed rounds, one step of each form per round."""
    for round_ in range(args.warmup + args.steps):
        for form in forms:
            form.step(timed=round_ >= args.warmup)
        if round_ >= args.warmup:
            log0(f"{label} round {round_ + 1 - args.warmup}/{args.steps}: "
                 + ", ".join(f"{f.name} {f.times[-1] * 1e3:.0f} ms" for f in forms))


def local_step_s(args: argparse.Namespace, device: torch.device, batch: int) -> float:
    """The step time without DDP at ``batch`` (the sweep's probe)."""
    form = Form("local", make_model(args.model, device), no_sync, device, args, batch)
    measure([form], args, f"sweep, batch {batch}:")
    return statistics.median(form.times)


def batch_sizes(args: argparse.Namespace, device: torch.device) -> list[int]:
    """The batch sizes to measure: ``--batch-sizes``, or the sweep (GPUs, or ``--sweep``): from
    ``--batch-size``, doubling until the step time grows with the batch, or memory runs out."""
    if args.batch_sizes:
        return sorted(set(args.batch_sizes))
    if not (args.sweep if args.sweep is not None else device.type == "cuda"):
        return [args.batch_size]
    swept = {args.batch_size: local_step_s(args, device, args.batch_size)}
    batch = args.batch_size
    for _ in range(SWEEP_MAX_DOUBLINGS):
        try:
            swept[batch * 2] = local_step_s(args, device, batch * 2)
        except torch.OutOfMemoryError:
            log0(f"sweep: batch {batch * 2} does not fit in memory; stopping at {batch}")
            break
        if step_elasticity(batch, swept[batch], batch * 2, swept[batch * 2]) >= GPU_BOUND_ELASTICITY:
            log0(f"sweep: batch {batch * 2} is GPU-bound (the step grows with the batch)")
            batch *= 2
            break
        batch *= 2
    return sorted(swept)


def check_one_image_trains(model: nn.Module, args: argparse.Namespace, device: torch.device) -> None:
    """Refuse, in one line, a batch of one image the model cannot train on (BatchNorm, where the
    last feature map is 1x1 at this image size), before anything is measured."""
    try:
        model(torch.zeros(1, 3, args.image_size, args.image_size, device=device))
    except ValueError as exc:
        if "Expected more than 1 value per channel" not in str(exc):
            raise
        refuse(f"--batch-size 1 at --image-size {args.image_size}: {args.model}'s batch norm needs more than one"
               " value per channel in training, and one image makes one at its last layer here: give a batch of 2"
               " or more, or a larger --image-size")


@record
def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="app.bench_ddp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", help="a torchvision model (default: resnet50)")
    parser.add_argument("--batch-size", type=positive_int, default=8,
                        help="images per rank and step; where a sweep starts (default: 8)")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=None, metavar="N",
                        help="measure at these batch sizes instead (no sweep)")
    sweep = parser.add_mutually_exclusive_group()
    sweep.add_argument("--sweep", dest="sweep", action="store_true", default=None,
                       help="double the batch from --batch-size until the step is GPU-bound (default on GPUs)")
    sweep.add_argument("--no-sweep", dest="sweep", action="store_false", help="measure at --batch-size only")
    parser.add_argument("--image-size", type=positive_int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument("--buckets", type=float, nargs="+", default=[25.0],
                        help="DDP bucket sizes in MB to try with DDP's defaults (default: 25, DDP's own)")
    parser.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps per form (default: 2)")
    parser.add_argument("--steps", type=positive_int, default=5, help="timed steps per form (default: 5)")
    parser.add_argument("--out", type=file_to_write, default=None, help="rank 0 writes the results here (JSON)")
    add_timeout_option(parser)
    args = parser.parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    with process_group(device, args.timeout) as backend:
        world = dist.get_world_size()
        probe = make_model(args.model, device)
        tensors = sum(1 for _ in probe.parameters())
        params = sum(p.numel() for p in probe.parameters())
        if min(args.batch_sizes or [args.batch_size]) == 1:  # batch norm in training needs two values a channel
            check_one_image_trains(probe, args, device)
        del probe
        log0(f"{args.model}: {tensors} parameter tensors, {params / 1e6:.1f} M parameters; world size {world},"
             f" {args.image_size}px images, backend {backend}, device {device.type}")
        batches = batch_sizes(args, device)
        rows, all_ok, local_times = [], True, {}
        for batch in batches:
            forms = make_forms(args, device, batch)
            measure(forms, args, f"batch {batch}:")
            local_times[batch] = statistics.median(forms[0].times)
            for form in forms:
                ok = True if form.replica is None else replicas_agree(parameter_checksum(form.replica), device)
                all_ok &= ok
                rows.append({"form": form.name, "batch_size": batch, "step_s": statistics.median(form.times),
                             "steps_s": form.times, "replicas_identical": ok if form.replica is not None else None,
                             **form.extra})
            del forms
            if device.type == "cuda":
                torch.cuda.empty_cache()
        regimes = batch_regimes(local_times, device.type)
        log0(f"{'batch':>5} {'regime':<12} {'form':<12} {'step (ms)':>10} {'vs local':>9} replicas")
        for row in rows:
            row["regime"] = regimes[row["batch_size"]]
            row["vs_local"] = row["step_s"] / local_times[row["batch_size"]]
            same = {True: "identical", False: "DIFFER", None: "-"}[row["replicas_identical"]]
            log0(f"{row['batch_size']:>5} {row['regime']:<12} {row['form']:<12} {row['step_s'] * 1e3:>10.1f}"
                 f" {row['vs_local']:>8.3f}x {same}")
        if env.rank == 0 and args.out:
            args.out.write_text(json.dumps({
                "model": args.model, "parameter_tensors": tensors, "parameters": params, "world_size": world,
                "nodes": world // env.local_world_size, "local_world_size": env.local_world_size,
                "batch_sizes": batches, "regimes": {str(b): r for b, r in regimes.items()},
                "image_size": args.image_size, "backend": backend, "device": device.type, "forms": rows,
                "measured": "side by side, one step of each form per round",
            }, indent=2) + "\n")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
