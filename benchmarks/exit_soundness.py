"""Exit soundness: how often a plain DDP script's workers abort at exit, per torch version.

    python -m benchmarks.exit_soundness --runs 100 --images ddp-compose-node:latest ddp-compose-node:torch-2.14.1 \
        --guard on off

``benchmarks/jobs/plain_ddp.py`` (DDP, a few steps, ``all_gather_object``,
``destroy_process_group``, return; nothing special at exit) runs ``--runs`` times in each mode:

- ``launcher``: ``python -m orchestrate run --nodes 2 --nproc-per-node 2`` (2 nodes x 2);
- ``standalone``: ``torchrun --standalone --nproc-per-node 4`` in one container of the image
  (1 node x 4).

A run counts as an abort when a worker died by SIGABRT ("terminate called without an active
exception", exit code -6), as a hang when it passed ``--deadline`` seconds (it is then killed);
any other non-zero exit is counted apart. Prints one row per torch
version, exit guard setting (docker/ddp_compose_exit.py, on or off with DDP_EXIT_GUARD=0) and
mode, and writes the figures as JSON (``--out``). Runs of one image alternate between the
settings, so that both see the same machine load.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrate.cli.options import argparse_type
from orchestrate.config.options import positive_float, positive_int

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "benchmarks" / "jobs"
SCRIPT = "plain_ddp.py"
ABORT = re.compile(r"SIGABRT|Signal 6|exit code -6|exitcode\s*:\s*-6|terminate called without an active exception")


@dataclass
class Tally:
    """The runs of one torch version in one mode."""

    image: str
    torch: str
    guard: str
    mode: str
    runs: int = 0
    aborts: int = 0
    hangs: int = 0
    other_failures: int = 0
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def add(self, code: int, output: str, seconds: float, hung: bool = False) -> None:
        self.runs += 1
        self.seconds += seconds
        if code == 0:
            return
        if hung:
            self.hangs += 1
        elif ABORT.search(output):
            self.aborts += 1
        else:
            self.other_failures += 1
        if len(self.examples) < 3:
            self.examples.append(output[-1500:])


def image_labels(image: str) -> dict[str, str]:
    out = subprocess.run(["docker", "image", "inspect", image, "--format", "{{ json .Config.Labels }}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"image {image} not found: build it with python -m orchestrate image build --torch VERSION")
    return json.loads(out.stdout) or {}


def guard_env(tally: Tally) -> list[str]:
    return ["DDP_EXIT_GUARD=0"] if tally.guard == "off" else []


def run_standalone(tallies: list[Tally], runs: int, deadline: float) -> None:
    """``torchrun --standalone --nproc-per-node 4`` in one long-lived container of the image,
    alternating between the tallies' guard settings; ``timeout`` inside the container ends a
    hung run (exit 124) and everything it started."""
    started = subprocess.run(
        ["docker", "run", "-d", "--rm", "--init", "--shm-size", "1g",
         "-v", f"{JOBS}:/job:ro", "-w", "/job", tallies[0].image, "sleep", "infinity"],
        capture_output=True, text=True, check=True)
    container = started.stdout.strip()
    try:
        for i in range(runs):
            for tally in tallies:
                env = [arg for kv in guard_env(tally) for arg in ("-e", kv)]
                t0 = time.monotonic()
                proc = subprocess.run(
                    ["docker", "exec", *env, container, "timeout", "--kill-after", "5", f"{deadline:g}",
                     "torchrun", "--standalone", "--nproc-per-node", "4", SCRIPT],
                    capture_output=True, text=True)
                tally.add(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0,
                          hung=proc.returncode in (124, 137))
            progress(tallies, i + 1, runs)
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def run_launcher(tallies: list[Tally], runs: int, runs_dir: Path, deadline: float) -> None:
    """``python -m orchestrate run --nodes 2 --nproc-per-node 2`` on the image, alternating
    between the tallies' guard settings; a run past the deadline gets SIGTERM, which tears
    its nodes down."""
    for i in range(runs):
        for tally in tallies:
            env = [arg for kv in guard_env(tally) for arg in ("--env", kv)]
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrate", "run", "--nodes", "2", "--nproc-per-node", "2",
                 "--cpu", "--image", tally.image, "--no-build", "--workdir", str(JOBS),
                 "--runs-dir", str(runs_dir), *env, "--", SCRIPT],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            try:
                output, _ = proc.communicate(timeout=deadline)
                hung = False
            except subprocess.TimeoutExpired:
                proc.terminate()
                output, _ = proc.communicate()
                hung = True
            tally.add(proc.returncode, output, time.monotonic() - t0, hung=hung)
        progress(tallies, i + 1, runs)


def progress(tallies: list[Tally], done: int, runs: int) -> None:
    counts = ", ".join(f"guard {t.guard}: {t.aborts} aborts {t.hangs} hangs {t.other_failures} other"
                       for t in tallies)
    print(f"\r[{tallies[0].mode} torch {tallies[0].torch}] {done}/{runs} runs; {counts}",
          end="" if done < runs else "\n", flush=True)


def format_table(tallies: list[Tally]) -> str:
    header = (f"{'torch':<8} {'exit guard':<10} {'mode':<26} {'runs':>5} {'aborts':>7} {'hangs':>6}"
              f" {'other fail':>10} {'s/run':>6}")
    rows = [header, "-" * len(header)]
    for t in tallies:
        mode = "launcher 2x2" if t.mode == "launcher" else "torchrun --standalone 1x4"
        rows.append(f"{t.torch:<8} {t.guard:<10} {mode:<26} {t.runs:>5} {t.aborts:>7} {t.hangs:>6}"
                    f" {t.other_failures:>10} {t.seconds / max(t.runs, 1):>6.1f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.exit_soundness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", nargs="+", default=["ddp-compose-node:latest"],
                        help="node images to compare, one per torch version (default: the default image)")
    parser.add_argument("--runs", type=argparse_type(positive_int, "--runs"), default=100,
                        help="runs per image and mode (default: 100)")
    parser.add_argument("--modes", nargs="+", choices=("launcher", "standalone"),
                        default=["launcher", "standalone"], help="which modes to run (default: both)")
    parser.add_argument("--guard", nargs="+", choices=("on", "off"), default=["on"],
                        help="exit guard settings to compare, alternating run by run (default: on)")
    parser.add_argument("--deadline", type=argparse_type(positive_float, "--deadline"), default=120.0,
                        help="seconds after which a run counts as hung and is killed (default: 120)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)

    labelled = {image: image_labels(image) for image in args.images}  # every image there before the first run
    tallies = []
    with tempfile.TemporaryDirectory(prefix="exit-soundness-") as runs_dir:
        for image in args.images:
            labels = labelled[image]
            version = labels.get("io.ddp-compose.torch", "unknown")
            settings = args.guard if labels.get("io.ddp-compose.exit-guard") == "1" else ["absent"]
            for mode in args.modes:
                group = [Tally(image, version, guard, mode) for guard in settings]
                tallies += group
                if mode == "standalone":
                    run_standalone(group, args.runs, args.deadline)
                else:
                    run_launcher(group, args.runs, Path(runs_dir), args.deadline)
    print()
    print(format_table(tallies))
    if args.out:
        args.out.write_text(json.dumps([asdict(t) for t in tallies], indent=2))
        print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
