"""The GPU paths of app/ and of the workers' start-up hook, on a real GPU, with plain torchrun.

    python3 -m benchmarks.gpu_check --out DIR          # on a host with an NVIDIA GPU
    python3 -m benchmarks.gpu_check --out DIR --cpu    # the same steps on gloo: checks this script
                                                       # (there gloo aborts the DDP desync at once:
                                                       # its watchdog step fails, as it should)
    python3 -m benchmarks.gpu_check --out DIR --only desync --only capture   # some steps again

For a machine with a GPU but no Docker (the lent GPU machine of docs/gpus.md): every step is a
``torchrun --standalone`` of this checkout, as the nodes run it. Two ranks share GPU 0 the way
``--share-gpus`` makes them (the hook's ``--nccl-hostid-per-rank``, ``DDP_SHARED_GPUS=1``), so NCCL
runs with a world of 2 on one GPU. The steps:

- ``app.toy`` (basic, and model parallel), ``app.collectives`` and ``app.train`` (synthetic data)
  on NCCL: one rank, then two sharing the GPU;
- ``app.bench_collectives`` (all_reduce up to 64 MB) and ``app.bench_ddp`` (ResNet-50, one
  batch size) for their figures;
- the hang watchdog on NCCL, the workers under the hook with a debug directory, as in the nodes:
  ``benchmarks/jobs/gpu_desync.py`` (rank 0 alone all-reduces a metric) and
  ``benchmarks/jobs/gpu_ddp_desync.py`` (the same in a DDP loop): once the ranks' records stop
  changing, the verdict the launcher's watchdog would give from two looks ``RECHECK_S`` apart
  (it must be hung, with the divergence), then how ``--collective-timeout`` ends the job;
  ``benchmarks/jobs/gpu_quiet_training.py``, a healthy loop that prints nothing for 30 s, some
  steps 8 s of GPU work long: three verdicts, none hung;
- the record's snapshot thread asking the GPU while the script captures a CUDA graph
  (``benchmarks/gpu_capture.py``): the capture must succeed (not with ``--cpu``);
- ``--debug-collectives`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``) on NCCL with DDP
  (``benchmarks/jobs/gpu_ddp_desync.py``): torch's check names the two collectives, and DDP's
  logging (which crashes on gloo, docs/debugging.md) runs.

Prints one line per step (passed or not, seconds, what it found) and writes ``DIR/summary.json``
and ``DIR/logs.tar.gz`` (every step's output and the hang steps' debug directories).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"
DESYNC = ROOT / "benchmarks" / "jobs" / "gpu_desync.py"
DDP_DESYNC = ROOT / "benchmarks" / "jobs" / "gpu_ddp_desync.py"
QUIET = ROOT / "benchmarks" / "jobs" / "gpu_quiet_training.py"
sys.path.insert(0, str(ROOT))


@dataclass
class Step:
    """One step's result."""

    name: str
    passed: bool
    seconds: float
    found: str
    figures: dict = field(default_factory=dict)


