"""The faults real clusters suffer, on real nodes: a straggler and a degraded link that end, a
worker killed or hung while its node lives, and faults held from the command line."""
from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import leftovers, read_so_far, remove_project, start_run, wait_for

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


@pytest.fixture
def probe_workdir(tmp_path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(JOBS / "fault_probe.py", workdir)
    return workdir


def step_line(output: str, rank: int, step: int) -> dict:
    """What rank ``rank`` printed at ``step``: its CPU quota, all_reduce time and link."""
    match = re.search(rf"rank {rank} step {step} quota (\S+) allreduce_s ([\d.]+) link (.*)$", output, re.M)
    assert match, f"no step {step} line of rank {rank}"
    return {"quota": match[1], "allreduce_s": float(match[2]), "link": match[3]}


def test_a_straggler_and_a_degraded_link_take_hold_mid_run_and_end(orchestrate_run, docker_client, probe_workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(probe_workdir), "--fault", "slow:node1,cpus=0.1@step=5..15",
                             "--fault", "degrade:node0,rate=10mbit@step=5..15", "--", "fault_probe.py", "--steps", "25")
    assert result.code == 0, result.output[-4000:]
    before, during, after = (step_line(result.output, 1, s) for s in (3, 8, 25))
    # node1's cgroup: no quota, then 10 ms per 100 ms period (0.1 CPU), then none again
    assert (before["quota"], during["quota"], after["quota"]) == ("max", "10000", "max")
    assert step_line(result.output, 0, 8)["quota"] == "max"  # the other node is untouched
    # node0's link: a 10 Mbit/s token bucket while the fault lasts; 1 MB cannot cross it in under 0.5 s
    assert "tbf" in step_line(result.output, 0, 8)["link"] and "rate 10Mbit" in step_line(result.output, 0, 8)["link"]
    assert step_line(result.output, 0, 8)["allreduce_s"] >= 0.5
    assert "tbf" not in step_line(result.output, 0, 25)["link"]
    assert "fault ended: slow:node1,cpus=0.1@step=5..15" in result.output
    assert "fault ended: degrade:node0,rate=10mbit@step=5..15" in result.output
    assert 'id="step-times"' in (result.run_dir / "report.html").read_text()  # the straggler, drawn
    assert leftovers(docker_client, result.project) == []


def test_a_killed_rank_fails_the_static_job_naming_the_rank(orchestrate_run, docker_client, probe_workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(probe_workdir), "--fault", "kill-rank:1@step=5", "--",
                             "fault_probe.py")
    assert result.code == 1
    assert "fault injected: kill-rank:1@step=5 (" in result.output and ", on node1)" in result.output
    assert "FAILED: node1 rank 1 failed (injected fault kill-rank:1@step=5)" in result.output
    # the node lived: its torchrun saw its worker die, and reported it
    assert re.search(r"\[node1\].*Signal 9 \(SIGKILL\) received by PID|exitcode\s*: -9", result.output)
    assert leftovers(docker_client, result.project) == []


def test_a_hung_rank_is_named_when_its_peer_times_out(orchestrate_run, docker_client, probe_workdir):
    result = orchestrate_run("--nodes", "2", "--collective-timeout", "8", "--workdir", str(probe_workdir),
                             "--fault", "hang-rank:1@step=5", "--", "fault_probe.py")
    assert result.code == 1
    assert "node1 rank 1 stopped answering: its worker process is stopped (hung)" in result.output
    assert ("FAILED: node1 rank 1 stopped answering: its worker process is stopped (hung) (injected fault"
            " hang-rank:1@step=5)") in result.output
    assert leftovers(docker_client, result.project) == []


def test_faults_held_from_the_command_line_are_undone_at_their_end(docker_client, tmp_path, probe_workdir, capsys):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--workdir", str(probe_workdir), "--", "fault_probe.py",
                            "--steps", "100000")
    seen: list[str] = []
    run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"rank 1 step 3 ", seen)
        out = io.StringIO()
        assert main(["fault", run_id, "slow:node1,cpus=0.2@t=0..1", "hang-rank:0@t=0..1"], out=out) == 0
        said = out.getvalue()
        assert "injected slow into node1" in said and "injected hang-rank into rank 0 on node0" in said
        assert "ended slow:node1,cpus=0.2@t=0..1 on node1" in said and "ended hang-rank:0@t=0..1 on node0" in said
        quota = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.CpuQuota}}", f"ddp-{run_id}-node1-1"],
                               capture_output=True, text=True).stdout.strip()
        assert quota in ("-1", "0")  # no quota again
        printed = read_so_far(lines, seen)  # what was printed before the end of the hang
        before = max(int(step) for step in re.findall(r"rank 0 step (\d+) ", printed))
        # the hung rank goes on: steps past where it was stopped (a line or so may still be in the pipe)
        while int(wait_for(lines, r"rank 0 step (\d+) ", seen).group(1)) < before + 2:
            pass
        assert proc.poll() is None
        with pytest.raises(SystemExit) as refused:  # bad input, as argparse refuses it
            main(["fault", run_id, "kill:node1@t=3..4"])
        assert refused.value.code == 2 and "kill has no end" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        remove_project(docker_client, f"ddp-{run_id}")


def test_a_step_fault_fires_at_its_step_on_a_plain_sgd_loop(orchestrate_run, docker_client, tmp_path):
    """The script reports no steps: the workers' start-up hook counts its optimizer's."""
    workdir = tmp_path / "plain"
    workdir.mkdir()
    shutil.copy(JOBS / "plain_sgd.py", workdir)
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--fault", "kill:node1@step=20", "--",
                             "plain_sgd.py", "--steps", "40")
    assert result.code == 1, result.output[-3000:]
    assert re.search(r"fault injected: kill:node1@step=20 \([\d.]+ s into the job, at step 20\)", result.output), \
        result.output[-3000:]
    assert "FAILED: node1 failed (injected fault kill:node1@step=20)" in result.output
    assert "rank 0 step 10 " in result.output and "rank 0 step 30 " not in result.output
    assert leftovers(docker_client, result.project) == []
