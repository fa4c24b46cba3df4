"""One long, silent step: rank 0 computes alone for --seconds (an evaluation, a slow step) while
the others wait in a barrier. Nothing is hung."""
import argparse
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} starting", flush=True)
if rank == 0:
    deadline, x = time.monotonic() + args.seconds, torch.randn(256, 256)
    while time.monotonic() < deadline:
        x = torch.tanh(x @ x)  # compute, and say nothing
dist.barrier()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
