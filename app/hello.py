"""Hello, distributed world: every rank reports where it runs, then one all_reduce.

    torchrun --standalone --nproc-per-node 2 -m app.hello
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from app.distenv import WorkerEnv, add_timeout_option, process_group, select_device


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.hello", description=__doc__)
    add_timeout_option(parser)
    return parser.parse_args(argv)


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    print(f"[{os.getpid()}] initialising process group: MASTER_ADDR={env.master_addr}"
          f" MASTER_PORT={env.master_port} RANK={env.rank} WORLD_SIZE={env.world_size}", flush=True)
    with process_group(device, args.timeout) as backend:
        print(f"hello rank={dist.get_rank()} local_rank={env.local_rank}"
              f" world_size={dist.get_world_size()} local_world_size={env.local_world_size}"
              f" host={env.host} backend={backend} device={device}", flush=True)
        value = torch.tensor([float(env.rank + 1)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        expected = env.world_size * (env.world_size + 1) / 2
        ok = value.item() == expected
        print(f"all_reduce rank={env.rank} sum={value.item():g} expected={expected:g}"
              f" {'ok' if ok else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
