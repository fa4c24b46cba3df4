"""What the hang tooling costs a training loop: the collective record on and off, side by side.

    python -m benchmarks.collective_record --launches 5

``benchmarks/jobs/collective_steps.py`` times two loops under ``torchrun --standalone
--nproc-per-node 2`` (gloo, CPU), started through ``orchestrate/node/worker_start.py`` with a
debug directory, as every run's workers are: small all_reduces (16 floats), and a small DDP
model's steps (two 64x64 layers with a BatchNorm between, batch 32, one logged all_reduce per
step, the forward pass's broadcast of the BatchNorm's buffers and the backward pass, which the
hook records as DDP's own collectives). In each launch, rounds alternate
between the collectives as the hook wrapped them and the originals, so both see the same
process and load (the snapshot thread runs in both: it wakes four times a second).
Prints each loop's median step time with and without the record, and the overhead: the median
of the ratios of each round to its neighbour of the other variant, with the middle half of those
ratios (this machine is shared and noisy); ``--out`` writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "benchmarks" / "jobs" / "collective_steps.py"
HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"


def launch(rounds: int, steps: int, gpu: bool = False) -> dict[str, dict[str, float]]:
    """One torchrun launch through the hook; the step times rank 0 printed. ``gpu``: NCCL, the
    two ranks on GPU 0 as ``--share-gpus`` puts them (their own NCCL host ids)."""
    with tempfile.TemporaryDirectory() as debug:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "DDP_DEBUG_DIR": debug,
               "PYTHONPATH": str(ROOT), "TMPDIR": debug}  # torchrun's log directory goes with it
        hook = [str(HOOK), "--nccl-hostid-per-rank"] if gpu else [str(HOOK)]
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               *hook, "--", str(JOB), "--rounds", str(rounds), "--steps", str(steps),
                               "--device", "cuda" if gpu else "cpu"],
                              env=env, capture_output=True, text=True, timeout=900)
    match = re.search(r"^STEP_TIMES (.*)$", done.stdout, re.M)
    if done.returncode != 0 or not match:
        raise SystemExit(f"the benchmark job failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(match.group(1))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.collective_record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=5, help="torchrun launches (default: 5)")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of each variant per launch (default: 40)")
    parser.add_argument("--steps", type=int, default=50, help="steps per round (default: 50)")
    parser.add_argument("--gpu", action="store_true",
                        help="NCCL on GPU 0, both ranks sharing it (the record then follows each collective on the GPU)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    launches = []
    for number in range(args.launches):
        launches.append(launch(args.rounds, args.steps, args.gpu))
        print(f"launch {number + 1}/{args.launches} done", file=sys.stderr, flush=True)
    figures = {}
    print(f"{'loop':<10} {'record off':>12} {'record on':>12} {'overhead':>9} {'(middle half of rounds)':>24}")
    for loop in [name for name in launches[0] if name != "per_call"]:
        off = [s for run in launches for s in run[loop]["plain"]]
        on = [s for run in launches for s in run[loop]["recorded"]]
        ratios = sorted(b / a - 1 for a, b in zip(off, on))  # each round against its neighbour
        quarter = len(ratios) // 4
        low, high = ratios[quarter], ratios[-quarter - 1]
        overhead = statistics.median(ratios)
        figures[loop] = {"off_s": statistics.median(off), "on_s": statistics.median(on), "overhead": overhead,
                         "overhead_interquartile": [low, high], "rounds": len(ratios)}
        print(f"{loop:<10} {statistics.median(off) * 1e6:>9.1f} us {statistics.median(on) * 1e6:>9.1f} us"
              f" {overhead:>+8.1%} {f'{low:+.1%} .. {high:+.1%}':>24}")
    cost = statistics.median(run["per_call"]["recorded"] - run["per_call"]["plain"] for run in launches)
    figures["per_call_s"] = cost
    print(f"the record's own cost: {cost * 1e6:.1f} us per recorded collective (no communication)")
    if args.out:
        args.out.write_text(json.dumps({"launches": args.launches, "rounds": args.rounds, "steps": args.steps,
                                        "loops": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
