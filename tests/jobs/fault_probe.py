"""A job that shows, every step, what the faults of a node or a worker do to it: the CPU quota
its node's cgroup allows, the queueing discipline of its link, and how long a 1 MB all_reduce
took. It reports its steps, so faults can fire at them."""
import argparse
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

try:
    from orchestrate.progress import report
except ImportError:  # outside ddp-compose
    def report(step, **metrics):
        pass


def cpu_quota() -> str:
    """The node's CPU quota: microseconds per 100 ms period, or "max" (none)."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    if v2.exists():
        return v2.read_text().split()[0]
    for v1 in ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"):
        if Path(v1).exists():
            quota = Path(v1).read_text().strip()
            return "max" if quota == "-1" else quota
    return "unknown"


def qdisc() -> str:
    shown = subprocess.run(["tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    return (shown.splitlines() or ["none"])[0].strip()


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=25)
parser.add_argument("--sleep", type=float, default=0.2, help="seconds between steps")
args = parser.parse_args()

# --collective-timeout reaches the workers as DDP_TIMEOUT: a hung peer fails the job after it
dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("DDP_TIMEOUT", "300"))))
rank = dist.get_rank()
payload = torch.ones(256 * 1024)  # 1 MB of float32
for step in range(1, args.steps + 1):
    started = time.perf_counter()
    dist.all_reduce(payload)
    took = time.perf_counter() - started
    print(f"rank {rank} step {step} quota {cpu_quota()} allreduce_s {took:.3f} link {qdisc()}", flush=True)
    report(step)
    time.sleep(args.sleep)
dist.destroy_process_group()
