"""The workers' start-up hook under real torchrun: a script that names nccl gets gloo (the
opt-in shim) and trains; each local rank gets its own NCCL host id."""
from __future__ import annotations

import re
import socket
import subprocess

from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOB = ROOT / "tests" / "jobs" / "names_nccl.py"


def test_a_script_that_names_nccl_gets_gloo_and_each_rank_its_own_nccl_hostid(tmp_path):
    done = subprocess.run(hooked_torchrun(2, "--nccl-hostid-per-rank", "--nccl-as-gloo", "--", str(JOB)),
                          cwd=tmp_path, env=host_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = {rank: rest for rank, *rest in
            re.findall(r"rank (\d) backend (\S+) hostid (\S+) all_reduce ([\d.]+) grad ([\d.]+)", done.stdout)}
    host = socket.gethostname()
    # ranks 1 + 2 summed; the same gradient on both replicas (2 inputs of ones x 4 weights)
    assert seen == {"0": ["gloo", f"{host}-local0", "3", "8"], "1": ["gloo", f"{host}-local1", "3", "8"]}, done.stdout


def test_without_the_shim_the_script_asks_for_nccl(tmp_path):
    done = subprocess.run(hooked_torchrun(1, "--nccl-hostid-per-rank", "--", str(JOB)),
                          cwd=tmp_path, env=host_env(tmp_path), capture_output=True, text=True, timeout=240)
    if "backend nccl" in done.stdout:  # a GPU host: real NCCL
        return
    assert done.returncode != 0 and re.search(r"nccl|NCCL", done.stdout + done.stderr)
