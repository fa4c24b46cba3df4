"""A training loop that checkpoints when it gets SIGTERM, as a job does where clusters preempt:
the ranks agree at each step whether any of them got it (the signals of different nodes arrive
at different times), then every rank writes ckpt-rank<R>.json into the work directory, says so,
and exits once its own SIGTERM has come. With --ignore-sigterm it goes on regardless (only
SIGKILL ends it); with --save-every-step it writes its checkpoint at every step too (the one it
writes on SIGTERM is then a file it wrote before)."""
import argparse
import json
import os
import signal
import time

import torch
import torch.distributed as dist

try:
    from orchestrate.progress import report
except ImportError:  # outside ddp-compose
    def report(step, **metrics):
        pass

parser = argparse.ArgumentParser()
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--save-every-step", action="store_true")
args = parser.parse_args()

stop = False


def on_sigterm(signum, frame):
    global stop
    stop = not args.ignore_sigterm


signal.signal(signal.SIGTERM, on_sigterm)
dist.init_process_group("gloo")
rank = dist.get_rank()
weight = torch.zeros(4)
step = 0
while True:
    step += 1
    update = torch.ones(4)
    dist.all_reduce(update)
    weight += update
    report(step)
    print(f"rank {rank} step {step}", flush=True)
    if args.save_every_step:
        with open(f"ckpt-rank{rank}.json", "w") as handle:
            json.dump({"rank": rank, "step": step, "weight": weight.tolist()}, handle)
    stopping = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(stopping, op=dist.ReduceOp.MAX)  # every rank saves at the same step
    if stopping.item():
        with open(f"ckpt-rank{rank}.json", "w") as handle:
            json.dump({"rank": rank, "step": step, "weight": weight.tolist()}, handle)
        print(f"rank {rank} checkpoint written at step {step}", flush=True)
        while not stop:  # its own node's SIGTERM is on its way
            time.sleep(0.05)
        os._exit(0)  # the peers are stopping too: no collective teardown to wait for
    time.sleep(0.2)
