"""benchmarks/per_test_cpu.py, the recorder behind ``suite_cost --per-test``: one line per test,
a test that burns CPU recorded with it, and nothing written without its variable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TESTS = '''
import time

def test_busy():
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass

def test_idle():
    time.sleep(0.2)
'''


def run_with_recorder(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.per_test_cpu",
                           "-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path), "-c", os.devnull,
                           str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)


def test_each_test_gets_a_line_with_its_core_seconds_and_wall_time(tmp_path):
    records = tmp_path / "records.jsonl"
    done = run_with_recorder(tmp_path, {**os.environ, "DDP_PER_TEST_CPU": str(records)})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["test"].split("::")[-1]: row for row in map(json.loads, records.read_text().splitlines())}
    assert set(rows) == {"test_busy", "test_idle"}
    assert rows["test_busy"]["core_s"] >= 0.25  # its own 0.3 s of CPU, at the clock's 10 ms
    assert rows["test_idle"]["wall_s"] >= 0.2
    assert rows["test_busy"]["wall_s"] >= 0.25


def test_without_the_variable_nothing_is_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DDP_PER_TEST_CPU"}
    done = run_with_recorder(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["test_sample.py"]
