"""Training steps from a plain script under real torchrun: the workers' start-up hook counts the
optimizer's steps onto the progress channel, and a script that reports its own is left alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.workers.conftest import ROOT

HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"
JOBS = ROOT / "tests" / "jobs"


def run_hooked(tmp_path: Path, script: Path, *args: str) -> dict[int, list[dict]]:
    progress = tmp_path / "progress"
    progress.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DDP_PROGRESS_DIR": str(progress), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(HOOK), "--", str(script), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {rank: [json.loads(line) for line in (progress / f"rank{rank}.jsonl").read_text().splitlines()]
            for rank in (0, 1)}


def test_a_plain_scripts_optimizer_steps_reach_the_progress_channel(tmp_path):
    records = run_hooked(tmp_path, JOBS / "plain_sgd.py", "--steps", "12", "--step-seconds", "0")
    for rank in (0, 1):
        assert [r["step"] for r in records[rank]] == list(range(1, 13))
        assert {r["counted"] for r in records[rank]} == {"optimizer"}


def test_a_script_that_reports_its_own_steps_keeps_its_numbering(tmp_path):
    records = run_hooked(tmp_path, JOBS / "resume_training.py", "--steps", "6")
    for rank in (0, 1):
        steps = [r for r in records[rank] if "step" in r]
        assert [r["step"] for r in steps] == list(range(1, 7))
        assert not any("counted" in r for r in records[rank])
