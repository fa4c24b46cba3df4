"""Runs live in the engine: detach, ps, logs, attach, stop, down, prune; a dead launcher leaks nothing."""
from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import ROOT, leftovers, read_to_end, remove_project, start_run, wait_for

# prune and ps act on every run in the engine: these tests, and the other detached runs, share a worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("engine-wide")]
# The launcher's lease in the test that kills a launcher (DDP_COMPOSE_LEASE_TIMEOUT_S; 30 s by
# default), and the bound docs/runs-in-the-engine.md states for its nodes after it: the lease,
# the node supervisor's 1 s poll and the run's 10 s stop grace, and a little slack.
LEASE_S = 5
LEASE_BOUND_S = LEASE_S + 15


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), out=out)
    return code, out.getvalue()


def wait_until(condition, timeout_s: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what} not within {timeout_s:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - started


def run_state(docker_client, run_id: str) -> str:
    code, text = cli("ps")
    assert code == 0
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(run_id)]
    return rows[0][2] if rows else "gone"


def test_detach_ps_logs_attach_then_the_same_summary(docker_client, tmp_path):
    code, out = cli("run", "--detach", "--nodes", "2", "--nproc-per-node", "2", "--runs-dir", str(tmp_path),
                    "--", "-m", "app.toy", "--steps", "60", "--log-every", "20")
    run_id = out.strip()
    try:
        assert code == 0 and re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run_id), out
        assert run_state(docker_client, run_id) == "running"  # detach returns once the nodes run
        code, listing = cli("ps")
        assert re.search(rf"^{run_id}\s+2\s+running\s+detached\s+\S+\s+\d+[sm]\s+{re.escape(str(ROOT))}$", listing, re.M)

        code, attached = cli("attach", run_id)  # from the start, to the end, with the summary
        assert code == 0, attached[-3000:]
        checksums = dict(re.findall(r"param_checksum rank=(\d) value=(\S+)", attached))
        assert sorted(checksums) == ["0", "1", "2", "3"] and len(set(checksums.values())) == 1
        assert re.search(r"^node1\s+2,3\s+succeeded\s+0\s", attached, re.M)
        assert "SUCCEEDED: all 2 nodes exited 0" in attached
        assert run_state(docker_client, run_id) == "succeeded"

        # after the end, still in the engine; named by its id's random end, as a user types it
        code, logs = cli("logs", run_id.rsplit("-", 1)[1], "--node", "node1")
        assert code == 0
        assert re.search(r"^\[node1/rank[23]\]\s+param_checksum rank=[23]", logs, re.M)
        assert "[node0" not in logs

        code, again = cli("attach", run_id)  # a second attach after the end tells the same story
        assert code == 0
        assert sorted(re.findall(r"param_checksum.*", again)) == sorted(re.findall(r"param_checksum.*", attached))
        assert again.split("summary ===")[1].splitlines()[:4] == attached.split("summary ===")[1].splitlines()[:4]
    finally:
        remove_project(docker_client, f"ddp-{run_id}")