class Checker:
    """Runs the steps in a scratch directory; keeps their output for the archive."""

    def __init__(self, scratch: Path, cpu: bool) -> None:
        self.scratch = scratch
        self.cpu = cpu
        self.steps: list[Step] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), "TMPDIR": str(self.scratch),
               "OMP_NUM_THREADS": "2", **extra}
        if self.cpu:
            env["DDP_FORCE_CPU"] = "1"
        return env

    def torchrun(self, nproc: int, target: list[str], shared: bool = False, hook: tuple[str, ...] = ()) -> list[str]:
        """``torchrun --standalone``; ``shared``: the ranks share GPU 0 as ``--share-gpus`` makes them."""
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        if shared or hook:
            return [*argv, str(HOOK), *(["--nccl-hostid-per-rank"] if shared else []), *hook, "--", *target]
        return [*argv, *target]

    def run(self, name: str, argv: list[str], timeout: float, **env: str) -> tuple[Optional[int], str, float]:
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=self.scratch, env=self.env(**env), capture_output=True, text=True,
                                  timeout=timeout)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as expired:  # its output comes as bytes, whatever text= says
            code = None
            output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                             for part in (expired.stdout, expired.stderr))
            output += f"\n[gpu_check] timed out after {timeout:.0f} s"
        seconds = time.monotonic() - started
        (self.scratch / f"{name}.log").write_text(output)
        return code, output, seconds

    def record(self, step: Step) -> None:
        self.steps.append(step)
        mark = "PASS" if step.passed else "FAIL"
        print(f"{mark} {step.name:<22} {step.seconds:6.1f} s  {step.found}", flush=True)

    def app(self, name: str, nproc: int, shared: bool, module: str, *args: str, expect: str,
            timeout: float = 120, figures_from: Optional[str] = None) -> None:
        extra = {"DDP_SHARED_GPUS": "1"} if shared else {}
        code, output, seconds = self.run(name, self.torchrun(nproc, ["-m", module, *args], shared), timeout, **extra)
        backend = re.search(r"backend (\w+)", output)
        found = re.findall(expect, output)
        passed = code == 0 and bool(found)
        said = (f"backend {backend.group(1)}; " if backend else "") + (found[-1] if found else last_line(output))
        figures = {}
        if figures_from:
            figures = {"lines": re.findall(figures_from, output, re.M)[:20]}
        self.record(Step(name, passed, seconds, f"exit {code}; {said}", figures))

    def start(self, name: str, script: Path, args: list[str], debug: Path, hook: tuple[str, ...] = ()):
        """A job of two ranks sharing GPU 0, under the hook with a debug directory, in the background."""
        debug.mkdir()
        argv = self.torchrun(2, [str(script), *args], shared=True, hook=hook)
        log = (self.scratch / f"{name}.log").open("w")
        proc = subprocess.Popen(argv, cwd=self.scratch, env=self.env(DDP_SHARED_GPUS="1", DDP_DEBUG_DIR=str(debug)),
                                stdout=log, stderr=subprocess.STDOUT)
        return proc, log

    def judge(self, name: str, debug: Path, started: float, probes: "Probes"):
        """What the launcher's watchdog would say now: two looks, ``RECHECK_S`` apart."""
        from orchestrate.hangs.diagnosis import diagnose
        from orchestrate.hangs.watchdog import RECHECK_S

        before = probes.take(debug)
        time.sleep(RECHECK_S)
        now = probes.take(debug)
        absent = {r: "it did not answer (exited?)" for r in (0, 1) if r not in now.snapshots}
        diagnosis = diagnose(now, before, {0, 1}, absent, quiet_s=now.at - started)
        (self.scratch / f"{name}-diagnosis.json").write_text(json.dumps(diagnosis.to_json(), indent=1))
        return diagnosis

    def hang(self, name: str, script: Path, timeout_s: int) -> None:
        """A desync on NCCL under the hook: what the watchdog would print once the ranks' records
        stop changing, then how ``--collective-timeout`` ends it."""
        debug = self.scratch / f"{name}-debug"
        started = time.monotonic()
        proc, log = self.start(name, script, [], debug, hook=("--collective-timeout", str(timeout_s)))
        probes = Probes()
        diagnosis = None
        try:
            while time.monotonic() < started + 60 and proc.poll() is None:
                if probes.stalled(debug):
                    diagnosis = self.judge(name, debug, started, probes)
                    break
                time.sleep(2)
            seen = time.monotonic() - started
            code = exit_code(proc, timeout_s + 120)
        finally:
            stop(proc, log)
        ended = time.monotonic() - started
        output = (self.scratch / f"{name}.log").read_text()
        timed_out = re.search(r"[Tt]imed? ?out[^\n]{0,160}", output)
        lines = diagnosis.lines() if diagnosis else []
        self.record(Step(f"{name}-watchdog", diagnosis is not None and diagnosis.hung and diagnosis.divergence is not None,
                         seen, lines[0] if lines else "the records never stopped changing within 60 s", {"lines": lines}))
        self.record(Step(f"{name}-timeout", code not in (0, None), ended,
                         f"exit {code}; " + (timed_out.group(0) if timed_out else last_line(output)),
                         {"files": sorted(p.name for p in debug.iterdir())}))

    def quiet(self, name: str, script: Path, args: list[str]) -> None:
        """A healthy job that prints nothing for a while: the watchdog must not call it hung."""
        debug = self.scratch / f"{name}-debug"
        started = time.monotonic()
        proc, log = self.start(name, script, args, debug)
        verdicts = []
        try:
            while time.monotonic() < started + 90 and "training" not in (self.scratch / f"{name}.log").read_text():
                time.sleep(1)
            probes = Probes()
            for _ in range(3):  # a look every ~7 s, through long GPU steps and short ones
                diagnosis = self.judge(name, debug, started, probes)
                verdicts.append(diagnosis.lines()[0])
                if diagnosis.hung or proc.poll() is not None:
                    break
            code = exit_code(proc, 120)
        finally:
            stop(proc, log)
        hung = [v for v in verdicts if not v.startswith("no output")]
        self.record(Step(name, code == 0 and len(verdicts) == 3 and not hung, time.monotonic() - started,
                         f"exit {code}; " + (hung[0] if hung else f"{len(verdicts)} looks, each: " +
                                             (verdicts[-1] if verdicts else "none")),
                         {"verdicts": verdicts}))

    def detail(self) -> None:
        """``--debug-collectives`` on NCCL with DDP: torch's check names the collectives."""
        argv = self.torchrun(2, [str(DDP_DESYNC)], shared=True, hook=("--collective-timeout", "60"))
        code, output, seconds = self.run("nccl-detail-ddp", argv, 150, DDP_SHARED_GPUS="1",
                                         TORCH_DISTRIBUTED_DEBUG="DETAIL",
                                         DDP_DEBUG_DIR=str(self.scratch / "detail-debug"))
        mismatch = re.search(r"Detected mismatch between collectives[^\n]{0,200}", output)
        crash = re.search(r"terminate called|Segmentation fault|core dumped", output)
        found = mismatch.group(0) if mismatch else last_line(output)
        self.record(Step("nccl-detail-ddp", code not in (0, None) and bool(mismatch) and not crash, seconds,
                         f"exit {code}; {'crashed: ' + crash.group(0) + '; ' if crash else ''}{found}"))

    def capture(self) -> None:
        """The record's snapshot thread asks the GPU while a CUDA graph is captured
        (``benchmarks/gpu_capture.py``): the capture must succeed."""
        code, output, seconds = self.run("graph-capture", [sys.executable, "-m", "benchmarks.gpu_capture"], 120)
        cases = re.findall(r"^(PASS|FAIL) (\w+)\s+(.*)$", output, re.M)
        control = re.search(r"the control ([^\n]*)", output)
        record = next((rest for _, case, rest in cases if case == "record"), last_line(output))
        self.record(Step("graph-capture", code == 0, seconds,
                         f"exit {code}; record: {record}; control {control.group(1) if control else '?'}",
                         {"cases": [" ".join(case) for case in cases]}))


