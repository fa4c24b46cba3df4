"""Global rank --rank allocates --gib GiB (more than its node may have); the others wait in a collective."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--gib", type=float, default=4.0)
args = parser.parse_args()
dist.init_process_group("gloo")
if dist.get_rank() == args.rank:
    print(f"rank {args.rank} allocating {args.gib} GiB", flush=True)
    hog = bytearray(int(args.gib * 2**30))  # zero-filled: every page is touched
    print(f"allocated {len(hog)} bytes", flush=True)
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
