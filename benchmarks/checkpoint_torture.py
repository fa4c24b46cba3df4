"""Kill a checkpoint writer with SIGKILL at random moments, many times; the latest
checkpoint must always load and its step must never go back.

    python -m benchmarks.checkpoint_torture --kills 200

Each round starts a writer that resumes from the latest checkpoint and keeps saving
(step, a few MB of tensors) with app.checkpoint's atomic write; the round kills it after a
random delay, then loads LATEST and checks it. Prints the figures at the end.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WRITER = """
import sys, torch
from pathlib import Path
from app.checkpoint import latest_checkpoint, load_checkpoint, write_checkpoint
directory, size = Path(sys.argv[1]), int(sys.argv[2])
latest = latest_checkpoint(directory)
step = load_checkpoint(latest, torch.device("cpu"))["step"] if latest else 0
payload = torch.randn(size)
print("ready", flush=True)
while True:
    step += 1
    payload += 1
    write_checkpoint(directory, f"step-{step:06d}.pt", {"step": step, "payload": payload, "sum": float(payload.sum())})
    for old in sorted(directory.glob("step-*.pt"))[:-3]:
        old.unlink()
"""


@dataclass
class TortureResult:
    kills: int = 0
    loads_ok: int = 0
    steps: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def monotonic(self) -> bool:
        return all(b >= a for a, b in zip(self.steps, self.steps[1:]))


def torture(directory: Path, kills: int, max_delay_s: float, size: int, seed: int) -> TortureResult:
    """Run ``kills`` rounds of write-then-SIGKILL in ``directory``."""
    import torch

    from app.checkpoint import latest_checkpoint, load_checkpoint

    rng = random.Random(seed)
    result = TortureResult()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(kills):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(size)],
                                  stdout=subprocess.PIPE, text=True, env=env)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, max_delay_s))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        result.kills += 1
        latest = latest_checkpoint(directory)
        if latest is None:
            if result.steps:
                result.failures.append("LATEST vanished after a kill")
            continue
        try:
            state = load_checkpoint(latest, torch.device("cpu"))
            if abs(float(state["payload"].sum()) - state["sum"]) > 1e-3 * max(1.0, abs(state["sum"])):
                raise ValueError("payload does not match its recorded sum")
        except Exception as exc:
            result.failures.append(f"{latest.name}: {exc}")
            continue
        result.loads_ok += 1
        result.steps.append(state["step"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200, help="write-and-kill rounds (default: 200)")
    parser.add_argument("--max-delay", type=float, default=0.4, help="longest random delay before a kill, s")
    parser.add_argument("--size", type=int, default=1_000_000, help="float32 values per checkpoint (4 MB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ckpt-torture-") as directory:
        result = torture(Path(directory), args.kills, args.max_delay, args.size, args.seed)
        leftovers = len(list(Path(directory).glob(".*.tmp")))
    elapsed = time.perf_counter() - started
    print(f"kills: {result.kills}  latest loaded: {result.loads_ok}  failures: {len(result.failures)}"
          f"  step never went back: {result.monotonic}  final step: {result.steps[-1] if result.steps else 0}"
          f"  temp files left by kills: {leftovers}  time: {elapsed:.0f} s")
    for failure in result.failures[:10]:
        print("  failure:", failure)
    return 0 if not result.failures and result.monotonic else 1


if __name__ == "__main__":
    raise SystemExit(main())
