"""The setup() of the single-machine DDP tutorial, run under torchrun as a user would: it sets
MASTER_ADDR and MASTER_PORT itself, so init_process_group looks for a store at localhost:12355,
where none listens (torchrun's store is elsewhere), and waits there."""
import os

import torch
import torch.distributed as dist


def setup(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # INIT


setup(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
total = torch.ones(4)
dist.all_reduce(total)
print("sum", total.tolist(), flush=True)
dist.destroy_process_group()
