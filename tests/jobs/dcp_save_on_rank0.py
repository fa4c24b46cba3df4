"""A DDP training loop whose rank 0 alone saves with torch.distributed.checkpoint, written as a
user used to torch.save would: dcp.save is a collective (the ranks agree on a plan, each writes
its own part), so rank 0 waits in it while rank 1 goes on to its next step."""
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 5):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).square().mean().backward()  # STEP
    optimizer.step()
    if step == 2 and rank == 0:
        dcp.save({"model": model.state_dict()}, checkpoint_id=f"ckpt/step_{step}")  # SAVE
dist.destroy_process_group()
