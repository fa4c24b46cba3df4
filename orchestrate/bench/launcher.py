"""``python -m orchestrate bench KIND``: benchmarks across simulated nodes.

- ``collectives`` and ``ddp`` are runs of ``app.bench_collectives`` and ``app.bench_ddp``
  (plain torchrun programs that work the same on a real cluster); the run's rank 0 writes its
  figures to ``/ddp-run/bench.json``, and this module adds what the host knows (the link, the
  fractions of the wire, the goals), prints a table and draws the plot into the run directory.
- ``launcher`` times a trivial 2x2 job through the launcher, side by side with a hand-made
  ``docker compose up`` + ``docker exec torchrun`` baseline (and TorchX's ``local_docker``
  when ``torchx`` is installed), and a scaling series over node counts.

The summaries are pure functions of the figures, tested apart from any engine.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Optional

from orchestrate.config.run_config import DEFAULT_IMAGE, PROJECT_ROOT
from orchestrate.errors import RunDirError

LAUNCHER_GOAL_RATIO = 1.10  # the launcher against the hand-made baseline


@contextmanager
def unmeasured_directory(directory: Path) -> Iterator[Path]:
    """Make ``directory`` (and the runs directory above it, where missing) for the bench's
    results, and remove what was made where the block fails (the image cannot be had, an
    interrupt): what comes before any measurement leaves nothing behind. A parent another
    process wrote into meanwhile is kept.

    Raises:
        RunDirError: Where the directory cannot be made (what ``check_runs_dir`` cannot foresee).
    """
    made = [directory]
    while not made[-1].parent.exists() and made[-1].parent != made[-1]:
        made.append(made[-1].parent)
    try:
        directory.mkdir(parents=True)
    except OSError as exc:
        raise RunDirError(f"cannot make the bench's directory {directory}: {exc.strerror or exc}"
                          f" (--runs-dir {directory.parent})") from None
    try:
        yield directory
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        for parent in made[1:]:
            try:
                parent.rmdir()  # only where still empty
            except OSError:
                break
        raise


def launcher_summary(side_by_side: dict[str, list[float]], scaling: list[dict]) -> dict:
    """Medians, the launcher's ratio to the hand-made baseline, and the scaling phases."""
    medians = {name: {"runs_s": times, "median_s": statistics.median(times)} for name, times in side_by_side.items()
               if times}
    ratio = None
    if "launcher" in medians and "hand-made" in medians:
        ratio = medians["launcher"]["median_s"] / medians["hand-made"]["median_s"]
    rows = []
    for row in scaling:
        row = dict(row)
        known = [row.get(k) or 0.0 for k in ("bring_up_s", "rendezvous_s")]
        row["rest_of_job_s"] = max(0.0, (row.get("job_s") or 0.0) - (row.get("rendezvous_s") or 0.0))
        row["total_s"] = sum(known) + row["rest_of_job_s"] + (row.get("teardown_s") or 0.0)
        rows.append(row)
    return {"side_by_side": medians, "ratio_to_hand_made": ratio, "scaling": rows}


def format_launcher(summary: dict) -> str:
    lines = [f"{'launcher':<22} {'median (s)':>10} {'runs (s)'}"]
    for name, row in summary["side_by_side"].items():
        lines.append(f"{name:<22} {row['median_s']:>10.2f} {' '.join(f'{t:.2f}' for t in row['runs_s'])}")
    if summary["ratio_to_hand_made"] is not None:
        ratio = summary["ratio_to_hand_made"]
        verdict = "meets" if ratio <= LAUNCHER_GOAL_RATIO else "misses"
        lines.append(f"launcher / hand-made: {ratio:.2f}x ({verdict} the {LAUNCHER_GOAL_RATIO}x goal)")
    if summary["scaling"]:
        lines.append(f"{'nodes':>5} {'bring-up':>9} {'rendezvous':>11} {'job':>7} {'teardown':>9} {'wall':>7}")
        for row in summary["scaling"]:
            lines.append(f"{row['nodes']:>5} {row.get('bring_up_s') or 0:>9.1f} {row.get('rendezvous_s') or 0:>11.1f}"
                         f" {row.get('job_s') or 0:>7.1f} {row.get('teardown_s') or 0:>9.1f} {row['wall_s']:>7.1f}")
    return "\n".join(lines)


# The launcher benchmark --------------------------------------------------------------------

TRIVIAL_JOB = ("-m", "app.hello")


# How long an interrupted launcher is given to tear its run down before it is killed.
LAUNCHER_TEARDOWN_S = 60.0


