"""Host-level tests of app/: real torchrun --standalone, real gloo process groups."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="app/ tests need torch (scripts/setup.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")
HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"  # the workers' start-up hook, as in the nodes


def hooked_torchrun(nproc: int, *args: str) -> list[str]:
    """``torchrun --standalone`` of ``nproc`` workers that start through the hook; ``args`` are the hook's."""
    return [*TORCHRUN, "--nproc-per-node", str(nproc), str(HOOK), *args]


def host_env(scratch: Path, **extra: str) -> dict[str, str]:
    """The environment of a torchrun on the host, its temporary files kept in ``scratch``.

    torchrun makes a ``torchelastic_*`` log directory in the temporary directory and never
    removes it: with TMPDIR in the test's own directory, the host's /tmp is left as it was."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch), **extra}


class Torchrun:
    """Runs ``torchrun --standalone`` for a module of app/ in a scratch directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, nproc: int, module: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        env = host_env(self.cwd, PYTHONPATH=str(ROOT), DDP_FORCE_CPU="1")
        env.pop("DDP_SHARED_DIR", None)
        argv = [*TORCHRUN, "--nproc-per-node", str(nproc), "--tee", "3", "-m", module, *args]
        return subprocess.run(argv, cwd=self.cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def torchrun(tmp_path: Path) -> Torchrun:
    return Torchrun(tmp_path)


def checksums(output: str) -> dict[int, str]:
    """Every rank's ``param_checksum`` line."""
    return {int(r): v for r, v in re.findall(r"param_checksum rank=(\d+) value=(\S+)", output)}
