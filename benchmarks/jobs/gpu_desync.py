"""The classic multi-node bug on GPUs, written as a user would: only rank 0 logs a metric, and
its extra all_reduce has no partner. NCCL queues collectives on the GPU's stream and returns at
once, so the ranks do not wait where they part: each waits later, where it reads a result
(``.item()``). Plain torch; on a host without CUDA it runs on gloo."""
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

on_gpu = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()) if on_gpu else None
if on_gpu:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if on_gpu else "gloo")
rank = dist.get_rank()
for step in range(1, args.steps + 1):
    stats = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    dist.all_reduce(stats)
    if rank == 0 and step == 3:
        metric = torch.tensor([float(step)], device=device)
        dist.all_reduce(metric)  # DESYNC: only rank 0 gets here
    print(f"step {step} total {stats.sum().item():g}", flush=True)  # READ: waits for the GPU
dist.destroy_process_group()
