"""The simulated Slurm cluster: real slurmctld, slurmd and munge in the nodes, jobs through
sbatch and srun, the state from Slurm (CPU/Gloo)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import LONG_TOY, leftovers, read_to_end, remove_project, start_run, wait_for

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"
TRAIN = ("-m", "app.train", "--data", "synthetic", "--data-dir", "data", "--train-size", "1024",
         "--test-size", "256", "--epochs", "2", "--min-accuracy", "0.9")
SLURM = ("--scheduler", "slurm", "--cpu")


def hellos(output: str) -> list[tuple[str, int, int, str]]:
    """(prefix node, rank, world size, host) of every hello line."""
    return [(node, int(rank), int(world), host) for node, rank, world, host in re.findall(
        r"^\[(node\d|task\d)[^\]]*\]\s+hello rank=(\d) .*? world_size=(\d) .*host=(\S+)", output, re.M)]


def test_two_by_two_under_slurm_is_a_world_of_four_with_ranks_on_their_nodes(orchestrate_run, docker_client,
                                                                              tmp_path):
    result = orchestrate_run(*SLURM, "--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                             "--", "-m", "app.hello")
    assert result.code == 0, result.output[-4000:]
    found = hellos(result.output)
    assert sorted(rank for _, rank, _, _ in found) == [0, 1, 2, 3]
    for node, rank, world, host in found:
        assert world == 4 and node == host == ("node0" if rank < 2 else "node1")
    assert re.findall(r"all_reduce rank=\d sum=(\S+) expected=10 ok", result.output) == ["10"] * 4
    summary = result.output.split("summary (Slurm job")[1]
    assert re.search(r"^SUCCEEDED: Slurm job \d+ COMPLETED, exit code 0:0$", summary, re.M)
    assert re.search(r"^node0\s+IDLE", summary, re.M) and re.search(r"^node1\s+IDLE", summary, re.M)
    assert leftovers(docker_client, result.project) == []


@pytest.mark.slow
def test_app_train_generated_and_exported_scripts_reach_the_same_checked_result(orchestrate_run, docker_client,
                                                                                  tmp_path):
    import torch

    generated = orchestrate_run(*SLURM, "--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                                "--", *TRAIN, "--save-params", "generated.pt")
    assert generated.code == 0, generated.output[-4000:]
    checksums = re.findall(r"^\[(node\d)/rank(\d)\]\s+param_checksum rank=\d value=(\S+)", generated.output, re.M)
    assert sorted((node, int(rank)) for node, rank, _ in checksums) == [
        ("node0", 0), ("node0", 1), ("node1", 2), ("node1", 3)]
    assert len({value for _, _, value in checksums}) == 1
    assert "replicas identical" in generated.output and "world size 4, backend gloo" in generated.output

    script = tmp_path / "exported.sbatch"
    assert main(["export", "--to", "slurm", "--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                 "-o", str(script), "--", *TRAIN, "--save-params", "exported.pt"]) == 0
    exported = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--sbatch", str(script))
    assert exported.code == 0, exported.output[-4000:]
    assert "replicas identical" in exported.output
    a = torch.load(tmp_path / "generated.pt", weights_only=True)
    b = torch.load(tmp_path / "exported.pt", weights_only=True)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    for run in (generated, exported):
        assert leftovers(docker_client, run.project) == []


def test_a_users_own_sbatch_script_is_submitted_unchanged(orchestrate_run, docker_client, tmp_path):
    script = tmp_path / "user_job.sbatch"
    shutil.copyfile(JOBS / "user_job.sbatch", script)
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    result = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--sbatch", str(script))
    assert result.code == 0, result.output[-4000:]
    submitted = result.run_dir / "slurm" / "user_job.sbatch"
    assert hashlib.sha256(submitted.read_bytes()).hexdigest() == digest == \
        hashlib.sha256(script.read_bytes()).hexdigest()
    found = hellos(result.output)
    assert sorted(rank for _, rank, _, _ in found) == [0, 1, 2, 3]
    assert all(world == 4 and host == ("node0" if rank < 2 else "node1") for _, rank, world, host in found)
    job_id = re.search(r"sbatch submitted job (\d+)", result.output)[1]
    assert (tmp_path / f"my-ddp-{job_id}.out").is_file()  # the script's own --output, where it said
    assert leftovers(docker_client, result.project) == []


def test_a_failing_rank_is_named_from_slurms_state_and_the_workers(orchestrate_run, docker_client, tmp_path):
    shutil.copyfile(JOBS / "fail_rank.py", tmp_path / "fail_rank.py")
    result = orchestrate_run(*SLURM, "--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                             "--", "fail_rank.py", "--fail-rank", "3")
    assert result.code == 1, result.output[-4000:]
    summary = result.output.split("summary (Slurm job")[1]
    assert re.search(r"^FAILED: Slurm job \d+ FAILED \(reason NonZeroExitCode, exit code \d+:0\)", summary, re.M)
    assert ("workers: node1 rank 3: RuntimeError: injected failure on rank 3\n"
            '  in your code: fail_rank.py:21 in main: raise RuntimeError(f"injected failure on rank {rank}")\n') in summary
    assert 'raise RuntimeError(f"injected failure on rank {rank}")' in summary
    assert leftovers(docker_client, result.project) == []


@pytest.mark.slow
def test_a_killed_node_is_reported_down_by_slurm(orchestrate_run, docker_client, tmp_path):
    # a plain script that reports no step: the workers' start-up hook counts its optimizer's under Slurm too
    shutil.copyfile(JOBS / "plain_sgd.py", tmp_path / "plain_sgd.py")
    result = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--fault", "kill:node1@step=3", "--",
                             "plain_sgd.py", "--steps", "200", "--step-seconds", "0.2")
    assert result.code == 1, result.output[-4000:]
    summary = result.output.split("summary (Slurm job")[1]
    assert re.search(r"^fault injected: kill:node1@step=3 \(.* at step 3\)$", summary, re.M)
    assert re.search(r"^node1\s+DOWN\S*\s+Not responding", summary, re.M)
    assert re.search(r"^FAILED: Slurm job \d+ NODE_FAIL \(reason NodeDown", summary, re.M)
    assert leftovers(docker_client, result.project) == []


def test_a_slurm_job_whose_collective_timed_out_is_said_hung_where_its_ranks_collectives_part(
        orchestrate_run, docker_client, tmp_path):
    shutil.copyfile(JOBS / "desync.py", tmp_path / "desync.py")
    lines = (JOBS / "desync.py").read_text().splitlines()
    every, extra = (next(i for i, line in enumerate(lines, 1) if text in line)
                    for text in ("dist.all_reduce(stats)", "# DESYNC"))
    result = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--collective-timeout", "10", "--",
                             "desync.py")
    assert result.code == 1, result.output[-4000:]
    summary = result.output.split("summary (Slurm job")[1]
    headline = next(line for line in summary.splitlines() if line.startswith("HUNG:"))
    assert headline.startswith("HUNG: a collective timed out on node") and "Timed out waiting 10000ms" in headline
    assert (f"rank 0 called all_reduce(float32[1]) at desync.py:{extra}; rank 1 called all_reduce(float32[4]) at"
            f" desync.py:{every}") in headline
    # torch's timeout ended the job, not the launcher
    assert re.search(r"^  then Slurm job \d+ ended FAILED \(reason NonZeroExitCode", summary, re.M), summary
    assert "cancelling Slurm job" not in result.output
    assert leftovers(docker_client, result.project) == []


def test_a_hung_slurm_job_is_said_hung_with_where_every_rank_waits_then_cancelled(orchestrate_run, docker_client,
                                                                                  tmp_path):
    shutil.copyfile(JOBS / "desync.py", tmp_path / "desync.py")
    lines = (JOBS / "desync.py").read_text().splitlines()
    every, extra = (next(i for i, line in enumerate(lines, 1) if text in line)
                    for text in ("dist.all_reduce(stats)", "# DESYNC"))
    started = time.monotonic()
    result = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--hang-timeout", "15", "--",
                             "desync.py")
    assert result.code == 1, result.output[-4000:]
    assert time.monotonic() - started < 300  # the watchdog ended it, not torch's 30-minute timeout
    summary = result.output.split("summary (Slurm job")[1]
    headline = next(line for line in summary.splitlines() if line.startswith("HUNG:"))
    assert headline.startswith("HUNG: no progress for ") and "(--hang-timeout 15)" in headline
    assert (f"rank 0 called all_reduce(float32[1]) at desync.py:{extra}; rank 1 called all_reduce(float32[4]) at"
            f" desync.py:{every}") in headline
    assert re.search(r"^  the launcher then cancelled Slurm job \d+ \(", summary, re.M)
    assert "cancelling Slurm job" in result.output.split("summary (Slurm job")[0]
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert outcome["failure"]["describe"] == headline
    assert [e["event"] for e in map(json.loads, (result.run_dir / "events.jsonl").read_text().splitlines())
            ].count("hung") == 1
    assert leftovers(docker_client, result.project) == []


def test_a_slurm_jobs_mistakes_that_fail_nothing_are_warned_of_as_in_compose(orchestrate_run, docker_client, tmp_path):
    shutil.copyfile(JOBS / "sampler_without_epoch.py", tmp_path / "sampler_without_epoch.py")
    result = orchestrate_run(*SLURM, "--nodes", "2", "--workdir", str(tmp_path), "--", "sampler_without_epoch.py")
    assert result.code == 0, result.output[-4000:]  # a warning fails no job
    summary = result.output.split("summary (Slurm job")[1]
    line = next(i for i, text in enumerate((JOBS / "sampler_without_epoch.py").read_text().splitlines(), 1)
                if "MISTAKE: no sampler.set_epoch" in text)
    assert re.findall(r"^warning: .*", summary, re.M) == [
        "warning: ranks 0, 1 each wrote ckpt.pt whole, in a directory every node shares: writers of one file race, so it"
        " holds whichever finished last (parts of each, where they wrote different bytes), and a rank that reads it"
        " meanwhile may find it half-written; write it on one rank (if dist.get_rank() == 0:), or a file per rank",
        f"warning: ranks 0, 1 iterated a shuffling DistributedSampler at sampler_without_epoch.py:{line} again with its"
        " epoch still 0: every epoch reads the data in the same order; call sampler.set_epoch(epoch) at the start of"
        " each epoch, before iterating its DataLoader"], summary
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert outcome["written_by_several"] == {"ckpt.pt": [0, 1]}
    assert leftovers(docker_client, result.project) == []


def test_an_elastic_slurm_job_trains_on_every_node_it_asked_for(orchestrate_run, docker_client, tmp_path):
    # Given --nodes=1-2, Slurm allocated one node with both idle, and the job trained as a world of one
    result = orchestrate_run(*SLURM, "--nodes", "2", "--rdzv", "c10d", "--nnodes", "1:2", "--workdir", str(tmp_path),
                             "--", "-m", "app.hello")
    assert result.code == 0, result.output[-4000:]
    found = hellos(result.output)
    assert sorted((node, world) for node, _, world, _ in found) == [("node0", 2), ("node1", 2)]
    assert sorted(rank for _, rank, _, _ in found) == [0, 1]  # the rendezvous gives the ranks
    summary = result.output.split("summary (Slurm job")[1]
    assert re.search(r"^job \d+: COMPLETED .* on node\[0-1\],", summary, re.M)
    assert leftovers(docker_client, result.project) == []


def test_torchruns_restart_in_place_within_a_slurm_job_is_said_beside_slurms_completed(orchestrate_run, docker_client):
    """A worker's transient error: torchrun restarts the workers within the job's tasks (a store
    per round, as the generated script exports), Slurm sees a job that COMPLETED, and the
    summary says what Slurm's accounting cannot."""
    result = orchestrate_run(*SLURM, "--nodes", "2", "--nproc-per-node", "2", "--rdzv", "c10d", "--max-restarts", "1",
                             "--workdir", str(JOBS), "--", "transient_error.py")
    assert result.code == 0, result.output[-4000:]
    assert len(re.findall(r"done in start 2, world 4$", result.output, re.M)) == 4, result.output[-4000:]
    summary = result.output.split("summary (Slurm job")[1]
    # node0's agent may rejoin the new round without using a restart up, or restart too
    assert re.search(r"^restarted in place: torchrun restarted the workers after a failure, once on (every node|node\d)$",
                     summary, re.M), summary
    assert re.search(r"^SUCCEEDED: Slurm job \d+ COMPLETED", summary, re.M)
    assert leftovers(docker_client, result.project) == []


