"""A process group made on its member only, written as a user would: rank 0 makes a group of
its own (for its logging), then every rank makes the group they all train in. torch names the
groups by the order they are made, so rank 0's second group is rank 1's first by another name:
both ranks wait in it for the other to connect."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    log_group = dist.new_group([0])  # ONLY_RANK_0
group = dist.new_group([0, 1])  # EVERY_RANK
total = torch.ones(1)
dist.all_reduce(total, group=group)
print(f"rank {rank}: {total.item()}", flush=True)
dist.destroy_process_group()
