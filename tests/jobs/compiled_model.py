"""A DDP model compiled with torch.compile, trained a few steps, as a user would write it: on
CPU, inductor builds the model's kernels with a C++ compiler, which the nodes must have. Each
rank trains on batches of its own, and prints its losses, a checksum of its parameters (equal
on every rank only if DDP averaged the gradients) and how many graphs it compiled."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
model = DistributedDataParallel(torch.compile(net))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    torch.manual_seed(100 * rank + step)  # each rank's own batch
    loss = model(torch.randn(16, 8)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
checksum = sum(p.detach().double().sum().item() for p in model.parameters())
print(f"rank {rank} parameters {checksum:.9f}", flush=True)
graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
print(f"rank {rank} compiled {graphs} graphs", flush=True)
dist.destroy_process_group()
