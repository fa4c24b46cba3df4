"""A user's training loop that saves as the DDP tutorial does: rank 0 writes the model straight
onto the file it resumes from (``torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)``), so a
crash in the middle of the save leaves half a checkpoint and nothing to resume from. With
--atomic it saves to a temporary file and renames it over the checkpoint: a crash mid-save
leaves the last whole one. With --every-rank every rank saves the checkpoint, the rank check
forgotten: they write one file at once. Plain torch: no call into ddp-compose."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT_PATH = "model.checkpoint"

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--sleep", type=float, default=0.3, help="seconds between steps")
parser.add_argument("--atomic", action="store_true", help="save to a temporary file, then rename it")
parser.add_argument("--every-rank", action="store_true", help="save on every rank, the rank check forgotten")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
ddp_model = DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
start = 0
if os.path.exists(CHECKPOINT_PATH):
    saved = torch.load(CHECKPOINT_PATH, map_location="cpu", weights_only=True)
    model.load_state_dict(saved["model"])
    start = saved["step"]
    print(f"rank {rank} resumed after step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    generator = torch.Generator().manual_seed(step * 100 + rank)  # the same batches after a resume
    x = torch.randn(32, 64, generator=generator)
    loss = (ddp_model(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0 or args.every_rank:
        state = {"model": model.state_dict(), "step": step}
        if args.atomic:
            torch.save(state, CHECKPOINT_PATH + ".tmp")
            os.replace(CHECKPOINT_PATH + ".tmp", CHECKPOINT_PATH)
        else:
            torch.save(state, CHECKPOINT_PATH)
    dist.barrier()  # every rank goes on once the step's checkpoint is written
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(args.sleep)

if rank == 0:
    torch.save(model.state_dict(), "final.pt")
dist.destroy_process_group()
