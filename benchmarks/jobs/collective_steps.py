"""Two step loops timed in one worker: small all_reduces, and a small DDP model's training steps.
Under the start-up hook, rounds alternate between the collectives (and DDP's backward pass and
its forward pass's broadcast of the buffers) as
the hook wrapped them (recorded) and the originals (not recorded), so both see the same process and machine load.
Rank 0 prints one JSON line: each round's seconds per step, per loop and variant. Plain torch.
``--device cuda``: on NCCL, each rank on GPU LOCAL_RANK mod the GPUs, every round ended by a
synchronize, so that it times the GPU's work too."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=40)
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
args = parser.parse_args()

on_gpu = args.device == "cuda"
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()) if on_gpu else None
if on_gpu:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if on_gpu else "gloo")
torch.manual_seed(0)
DDP = torch.nn.parallel.DistributedDataParallel
model = DDP(torch.nn.Sequential(  # BatchNorm's buffers: every forward pass broadcasts them
    torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch, small = torch.randn(32, 64, device=device), torch.ones(16, device=device)
RECORDED = {name: getattr(dist, name) for name in ("all_reduce", "barrier")}
RECORDED["backward"] = torch.autograd.backward  # the hook records DDP's backward passes there
RECORDED["buffers"] = DDP._sync_module_buffers  # and a forward pass's broadcast of the buffers there
PLAIN = {name: getattr(f, "__wrapped__", f) for name, f in RECORDED.items()}


def use(functions: dict) -> None:
    for name, function in functions.items():
        if name == "backward":
            torch.autograd.backward = function
        elif name == "buffers":
            DDP._sync_module_buffers = function
        else:
            setattr(dist, name, function)
            setattr(c10d, name, function)


def allreduce_step() -> None:
    dist.all_reduce(small)


def ddp_step() -> None:
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss.detach())  # the loss logged across ranks, as training loops do


variants = {"recorded": RECORDED, "plain": PLAIN}
if RECORDED == PLAIN:  # not under the hook: one variant
    variants = {"plain": PLAIN}
results = {}
for name, step in (("allreduce", allreduce_step), ("ddp", ddp_step)):
    for _ in range(20):
        step()  # warm up
    times: dict = {variant: [] for variant in variants}
    for round_ in range(args.rounds):
        order = list(variants.items())
        for variant, functions in (order if round_ % 2 == 0 else order[::-1]):  # ABBA: no order effect
            use(functions)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            if on_gpu:
                torch.cuda.synchronize()
            times[variant].append((time.perf_counter() - start) / args.steps)
    results[name] = times  # seconds per step of each round, by variant: round i of each ran side by side
# The record's own cost per call, without communication: a no-op in its place.
use(RECORDED)
noop = lambda tensor, op=None, group=None, async_op=False: None  # noqa: E731
from orchestrate.node.collective_log import CollectiveLog, group_namer  # noqa: E402 - under the hook only

if RECORDED != PLAIN:
    recorded_noop = CollectiveLog().wrap("all_reduce", noop, group_namer())
    per_call = {}
    for variant, function in (("plain", noop), ("recorded", recorded_noop)):
        start = time.perf_counter()
        for _ in range(20000):
            function(small)
        per_call[variant] = (time.perf_counter() - start) / 20000
    results["per_call"] = per_call
if dist.get_rank() == 0:
    print("STEP_TIMES " + json.dumps(results), flush=True)
dist.destroy_process_group()
