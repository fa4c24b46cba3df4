"""A job debugged as a user debugs one: rank 1 stops at breakpoint() before it sums its tensor
with the others, and rank 0 at torch.distributed.breakpoint() after (the others wait for it in a
barrier). What a terminal does to the rank's tensor there is what the job sums."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(2) * (rank + 1)
if rank == 1:
    breakpoint()
dist.all_reduce(t)
dist.breakpoint(rank=0)
print(f"rank {rank} sum {t.tolist()}", flush=True)
dist.destroy_process_group()
