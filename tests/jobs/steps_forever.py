"""A loop of small all_reduces that prints every step and never ends by itself: what a fault
that stops a rank or a node leaves hanging."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
step = 0
while True:
    step += 1
    value = torch.ones(8)
    dist.all_reduce(value)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.2)
