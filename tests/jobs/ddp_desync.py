"""A DDP training loop with the classic bug, written as a user would: at step 3 rank 0 alone
averages its loss for a log line, so its all_reduce meets the other ranks' gradient all_reduce.
Without checks the job hangs or fails somewhere in gloo; with TORCH_DISTRIBUTED_DEBUG=DETAIL
torch names both collectives."""
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
    loss = model(torch.randn(8, 16)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0 and step == 3:
        mean_loss = loss.detach().reshape(1)
        dist.all_reduce(mean_loss)  # DESYNC: only rank 0 gets here
    print(f"rank {rank} step {step} done", flush=True)
dist.destroy_process_group()