def test_stop_from_another_terminal_ends_a_slurm_job_through_slurm_as_stopped(docker_client, tmp_path, capsys):
    """`stop RUN` signals the job's tasks through Slurm (not the slurmd containers, which Slurm
    would only find silent, and end the job NODE_FAIL half a minute later): the launcher in the
    other terminal ends at once, STOPPED with 143, and removes the cluster."""
    import io
    import time

    proc, lines = start_run(tmp_path, *SLURM, "--nodes", "2", *LONG_TOY)
    seen: list[str] = []
    run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"basic step 10\b", seen)
        out = io.StringIO()
        asked = time.monotonic()
        assert main(["stop", run_id], out=out) == 0, capsys.readouterr().err
        assert f"sent SIGTERM to Slurm job 1 of run {run_id} (scancel --signal=TERM)" in out.getvalue()
        output = read_to_end(proc, lines, seen, timeout_s=60)
        took = time.monotonic() - asked
        assert proc.returncode == 143, output[-3000:]
        summary = output.split("summary (Slurm job")[1]
        assert "STOPPED by python -m orchestrate stop (SIGTERM to Slurm job 1's tasks): every node was stopped" in summary
        assert "NODE_FAIL" not in summary and "FAILED:" not in summary
        assert took < 20, f"{took:.1f} s from the stop to the launcher's end"
        assert leftovers(docker_client, f"ddp-{run_id}") == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_project(docker_client, f"ddp-{run_id}")
