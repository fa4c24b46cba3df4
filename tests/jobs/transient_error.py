"""A worker that raises once, at step 4 of its first start (a transient error: a dataset server
that dropped its connection), so that torchrun restarts the worker group within its surviving
agents (--max-restarts). On its second start, each of the first node's workers reads its
checkpoint before init_process_group (3 s), so the other node's ranks reach the process group's
store first. Starts are counted in a node-local file per local rank: torchrun's own
TORCHELASTIC_RESTART_COUNT stays 0 on a node whose agent only rejoined the new round."""
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

marker = Path(f"/tmp/transient_error-starts-{os.environ['LOCAL_RANK']}")
starts = int(marker.read_text()) + 1 if marker.exists() else 1
marker.write_text(str(starts))
if starts > 1 and int(os.environ["GROUP_RANK"]) == 0:
    time.sleep(3)  # reading a checkpoint before joining the group
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(8):
    total = torch.ones(1)
    dist.all_reduce(total)
    if rank == dist.get_world_size() - 1 and step == 4 and starts == 1:
        raise RuntimeError("transient: lost the connection to the dataset server")
    time.sleep(0.1)
print(f"rank {rank} done in start {starts}, world {int(total.item())}", flush=True)
dist.destroy_process_group()
