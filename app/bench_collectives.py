"""Collective bandwidth across ranks, nccl-tests style, next to the raw TCP limit between nodes.

    torchrun --standalone --nproc-per-node 2 -m app.bench_collectives --max-size 64M --out bench.json

For every operation (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all) and message
size from ``--min-size`` to ``--max-size`` (x4 each step): warm-up calls, then timed calls; the
time is the slowest rank's mean; algbw = size / time and busbw = algbw x nccl-tests' factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1), size being
the largest buffer a rank holds, as nccl-tests count it. As in nccl-tests, the timed calls run
back to back on the same buffers (an all_reduce sums onto its last result), and then one more
call, on freshly initialised buffers, is checked against the value it must have.

Before that, the ranks of one node send to those of the next over plain TCP sockets, the
wire's limits: one stream alone; one stream per process pair at once; and every pair both
ways at once. The last is the most a collective that sends and receives at the same time can
use (a ring all_reduce does): on a host whose cores carry both nodes' TCP copies, it is about
half the single stream, since both directions share the same cores. Rank 0 prints a row per
measurement and writes everything as JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from app import busbw as bandwidth
from app.distenv import (
    WorkerEnv,
    add_timeout_option,
    file_to_write,
    at_least,
    log0,
    non_negative_int,
    positive_int,
    process_group,
    select_device,
)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
TCP_CHUNK = 4 << 20


def parse_size(text: str) -> int:
    """Bytes in ``4``, ``1K``, ``64M`` or ``1.5G`` (a ``B`` after them or not), 0 or more."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    number, unit = text.rstrip("bB"), ""
    if number and number[-1].lower() in units:
        number, unit = number[:-1], number[-1].lower()
    try:
        size = int(float(number) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a size in bytes like 4, 1K or 64M, got {text!r}") from None
    if size < 0:
        raise argparse.ArgumentTypeError(f"expected a size of 0 bytes or more, got {text!r}")
    return size


SPLIT_OPS = ("all_gather", "reduce_scatter", "all_to_all")  # these split their elements evenly among the ranks


def message_sizes(low: int, high: int, factor: int = 4) -> list[int]:
    """``low``, ``low*factor``, ... up to ``high`` (included)."""
    sizes, size = [], low
    while size < high:
        sizes.append(size)
        size *= factor
    return sizes + [high]


class Collective:
    """One operation at one size: its buffers, the call, and the check of its result."""

    def __init__(self, op: str, nbytes: int, rank: int, world: int, device: torch.device) -> None:
        self.op, self.rank, self.world = op, rank, world
        elements = max(1, nbytes // 4)
        if op in SPLIT_OPS:
            elements = max(world, elements - elements % world)
        self.elements = elements
        self.nbytes = elements * 4
        share = elements // world
        if op == "all_reduce":
            self.input = torch.full((elements,), float(rank + 1), device=device)
            self.expected = float(world * (world + 1) / 2)
        elif op == "all_gather":
            self.input = torch.full((share,), float(rank), device=device)
            self.output = torch.empty(elements, device=device)
        elif op == "reduce_scatter":
            self.input = torch.full((elements,), float(rank + 1), device=device)
            self.output = torch.empty(share, device=device)
        elif op == "broadcast":
            self.input = torch.full((elements,), 7.0 if rank == 0 else 0.0, device=device)
        elif op == "all_to_all":
            self.input = torch.arange(world, dtype=torch.float32, device=device).repeat_interleave(share) + rank * world
            self.output = torch.empty(elements, device=device)
        else:
            raise ValueError(f"unknown operation {op}")

    def reset(self) -> None:
        """Initialise the buffer that calls change in place (an all_reduce sums onto it)."""
        if self.op == "all_reduce":
            self.input.fill_(float(self.rank + 1))

    def __call__(self) -> None:
        if self.op == "all_reduce":
            dist.all_reduce(self.input)
        elif self.op == "all_gather":
            dist.all_gather_into_tensor(self.output, self.input)
        elif self.op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.output, self.input)
        elif self.op == "broadcast":
            dist.broadcast(self.input, src=0)
        else:
            dist.all_to_all_single(self.output, self.input)

    def correct(self) -> bool:
        """Whether the last call gave what it must."""
        share = self.elements // self.world
        if self.op == "all_reduce":
            return bool(torch.all(self.input == self.expected))
        if self.op == "all_gather":
            expected = torch.arange(self.world, dtype=torch.float32, device=self.output.device).repeat_interleave(share)
            return bool(torch.equal(self.output, expected))
        if self.op == "reduce_scatter":
            return bool(torch.all(self.output == float(self.world * (self.world + 1) / 2)))
        if self.op == "broadcast":
            return bool(torch.all(self.input == 7.0))
        expected = (torch.arange(self.world, dtype=torch.float32, device=self.output.device) * self.world
                    + self.rank).repeat_interleave(share)
        return bool(torch.equal(self.output, expected))


def finish(device: torch.device) -> None:
    """Wait until the device has done the calls queued on it: on a GPU a collective returns once
    it is queued (NCCL), so a clock read without this times the queueing, not the transfer."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def slowest(seconds: float, device: torch.device) -> float:
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def measure(collective: Collective, warmup: int, min_time_s: float, max_iters: int,
            device: torch.device) -> tuple[float, int, bool]:
    """Mean seconds per call (the slowest rank's), the calls timed, and whether a call on freshly
    initialised buffers gave, on every rank, what it must."""
    for _ in range(warmup):
        collective()
    finish(device)
    dist.barrier()
    start = time.perf_counter()
    collective()
    finish(device)
    one = slowest(time.perf_counter() - start, device)
    iters = int(max(1, min(max_iters, min_time_s / max(one, 1e-6))))
    finish(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        collective()
    finish(device)
    elapsed = slowest(time.perf_counter() - start, device)
    collective.reset()
    collective()
    ok = torch.tensor([1 if collective.correct() else 0], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return elapsed / iters, iters, bool(ok.item())


def tcp_receive(server: socket.socket, total: int) -> float:
    """Accept one sender and read ``total`` bytes; bytes per second from first to last byte."""
    connection, _ = server.accept()
    buffer = bytearray(TCP_CHUNK)
    view = memoryview(buffer)
    received, started = 0, None
    with connection:
        while received < total:
            got = connection.recv_into(view, min(TCP_CHUNK, total - received))
            if not got:
                break
            if started is None:
                started = time.perf_counter()
            received += got
    return received / max(time.perf_counter() - (started or time.perf_counter()), 1e-9)


def tcp_send(address: tuple[str, int], total: int) -> None:
    """Send exactly ``total`` bytes (the receiver stops there and closes: a byte more resets the
    connection)."""
    payload = memoryview(bytes(TCP_CHUNK))
    with socket.create_connection(address, timeout=60) as connection:
        sent = 0
        while sent < total:
            chunk = min(TCP_CHUNK, total - sent)
            connection.sendall(payload[:chunk])
            sent += chunk


def tcp_both_ways(server: socket.socket, address: tuple[str, int], total: int) -> float:
    """Send ``total`` bytes to ``address`` while receiving as much on ``server``; the rate received."""
    received: list[float] = []
    receiver = threading.Thread(target=lambda: received.append(tcp_receive(server, total)))
    receiver.start()
    tcp_send(address, total)
    receiver.join()
    return received[0]


def wire_limit(env: WorkerEnv, total: int, rounds: int) -> Optional[dict]:
    """TCP throughput between the ranks of node 0 and those of node 1: one stream alone (node 0
    to node 1), then one per process pair at once, then every pair both ways at once (per
    direction, summed over the pairs); best of ``rounds`` each. None with a single node."""
    local = env.local_world_size
    if env.world_size < 2 * local:
        return None
    node, local_rank = env.rank // local, env.rank % local
    on_wire = node in (0, 1)  # the two nodes measured; any others only take part in the gathers
    server = None
    address = None
    if on_wire:
        server = socket.create_server(("", 0))
        address = (socket.gethostname(), server.getsockname()[1])
    addresses: list = [None] * env.world_size
    dist.all_gather_object(addresses, address)
    peer = addresses[(1 - node) * local + local_rank] if on_wire else None

    def round_trip(active: bool, both_ways: bool = False) -> float:
        rate = 0.0
        dist.barrier()
        if active and both_ways:
            rate = tcp_both_ways(server, peer, total)
        elif active and node == 1:
            rate = tcp_receive(server, total)
        elif active and node == 0:
            time.sleep(0.05)
            tcp_send(peer, total)
        rates: list = [None] * env.world_size
        dist.all_gather_object(rates, rate)
        return sum(r for r in rates if r)

    single = max(round_trip(local_rank == 0) for _ in range(rounds))
    pairs = max(round_trip(True) for _ in range(rounds))
    both = max(round_trip(on_wire, both_ways=True) for _ in range(rounds)) / 2
    if server is not None:
        server.close()
    return {"single_stream_Bps": single, "per_pair_Bps": pairs, "both_ways_Bps": both, "pairs": local,
            "bytes": total}


@record
def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="app.bench_collectives", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="operations (default: all)")
    parser.add_argument("--min-size", type=parse_size, default=4, help="smallest message, e.g. 4, 1K (default: 4)")
    parser.add_argument("--max-size", type=parse_size, default=256 << 20, help="largest message (default: 256M)")
    parser.add_argument("--factor", type=at_least(2), default=4, help="size step (default: x4)")
    parser.add_argument("--warmup", type=non_negative_int, default=3, help="untimed calls per size (default: 3)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timed calls per size, about")
    parser.add_argument("--max-iters", type=positive_int, default=50, help="timed calls per size at most (default: 50)")
    parser.add_argument("--wire-bytes", type=parse_size, default=256 << 20,
                        help="bytes per TCP stream for the wire's limit (0: skip) (default: 256M)")
    parser.add_argument("--out", type=file_to_write, default=None, help="rank 0 writes the results here (JSON)")
    add_timeout_option(parser)
    args = parser.parse_args(argv)
    if not 0 < args.min_size <= args.max_size:  # (sizes from 0 would grow by --factor for ever)
        parser.error(f"message sizes must run from above 0 up to --max-size, got {args.min_size} to {args.max_size}")
    if not args.min_time > 0:
        parser.error(f"--min-time must be above 0 seconds, got {args.min_time:g}")
    env = WorkerEnv.from_environ()
    device = select_device(env.local_rank)
    with process_group(device, args.timeout) as backend:
        world = dist.get_world_size()
        results: dict = {"world_size": world, "local_world_size": env.local_world_size,
                         "nodes": world // env.local_world_size, "backend": backend, "wire": None,
                         "results": [], "socket_ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}
        if args.wire_bytes:
            results["wire"] = wire_limit(env, args.wire_bytes, rounds=3)
            if results["wire"]:
                wire = results["wire"]
                log0(f"wire: one TCP stream {wire['single_stream_Bps'] / 1e9:.3f} GB/s, {wire['pairs']}"
                     f" stream(s) at once {wire['per_pair_Bps'] / 1e9:.3f} GB/s, both ways at once"
                     f" {wire['both_ways_Bps'] / 1e9:.3f} GB/s each way")
        log0(f"{'op':<15} {'size':>12} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'iters':>6} check")
        all_ok = True
        for op in args.ops:
            rounded_said = False
            for size in message_sizes(args.min_size, args.max_size, args.factor):
                collective = Collective(op, size, env.rank, world, device)
                if collective.nbytes != size and not rounded_said:  # said once per op, not silently
                    split = f", split evenly among the {world} ranks" if op in SPLIT_OPS else ""
                    log0(f"note: {op} moves whole float32 elements{split}: {size} B is measured as"
                         f" {collective.nbytes} B (the size column is what moved)")
                    rounded_said = True
                seconds, iters, ok = measure(collective, args.warmup, args.min_time, args.max_iters, device)
                algbw = bandwidth.algbw(collective.nbytes, seconds)
                busbw = bandwidth.busbw(op, collective.nbytes, seconds, world)
                all_ok &= ok
                results["results"].append({"op": op, "size": collective.nbytes, "time_s": seconds, "iters": iters,
                                           "algbw_Bps": algbw, "busbw_Bps": busbw, "ok": ok})
                log0(f"{op:<15} {collective.nbytes:>12} {seconds * 1e6:>12.1f} {algbw / 1e9:>11.3f}"
                     f" {busbw / 1e9:>11.3f} {iters:>6} {'ok' if ok else 'WRONG'}")
                del collective
        if env.rank == 0 and args.out:
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
