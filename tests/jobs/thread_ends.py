"""A rank whose main thread waits for a thread of its own, written as a user would meet it: a
prefetch thread fills a queue with batches and the training loop takes them. On rank 1 the thread
meets a corrupt record at batch 5 and raises: Python prints its traceback and goes on, and rank
1's loop waits for ever in the queue's get while rank 0 waits in its all-reduce. Plain torch; it
reports no steps."""
import queue
import threading

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batches: "queue.Queue[torch.Tensor]" = queue.Queue(maxsize=2)

    def prefetch() -> None:
        for index in range(1000):
            if rank == 1 and index == 5:
                raise ValueError(f"corrupt record {index}")  # RAISE
            batches.put(torch.ones(4) * index)

    threading.Thread(target=prefetch, name="prefetcher", daemon=True).start()
    for step in range(1000):
        batch = batches.get()  # GET
        dist.all_reduce(batch)
        print(f"rank {rank} step {step}", flush=True)


if __name__ == "__main__":
    main()
