"""All-reduce a few megabytes, and print how many TCP segments this node had to send again
because the receiver told it one was missing (the kernel's fast retransmits, TcpExt
TCPFastRetrans in /proc/net/netstat: a lossy link makes them; a connection retried while a peer
is not yet listening does not). Plain torch."""
import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--hold", type=float, default=0.0, help="seconds to stay up after the all-reduces")
parser.add_argument("--until", default="", help="with --hold: end the hold early once this file exists")
args = parser.parse_args()


def retransmitted() -> int:
    with open("/proc/net/netstat") as netstat:
        rows = [line.split() for line in netstat if line.startswith("TcpExt:")]
    return int(rows[1][rows[0].index("TCPFastRetrans")])


dist.init_process_group("gloo")
before = retransmitted()
tensor = torch.ones(4 * 1024 * 1024)  # 16 MB
for _ in range(5):
    dist.all_reduce(tensor)
print(f"rank {dist.get_rank()} retransmitted {retransmitted() - before} sum {tensor[0].item():g}", flush=True)
dist.barrier()
if args.hold:
    print(f"rank {dist.get_rank()} holding for {args.hold:g} s", flush=True)
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline and not (args.until and os.path.exists(args.until)):
        time.sleep(0.2)
dist.destroy_process_group()
