"""Print, from every worker, what torchrun and the process group say it is: its node (group
rank), global rank, local rank, world size and its node's local world size. Plain torch."""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"ranks node={os.environ['GROUP_RANK']} rank={dist.get_rank()} local={os.environ['LOCAL_RANK']}"
      f" world={dist.get_world_size()} local_world={os.environ['LOCAL_WORLD_SIZE']}", flush=True)
dist.barrier()
dist.destroy_process_group()
