"""A DDP training loop whose rank 1 is slow to load its second batch, written as a user would
(plain torch): rank 0 goes on into its second forward pass, where DDP rebuilds its gradient buckets
and broadcasts them from rank 0, and waits there for rank 1. The model has BatchNorm (buffers),
whose broadcast comes after the rebuild in the same forward pass."""
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def next_batch(step, rank):
    if rank == 1 and step == 2:
        time.sleep(600)  # SLOW: rank 1's data loading stalls
    return torch.randn(16, 8), torch.randn(16, 1)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
model = DistributedDataParallel(net)  # BUILD
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 4):
    x, y = next_batch(step, rank)
    loss = torch.nn.functional.mse_loss(model(x), y)  # FORWARD
    optimizer.zero_grad()
    loss.backward()  # BACKWARD
    optimizer.step()
dist.destroy_process_group()
