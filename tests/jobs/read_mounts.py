"""A user's job with its data outside the work directory: read a dataset mounted read-only at
/data, write a checkpoint into a directory mounted at the host's own path (given as argv[1])."""
import sys
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} read: {Path('/data/readme.txt').read_text().strip()}", flush=True)
try:
    Path("/data/mine.txt").write_text("x")
    print(f"rank {rank} wrote into /data", flush=True)
except OSError as exc:
    print(f"rank {rank} could not write into /data: {exc.strerror}", flush=True)
Path(sys.argv[1], f"rank{rank}.ckpt").write_text(f"rank {rank}\n")
dist.barrier()
dist.destroy_process_group()
