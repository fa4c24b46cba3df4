"""A multi-node bug written as a user would: a rank with nothing to do returns before it joins
the process group. The other rank waits in init_process_group for it until torch's timeout
(30 minutes by default), while the early rank's torchrun waits for its peers to finish (up to
5 minutes, its exit barrier)."""
import os

import torch
import torch.distributed as dist


def main() -> None:
    if int(os.environ["RANK"]) == 1:
        print("rank 1: no shard for me, done", flush=True)
        return  # EARLY: this rank never calls init_process_group
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"total {total.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
