from __future__ import annotations

import re

import pytest
import torch

from tests.workers.conftest import checksums

COMMON = ("--data", "synthetic", "--data-dir", "data", "--train-size", "1024", "--test-size", "256")


def params(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_sync_modes_and_the_single_process_reference_agree(torchrun):
    steps = ("--epochs", "1", "--max-steps", "6", "--min-accuracy", "0")
    for mode in ("ddp", "allreduce", "butterfly"):
        proc = torchrun(2, "app.train", *COMMON, *steps, "--sync", mode,
                        "--checkpoint-dir", f"ck-{mode}", "--save-params", f"{mode}.pt")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(set(checksums(proc.stdout).values())) == 1
    proc = torchrun(1, "app.train", *COMMON, *steps, "--emulate-world-size", "2",
                    "--checkpoint-dir", "ck-ref", "--save-params", "reference.pt")
    assert proc.returncode == 0, proc.stderr[-3000:]

    result = {name: params(torchrun.cwd / f"{name}.pt") for name in ("ddp", "allreduce", "butterfly", "reference")}
    for name in ("allreduce", "butterfly", "reference"):
        assert max_difference(result["ddp"], result[name]) < 1e-5, name

    from app.train import Net

    torch.manual_seed(1234)
    initial = {k: v.detach() for k, v in Net().named_parameters()}
    assert max_difference(initial, result["ddp"]) > 1e-3, "training must have moved the weights"


def test_training_learns_the_synthetic_data_and_prepares_it_once(torchrun):
    proc = torchrun(2, "app.train", *COMMON, "--epochs", "2", "--checkpoint-dir", "ck", "--min-accuracy", "0.9")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote synthetic MNIST") == 1
    accuracies = [float(a) for a in re.findall(r"test accuracy ([\d.]+)% \(\d+/256\)", proc.stdout)]
    assert len(accuracies) >= 2 and accuracies[-1] >= 90.0
    assert "replicas identical" in proc.stdout


@pytest.mark.slow
def test_stopped_and_resumed_run_ends_like_an_uninterrupted_one(torchrun):
    full = torchrun(2, "app.train", *COMMON, "--epochs", "2", "--checkpoint-dir", "ck-full",
                    "--save-params", "full.pt")
    assert full.returncode == 0, full.stderr[-3000:]
    first = torchrun(2, "app.train", *COMMON, "--epochs", "2", "--checkpoint-dir", "ck",
                     "--stop-after-epoch", "1")
    assert first.returncode == 0 and "stopping after epoch 1" in first.stdout
    assert (torchrun.cwd / "ck" / "LATEST").read_text() == "step-0000016.pt"
    resumed = torchrun(2, "app.train", *COMMON, "--epochs", "2", "--checkpoint-dir", "ck",
                       "--resume", "--save-params", "resumed.pt")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from ck/step-0000016.pt (epoch 1, step 16)" in resumed.stdout
    assert "epoch 1/2 done" not in resumed.stdout
    assert max_difference(params(torchrun.cwd / "full.pt"), params(torchrun.cwd / "resumed.pt")) < 1e-6
    assert (torchrun.cwd / "ck" / "LATEST").read_text() == "step-0000032.pt"
    assert not list((torchrun.cwd / "ck").glob("*.tmp")), "no temporary files may remain"


@pytest.mark.parametrize("flag, message", [
    ("--sync-bn", "--sync-bn needs GPUs"),
])
def test_train_refuses_what_the_cpu_cannot_do(torchrun, flag, message):
    proc = torchrun(1, "app.train", *COMMON, "--epochs", "1", flag, "--checkpoint-dir", "ck")
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert re.search(r"exitcode\s*:\s*2\b", proc.stderr)  # refused, as bad input is: exit 2


def test_reference_mode_needs_a_single_process(torchrun):
    proc = torchrun(2, "app.train", *COMMON, "--emulate-world-size", "2", "--checkpoint-dir", "ck")
    assert proc.returncode != 0
    assert "use --nproc-per-node 1" in proc.stdout + proc.stderr


def test_resuming_from_a_mid_epoch_checkpoint_matches_too(torchrun):
    full = torchrun(2, "app.train", *COMMON, "--epochs", "1", "--checkpoint-dir", "ck-full",
                    "--save-params", "full.pt")
    assert full.returncode == 0, full.stderr[-3000:]
    first = torchrun(2, "app.train", *COMMON, "--epochs", "1", "--checkpoint-dir", "ck",
                     "--checkpoint-every", "5", "--max-steps", "12", "--min-accuracy", "0")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (torchrun.cwd / "ck" / "LATEST").read_text() == "step-0000012.pt"
    resumed = torchrun(2, "app.train", *COMMON, "--epochs", "1", "--checkpoint-dir", "ck",
                       "--resume", "--save-params", "resumed.pt")
    assert "resumed from ck/step-0000012.pt (epoch 0, step 12)" in resumed.stdout
    assert max_difference(params(torchrun.cwd / "full.pt"), params(torchrun.cwd / "resumed.pt")) < 1e-6
