"""All-reduce 40 MB again and again until a file named by the first argument exists, then wait
for ever: each rank receives from the other, and neither sends. Plain torch."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
tensor = torch.ones(10_000_000)  # 40 MB
flag = torch.zeros(1)
while True:
    dist.all_reduce(tensor)  # MOVES
    flag.fill_(float(os.path.exists(sys.argv[1])))
    dist.all_reduce(flag)  # every rank leaves the loop after the same all-reduce
    if flag.item():
        break
print(f"rank {rank} waits", flush=True)
dist.recv(torch.zeros(1), src=1 - rank)  # HANGS
