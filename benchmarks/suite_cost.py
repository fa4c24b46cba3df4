"""What the test suite's time is made of: CPU, and how much of it is torch starting up.

    python -m benchmarks.suite_cost                 # one 2-node run, and torch's start-up
    python -m benchmarks.suite_cost --suite -n 4    # also the whole suite: core-seconds, floor
    python -m benchmarks.suite_cost --per-test      # the suite one test at a time: what each costs

The suite is CPU-bound on a small machine: its tests start real processes, and every process
that imports torch (torchrun in each node, each worker, the host's own torchrun tests) pays for
it in CPU. This prints:

- ``import torch`` and ``import torch.distributed.run`` (what torchrun loads) in the node image:
  the CPU each costs one process, the median of ``--repeats`` (user + system time, from the
  process's own rusage);
- a torch process from start to exit (``python3 -c "import torch"``), with the exit guard's
  freeze on and off (``DDP_EXIT_FREEZE``), alternating in one container: what skipping the final
  garbage collections saves every torch process (docker/ddp_compose_exit.py);
- one plain 2-node run (``orchestrate run --nodes 2 -- -m app.hello``): the core-seconds the
  whole machine spent meanwhile (``/proc/stat``) and its wall time, and the share of those
  core-seconds that its four torch start-ups (two torchruns, two workers) account for;
- with ``--suite``: ``scripts/run-tests.sh`` itself (extra arguments go to pytest), its wall
  time and core-seconds, and the floor they set: the core-seconds over the machine's cores,
  the shortest wall time that this CPU could give at full use, and the cores the suite would
  need to end in ``--goal`` minutes;
- with ``--per-test``: the suite run one test at a time (``-n 0``, :mod:`benchmarks.per_test_cpu`
  records each), instead of the rest: the core-seconds of each test file and of the costliest
  tests, their sum, and the floor that sum sets at any number of workers (the sum over the
  cores). Run in parallel, the suite spends more than the sum (its tests share the cores); it
  can never spend less.

The machine-wide counters take in whatever else runs: run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where benchmarks/per_test_cpu.py appends its records, one JSON line per test.
PER_TEST_VARIABLE = "DDP_PER_TEST_CPU"

RUSAGE_OF = ("import resource; import {module}; u = resource.getrusage(resource.RUSAGE_SELF);"
             " print(u.ru_utime + u.ru_stime)")


def busy_core_seconds() -> float:
    """Core-seconds the whole machine has spent busy since boot (every state but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def import_cost(image: str, module: str, repeats: int) -> float:
    """The median CPU one process of ``image`` spends importing ``module``."""
    costs = []
    for _ in range(repeats):
        done = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python3", image, "-c",
                               RUSAGE_OF.format(module=module)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            sys.exit(f"suite_cost: importing {module} in {image} failed: {done.stderr.strip()[-300:]}")
        costs.append(float(done.stdout.split()[-1]))
    return statistics.median(costs)


# Runs in the node image: whole torch processes, the freeze on and off by turns; prints the median
# core-seconds of each (user + system, from the children's rusage).
WHOLE_PROCESS = """
import os, resource, statistics, subprocess, sys
costs = {"1": [], "0": []}
for _ in range(int(sys.argv[1])):
    for guard in costs:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch"], env={**os.environ, "DDP_EXIT_FREEZE": guard}, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        costs[guard].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
print(statistics.median(costs["1"]), statistics.median(costs["0"]))
"""


def whole_process_cost(image: str, repeats: int) -> tuple[float, float]:
    """The median CPU of a whole ``import torch`` process in ``image``, the exit guard's freeze on and off."""
    done = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python3", image, "-c", WHOLE_PROCESS,
                           str(repeats)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"suite_cost: timing whole torch processes in {image} failed: {done.stderr.strip()[-300:]}")
    on, off = (float(v) for v in done.stdout.split()[-2:])
    return on, off


def measured(argv: list[str], **kwargs) -> tuple[float, float, int]:
    """Run ``argv``; its wall time, the machine's core-seconds meanwhile, and its exit status."""
    start_cpu, start = busy_core_seconds(), time.monotonic()
    code = subprocess.run(argv, **kwargs).returncode
    return time.monotonic() - start, busy_core_seconds() - start_cpu, code


