"""Use what a derived image added: a pip requirement and a file from the work directory's Dockerfile."""
from pathlib import Path

import ddptest_dep
import torch.distributed as dist

dist.init_process_group("gloo")
marker = Path("/opt/ddptest-marker.txt").read_text().strip()
print(f"deps rank={dist.get_rank()} dep={ddptest_dep.VALUE} marker={marker}", flush=True)
dist.barrier()
dist.destroy_process_group()
