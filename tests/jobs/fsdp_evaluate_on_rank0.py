"""An FSDP (fully_shard) training loop whose rank 0 alone evaluates the model, written as a user
would: every forward pass of a sharded module gathers its parameters from every rank, the
evaluation's too. Rank 0 waits there; the other ranks wait in the barrier after it."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def evaluate(model):
    with torch.no_grad():
        return model(torch.randn(16, 8)).mean().item()  # EVALUATE


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
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
