"""A rank stuck before a barrier, written as a user would: rank 1 waits for its shard (a slow
filesystem) while rank 0 checks with ``monitored_barrier`` that every rank got there. Rank 0's
barrier names rank 1; rank 1 is ended where it waits, outside any collective."""
import datetime
import time

import torch.distributed as dist


def read_shard():
    time.sleep(300)  # STUCK: the filesystem never answers


dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    read_shard()
dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))
print("every rank reached the barrier", flush=True)
dist.destroy_process_group()
