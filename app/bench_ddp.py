"""Step time of one model in three forms: without DDP, with DDP (a few bucket sizes), and with
one all_reduce per parameter after backward (the naive form).

    torchrun --standalone --nproc-per-node 2 -m app.bench_ddp --buckets 1 25 100 --out ddp.json

The model is torchvision's ResNet-50 (161 parameter tensors, 25.6 M parameters) on synthetic
images; every rank keeps its batch (weak scaling), so the ideal step time with DDP is the
step time without it. "Without DDP" runs on every rank at once, each on its own, so that it
sees the same CPU contention as the others. The forms are measured side by side: every round
runs one step of each, in turn, so that warm-up, drift and the machine's load hit them alike;
a step's time is the slowest rank's, a form's is the median over the timed rounds. After the
DDP and naive forms every replica must be identical. Rank 0 prints a row per form and writes
the results as JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from app.distenv import WorkerEnv, add_timeout_option, log0, process_group, select_device
from app.toy import parameter_checksum, replicas_agree


def make_model(name: str, device: torch.device) -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).to(device)


class Form:
    """One way to train the model: its own replica, optimizer and gradient synchronisation."""

    def __init__(self, name: str, model: nn.Module, sync, device: torch.device, args: argparse.Namespace,
                 replica: Optional[nn.Module] = None, **extra: float) -> None:
        self.name, self.model, self.sync, self.device = name, model, sync, device
        self.replica = replica  # the module whose parameters must agree across ranks
        self.extra = extra
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(1 + dist.get_rank())
        self.images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator).to(device)
        self.labels = torch.randint(0, 1000, (args.batch_size,), generator=generator).to(device)
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


def naive_sync(model: nn.Module, world: int):
    """After backward: one blocking all_reduce per parameter, then the mean."""
    def sync() -> None:
        for param in model.parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad)
                param.grad.div_(world)
    return sync


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="app.bench_ddp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", help="a torchvision model (default: resnet50)")
    parser.add_argument("--batch-size", type=int, default=8, help="images per rank and step (default: 8)")
    parser.add_argument("--image-size", type=int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument("--buckets", type=float, nargs="+", default=[1.0, 25.0, 100.0],
                        help="DDP bucket sizes in MB to try (default: 1 25 100; 25 is DDP's default)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per form (default: 2)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per form (default: 5)")
    parser.add_argument("--out", type=Path, default=None, help="rank 0 writes the results here (JSON)")
    add_timeout_option(parser)
    args = parser.parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    with process_group(device, args.timeout) as backend:
        world = dist.get_world_size()
        probe = make_model(args.model, device)
        tensors = sum(1 for _ in probe.parameters())
        params = sum(p.numel() for p in probe.parameters())
        del probe
        log0(f"{args.model}: {tensors} parameter tensors, {params / 1e6:.1f} M parameters; world size {world},"
             f" batch {args.batch_size}x{args.image_size}px per rank, backend {backend}")
        forms = [Form("local", make_model(args.model, device), lambda: None, device, args)]
        for bucket in args.buckets:
            ddp = DDP(make_model(args.model, device), device_ids=[device.index] if device.type == "cuda" else None,
                      bucket_cap_mb=bucket)
            forms.append(Form(f"ddp-{bucket:g}MB", ddp, lambda: None, device, args, replica=ddp.module,
                              bucket_mb=bucket))
        naive = make_model(args.model, device)
        for tensor in naive.state_dict().values():  # the same start on every rank, as DDP guarantees
            dist.broadcast(tensor, src=0)
        forms.append(Form("naive", naive, naive_sync(naive, world), device, args, replica=naive))
        for round_ in range(args.warmup + args.steps):
            for form in forms:
                form.step(timed=round_ >= args.warmup)
            log0(f"round {round_ + 1}/{args.warmup + args.steps}" + (" (warm-up)" if round_ < args.warmup else "")
                 + ": " + ", ".join(f"{f.name} {f.times[-1] * 1e3:.0f} ms" for f in forms if f.times
                                    and round_ >= args.warmup))
        log0(f"{'form':<16} {'step (ms)':>10} {'vs local':>9} replicas")
        results, all_ok = [], True
        local = statistics.median(forms[0].times)
        for form in forms:
            ok = True if form.replica is None else replicas_agree(parameter_checksum(form.replica), device)
            all_ok &= ok
            median = statistics.median(form.times)
            results.append({"form": form.name, "step_s": median, "steps_s": form.times, "replicas_identical": ok,
                            **form.extra})
            log0(f"{form.name:<16} {median * 1e3:>10.1f} {median / local:>8.2f}x"
                 f" {'-' if form.replica is None else ('identical' if ok else 'DIFFER')}")
        if env.rank == 0 and args.out:
            args.out.write_text(json.dumps({
                "model": args.model, "parameter_tensors": tensors, "parameters": params, "world_size": world,
                "nodes": world // env.local_world_size, "local_world_size": env.local_world_size,
                "batch_size": args.batch_size, "image_size": args.image_size, "backend": backend,
                "device": device.type, "forms": results, "measured": "side by side, one step of each form per round",
            }, indent=2) + "\n")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
