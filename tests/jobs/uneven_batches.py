"""A DDP loop over data split unevenly, written as a user would: the last rank gets fewer
batches, finishes its loop and leaves, while the others still train. Their next gradient
all_reduce loses its peer: with gloo it fails at once ("Connection closed by peer"), with NCCL it
would hang."""
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=8)
parser.add_argument("--short-by", type=int, default=3, help="batches the last rank lacks")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = args.batches - (args.short_by if rank == world - 1 else 0)
for batch in range(batches):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
print(f"rank {rank} done after {batches} batches", flush=True)
dist.destroy_process_group()
