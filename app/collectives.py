"""The torch.distributed primitives, one verified step each, across every rank and node.

    torchrun --standalone --nproc-per-node 2 -m app.collectives

Steps: barrier ordering, ping-pong between ranks 0 and 1, blocking send/recv, isend/irecv
with wait, all_reduce SUM, and a hand-written butterfly all-reduce compared with the true
mean. Each step prints what it did and checks its result; any failed check exits 1.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from app.distenv import (
    WorkerEnv,
    add_timeout_option,
    log0,
    non_negative_float,
    positive_int,
    process_group,
    select_device,
)
from app.gradsync import butterfly_all_reduce

Step = Callable[[torch.device, argparse.Namespace], bool]


def say(text: str) -> None:
    print(f"rank {dist.get_rank()}: {text}", flush=True)


def barrier_ordering(device: torch.device, args: argparse.Namespace) -> bool:
    """Rank 0 works first; the others pass the barrier only after rank 0 reached it."""
    rank = dist.get_rank()
    if rank == 0:
        time.sleep(args.barrier_delay)
        say("started (first, before the barrier)")
        stamp = time.time()
        dist.barrier()
    else:
        dist.barrier()
        stamp = time.time()
        say("started (after rank 0, released by the barrier)")
    stamps = [None] * dist.get_world_size()
    dist.all_gather_object(stamps, stamp)
    # Wall clocks of one host (or NTP-synced nodes): a small tolerance for clock skew.
    return all(s >= stamps[0] - 0.05 for s in stamps[1:])


def ping_pong(device: torch.device, args: argparse.Namespace) -> bool:
    """Ranks 0 and 1 alternate strictly: ping, pong, ping ... each waits for the other."""
    rank = dist.get_rank()
    if rank > 1:
        return True
    ball = torch.zeros(1, device=device)
    seen = []
    for i in range(args.rounds):
        if rank == 0:
            ball.fill_(2 * i)
            dist.send(ball, dst=1)
            dist.recv(ball, src=1)
            seen.append(int(ball.item()))
            say(f"ping {2 * i} -> got pong {seen[-1]}")
        else:
            dist.recv(ball, src=0)
            seen.append(int(ball.item()))
            ball += 1
            dist.send(ball, dst=0)
            say(f"got ping {seen[-1]} -> pong {int(ball.item())}")
    expected = [2 * i + 1 for i in range(args.rounds)] if rank == 0 else [2 * i for i in range(args.rounds)]
    return seen == expected


def send_recv(device: torch.device, args: argparse.Namespace) -> bool:
    """Blocking point-to-point: rank 0's 1.0 reaches rank 1's 0.0."""
    rank = dist.get_rank()
    tensor = torch.full((1,), float(rank == 0), device=device)
    if rank == 0:
        dist.send(tensor, dst=1)
        say(f"sent {tensor.item():g} to rank 1")
    elif rank == 1:
        before = tensor.item()
        dist.recv(tensor, src=0)
        say(f"had {before:g}, received {tensor.item():g} from rank 0")
        return tensor.item() == 1.0
    return True


def isend_irecv(device: torch.device, args: argparse.Namespace) -> bool:
    """Non-blocking: rank 1 posts irecv at once, rank 0 sends later; data is there after wait()."""
    rank = dist.get_rank()
    tensor = torch.zeros(1, device=device)
    if rank == 0:
        time.sleep(args.isend_delay)
        tensor += 1
        request = dist.isend(tensor, dst=1)
        say("started sending 1")
        request.wait()
    elif rank == 1:
        request = dist.irecv(tensor, src=0)
        say(f"started receiving; before wait() the buffer holds {tensor.item():g}")
        request.wait()
        say(f"after wait() the buffer holds {tensor.item():g}")
        return tensor.item() == 1.0
    return True


def all_reduce_sum(device: torch.device, args: argparse.Namespace) -> bool:
    """all_reduce(SUM) of ones is the world size on every rank."""
    tensor = torch.ones(1, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    say(f"all_reduce(SUM) of ones = {tensor.item():g}")
    return tensor.item() == dist.get_world_size()


def rank_vector(rank: int, size: int) -> torch.Tensor:
    """The random vector rank ``rank`` contributes (any rank can recompute anyone's)."""
    return torch.randn(size, generator=torch.Generator().manual_seed(rank))


def butterfly(device: torch.device, args: argparse.Namespace) -> bool:
    """The butterfly all-reduce gives every rank the true mean of all ranks' vectors."""
    rank, world = dist.get_rank(), dist.get_world_size()
    size = args.vector_size
    tensor = rank_vector(rank, size).to(device)
    butterfly_all_reduce(tensor)
    truth = torch.stack([rank_vector(r, size) for r in range(world)]).mean(dim=0).to(device)
    error = (tensor - truth).abs().max().item()
    say(f"butterfly all-reduce of {size} values: max error vs the true mean {error:.2e}")
    return error < 1e-5


STEPS: dict[str, Step] = {
    "barrier": barrier_ordering,
    "ping-pong": ping_pong,
    "send-recv": send_recv,
    "isend-irecv": isend_irecv,
    "all-reduce": all_reduce_sum,
    "butterfly": butterfly,
}
POINT_TO_POINT = {"ping-pong", "send-recv", "isend-irecv"}


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.collectives", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated steps to run (default: all: {','.join(STEPS)})")
    parser.add_argument("--rounds", type=positive_int, default=5, help="ping-pong rounds (default: 5)")
    parser.add_argument("--barrier-delay", type=non_negative_float, default=0.5,
                        help="seconds rank 0 works before the barrier (default: 0.5)")
    parser.add_argument("--isend-delay", type=non_negative_float, default=0.5,
                        help="seconds rank 0 waits before isend (default: 0.5)")
    parser.add_argument("--vector-size", type=positive_int, default=10, help="butterfly vector length")
    add_timeout_option(parser, 120.0)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.steps.split(",")) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps {unknown}; choose from {','.join(STEPS)}")
    return args


@record
def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    failed = []
    with process_group(device, args.timeout) as backend:
        log0(f"collectives: world size {env.world_size}, backend {backend}")
        for name in args.steps.split(","):
            if name in POINT_TO_POINT and env.world_size < 2:
                log0(f"--- {name}: skipped (needs 2 ranks)")
                continue
            log0(f"--- {name}")
            ok = STEPS[name](device, args)
            verdicts = [None] * env.world_size
            dist.all_gather_object(verdicts, ok)
            if not all(verdicts):
                failed.append(name)
            log0(f"--- {name}: {'OK' if all(verdicts) else 'FAILED on ranks ' + str([r for r, v in enumerate(verdicts) if not v])}")
        log0("all steps passed" if not failed else f"FAILED steps: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
