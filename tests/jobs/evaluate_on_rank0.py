"""A DDP training loop whose rank 0 alone evaluates the model, written as a user would: the
model has BatchNorm (buffers), so every forward pass of the DDP model broadcasts them, the
evaluation's too. Rank 0 waits there; the other ranks wait in the barrier after it."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def evaluate(model):
    model.eval()
    with torch.no_grad():
        return model(torch.randn(16, 8)).mean().item()  # EVALUATE


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)))  # BUILD
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    optimizer.zero_grad()
    loss = model(torch.randn(16, 8)).square().mean()  # FORWARD
    loss.backward()  # BACKWARD
    optimizer.step()
if rank == 0:
    print("validation", evaluate(model), flush=True)
dist.barrier()  # BARRIER
dist.destroy_process_group()
