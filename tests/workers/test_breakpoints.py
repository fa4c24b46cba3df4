"""A script's breakpoint() and torch.distributed.breakpoint() under real torchrun and gloo, started
through the workers' start-up hook: each waits for a terminal on its socket in the debug
directory, takes pdb's commands from it, and the job goes on with what the terminal changed; and
with run --pdb, the rank that raised waits in its post-mortem.
(tests/unit/test_remote_debugger.py covers pdb's commands; tests/integration, `debug RUN` on real
nodes.)"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Iterator

from orchestrate.debugger.session import connect, talk
from orchestrate.errors import OrchestrateError
from orchestrate.node.remote_debugger import socket_name
from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOB = ROOT / "tests" / "jobs" / "breakpoints.py"
POST_MORTEM_JOB = ROOT / "tests" / "jobs" / "post_mortem.py"


def session(debug, rank: int, typed: str, job: subprocess.Popen) -> str:
    """A terminal's session with ``rank``, once it listens."""
    path = debug / socket_name(rank)
    deadline = time.monotonic() + 120
    while True:  # (its socket's file is there from its bind, a moment before it listens)
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, f"rank {rank} never stopped"
        try:
            connection = connect(path)
            break
        except OrchestrateError:
            time.sleep(0.05)
    shown = io.StringIO()
    talk(connection, io.StringIO(typed), shown)
    return shown.getvalue()


@contextlib.contextmanager
def two_hooked_ranks(tmp_path: Path, script: Path, **environ: str) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """``script`` on 2 ranks of torchrun through the workers' start-up hook, with its debug and
    progress directories; killed on the way out should a test fail before it ended."""
    debug, progress = tmp_path / "debug", tmp_path / "progress"
    debug.mkdir()
    progress.mkdir()
    env = host_env(tmp_path, DDP_DEBUG_DIR=str(debug), DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT), **environ)
    env.pop("PYTHONBREAKPOINT", None)
    job = subprocess.Popen(hooked_torchrun(2, "--", str(script)), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        yield job, debug, progress
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()


def debugger_states(progress: Path, rank: int) -> list[dict]:
    """What ``rank`` said of its debugger on the progress channel."""
    records = [json.loads(line) for line in (progress / f"rank{rank}.jsonl").read_text().splitlines()]
    return [record["debugger"] for record in records if "debugger" in record]


def test_each_rank_stops_for_a_terminal_and_the_job_sums_what_the_terminal_made(tmp_path):
    with two_hooked_ranks(tmp_path, JOB) as (job, debug, progress):
        first = session(debug, 1, "p t\nt.mul_(10)\nc\n", job)
        second = session(debug, 0, "up\np rank, t\nc\n", job)
        out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert "(Pdb) tensor([2., 2.])" in first  # rank 1's tensor, before the terminal made it 20s
    assert "Type 'up' to get to the frame that called dist.breakpoint(rank=0)" in second  # torch's own words
    assert "breakpoints.py(13)<module>()" in second and "(Pdb) (0, tensor([21., 21.]))" in second
    assert "rank 0 sum [21.0, 21.0]" in out and "rank 1 sum [21.0, 21.0]" in out
    said = {rank: debugger_states(progress, rank) for rank in (0, 1)}
    assert said[1][0] == {"state": "waits", "call": "breakpoint()", "file": str(JOB), "line": 11,  # not under cwd
                          "function": "<module>", "text": "breakpoint()", "attached": False}
    assert said[0][0]["call"] == "torch.distributed.breakpoint()" and said[0][0]["line"] == 13  # the script's call
    assert [s["state"] for s in said[0]] == [s["state"] for s in said[1]] == ["waits", "attached", "left"]


def test_with_pdb_the_rank_that_raised_waits_in_its_post_mortem_then_ends_the_job_with_its_error(tmp_path):
    with two_hooked_ranks(tmp_path, POST_MORTEM_JOB, DDP_POST_MORTEM="1", DDP_RUN_ID="r9") as (job, debug, progress):
        shown = session(debug, 1, "p width, batch\nwhere\nc\n", job)
        out, err = job.communicate(timeout=120)
    assert job.returncode != 0  # the job ends with rank 1's error, as without --pdb
    assert "(Pdb) (3, tensor([[3., 3.]]))" in shown  # the frame that raised: the user's own function
    assert "post_mortem.py(16)<module>()" in shown.split("(Pdb)")[2] and "worker_start" not in shown
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x2 and 3x2)" in err
    assert "rank 0 out [[6.0, 6.0]]" in out and "rank 1 out" not in out
    said = debugger_states(progress, 1)
    assert said[0] == {"state": "waits", "call": "an uncaught error (--pdb)", "file": str(POST_MORTEM_JOB),
                       "line": 9, "function": "scale", "attached": False,
                       "text": "uncaught RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x2 and 3x2)"}
    assert [s["state"] for s in said] == ["waits", "attached", "left"]
