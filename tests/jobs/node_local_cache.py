"""A user's script that prepares a file once for every rank, as one machine allows: rank 0 writes
a vocabulary to /tmp, a barrier, then every rank reads it. On two nodes the other node's /tmp has
no such file. With --per-node the first rank of each node (LOCAL_RANK 0) writes it, which works
on any number of nodes. Plain torch: no call into ddp-compose."""
import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--cache", default="/tmp/ddp-cache/vocab.json", help="where the vocabulary is prepared")
parser.add_argument("--per-node", action="store_true", help="prepare it on every node, not on rank 0 alone")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
preparer = int(os.environ["LOCAL_RANK"]) == 0 if args.per_node else rank == 0
if preparer:
    os.makedirs(os.path.dirname(args.cache), exist_ok=True)
    with open(args.cache, "w") as f:
        json.dump({"hello": 0, "world": 1}, f)
dist.barrier()
with open(args.cache) as f:
    vocabulary = json.load(f)
size = torch.tensor([float(len(vocabulary))])
dist.all_reduce(size)
print(f"rank {rank} vocabulary {len(vocabulary)} summed {size.item():.0f}", flush=True)
dist.destroy_process_group()
