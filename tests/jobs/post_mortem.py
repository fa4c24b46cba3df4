"""A job that fails as a user's does, run with --pdb: after a collective, rank 1 calls a function
of its own with a batch whose shape cannot be multiplied; rank 0 waits for it in a barrier."""
import torch
import torch.distributed as dist


def scale(batch, width):
    weights = torch.ones(width, 2)
    return batch @ weights


dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(2) * (rank + 1)
dist.all_reduce(t)
out = scale(t.reshape(1, 2), 2 if rank == 0 else 3)
print(f"rank {rank} out {out.tolist()}", flush=True)
dist.barrier()
dist.destroy_process_group()
