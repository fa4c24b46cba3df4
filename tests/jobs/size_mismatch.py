"""A multi-node bug gloo does not survive, written as a user would: at step 3 rank 1 all-reduces
a tensor of another size than rank 0's. gloo's receiving thread finds 8 floats where it expected
4 and aborts the process (a C++ exception, no Python traceback); the peer loses its connection.
``--crash segfault`` crashes rank 1 instead, as a native extension's bad pointer would."""
import argparse
import ctypes

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--crash", choices=["sizes", "segfault"], default="sizes")
args = parser.parse_args()


def read_native_buffer(address: int) -> int:
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_long))[0]


dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 6):
    size = 8 if rank == 1 and step == 3 and args.crash == "sizes" else 4
    stats = torch.ones(size)
    dist.all_reduce(stats)  # SIZES
    if rank == 1 and step == 3 and args.crash == "segfault":
        read_native_buffer(8)  # SEGFAULT
    print(f"step {step} done", flush=True)
dist.destroy_process_group()
