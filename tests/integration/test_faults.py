"""Injected faults on real nodes: a node that dies, hangs or is cut off, on CPU/Gloo."""
from __future__ import annotations

import re

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import (
    HUNG_TIMEOUT_S,
    LONG_TOY,
    leftovers,
    read_to_end,
    remove_project,
    start_run,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_killed_node_fails_the_static_job_and_is_named(orchestrate_run, docker_client):
    result = orchestrate_run("--nodes", "2", "--fault", "kill:node1@step=30", *LONG_TOY)
    assert result.code == 1
    assert "fault injected: kill:node1@step=30" in result.output
    assert "FAILED: node1 failed (injected fault kill:node1@step=30)" in result.output
    assert leftovers(docker_client, result.project) == []


@pytest.mark.parametrize("action, reason", [
    pytest.param("pause", "its container is paused (hung)", marks=pytest.mark.xdist_group("paused-run")),
    ("disconnect", "it is cut off from the ddp network"),
])
def test_hung_or_cut_off_node_fails_the_job_after_the_timeout_naming_it(faulted_run, action, reason):
    run = faulted_run(action)
    assert run.code == 1
    assert f"FAILED: node1 stopped answering: {reason} (injected fault {action}:node1@step=30)" in run.output
    assert re.search(r"then node0 rank 0: RuntimeError: .*Timed out", run.output)
    # the collective timeout plus a few seconds, never the 30-minute default
    took = run.seconds_after_fault
    assert HUNG_TIMEOUT_S - 1 < took < HUNG_TIMEOUT_S + 12, f"{took:.1f} s after the fault"
    assert run.leftovers == []


def test_faults_can_be_injected_into_a_running_run_by_id(docker_client, tmp_path, capsys):
    proc, lines = start_run(tmp_path, "--nodes", "2", *LONG_TOY)
    seen: list[str] = []
    run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"basic step 20\b", seen)
        assert main(["fault", run_id, "kill:node1"]) == 0
        output = read_to_end(proc, lines, seen, timeout_s=60)
        assert proc.returncode == 1
        # the launcher in this other "terminal" says the fault, and blames it, not a bare 137
        assert re.search(r"fault injected by `python -m orchestrate fault`: kill:node1 \([\d.]+ s into the job, at"
                         r" step \d+\)", output), output
        assert "FAILED: node1 failed (injected fault kill:node1)" in output
        assert main(["fault", "no-such-run", "kill:node1"]) == 2
        assert "no run no-such-run in the engine" in capsys.readouterr().err
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, f"ddp-{run_id}")
