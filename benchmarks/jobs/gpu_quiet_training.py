"""A healthy DDP training loop on GPUs that prints nothing for a while, written as a user would:
each step reads its loss (``loss.item()``, where CUDA spins while the GPU works), and every
``--long-every`` steps a long stretch of GPU work (``--long-s`` seconds of matrix products) comes
before the gradients' all-reduce. Prints "training" once, then only its last line. Plain torch;
on a host without CUDA it runs on gloo."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30.0)
parser.add_argument("--long-every", type=int, default=5)
parser.add_argument("--long-s", type=float, default=8.0)
args = parser.parse_args()

on_gpu = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()) if on_gpu else None
if on_gpu:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if on_gpu else "gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).to(device),
                                device_ids=[device.index] if on_gpu else None)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
side = torch.randn(8192 if on_gpu else 512, 8192 if on_gpu else 512, device=device)


def matmul_seconds() -> float:
    """How long one product of ``side`` with itself takes here."""
    start = time.perf_counter()
    for _ in range(5):
        side @ side
    if on_gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / 5


products = max(1, int(args.long_s / matmul_seconds()))
print(f"training; a long step is {products} products", flush=True)
started, step = time.monotonic(), 0
while time.monotonic() - started < args.seconds:
    step += 1
    x = torch.randn(256, 2048, device=device)
    if step % args.long_every == 0:
        for _ in range(products):  # queued on the GPU: the all-reduce below waits behind them
            x = x + (side @ side).sum() * 0
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss.item()
print(f"rank {dist.get_rank()} trained {step} steps", flush=True)
dist.destroy_process_group()