def run_to_its_end(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a launcher, its output captured, in a session of its own (a
    terminal's Ctrl-C reaches this process alone): an interrupt here is passed on to it as one
    SIGINT, and its teardown waited for, where ``subprocess.run`` would SIGKILL it and leave its
    nodes running."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=LAUNCHER_TEARDOWN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the launcher and what it started
            proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def time_launcher(nodes: int, nproc: int, runs_dir: Path, image: str) -> tuple[float, dict]:
    """Wall time of ``python -m orchestrate run`` for a trivial job, and its outcome record."""
    started = time.monotonic()
    proc = run_to_its_end([sys.executable, "-m", "orchestrate", "run", "--nodes", str(nodes), "--nproc-per-node",
                           str(nproc), "--cpu", "--no-build", "--image", image, "--runs-dir", str(runs_dir), "--",
                           *TRIVIAL_JOB], cwd=PROJECT_ROOT)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"launcher run failed ({proc.returncode}): {proc.stdout[-500:]}{proc.stderr[-500:]}")
    latest = max(runs_dir.glob("*/outcome.json"), key=lambda p: p.stat().st_mtime)
    return wall, json.loads(latest.read_text())


def hand_made_project(nodes: int, image: str, name: str) -> dict:
    """The least a person would write: N containers on one network, idling, the project mounted."""
    services = {
        f"node{i}": {"image": image, "hostname": f"node{i}", "init": True, "command": ["sleep", "infinity"],
                     "environment": {"PYTHONPATH": "/opt/ddp-compose", "GLOO_SOCKET_IFNAME": "eth0"},
                     "volumes": [f"{PROJECT_ROOT}:/opt/ddp-compose:ro"], "networks": ["ddp"]}
        for i in range(nodes)
    }
    return {"name": name, "services": services, "networks": {"ddp": {}}}


def hand_made_name() -> str:
    """A Compose project name of its own for one hand-made baseline."""
    return f"ddp-bench-baseline-{int(time.time() * 1000) % 10**8}"


def time_hand_made(nodes: int, nproc: int, image: str, name: str) -> float:
    """``docker compose up`` + ``docker exec torchrun`` on every node at once + ``down``, as
    Compose project ``name``."""
    from orchestrate.engine.compose_cli import compose_command

    with tempfile.TemporaryDirectory() as scratch:
        compose_file = Path(scratch) / "compose.json"
        compose_file.write_text(json.dumps(hand_made_project(nodes, image, name)))
        base = [*compose_command(), "-p", name, "-f", str(compose_file)]
        started = time.monotonic()
        try:
            subprocess.run([*base, "up", "-d", "--quiet-pull"], check=True, capture_output=True)
            execs = [subprocess.Popen([*base, "exec", "-T", f"node{i}", "torchrun", "--nnodes", str(nodes),
                                       "--node-rank", str(i), "--nproc-per-node", str(nproc), "--master-addr",
                                       "node0", "--master-port", "29500", *TRIVIAL_JOB],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(nodes)]
            codes = [p.wait() for p in execs]
            if any(codes):
                raise RuntimeError(f"hand-made baseline failed: exit codes {codes}")
        finally:
            subprocess.run([*base, "down", "-v", "-t", "2"], capture_output=True)
        return time.monotonic() - started


def time_torchx(nodes: int, nproc: int, image: str) -> Optional[float]:
    """TorchX ``local_docker`` with ``dist.ddp`` (None when torchx is not installed)."""
    if shutil.which("torchx") is None:
        return None
    started = time.monotonic()
    proc = subprocess.run(["torchx", "run", "-s", "local_docker", "--wait", "dist.ddp", "-j", f"{nodes}x{nproc}",
                           "--image", image, "--script", "app/hello.py"], capture_output=True, text=True,
                          cwd=PROJECT_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"torchx failed: {proc.stderr[-500:]}")
    return time.monotonic() - started


def run_launcher_bench(runs_dir: Path, repeats: int, scaling: list[int], out: IO[str],
                       image: str = DEFAULT_IMAGE) -> dict:
    """Side by side (alternating, so that each sees the same machine), then the scaling series."""
    side: dict[str, list[float]] = {"launcher": [], "hand-made": [], "torchx local_docker": []}
    hand_made_projects = []
    for i in range(repeats):
        side["launcher"].append(time_launcher(2, 2, runs_dir, image)[0])
        hand_made_projects.append(hand_made_name())
        side["hand-made"].append(time_hand_made(2, 2, image, hand_made_projects[-1]))
        torchx = time_torchx(2, 2, image)
        if torchx is not None:
            side["torchx local_docker"].append(torchx)
        out.write(f"[bench] 2x2 round {i + 1}/{repeats}: launcher {side['launcher'][-1]:.2f} s,"
                  f" hand-made {side['hand-made'][-1]:.2f} s"
                  + (f", torchx {torchx:.2f} s" if torchx is not None else ", torchx not installed") + "\n")
        out.flush()
    rows = []
    for nodes in scaling:
        wall, record = time_launcher(nodes, 1, runs_dir, image)
        rows.append({"nodes": nodes, "wall_s": wall, **record["timings"]})
        out.write(f"[bench] scaling: {nodes} node(s) in {wall:.1f} s\n")
        out.flush()
    return {**launcher_summary(side, rows), "hand_made_projects": hand_made_projects}
