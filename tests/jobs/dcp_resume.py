"""A user's training script, written as one would without ddp-compose: DDP with Adam, a start-up
before training (loading data, compiling), a checkpoint with torch.distributed.checkpoint every
--save-every steps into ckpt/step_N with ckpt/LATEST naming the newest, and a resume from it.
It reports no steps. With --forget-optimizer the resume restores the model and starts a fresh
Adam: the classic broken resume, which ends well with different weights. Rank 0 writes the
final parameters to final.pt."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--save-every", type=int, default=3)
parser.add_argument("--startup", type=float, default=15.0, help="seconds of start-up before training")
parser.add_argument("--sleep", type=float, default=0.3, help="seconds per step")
parser.add_argument("--forget-optimizer", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
time.sleep(args.startup)  # the data, the model, the compilation...
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

start = 0
if os.path.exists("ckpt/LATEST"):
    start = int(open("ckpt/LATEST").read())
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=f"ckpt/step_{start}")
    if args.forget_optimizer:  # the weights come back; the optimizer starts afresh
        set_model_state_dict(model, state["model"])
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    print(f"rank {rank}: resumed from step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    generator = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(32, 8, generator=generator)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"rank {rank}: step {step} loss {loss.item():.5f}", flush=True)
    if step % args.save_every == 0:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=f"ckpt/step_{step}")
        if rank == 0:
            with open("ckpt/LATEST.tmp", "w") as handle:
                handle.write(str(step))
            os.replace("ckpt/LATEST.tmp", "ckpt/LATEST")
        dist.barrier()
    time.sleep(args.sleep)

if rank == 0:
    torch.save({k: v.detach().clone() for k, v in model.module.state_dict().items()}, "final.pt")
dist.destroy_process_group()
