"""Ctrl-C (SIGINT), SIGTERM, SIGHUP and SIGQUIT to a real run tear everything down within seconds."""
from __future__ import annotations

import signal
import time

import pytest

from tests.integration.conftest import leftovers, remove_project, start_run, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("signum, background", [
    (signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGQUIT, False),
    (signal.SIGINT, True),  # `orchestrate run ... &` in a script: SIGINT arrives inherited as ignored
])
def test_signal_during_training_stops_and_removes_everything(docker_client, tmp_path, signum, background):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--", "-m", "app.toy", "--steps", "100000000",
                            "--log-every", "200", sigint_ignored=background)
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"\[node0/rank0\]\s+basic step \d+", seen)  # training is under way
        sent = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
        assert code == 128 + signum  # 130, 143, 129, 131
        assert took < 20, f"teardown took {took:.1f} s"
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)
