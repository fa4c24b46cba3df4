"""A worker that raises once, at step 4 of its first attempt (a transient error: a dataset server
that dropped its connection), so that torchrun restarts the worker group within its surviving
agents (--max-restarts). On the restart, the first node's ranks read their checkpoint before
init_process_group (3 s), so the other node's ranks reach the process group's store first."""
import os
import time

import torch
import torch.distributed as dist

restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if restart and int(os.environ["GROUP_RANK"]) == 0:
    time.sleep(3)  # reading a checkpoint before joining the group
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(8):
    total = torch.ones(1)
    dist.all_reduce(total)
    if rank == dist.get_world_size() - 1 and step == 4 and restart == 0:
        raise RuntimeError("transient: lost the connection to the dataset server")
    time.sleep(0.1)
print(f"rank {rank} done after {restart} restart(s), world {int(total.item())}", flush=True)
dist.destroy_process_group()
