"""A training loop whose rank 0 evaluates alone for longer than the process group's timeout,
written as a user would: the others wait for it in the barrier after the step, and their wait
times out while rank 0 still computes. The job was working; its timeout was too short."""
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def evaluate(seconds: float) -> float:
    end, x = time.time() + seconds, torch.randn(128, 128)
    while time.time() < end:
        x = (x @ x).tanh()  # EVALUATE
    return float(x.sum())


for step in range(4):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1 and rank == 0:
        print("eval", evaluate(60), flush=True)
    dist.barrier()  # BARRIER
dist.destroy_process_group()
