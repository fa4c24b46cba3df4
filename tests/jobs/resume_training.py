"""A training loop that checkpoints every step (model and optimizer) and resumes from the
latest checkpoint; rank 0 writes the final parameters to final.pt. With --forget-momentum it
resumes the model but not the optimizer's momentum: the classic broken resume, which ends
SUCCEEDED with parameters that differ from an undisturbed run's."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:
    from orchestrate.progress import report, report_resumed
except ImportError:  # outside ddp-compose
    def report(step, **metrics):
        pass

    def report_resumed(step):
        pass

CHECKPOINT = "checkpoint.pt"

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--sleep", type=float, default=0.2, help="seconds between steps")
parser.add_argument("--forget-momentum", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
ddp = DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
start = 0
if os.path.exists(CHECKPOINT):
    state = torch.load(CHECKPOINT, weights_only=True)
    model.load_state_dict(state["model"])
    if not args.forget_momentum:
        optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    report_resumed(start)
    print(f"rank {rank} resumed from step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    # each step's batch depends on the step and the rank only: a resumed run sees the same data
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(16, 8, generator=generator)
    loss = ((ddp(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, CHECKPOINT + ".tmp")
        os.replace(CHECKPOINT + ".tmp", CHECKPOINT)  # a kill mid-write never leaves half a checkpoint
    dist.barrier()  # the step's checkpoint exists before any rank reports the step
    report(step, loss=loss.item())
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(args.sleep)

if rank == 0:
    torch.save(model.state_dict(), "final.pt")
dist.destroy_process_group()
