"""The pure helpers of app/, in one process."""
from __future__ import annotations

import pytest

from app.checkpoint import LATEST, latest_checkpoint
from app.distenv import device_indices, span_per_process
from app.mnist_data import has_mnist, raw_dir, write_synthetic_mnist


def test_synthetic_mnist_is_read_by_torchvision(tmp_path):
    from torchvision.datasets import MNIST

    write_synthetic_mnist(tmp_path, train_size=100, test_size=30)
    assert has_mnist(tmp_path)
    train, test = MNIST(str(tmp_path), train=True), MNIST(str(tmp_path), train=False)
    assert (len(train), len(test)) == (100, 30)
    image, label = train[0]
    assert image.size == (28, 28) and 0 <= label < 10
    assert set(train.targets.tolist()) == set(range(10))
    assert [p.name for p in raw_dir(tmp_path).parent.iterdir()] == ["raw"], "no staging left"


def test_the_synthetic_stand_in_is_said_to_be_one_and_never_taken_for_mnist(tmp_path):
    # --data download found it and said "found MNIST", training on the stand-in for good
    from app.mnist_data import SYNTHETIC_MARK, has_synthetic_mnist, prepare_mnist

    assert prepare_mnist(tmp_path, "synthetic", 50, 10) == f"wrote synthetic MNIST (50 train / 10 test) to {tmp_path}"
    assert has_synthetic_mnist(tmp_path)
    assert prepare_mnist(tmp_path, "synthetic") == f"found synthetic MNIST in {tmp_path}"
    (raw_dir(tmp_path) / SYNTHETIC_MARK).unlink()  # as a real download's files are: no mark
    assert not has_synthetic_mnist(tmp_path) and prepare_mnist(tmp_path, "download") == f"found MNIST in {tmp_path}"


def test_synthetic_mnist_is_deterministic(tmp_path):
    write_synthetic_mnist(tmp_path / "a", 50, 10)
    write_synthetic_mnist(tmp_path / "b", 50, 10)
    for name in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert (raw_dir(tmp_path / "a") / name).read_bytes() == (raw_dir(tmp_path / "b") / name).read_bytes()


def test_latest_checkpoint_follows_the_pointer(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "epoch-0001.pt").write_bytes(b"x")
    (tmp_path / LATEST).write_text("epoch-0001.pt")
    assert latest_checkpoint(tmp_path) == tmp_path / "epoch-0001.pt"
    (tmp_path / LATEST).write_text("epoch-0009.pt")
    assert latest_checkpoint(tmp_path) is None


@pytest.mark.parametrize("local_rank, world, per, available, expected", [
    (0, 2, 4, 8, [0, 1, 2, 3]),
    (1, 2, 4, 8, [4, 5, 6, 7]),
    (3, 4, 2, 8, [6, 7]),
    (0, 1, 1, 1, [0]),
])
def test_each_process_gets_its_own_block_of_gpus(local_rank, world, per, available, expected):
    assert device_indices(local_rank, world, per, available) == expected


@pytest.mark.parametrize("local_rank, world, per, available, expected", [
    (1, 2, 1, 1, [0]),  # --share-gpus: two processes on one GPU
    (1, 2, 2, 1, [0, 0]),  # model parallel, both stages on the one GPU
    (2, 3, 1, 2, [0]),
    (1, 2, 2, 3, [2, 0]),
])
def test_processes_that_share_gpus_take_them_in_turn(local_rank, world, per, available, expected):
    assert device_indices(local_rank, world, per, available, shared=True) == expected


def test_model_parallel_with_too_few_gpus_is_refused_with_the_arithmetic():
    with pytest.raises(ValueError, match="1 processes x 2 GPUs each need 2 GPUs on this node, but 1 are visible"):
        device_indices(0, 1, 2, 1)


def test_spanning_splits_gpus_evenly_and_refuses_g_below_l():
    assert span_per_process(8, 2) == 4
    assert span_per_process(8, 3) == 2
    with pytest.raises(ValueError, match="2 GPUs cannot be spanned by 4 processes per node"):
        span_per_process(2, 4)
    assert span_per_process(2, 4, shared=True) == 1 and span_per_process(8, 3, shared=True) == 2


def test_collective_timings_end_once_the_device_has_done_the_calls(tmp_path, monkeypatch):
    """A GPU collective returns once queued (NCCL): measured on an H200 without waiting for the
    device, a 64 MB all_reduce read 1.6 TB/s. The timed calls must end with the device done."""
    import types

    import torch
    import torch.distributed as dist

    import app.bench_collectives as bench

    events: list[str] = []
    monkeypatch.setattr(bench, "finish", lambda device: events.append("finish"))
    clock = bench.time.perf_counter  # the benchmark's own clock reads, not torch's
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: events.append("clock") or clock()))
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        collective = bench.Collective("all_reduce", 64, 0, 1, torch.device("cpu"))
        called = collective.__call__
        monkeypatch.setattr(bench.Collective, "__call__", lambda self: events.append("call") or called())
        _, iters, ok = bench.measure(collective, warmup=1, min_time_s=10.0, max_iters=3, device=torch.device("cpu"))
    finally:
        dist.destroy_process_group()
    assert ok and iters == 3
    timed = "".join("c" if e == "call" else "f" if e == "finish" else "t" for e in events)
    # warm-up, finish; the one timed call; then the timed loop: each clock read that ends a timing
    # comes right after a finish
    assert timed == "cf" + "tcft" + "f" + "t" + "c" * iters + "ft" + "c", timed


@pytest.mark.parametrize("argv", [["--min-size", "0"], ["--min-size", "4M", "--max-size", "1M"],
                                  ["--max-size", "-1"], ["--factor", "1"], ["--min-time", "0"]])
