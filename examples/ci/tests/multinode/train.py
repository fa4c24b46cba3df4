"""A small DDP training script, as a user's repository has one: it reports its steps (so
faults can fire at them) and prints a checksum of its final parameters on every rank."""
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:  # ddp-compose's progress channel; a no-op anywhere else
    from orchestrate.progress import report
except ImportError:
    def report(step, **metrics):
        pass

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(16, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(1, args.steps + 1):
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step * 100 + rank))
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    report(step, loss=loss.item())
checksum = sum(p.double().sum().item() for p in model.parameters())
print(f"final checksum {checksum:.10f}", flush=True)
dist.destroy_process_group()
