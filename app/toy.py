"""The DDP tutorial's demos with its ToyModel, trained across every rank.

    torchrun --standalone --nproc-per-node 2 -m app.toy [--demo basic|checkpoint|model-parallel|spanning]

- basic: ToyModel under DDP; each rank draws its own data, DDP averages the gradients.
- checkpoint: train, rank 0 saves, a barrier, every rank loads onto its own device
  (map_location), training goes on from there.
- model-parallel: each process spans two devices (the model split across them, DDP
  without device_ids); GPUs need 2 per process; on the CPU both halves are on the CPU.
- spanning: each process spans G/L of its node's G GPUs (L processes per node), the
  model split across them; refused when G < L.

Every demo ends with a checksum of each rank's parameters and checks that all agree.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from app.checkpoint import load_checkpoint, remove_checkpoint, save_checkpoint
from app.distenv import (
    WorkerEnv,
    accelerator_count,
    add_timeout_option,
    log0,
    positive_int,
    process_devices,
    process_group,
    refuse,
    report_step,
    shares_gpus,
    span_per_process,
)


class SplitToyModel(nn.Module):
    """ToyModel split across devices: net1 on the first, net2 on the last, extra hidden
    stages (Linear(10, 10) -> ReLU) on the devices between. One device: the ToyModel."""

    def __init__(self, devices: list[torch.device]) -> None:
        super().__init__()
        self.devices = devices
        self.net1 = nn.Linear(10, 10).to(devices[0])
        self.hidden = nn.ModuleList(nn.Linear(10, 10).to(d) for d in devices[1:-1])
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5).to(devices[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.net1(x.to(self.devices[0])))
        for layer, device in zip(self.hidden, self.devices[1:-1]):
            x = self.relu(layer(x.to(device)))
        return self.net2(x.to(self.devices[-1]))


def parameter_checksum(model: nn.Module) -> float:
    """Sum of every parameter in float64: equal on all ranks iff replicas agree (in practice)."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum().item() for p in model.parameters()))


def replicas_agree(checksum: float, device: torch.device) -> bool:
    """Gather every rank's checksum and check that they are all equal."""
    mine = torch.tensor([checksum], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    values = [g.item() for g in gathered]
    return max(values) - min(values) <= 1e-9 * max(1.0, abs(values[0]))


def wrap_ddp(model: nn.Module, devices: list[torch.device]) -> DDP:
    """DDP with device_ids for a one-GPU module; without them for CPU or multi-device modules."""
    single_gpu = len(devices) == 1 and devices[0].type != "cpu"
    return DDP(model, device_ids=[devices[0].index] if single_gpu else None)


def train(ddp_model: nn.Module, devices: list[torch.device], env: WorkerEnv,
          args: argparse.Namespace, steps: int, data: torch.Generator, label: str) -> None:
    """``steps`` SGD steps on this rank's own random data; progress from rank 0."""
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    last = time.perf_counter()
    for step in range(1, steps + 1):
        inputs = torch.randn(args.batch_size, 10, generator=data).to(devices[0])
        labels = torch.randn(args.batch_size, 5, generator=data).to(devices[-1])
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(inputs), labels)
        loss.backward()
        optimizer.step()
        report_step(step, loss=loss.item())
        if step % args.log_every == 0 or step == steps:
            now = time.perf_counter()
            rate = args.log_every * args.batch_size * env.world_size / max(now - last, 1e-9)
            log0(f"{label} step {step}/{steps} loss {loss.item():.4f} ({rate:.0f} samples/s)")
            last = now


def finish(model: nn.Module, devices: list[torch.device], env: WorkerEnv, what: str) -> bool:
    """Print this rank's parameter checksum and check that every replica agrees."""
    checksum = parameter_checksum(model)
    print(f"param_checksum rank={env.rank} value={checksum:.12f}", flush=True)
    agree = replicas_agree(checksum, devices[0])
    if not math.isfinite(checksum):  # (nan differs from itself: "replicas DIFFER" named the wrong fault)
        log0(f"{what}: training diverged: the parameters are {checksum} (a learning rate too high, or of nan?)")
        return False
    log0(f"{what}: replicas {'identical' if agree else 'DIFFER'} across {env.world_size} ranks")
    return agree


