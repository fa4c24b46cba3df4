"""Two process groups of the same ranks, used in another order on each rank: each waits in the
group the other has not reached (a plain script: no import of orchestrate)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
data_parallel = dist.new_group([0, 1])
model_parallel = dist.new_group([0, 1])
t = torch.ones(4)
if rank == 0:
    dist.all_reduce(t, group=data_parallel)  # RANK_0_FIRST
    dist.all_reduce(t, group=model_parallel)
else:
    dist.all_reduce(t, group=model_parallel)  # RANK_1_FIRST
    dist.all_reduce(t, group=data_parallel)
dist.destroy_process_group()
