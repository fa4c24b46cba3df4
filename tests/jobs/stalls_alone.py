"""A training loop of small all_reduces and optimizer steps that stalls for good, outside any
collective, at step 3 once it runs in a world of one rank (the nodes around it were lost): what
a hang after an elastic job shrank looks like."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} of {world}", flush=True)
weight = torch.nn.Parameter(torch.zeros(8))
optimizer = torch.optim.SGD([weight], lr=0.1)
for step in range(1, 10_000):
    if world == 1 and step == 3:
        time.sleep(100_000)  # stalls here, alone
    grad = torch.ones(8)
    dist.all_reduce(grad)
    weight.grad = grad
    optimizer.step()  # a step the workers' hook counts: @step faults fire in training
    time.sleep(0.2)