def demo_devices(args: argparse.Namespace, env: WorkerEnv) -> list[torch.device]:
    """The devices this process uses in ``args.demo``."""
    if args.demo == "model-parallel":
        return process_devices(env.local_rank, env.local_world_size, 2)
    if args.demo == "spanning":
        gpus = accelerator_count()
        try:
            per_process = span_per_process(gpus, env.local_world_size, shares_gpus()) if gpus else 1
        except ValueError as exc:
            refuse(str(exc))
        devices = process_devices(env.local_rank, env.local_world_size, per_process)
        print(f"rank {env.rank} (local rank {env.local_rank} of {env.local_world_size}) spans"
              f" {per_process} device(s): {[str(d) for d in devices]}", flush=True)
        return devices
    return process_devices(env.local_rank, env.local_world_size, 1)


def run_demo(args: argparse.Namespace, env: WorkerEnv, devices: list[torch.device]) -> bool:
    """Run ``args.demo``; return whether its checks passed."""
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = SplitToyModel(devices)
    ddp_model = wrap_ddp(model, devices)
    data = torch.Generator().manual_seed(args.seed + 1000 + env.rank)  # each rank its own data
    started = time.perf_counter()
    train(ddp_model, devices, env, args, args.steps, data, args.demo)
    if args.demo != "checkpoint":
        log0(f"trained {args.steps} steps in {time.perf_counter() - started:.2f} s")
        return finish(model, devices, env, args.demo)

    before = parameter_checksum(model)
    name = f"toy-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}-{env.master_port}.pt"
    path = args.checkpoint_dir / name
    save_checkpoint(args.checkpoint_dir, name, {"model": ddp_model.state_dict()})
    log0(f"rank 0 saved {path}; barrier passed, every rank loads it onto its own device")
    ddp_model.load_state_dict(load_checkpoint(path, devices[0])["model"])
    loaded = parameter_checksum(model)
    ok = abs(loaded - before) <= 1e-9 * max(1.0, abs(before))
    print(f"rank {env.rank} loaded the checkpoint: checksum {loaded:.12f}"
          f" {'matches' if ok else 'DIFFERS FROM'} its own {before:.12f}", flush=True)
    train(ddp_model, devices, env, args, args.steps, data, "after load")
    agree = finish(model, devices, env, "checkpoint")
    dist.barrier()  # nobody may still be reading when rank 0 removes the file
    if env.rank == 0:
        remove_checkpoint(args.checkpoint_dir, name)
    return ok and agree


DEMOS = ("basic", "checkpoint", "model-parallel", "spanning")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.toy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", choices=DEMOS, default="basic", help="which demo (default: basic)")
    parser.add_argument("--steps", type=positive_int, default=20, help="training steps (default: 20)")
    parser.add_argument("--batch-size", type=positive_int, default=20, help="per-rank batch size (default: 20)")
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--log-every", type=positive_int, default=5, help="print progress every N steps")
    parser.add_argument("--checkpoint-dir", type=Path,
                        default=Path(os.environ.get("DDP_SHARED_DIR", tempfile.gettempdir())),
                        help="directory all ranks can read (default: $DDP_SHARED_DIR, else the temp dir)")
    add_timeout_option(parser)
    return parser.parse_args(argv)


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = WorkerEnv.from_environ()
    devices = demo_devices(args, env)
    with process_group(devices[0], args.timeout) as backend:
        log0(f"toy DDP, demo {args.demo}: world size {env.world_size}, backend {backend},"
             f" {len(devices)} device(s) per process ({devices[0].type})")
        ok = run_demo(args, env, devices)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
