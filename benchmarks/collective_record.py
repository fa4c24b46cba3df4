"""What the hang tooling costs a training loop: the workers' start-up hook (collective record
and snapshot thread) on and off, side by side.

    python -m benchmarks.collective_record --pairs 5

``benchmarks/jobs/collective_steps.py`` times two loops under ``torchrun --standalone
--nproc-per-node 2`` (gloo, CPU): small all_reduces (16 floats), and a small DDP model's steps
(two 64x64 layers, batch 32, one logged all_reduce per step). Launches alternate between the
script run plainly and run through ``orchestrate/node/worker_start.py`` with a debug directory,
so both see the same machine load. Prints each loop's median step time with and without the hook
and the overhead; ``--out`` writes them as JSON.
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

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "benchmarks" / "jobs" / "collective_steps.py"
HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"


def launch(recorded: bool, steps: int) -> dict[str, float]:
    """One torchrun launch; the step times rank 0 printed."""
    with tempfile.TemporaryDirectory() as debug:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        target = [str(JOB), "--steps", str(steps)]
        if recorded:
            env.update(DDP_DEBUG_DIR=debug, PYTHONPATH=str(ROOT))
            target = [str(HOOK), "--", *target]
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               *target], env=env, capture_output=True, text=True, timeout=600)
    match = re.search(r"^STEP_TIMES (.*)$", done.stdout, re.M)
    if done.returncode != 0 or not match:
        raise SystemExit(f"the benchmark job failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.collective_record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5, help="launches of each variant, alternating (default: 5)")
    parser.add_argument("--steps", type=int, default=400, help="steps per timed round (default: 400)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    samples: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    for pair in range(args.pairs):
        for variant in ("off", "on"):
            for loop, seconds in launch(variant == "on", args.steps).items():
                samples[variant].setdefault(loop, []).append(seconds)
        print(f"pair {pair + 1}/{args.pairs} done", file=sys.stderr, flush=True)
    figures = {}
    print(f"{'loop':<10} {'hook off':>12} {'hook on':>12} {'overhead':>9}")
    for loop in samples["off"]:
        off, on = statistics.median(samples["off"][loop]), statistics.median(samples["on"][loop])
        figures[loop] = {"off_s": off, "on_s": on, "overhead": on / off - 1}
        print(f"{loop:<10} {off * 1e6:>9.1f} us {on * 1e6:>9.1f} us {on / off - 1:>+8.1%}")
    if args.out:
        args.out.write_text(json.dumps({"pairs": args.pairs, "steps": args.steps, "loops": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
