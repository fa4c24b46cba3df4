"""A DataLoader worker process that segfaults, written as a user would meet it: a dataset whose
decoder (a native library) reads a bad pointer at one item. The rank's DataLoader raises
"DataLoader worker (pid N) is killed by signal: Segmentation fault." with no line of the dataset
in its traceback. ``--start spawn`` (or ``forkserver``) starts the workers as fresh interpreters
instead of forks, so the script keeps its work under ``__main__``."""
import argparse
import ctypes

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 37:
            ctypes.cast(8, ctypes.POINTER(ctypes.c_long))[0]  # DECODER: a broken image decoder
        return torch.ones(4) * index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", choices=("fork", "spawn", "forkserver"), default=None,
                        help="how the DataLoader starts its workers (default: the platform's)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for batch in DataLoader(Images(), batch_size=8, num_workers=2, multiprocessing_context=args.start):
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
        print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
