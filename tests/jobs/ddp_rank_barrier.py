"""A DDP training loop with a barrier only one rank reaches, written as a user would: rank 0
saves a checkpoint at step 3 and waits for the others in a barrier placed inside its
``if rank == 0:``. The others go on into their next backward pass, where DDP all-reduces the
gradients: every rank waits, in a different collective. Each step accumulates two micro-batches,
the first under ``no_sync()`` (no all-reduce)."""
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(16, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    with model.no_sync():
        model(torch.randn(8, 16)).square().mean().backward()  # ACCUMULATE
    model(torch.randn(8, 16)).square().mean().backward()  # SYNC
    optimizer.step()
    print(f"rank {rank} step {step} done", flush=True)
    if rank == 0 and step == 3:
        state = model.module.state_dict()
        dist.barrier()  # DESYNC: rank 0 alone waits here
dist.destroy_process_group()
