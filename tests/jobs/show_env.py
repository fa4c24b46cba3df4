"""Print, from every rank, the variables a test passed with --env, --env-file and --copy-env,
and the CPU threads torch sized its pool to."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
names = sorted(n for n in os.environ if n.startswith("DDPTEST_"))
print(f"env rank={dist.get_rank()} " + " ".join(f"{n}={os.environ[n]}" for n in names), flush=True)
print(f"threads rank={dist.get_rank()} torch={torch.get_num_threads()}", flush=True)
dist.barrier()
dist.destroy_process_group()