def test_the_collectives_benchmark_refuses_sizes_it_would_spin_on_before_any_process_group(argv, capsys):
    # sizes from 0 grew by the factor for ever: every rank spun, appending 0 to a list
    import app.bench_collectives as bench

    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert refused.value.code == 2 and "error:" in capsys.readouterr().err


def test_the_launcher_offers_the_collectives_the_benchmark_measures():
    import app.bench_collectives as bench
    from orchestrate.bench.jobs import COLLECTIVE_OPS

    assert COLLECTIVE_OPS == bench.OPS


def test_resume_finds_the_newest_save_where_latest_names_one_that_is_not_there(tmp_path, capsys):
    # --resume said "no checkpoint; starting from scratch", then overwrote LATEST: the way to step 64 was lost
    from app.checkpoint import LATEST, latest_checkpoint

    assert latest_checkpoint(tmp_path) is None
    for step in (32, 64, 128):
        (tmp_path / f"step-{step:07d}.pt").write_bytes(b"x")
    (tmp_path / LATEST).write_text("step-0000064.pt")
    assert latest_checkpoint(tmp_path) == tmp_path / "step-0000064.pt" and capsys.readouterr().err == ""
    (tmp_path / LATEST).write_text("garbage")
    assert latest_checkpoint(tmp_path) == tmp_path / "step-0000128.pt"
    assert capsys.readouterr().err == (f"{tmp_path / LATEST} names 'garbage', which is not there: resuming from the"
                                       " newest, step-0000128.pt\n")


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--out", "no/such/dir/ddp.json"], ["--warmup", "-1"]])
def test_the_ddp_benchmark_refuses_what_it_would_fail_on_after_measuring_before_any_process_group(argv, capsys):
    # an --out in a missing directory lost every measurement at the end; --steps 0 ended in StatisticsError
    import app.bench_ddp as bench

    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert refused.value.code == 2 and "error:" in capsys.readouterr().err


@pytest.mark.parametrize("text, value", [("3", 3), ("0", None), ("-1", None), ("x", None), ("inf", None)])
def test_a_workers_count_option_takes_its_least_or_more_in_one_line(text, value):
    import argparse

    from app.distenv import positive_int

    if value is not None:
        assert positive_int(text) == value
        return
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^expected an integer of 1 or more, got '{text}'$"):
        positive_int(text)


def test_toy_says_training_diverged_where_the_parameters_are_nan_not_that_replicas_differ(tmp_path, capsys):
    import torch
    import torch.distributed as dist

    from app.distenv import WorkerEnv
    from app.toy import finish

    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    env = WorkerEnv(rank=0, local_rank=0, world_size=1, local_world_size=1, master_addr="localhost", master_port="0",
                    host="localhost")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        assert finish(model, [torch.device("cpu")], env, "basic") is False
    finally:
        dist.destroy_process_group()
    said = capsys.readouterr().out
    assert "basic: training diverged: the parameters are nan" in said and "DIFFER" not in said


def test_a_resume_of_another_batch_size_or_world_says_what_it_cannot_continue_exactly():
    # it skipped the checkpoint's steps in batches of the new size, and dropped the random state, silently
    from app.train import resume_notes

    state = {"step": 10, "world_size": 2, "batch_size": 32}
    assert resume_notes(state, 2, 32) == []
    assert resume_notes({"step": 10, "world_size": 2}, 2, 64) == []  # (a checkpoint from before it was kept)
    batch, world = resume_notes(state, 4, 64)
    assert batch.startswith("the checkpoint was made with --batch-size 32, this run has 64: the 10 step(s)")
    assert world.startswith("the checkpoint was made by 2 rank(s), this run has 4: each rank's random state")


def test_a_removed_checkpoint_takes_latest_with_it_only_where_latest_named_it(tmp_path):
    # toy's checkpoint demo left LATEST naming the file it had removed; a later --resume followed it
    from app.checkpoint import LATEST, remove_checkpoint

    for name in ("a.pt", "b.pt"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / LATEST).write_text("b.pt")
    remove_checkpoint(tmp_path, "a.pt")
    assert not (tmp_path / "a.pt").exists() and (tmp_path / LATEST).read_text() == "b.pt"
    remove_checkpoint(tmp_path, "b.pt")
    assert not (tmp_path / "b.pt").exists() and not (tmp_path / LATEST).exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("total", [100, 1 << 20, 6 << 20, 4 << 20])
def test_the_wire_measure_sends_exactly_what_the_receiver_reads_whatever_the_size(total):
    """--wire-bytes 1M: the sender sent whole 4 MiB chunks past what the receiver read, which
    then closed, and the connection was reset (the job failed)."""
    import socket

    import app.bench_collectives as bench

    with socket.create_server(("127.0.0.1", 0)) as server:
        rate = bench.tcp_both_ways(server, server.getsockname(), total)  # raises on a reset
    assert rate > 0


def test_the_ddp_benchmark_refuses_one_image_its_model_cannot_train_on_in_one_line(capsys):
    """--batch-size 1 at a small --image-size: resnet's batch norm failed mid-measure, its error
    said to be in the user's code."""
    import argparse

    import torch

    from app.bench_ddp import check_one_image_trains

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.BatchNorm2d(4))
    small = argparse.Namespace(image_size=3, model="tiny")  # a 1x1 map of one image: one value a channel
    with pytest.raises(SystemExit) as exited:
        check_one_image_trains(model, small, torch.device("cpu"))
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "--batch-size 1 at --image-size 3: tiny's batch norm needs more than one value per channel in training, and one"
        " image makes one at its last layer here: give a batch of 2 or more, or a larger --image-size")
    check_one_image_trains(model, argparse.Namespace(image_size=16, model="tiny"), torch.device("cpu"))  # 4x4: fine
