"""The DDP tutorial's ToyModel, trained across every rank.

Each rank draws its own data (seeded by its rank); DDP averages the gradients, so every
replica stays identical. At the end every rank prints a checksum of its parameters and
the program checks that all ranks agree.

    torchrun --standalone --nproc-per-node 2 -m app.toy --steps 20
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from app.distenv import WorkerEnv, log0, process_group, select_device


class ToyModel(nn.Module):
    """Linear(10, 10) -> ReLU -> Linear(10, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


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


def train_basic(args: argparse.Namespace, env: WorkerEnv, device: torch.device) -> bool:
    """Train the ToyModel under DDP for ``args.steps`` steps; return whether replicas agree."""
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type != "cpu" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    data = torch.Generator().manual_seed(args.seed + 1000 + env.rank)  # each rank its own data
    started = last = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs = torch.randn(args.batch_size, 10, generator=data).to(device)
        labels = torch.randn(args.batch_size, 5, generator=data).to(device)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(inputs), labels)
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        if step % args.log_every == 0 or step == args.steps:
            rate = args.log_every * args.batch_size * env.world_size / max(now - last, 1e-9)
            log0(f"step {step}/{args.steps} loss {loss.item():.4f} ({rate:.0f} samples/s)")
            last = now
    checksum = parameter_checksum(model)
    print(f"param_checksum rank={env.rank} value={checksum:.12f}", flush=True)
    agree = replicas_agree(checksum, device)
    log0(f"trained {args.steps} steps in {time.perf_counter() - started:.2f} s;"
         f" replicas {'identical' if agree else 'DIFFER'} across {env.world_size} ranks")
    return agree


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.toy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="training steps (default: 20)")
    parser.add_argument("--batch-size", type=int, default=20, help="per-rank batch size (default: 20)")
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--log-every", type=int, default=5, help="print progress every N steps")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="process group timeout in seconds (default: 300)")
    return parser.parse_args(argv)


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    with process_group(device, args.timeout) as backend:
        log0(f"toy DDP: world size {env.world_size}, backend {backend}, device {device.type}")
        ok = train_basic(args, env, device)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