def test_stop_keeps_the_logs_and_state_down_and_prune_remove_everything(docker_client, tmp_path):
    runs = []
    for _ in range(2):
        code, out = cli("run", "-d", "--nodes", "2", "--runs-dir", str(tmp_path), "--",
                        "-m", "app.toy", "--steps", "100000000", "--log-every", "200")
        assert code == 0, out
        runs.append(out.strip())
    first, second = runs
    try:
        wait_until(lambda: "basic step" in cli("logs", first)[1], 120, "training output")
        code, out = cli("stop", first)
        assert code == 0 and "stopped node0, node1 of run" in out
        assert run_state(docker_client, first) == "stopped"
        code, logs = cli("logs", first)  # the logs outlive the stop
        assert code == 0 and "basic step" in logs
        code, summary = cli("attach", first)  # its summary says it was stopped, not that it failed
        assert code == 143, summary[-2000:]
        assert "STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped" in summary
        assert "FAILED" not in summary.split("summary ===")[-1]
        assert "did not stop within its grace" not in summary  # app.toy ends on its SIGTERM: no SIGKILL to name

        # two `down`s of the live run at once, from two terminals: both end well, and nothing is left
        downs = [subprocess.Popen([sys.executable, "-m", "orchestrate", "down", second], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
        said = [down.communicate(timeout=90)[0] for down in downs]
        assert [down.returncode for down in downs] == [0, 0], said
        assert any(f"stopped node0, node1 of run {second} first (SIGTERM" in text for text in said), said
        assert any(f"removed run {second}: container" in text for text in said), said
        assert leftovers(docker_client, f"ddp-{second}") == []
        request = json.loads((tmp_path / second / "stop-requested").read_text())
        assert request["by"] == "python -m orchestrate down" and request["nodes"] == ["node0", "node1"]
        # no one followed it: its lines and its summary were written from the engine before it went
        assert any(f"run {second}: no one followed it to its end" in text for text in said), said
        assert "basic step" in (tmp_path / second / "node0.log").read_text()
        outcome = json.loads((tmp_path / second / "outcome.json").read_text())
        assert outcome["stopped_by"] == "python -m orchestrate down" and outcome["exit_code"] == 143, outcome

        code, out = cli("prune", "--runs-dir", str(tmp_path))  # not other tests' kept runs
        assert code == 0 and f"removed run {first} (stopped)" in out
        assert leftovers(docker_client, f"ddp-{first}") == []
        assert cli("logs", first)[0] == 2  # gone from the engine, and not in ./runs
        code, logs = cli("logs", first, "--runs-dir", str(tmp_path))  # but its directory kept its lines
        assert code == 0 and "basic step" in logs
    finally:
        for run_id in runs:
            remove_project(docker_client, f"ddp-{run_id}")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGHUP"])
def test_a_launcher_that_dies_or_hangs_up_leaves_nothing_behind(docker_client, tmp_path, how):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--", "-m", "app.toy", "--steps", "100000000",
                            "--log-every", "200", env={"DDP_COMPOSE_LEASE_TIMEOUT_S": str(LEASE_S)})
    seen: list[str] = []
    run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    project = f"ddp-{run_id}"
    try:
        wait_for(lines, r"basic step \d+", seen)
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=60)
        if how == "SIGHUP":
            # a hang-up (a closed terminal) tears down like Ctrl-C
            assert proc.returncode == 129
            assert leftovers(docker_client, project) == []
            return
        assert proc.returncode == -signal.SIGKILL
        assert run_state(docker_client, run_id) == "orphaned"  # the launcher's pid is gone
        took = wait_until(lambda: not docker_client.containers.list(ignore_removed=True, filters={"label": f"io.ddp-compose.run-id={run_id}"}),
                          LEASE_BOUND_S + 5, "the nodes stopping by themselves")
        assert took <= LEASE_BOUND_S, f"nodes stopped {took:.0f} s after the launcher died"
        code, out = cli("logs", run_id)
        # the node that notices first stops itself; its peer may fail first, its rank's peer gone
        gone = rf"\[ddp-compose\] the launcher is gone \(no heartbeat for {LEASE_S} s\): stopping this node"
        assert re.search(rf"^\[node[01]\]\s+{gone}$", out, re.M), out[-3000:]
        code, out = cli("prune", "--runs-dir", str(tmp_path))  # not other tests' kept runs
        assert f"removed run {run_id} (orphaned)" in out
        assert leftovers(docker_client, project) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, project)


def test_a_step_fault_fires_at_the_named_step_with_app_train_defaults(orchestrate_run, docker_client, tmp_path):
    result = orchestrate_run("--nodes", "2", "--workdir", str(tmp_path), "--collective-timeout", "20",
                             "--fault", "kill:node1@step=7", "--", "-m", "app.train", "--data", "synthetic",
                             "--train-size", "1024", "--test-size", "256", "--epochs", "3")
    assert result.code == 1, result.output[-3000:]
    # app.train prints a line every 2 s, but reports every step on the progress channel
    assert re.search(r"fault injected: kill:node1@step=7 \([\d.]+ s into the job, at step 7\)", result.output)
    assert "FAILED: node1 failed (injected fault kill:node1@step=7)" in result.output
    steps = [int(s) for s in re.findall(r'"step": (\d+)', (result.run_dir / "progress" / "rank0.jsonl").read_text())]
    assert max(steps) == 7  # no rank got past the fault's step
    assert leftovers(docker_client, result.project) == []


