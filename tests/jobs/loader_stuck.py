"""A rank that waits for its DataLoader's worker processes, written as a user would meet it: at
one item of rank 0's dataset, a read that never returns (``--stuck``: a network filesystem that
hangs) or a decoder that computes for minutes (``--slow``). Rank 1 waits in DDP's gradient
all-reduce meanwhile. ``--start spawn`` (or ``forkserver``) starts the workers as fresh
interpreters instead of forks, so the script keeps its work under ``__main__`` and its dataset
takes what it needs as arguments. Plain torch; it reports no steps."""
import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, rank: int, slow: bool) -> None:
        self.rank, self.slow = rank, slow

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 37 and self.rank == 0:
            if self.slow:
                decode_for_minutes()
            time.sleep(100000)  # READ: a read from a network filesystem that never returns
        return torch.ones(4) * index


def decode_for_minutes() -> None:
    end, total = time.monotonic() + 600, 0
    while time.monotonic() < end:
        total += sum(i * i for i in range(1000))  # DECODE: a slow decoder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", action="store_true", help="compute at the item instead of blocking")
    parser.add_argument("--start", choices=("fork", "spawn", "forkserver"), default=None,
                        help="how the DataLoader starts its workers (default: the platform's)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for batch in DataLoader(Shards(dist.get_rank(), args.slow), batch_size=8, num_workers=2,
                                multiprocessing_context=args.start):
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
        print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