def one_run(workdir: Path) -> tuple[float, float]:
    wall, cpu, code = measured([sys.executable, "-m", "orchestrate", "run", "--nodes", "2", "--runs-dir",
                                str(workdir / "runs"), "--", "-m", "app.hello"], cwd=workdir,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    if code != 0:
        sys.exit(f"suite_cost: the 2-node run failed (exit {code}); see {workdir / 'runs'}")
    return wall, cpu


def per_test(pytest_args: list[str], cores: int, goal_min: float, top: int) -> int:
    """The suite one test at a time, each test's core-seconds recorded; the tables and the floor."""
    with tempfile.TemporaryDirectory(prefix="ddp-per-test-") as scratch:
        records = Path(scratch) / "tests.jsonl"
        print(f"[suite_cost] the suite one test at a time: scripts/run-tests.sh -n 0 -p benchmarks.per_test_cpu"
              f" {' '.join(pytest_args)}", flush=True)
        wall, cpu, code = measured(["bash", str(ROOT / "scripts" / "run-tests.sh"), "-n", "0", "-p",
                                    "benchmarks.per_test_cpu", *pytest_args], cwd=ROOT,
                                   env={**os.environ, PER_TEST_VARIABLE: str(records)})
        rows = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    if not rows:
        print(f"suite: exit {code}, no test recorded")
        return code or 1
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        totals = by_file[row["test"].split("::")[0]]
        totals[0] += row["core_s"]
        totals[1] += row["wall_s"]
        totals[2] += 1
    total = sum(row["core_s"] for row in rows)
    print(f"\n{'core-s':>8} {'share':>6} {'wall s':>8} {'tests':>6}  file")
    for name, (core_s, wall_s, count) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{core_s:8.1f} {100 * core_s / total:5.1f}% {wall_s:8.1f} {count:6d}  {name}")
    print(f"\n{'core-s':>8} {'wall s':>8}  test")
    for row in sorted(rows, key=lambda r: -r["core_s"])[:top]:
        print(f"{row['core_s']:8.1f} {row['wall_s']:8.1f}  {row['test']}")
    floor = total / cores
    print(f"\nsuite: exit {code}, {len(rows)} tests one at a time in {wall / 60:.1f} min wall, {cpu:.0f} core-s in"
          f" all; the tests' own {total:.0f} core-s set a floor of {floor / 60:.1f} min on {cores} cores at full use"
          f" and any number of workers; {goal_min:g} min needs {total / (goal_min * 60):.1f} cores")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="ddp-compose-node:latest", help="the node image (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each kind, the median kept "
                                                                "(default: %(default)s)")
    parser.add_argument("--suite", action="store_true", help="also run the whole suite (scripts/run-tests.sh)")
    parser.add_argument("--per-test", action="store_true",
                        help="instead, run the suite one test at a time and say what each file and test costs")
    parser.add_argument("--top", type=int, default=20,
                        help="with --per-test, the files and the tests shown (default: %(default)s)")
    parser.add_argument("--goal", type=float, default=8.0, help="the suite's goal in minutes, for the cores it "
                                                                 "would need (default: %(default)s)")
    args, pytest_args = parser.parse_known_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.top < 1:
        parser.error("--top must be at least 1")
    if args.suite and args.per_test:
        parser.error("--suite and --per-test are two ways to run the suite: give one")
    if pytest_args and not (args.suite or args.per_test):
        parser.error(f"unrecognized arguments: {' '.join(pytest_args)} (pytest's go with --suite or --per-test)")
    cores = os.cpu_count() or 1
    if args.per_test:
        return per_test(pytest_args, cores, args.goal, args.top)
    print(f"[suite_cost] {cores} cores; measuring torch's start-up in {args.image} ({args.repeats} each)", flush=True)
    torch_s = import_cost(args.image, "torch", args.repeats)
    torchrun_s = import_cost(args.image, "torch.distributed.run", args.repeats)
    print(f"import torch: {torch_s:.2f} core-s a process; import torch.distributed.run (torchrun): "
          f"{torchrun_s:.2f} core-s")
    guarded, unguarded = whole_process_cost(args.image, max(args.repeats, 5))
    print(f"a whole torch process (import torch, then exit): {guarded:.2f} core-s with the exit guard's freeze, "
          f"{unguarded:.2f} without (DDP_EXIT_FREEZE=0): {unguarded - guarded:.2f} core-s "
          f"({100 * (unguarded - guarded) / unguarded:.0f}%) saved at exit")

    runs = []
    with tempfile.TemporaryDirectory(prefix="ddp-suite-cost-") as scratch:
        for index in range(args.repeats):
            print(f"[suite_cost] 2-node run {index + 1} of {args.repeats}", flush=True)
            runs.append(one_run(Path(scratch)))
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    starts = 2 * torchrun_s + 2 * torch_s
    print(f"one 2-node run (app.hello, 1 process a node): {cpu:.1f} core-s in {wall:.1f} s wall; "
          f"its 4 torch start-ups {starts:.1f} core-s ({100 * starts / cpu:.0f}%)")

    if args.suite:
        print(f"[suite_cost] the suite: scripts/run-tests.sh {' '.join(pytest_args)}", flush=True)
        wall, cpu, code = measured(["bash", str(ROOT / "scripts" / "run-tests.sh"), *pytest_args], cwd=ROOT)
        floor = cpu / cores
        print(f"suite: exit {code}, {wall / 60:.1f} min wall, {cpu:.0f} core-s ({100 * cpu / (wall * cores):.0f}% "
              f"of {cores} cores); floor at full use {floor / 60:.1f} min; {args.goal:g} min needs "
              f"{cpu / (args.goal * 60):.1f} cores at full use")
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
