"""app/ programs across two Compose nodes (CPU/Gloo) through `python -m orchestrate run`."""
from __future__ import annotations

import re

import pytest

from tests.integration.conftest import leftovers

pytestmark = pytest.mark.integration
TRAIN = ("-m", "app.train", "--data", "synthetic", "--data-dir", "data", "--train-size", "1024",
         "--test-size", "256", "--epochs", "2")


def test_collectives_across_nodes(orchestrate_run, docker_client, tmp_path):
    # One process per node: every point-to-point step crosses the network between nodes.
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "1", "--workdir", str(tmp_path),
                             "--", "-m", "app.collectives", "--rounds", "3")
    assert result.code == 0, result.output[-4000:]
    assert re.search(r"^\[node0/rank0\]\s+all steps passed", result.output, re.M)
    assert re.search(r"^\[node1/rank1\]\s+rank 1: got ping 4 -> pong 5", result.output, re.M)
    assert re.search(r"^\[node1/rank1\]\s+rank 1: after wait\(\) the buffer holds 1", result.output, re.M)
    assert leftovers(docker_client, result.project) == []


@pytest.mark.slow
def test_train_across_nodes_resumes_to_the_uninterrupted_result(orchestrate_run, docker_client, tmp_path):
    import torch

    nodes = ("--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path), "--")
    full = orchestrate_run(*nodes, *TRAIN, "--checkpoint-dir", "ck-full", "--save-params", "full.pt",
                           "--min-accuracy", "0.9")
    assert full.code == 0, full.output[-4000:]
    assert full.output.count("wrote synthetic MNIST") == 1
    assert "world size 4, backend gloo" in full.output

    stopped = orchestrate_run(*nodes, *TRAIN, "--checkpoint-dir", "ck", "--stop-after-epoch", "1")
    assert stopped.code == 0, stopped.output[-4000:]
    resumed = orchestrate_run(*nodes, *TRAIN, "--checkpoint-dir", "ck", "--resume",
                              "--save-params", "resumed.pt")
    assert resumed.code == 0, resumed.output[-4000:]
    assert "resumed from ck/step-0000008.pt (epoch 1, step 8)" in resumed.output

    a = torch.load(tmp_path / "full.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    for run in (full, stopped, resumed):
        assert leftovers(docker_client, run.project) == []


def test_a_worker_that_refuses_is_one_line_in_the_summary_and_torchruns_report_stays_in_the_log(
        orchestrate_run, docker_client, tmp_path):
    # The CPU's counterpart of model parallel on too few GPUs: app/ refuses, exit code 2
    result = orchestrate_run("--nodes", "2", "--workdir", str(tmp_path), "--", "-m", "app.train", "--data",
                             "synthetic", "--sync-bn")
    assert result.code == 1
    summary = result.output[result.output.index("=== run"):]
    assert re.search(r"FAILED: node\d rank \d failed \(exit code 2\): CannotRun: --sync-bn needs GPUs: torch's"
                     r" SyncBatchNorm does not run on the CPU\n", summary), summary
    assert "traceback" not in summary  # the refusal's one line is all there is to say
    assert "errors.ChildFailedError" not in result.output  # the console leaves torchrun's report to the logs
    assert "torchrun's ChildFailedError report: see the summary below" in result.output
    assert "ChildFailedError" in (result.run_dir / "node0.log").read_text()
    assert leftovers(docker_client, result.project) == []
