"""Ctrl-C (SIGINT) and SIGTERM to a real run tear everything down within seconds."""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import leftovers, remove_project

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def start_run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, "queue.Queue[str]"]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "run", "--runs-dir", str(tmp_path), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
    )
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    return proc, lines


def wait_for(lines: "queue.Queue[str]", pattern: str, seen: list[str], timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n{''.join(seen[-30:])}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_training_stops_and_removes_everything(docker_client, tmp_path, signum):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--", "-m", "app.toy", "--steps", "100000000",
                            "--log-every", "200")
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"\[node0/rank0\]\s+basic step \d+", seen)  # training is under way
        sent = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
        assert code == 130
        assert took < 20, f"teardown took {took:.1f} s"
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)
