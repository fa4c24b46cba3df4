"""A script as pytorch/examples' multinode.py is written: it names nccl, and wraps its model in
DDP with device_ids=[LOCAL_RANK] when it has GPUs. It prints the backend it got, its NCCL host
id, and the sum of an all_reduce and of one DDP step's gradients."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
on_gpu = torch.cuda.is_available()
device = torch.device("cuda", local_rank % torch.cuda.device_count()) if on_gpu else torch.device("cpu")
value = torch.ones(4, device=device) * (rank + 1)
dist.all_reduce(value)
model = torch.nn.Linear(4, 1).to(device)
ddp = DistributedDataParallel(model, device_ids=[device.index] if on_gpu else None)
ddp(torch.ones(2, 4, device=device)).sum().backward()
grad = model.weight.grad.sum().item()
print(f"rank {rank} backend {dist.get_backend()} hostid {os.environ.get('NCCL_HOSTID')} all_reduce {value[0].item():g}"
      f" grad {grad:g}", flush=True)
dist.destroy_process_group()
