"""Ranks that wait in different places, as a user's job might: every rank but the last waits in
a barrier, the last one sleeps in a function of its own (a stuck data loader, say). Prints
"ready" first, so a test knows the ranks are where they will stay."""
import time

import torch.distributed as dist


def load_next_batch() -> None:
    time.sleep(3600)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
dist.barrier()
print(f"rank {rank} ready", flush=True)
if rank == world - 1:
    load_next_batch()
dist.barrier()
