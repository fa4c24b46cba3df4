"""Ranks that name different roots, written as a user would: the losses are gathered to rank 0
(the list only rank 0 gives), then each rank broadcasts the seed "from itself" (src=rank, where
every rank must name the same one, a global rank). gloo pairs the broadcasts anyway, and each
waits for a root that never sends: the job hangs there."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
loss = torch.tensor([float(rank)])
losses = [torch.zeros(1) for _ in range(world)] if rank == 0 else None
dist.gather(loss, losses, 0)
seed = torch.tensor([1234 + rank])
dist.broadcast(seed, src=rank)  # ROOTS: each rank names itself
print(f"rank {rank} seed {int(seed)}", flush=True)
dist.destroy_process_group()
