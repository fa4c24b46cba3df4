"""Write into the work directory, HOME's cache and the shared volume, and say who we are."""
import getpass
import os
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
Path("out").mkdir(exist_ok=True)
Path(f"out/rank{rank}.txt").write_text(f"rank {rank}\n")
cache = Path(os.environ["HOME"]) / ".cache" / "ddptest"
cache.mkdir(parents=True, exist_ok=True)
(cache / f"rank{rank}").write_text("cached\n")
shared = Path(os.environ["DDP_SHARED_DIR"]) / "ckpt"
shared.mkdir(exist_ok=True)
(shared / f"rank{rank}.pt").write_text("checkpoint\n")
print(f"wrote rank={rank} uid={os.getuid()} gid={os.getgid()} home={os.environ['HOME']}"
      f" user={getpass.getuser()}", flush=True)
dist.barrier()
dist.destroy_process_group()
