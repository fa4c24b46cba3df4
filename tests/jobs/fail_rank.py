"""A job in which one rank fails after the process group is up, while the others wait
in a collective that would otherwise block until the collective timeout."""
import argparse
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} up", flush=True)
    dist.barrier()
    if rank == args.fail_rank:
        time.sleep(1)
        raise RuntimeError(f"injected failure on rank {rank}")
    dist.barrier()  # never completes: the failing rank does not arrive
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
