"""Two step loops timed in one worker: small all_reduces, and a small DDP model's training steps.
Rank 0 prints one JSON line of median seconds per step. Plain torch: the hook, when present,
wraps its collectives from outside."""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--steps", type=int, default=400)
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch, small = torch.randn(32, 64), torch.ones(16)


def allreduce_step() -> None:
    dist.all_reduce(small)


def ddp_step() -> None:
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss.detach())  # the loss logged across ranks, as training loops do


results = {}
for name, step in (("allreduce", allreduce_step), ("ddp", ddp_step)):
    for _ in range(20):
        step()  # warm up
    per_round = []
    for _ in range(args.rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        per_round.append((time.perf_counter() - start) / args.steps)
    results[name] = statistics.median(per_round)
if dist.get_rank() == 0:
    print("STEP_TIMES " + json.dumps(results), flush=True)
dist.destroy_process_group()
