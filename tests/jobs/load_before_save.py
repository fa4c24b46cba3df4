"""A user's script that saves a checkpoint on rank 0 and reloads it on every rank to check it,
with no barrier between: rank 0 first computes its metrics (a moment), so the other ranks look
for the file before it is there. With --barrier every rank waits for the save in a
dist.barrier() first, which works. Plain torch: no call into ddp-compose."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", default="checkpoints/last.pt", help="where rank 0 saves the model")
parser.add_argument("--barrier", action="store_true", help="wait for the save before reloading it")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
if rank == 0:
    time.sleep(2)  # its metrics, before the save
    os.makedirs(os.path.dirname(args.checkpoint), exist_ok=True)
    torch.save(model.module.state_dict(), args.checkpoint)
if args.barrier:
    dist.barrier()
model.module.load_state_dict(torch.load(args.checkpoint))
print(f"rank {rank} reloaded {args.checkpoint}", flush=True)
dist.destroy_process_group()
