"""No lost work, no leaked secret, no hang, on real nodes: a Ctrl-C lets a job checkpoint, a
second one forces, a preempted node gets its grace, a planted secret is found only in the
Compose file, and a launcher whose engine goes away ends in bounded time."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import ROOT, job_workdir, leftovers, read_to_end, remove_project, start_run, wait_for
from tests.integration.engine_proxy import EngineProxy

pytestmark = pytest.mark.integration
JOB = ROOT / "tests" / "jobs" / "checkpoint_on_sigterm.py"


def a_workdir(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(JOB, workdir / JOB.name)
    return workdir


def test_ctrl_c_lets_a_job_that_checkpoints_on_sigterm_write_its_checkpoints(docker_client, tmp_path):
    workdir = a_workdir(tmp_path)
    proc, lines = start_run(tmp_path, "--nodes", "2", "--workdir", str(workdir), "--", JOB.name)
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"rank 1 step 5\b", seen)
        proc.send_signal(signal.SIGINT)
        output = read_to_end(proc, lines, seen)
        assert proc.returncode == 130, output[-3000:]
        assert "interrupted: stopping every node (SIGTERM, then SIGKILL after 10 s" in output
        for rank in (0, 1):
            checkpoint = json.loads((workdir / f"ckpt-rank{rank}.json").read_text())
            assert checkpoint["step"] >= 5 and checkpoint["weight"] == [2.0 * checkpoint["step"]] * 4
            assert re.search(rf"rank {rank} checkpoint written at step \d+", output)
        # the summary times what the nodes really did, not 0.0 s
        rows = re.findall(r"^node\d\s+\d\s+stopped\s+143\s+([\d.]+) s$", output, re.M)
        assert len(rows) == 2 and all(float(s) > 1.0 for s in rows), output[-1500:]
        assert "INTERRUPTED by SIGINT" in output
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)


def test_a_second_ctrl_c_kills_the_nodes_at_once(docker_client, tmp_path):
    workdir = a_workdir(tmp_path)
    proc, lines = start_run(tmp_path, "--nodes", "2", "--stop-grace", "120", "--workdir", str(workdir), "--",
                            JOB.name, "--ignore-sigterm")
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"rank 1 step 3\b", seen)
        first = time.monotonic()
        proc.send_signal(signal.SIGINT)
        wait_for(lines, r"interrupted: stopping every node", seen)
        proc.send_signal(signal.SIGINT)
        output = read_to_end(proc, lines, seen)
        assert time.monotonic() - first < 60, "the second Ctrl-C must not wait out the 120 s grace"
        assert proc.returncode == 130
        assert "interrupted again: killing every node now" in output
        assert re.findall(r"^node\d\s+\d\s+stopped\s+137\s", output, re.M), output[-1500:]
        assert not list(workdir.glob("ckpt-*.json"))
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)


def test_a_preempted_node_gets_sigterm_and_its_grace(orchestrate_run, docker_client, tmp_path):
    workdir = a_workdir(tmp_path)
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--collective-timeout", "20",
                             "--fault", "preempt:node1@step=5", "--", JOB.name)
    assert result.code == 1, result.output[-3000:]
    assert "fault injected: preempt:node1@step=5" in result.output
    # what the preempt tested: the rank caught the SIGTERM, saved and exited 0 within the grace
    assert re.search(r"FAILED: node1 failed \(injected fault preempt:node1@step=5\): rank 1 finished its script \(exit"
                     r" 0\) \d+\.\d s after the SIGTERM \(opened to write after it: ckpt-rank1\.json\)\n",
                     result.output), result.output[-3000:]
    checkpoint = json.loads((workdir / "ckpt-rank1.json").read_text())  # the preempted node's rank saved
    assert checkpoint["step"] >= 5
    assert re.search(r"^node1\s+1\s+failed\s+143\s", result.output, re.M), result.output[-1500:]
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "fault" and e.get("action") == "preempt" for e in events)
    assert leftovers(docker_client, result.project) == []


def test_a_preempted_rank_that_saves_every_step_is_said_to_save_again_after_the_sigterm(orchestrate_run, tmp_path):
    # its checkpoint is a file it wrote before the signal: the launcher's mark makes the worker say it again
    workdir = a_workdir(tmp_path)
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--collective-timeout", "20",
                             "--fault", "preempt:node1@step=5", "--", JOB.name, "--save-every-step")
    assert result.code == 1, result.output[-3000:]
    assert re.search(r"FAILED: node1 failed \(injected fault preempt:node1@step=5\): rank 1 finished its script \(exit"
                     r" 0\) \d+\.\d s after the SIGTERM \(opened to write after it: ckpt-rank1\.json\)\n",
                     result.output), result.output[-3000:]
    assert (result.run_dir / "progress" / "sigterm-node1").exists()
    [after] = json.loads((result.run_dir / "outcome.json").read_text())["nodes"][1]["after_sigterm"]
    assert after["wrote"] == ["ckpt-rank1.json"] and not after["finished_before"]


def test_a_planted_secret_is_found_only_in_the_compose_file(docker_client, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "job.env").write_text("HF_TOKEN=env-file-secret-7\n")
    secrets = ("supersecret123", "env-file-secret-7", "copied-secret-9")
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrate", "run", "--keep", "--nodes", "2", "--runs-dir",
         str(runs), "--workdir", str(workdir), "--env", "WANDB_API_KEY=supersecret123", "--env-file",
         str(workdir / "job.env"), "--copy-env", "MYTEAM_*", "--", "-m", "app.hello"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MYTEAM_TOKEN": "copied-secret-9"})
    [run_dir] = list(runs.iterdir())
    project = f"ddp-{run_dir.name}"
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        console = proc.stdout + proc.stderr
        compose = run_dir / "compose.json"
        assert stat.S_IMODE(compose.stat().st_mode) == 0o600
        assert all(secret in compose.read_text() for secret in secrets)
        found = {str(path.relative_to(run_dir)): [s for s in secrets if s in path.read_text(errors="replace")]
                 for path in run_dir.rglob("*") if path.is_file() and path != compose}
        assert {name: hits for name, hits in found.items() if hits} == {}
        assert not [s for s in secrets if s in console]
        assert "--env 'WANDB_API_KEY=***'" in json.loads((run_dir / "run.json").read_text())["command"]
        for container in docker_client.containers.list(all=True, ignore_removed=True, filters={"label": f"com.docker.compose.project={project}"}):
            labels = json.dumps(container.labels)
            assert not [s for s in secrets if s in labels], container.name
            environment = container.attrs["Config"]["Env"]
            assert "WANDB_API_KEY=supersecret123" in environment  # the workers have it, where it belongs
    finally:
        remove_project(docker_client, project)


@pytest.fixture
def engine_proxy(tmp_path, docker_client):
    proxy = EngineProxy(tmp_path / "docker.sock").start()
    yield proxy
    proxy.stop()


def test_a_cut_event_stream_is_said_and_the_run_ends_as_it_should(engine_proxy, docker_client, tmp_path):
    # a job paced by the clock (60 steps, 0.2 s apart): it still runs well after the cut
    workdir = job_workdir(tmp_path, "fault_probe.py")
    proc, lines = start_run(tmp_path / "runs", "--nodes", "2", "--workdir", str(workdir), "--", "fault_probe.py",
                            "--steps", "60", env={"DOCKER_HOST": engine_proxy.docker_host})
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"rank 0 step 3 ", seen)
        assert engine_proxy.cut_events() >= 1
        output = read_to_end(proc, lines, seen, timeout_s=180)
        assert proc.returncode == 0, output[-3000:]
        assert "the engine's event stream ended" in output and "following the nodes by inspecting" in output
        assert "SUCCEEDED: all 2 nodes exited 0" in output
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)


def test_a_lost_engine_ends_the_run_in_bounded_time_and_its_nodes_go_when_it_returns(engine_proxy, docker_client,
                                                                                      tmp_path):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--", "-m", "app.toy", "--steps", "100000000",
                            "--log-every", "50", env={"DOCKER_HOST": engine_proxy.docker_host})
    seen: list[str] = []
    project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"basic step 50\b", seen)
        cut = time.monotonic()
        engine_proxy.cut()
        wait_for(lines, r"the engine does not answer", seen, timeout=30)
        wait_for(lines, r"teardown attempt 1 failed", seen, timeout=60)
        lost_after = time.monotonic() - cut
        engine_proxy.restore()
        output = read_to_end(proc, lines, seen, timeout_s=120)
        assert 14 < lost_after < 40, f"{lost_after:.1f} s from the cut to the end of the run"
        assert proc.returncode == 2, output[-3000:]
        assert re.search(r"^FAILED: lost the Docker engine: no answer for \d+ s", output, re.M), output[-2000:]
        assert leftovers(docker_client, project) == []  # removed once the engine was back
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)