def test_a_step_fault_in_a_script_that_reports_no_steps_is_announced(docker_client, tmp_path):
    proc, lines = start_run(tmp_path, "--nodes", "2", "--workdir", str(ROOT / "tests" / "jobs"),
                            "--fault", "kill:node1@step=5", "--", "show_env.py")
    seen: list[str] = []
    project = ""
    try:
        project = "ddp-" + wait_for(lines, r"run (\S+): bringing up", seen).group(1)
        wait_for(lines, r"kill:node1@step=5: fires when a worker reaches that step \(its optimizer's steps,"
                        r" counted, or its own orchestrate.progress.report\(step\)\)", seen)
        # the job ends normally, but the fault asked for never fires: not a success
        output = read_to_end(proc, lines, seen)
        assert proc.returncode == 1
        assert not [line for line in seen if "fault injected" in line]
        assert "fault not fired: kill:node1@step=5 did not fire: no worker reported a training step" in output
        assert "FAILED: all 2 nodes exited 0, but 1 fault(s) asked for never fired: kill:node1@step=5" in output
    finally:
        if proc.poll() is None:
            proc.kill()
        if project:
            remove_project(docker_client, project)


def test_a_network_and_volume_left_with_no_container_are_listed_and_pruned(docker_client, tmp_path):
    """What a launcher killed between Compose making the run's network and volume and making its
    nodes leaves: real Compose labels them as rendered, ps names them, down and prune remove them."""
    import os
    import socket

    from orchestrate.config.run_config import RunConfig
    from orchestrate.engine.compose_cli import compose_command
    from orchestrate.engine.compose_file import write_compose_file
    from orchestrate.launch.run import new_run_id
    from orchestrate.plan.make import make_plan

    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    ended_launcher = f"{socket.gethostname()}:{os.getpid()}:1"  # this pid with a start it never had: gone
    run_ids = [new_run_id() for _ in range(2)]
    try:
        for run_id in run_ids:
            config = RunConfig(workdir=ROOT, runs_dir=runs_dir, nodes=1, run_as=f"{os.getuid()}:{os.getgid()}")
            plan = make_plan(config, run_id, launcher=ended_launcher)
            compose_file = write_compose_file(plan, tmp_path / f"{run_id}.json")
            subprocess.run([*compose_command(), "-p", plan.project_name, "-f", str(compose_file), "up", "--no-start"],
                           check=True, capture_output=True, timeout=120)
            for container in docker_client.containers.list(
                    all=True, ignore_removed=True, filters={"label": f"com.docker.compose.project={plan.project_name}"}):
                container.remove(force=True)  # as if its launcher had died before Compose made it
        code, listing = cli("ps", "--runs-dir", str(runs_dir))
        assert code == 0 and listing.splitlines()[0] == f"no runs in {runs_dir}", listing
        assert sorted(re.findall(r"^run (\S+) left network ddp-\S+_ddp, volume ddp-\S+_shared with no container",
                                 listing, re.M)) == sorted(run_ids), listing
        code, out = cli("down", run_ids[0].rsplit("-", 1)[1], "--runs-dir", str(runs_dir))
        assert code == 0 and out.startswith(f"removed what run {run_ids[0]} left with no container: network "), out
        assert leftovers(docker_client, f"ddp-{run_ids[0]}") == []
        code, out = cli("prune", "--runs-dir", str(runs_dir))
        assert code == 0 and f"removed what run {run_ids[1]} left with no container: " in out, out
        assert out.endswith(f"pruned 1 run(s) in {runs_dir}\n"), out
        assert leftovers(docker_client, f"ddp-{run_ids[1]}") == []
    finally:
        for run_id in run_ids:
            remove_project(docker_client, f"ddp-{run_id}")
