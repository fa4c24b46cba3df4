"""A plain user DDP script, as people write it: nothing special at exit.

init, DDP on a small model, a few steps, all_gather_object, destroy_process_group, return.
No os._exit, no gc.collect, no del: the exit-soundness benchmark runs it as it is.
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(nn.Linear(10, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(8, 10)).sum().backward()
        optimizer.step()
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank})
    assert [g["rank"] for g in gathered] == list(range(world)), gathered
    print(f"plain_ddp rank {rank}/{world} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
