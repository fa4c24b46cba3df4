"""A job that prints faster than anyone reads, written as a user would: every rank logs each of
its items as it goes, tens of thousands of lines in a second or two, then says it is done."""
import argparse

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=30000)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(args.lines):
    print(f"rank {rank} item {i} " + "x" * 60)
print(f"rank {rank} done", flush=True)
dist.barrier()
dist.destroy_process_group()
