"""A DDP training loop on GPUs with the classic bug, written as a user would: at step 3 rank 0
alone averages its loss for a log line, so its all_reduce meets the other ranks' gradient
all_reduce. Plain torch; on a host without CUDA it runs on gloo."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

on_gpu = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()) if on_gpu else None
if on_gpu:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if on_gpu else "gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(16, 4).to(device),
                                device_ids=[device.index] if on_gpu else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, args.steps + 1):
    loss = model(torch.randn(8, 16, device=device)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0 and step == 3:
        mean_loss = loss.detach().reshape(1)
        dist.all_reduce(mean_loss)  # DESYNC: only rank 0 gets here
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
