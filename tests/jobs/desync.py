"""A classic multi-node bug, written as a user would: only rank 0 logs a metric, and its extra
all_reduce has no partner. The ranks' collectives part at step 3; the job hangs (or, with a
process group timeout, fails) there."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, args.steps + 1):
    stats = torch.tensor([1.0, 2.0, 3.0, 4.0])
    dist.all_reduce(stats)
    if rank == 0 and step == 3:
        metric = torch.tensor([float(step)])
        dist.all_reduce(metric)  # DESYNC: only rank 0 gets here
    print(f"step {step} done", flush=True)
dist.destroy_process_group()