class Probes:
    """The snapshots the workers write when asked, as the launcher asks for them."""

    def __init__(self) -> None:
        self.last = None

    def take(self, debug: Path):
        from orchestrate.hangs.snapshots import request_snapshots

        self.last = request_snapshots(debug, {0, 1}, timeout_s=2)
        return self.last

    def stalled(self, debug: Path) -> bool:
        """Both ranks answer with the same records as the look before, and have made collectives
        (NCCL's set-up takes seconds, with none)."""
        before, now = self.last, self.take(debug)
        return (set(now.snapshots) == {0, 1} and before is not None and set(before.snapshots) == {0, 1}
                and all(now.snapshots[r].collectives and now.snapshots[r].collectives == before.snapshots[r].collectives
                        for r in now.snapshots))


def exit_code(proc: subprocess.Popen, timeout_s: float) -> Optional[int]:
    """Its exit status once it ends, or None if it runs past ``timeout_s``."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def stop(proc: subprocess.Popen, log) -> None:
    proc.kill()
    proc.wait()
    log.close()


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def environment() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info.update(device=torch.cuda.get_device_name(0), devices=torch.cuda.device_count(),
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
    return info


def steps(check: Checker, collective_timeout: int) -> dict:
    """Every step by name, in the order they run (``--cpu`` skips the graph capture: it needs CUDA)."""
    replicas = r"replicas identical across \d+ ranks"

    def app(name: str, *args, **options):
        return name, lambda: check.app(name, *args, **options)

    def hang(name: str, script: Path):
        return name, lambda: check.hang(name, script, collective_timeout)

    skip_capture = lambda: print("SKIP graph-capture             needs CUDA", flush=True)  # noqa: E731
    return dict([
        app("toy-1-rank", 1, False, "app.toy", "--steps", "40", expect=replicas),
        app("toy-2-shared", 2, True, "app.toy", "--steps", "40", expect=replicas),
        app("collectives-2-shared", 2, True, "app.collectives", expect=r"butterfly all-reduce[^\n]*"),
        app("train-2-shared", 2, True, "app.train", "--data", "synthetic", "--epochs", "1",
            expect=r"[^\n]*-> OK", timeout=180),
        app("bench-collectives-2", 2, True, "app.bench_collectives", "--ops", "all_reduce", "--max-size", "64M",
            "--min-size", "1K", "--factor", "16", expect=r"[^\n]*all_reduce[^\n]*", figures_from=r"^.*all_reduce.*$"),
        app("bench-ddp-1", 1, False, "app.bench_ddp", "--no-sweep", "--batch-size", "64", "--steps", "5",
            expect=r"(?m)^\s+\d+ \w+\s+ddp-tuned .*$", timeout=240,
            figures_from=r"^(?:\s+\d+ \w+\s+\S+\s+[\d.]+\s+[\d.]+x.*|resnet50.*)$"),
        app("toy-mp-2-shared", 2, True, "app.toy", "--demo", "model-parallel", "--steps", "20", expect=replicas),
        ("graph-capture", skip_capture if check.cpu else check.capture),
        hang("nccl-desync", DESYNC),
        hang("nccl-ddp-desync", DDP_DESYNC),
        ("nccl-quiet-training", lambda: check.quiet("nccl-quiet-training", QUIET, ["--seconds", "30"])),
        ("nccl-detail-ddp", check.detail),
    ])


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where summary.json and logs.tar.gz go")
    parser.add_argument("--cpu", action="store_true", help="run the steps on gloo (DDP_FORCE_CPU=1): checks the script")
    parser.add_argument("--collective-timeout", type=int, default=30,
                        help="the hang step's --collective-timeout, seconds (default: 30)")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="run only the steps whose name holds TEXT (repeatable; default: every step)")
    args = parser.parse_args(argv)
    info = environment()
    print(f"gpu_check: {info}", flush=True)
    if not info["cuda"] and not args.cpu:
        print("gpu_check: no CUDA device here (--cpu runs the steps on gloo)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch_dir:
        scratch = Path(scratch_dir)
        check = Checker(scratch, args.cpu)
        chosen = [step for name, step in steps(check, args.collective_timeout).items()
                  if not args.only or any(part in name for part in args.only)]
        if not chosen:
            print(f"gpu_check: no step's name holds {' or '.join(args.only)}", file=sys.stderr)
            return 2
        for step in chosen:
            step()
        summary = {"environment": info, "steps": [asdict(s) for s in check.steps]}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        with tarfile.open(args.out / "logs.tar.gz", "w:gz") as archive:
            for path in sorted(scratch.iterdir()):
                if path.suffix in (".log", ".json") or path.name.endswith("-debug"):
                    archive.add(path, arcname=path.name)
    failed = [s.name for s in check.steps if not s.passed]
    print(f"gpu_check: {len(check.steps) - len(failed)} of {len(check.steps)} passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
