"""A shuffling DistributedSampler iterated again with the same epoch (``set_epoch`` forgotten):
each worker reports the line (orchestrate/node/sampler_epochs.py), and the launcher warns of it."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrate.node import progress, sampler_epochs
from orchestrate.node.sampler_epochs import watching_iter
from orchestrate.supervise.progress import ProgressWatch


def fake_iter(sampler):
    return iter(range(4))


def test_a_shuffling_sampler_iterated_again_from_one_line_with_one_epoch_is_reported_once_for_that_line():
    said: list[tuple[str, int]] = []
    line = ["train.py:14"]
    watched = watching_iter(fake_iter, lambda at, epoch: said.append((at, epoch)), lambda: line[0])
    sampler = SimpleNamespace(shuffle=True, seed=0, epoch=0)
    assert list(watched(sampler)) == [0, 1, 2, 3]  # what the sampler gives, unchanged
    for epoch in (1, 2):  # set_epoch called: a new order each epoch
        sampler.epoch = epoch
        list(watched(sampler))
    assert said == []
    list(watched(sampler))  # epoch 2 again
    assert said == [("train.py:14", 2)]
    list(watched(SimpleNamespace(shuffle=True, seed=0, epoch=2)))  # a new sampler each epoch is the same
    assert said == [("train.py:14", 2)]  # once per line
    fresh = SimpleNamespace(shuffle=True, seed=0, epoch=0)
    line[0] = "train.py:30"
    list(watched(fresh))
    list(watched(SimpleNamespace(shuffle=True, seed=1, epoch=0)))  # another seed: another order
    assert said == [("train.py:14", 2)]
    list(watched(fresh))
    assert said == [("train.py:14", 2), ("train.py:30", 0)]


def test_a_sampler_that_does_not_shuffle_or_one_iterated_from_another_line_is_no_mistake():
    said: list[tuple[str, int]] = []
    line = ["eval.py:3"]
    watched = watching_iter(fake_iter, lambda at, epoch: said.append((at, epoch)), lambda: line[0])
    ordered = SimpleNamespace(shuffle=False, seed=0, epoch=0)
    list(watched(ordered))
    list(watched(ordered))
    shuffled = SimpleNamespace(shuffle=True, seed=0, epoch=0)
    list(watched(shuffled))
    line[0] = "train.py:40"  # the same epoch's data read at another place (a second pass of its own)
    list(watched(shuffled))
    assert said == []


def test_torchs_sampler_is_watched_through_a_data_loader_at_the_scripts_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    monkeypatch.setattr(DistributedSampler, "__iter__", DistributedSampler.__iter__)  # put back after the test
    said: list[tuple[str, int]] = []
    sampler_epochs.install(lambda at, epoch: said.append((at, epoch)))
    data = TensorDataset(torch.arange(16.0))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    epochs = []
    for epoch in range(2):
        epochs.append([batch[0].tolist() for batch in loader])  # set_epoch forgotten
    assert epochs[0] == epochs[1]  # the mistake itself: the same order both times
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("# set_epoch forgotten"))
    assert said == [(f"tests/unit/test_sampler_epochs.py:{line}", 0)]
    sampler.set_epoch(1)
    assert [batch[0].tolist() for batch in loader] != epochs[0] and len(said) == 1


def test_the_launcher_warns_of_each_line_with_its_ranks_and_the_record_keeps_them(tmp_path, monkeypatch):
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.summary import format_summary

    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(progress, "_channel", None)  # another worker process
        progress.report_same_shuffle("train.py:14", 2)
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.shuffled_alike() == {"train.py:14": (2, (0, 1))}
    assert watch.max_step is None and not watch.seen and not watch.attempts  # no step, no metric
    result = RunResult("r1", tmp_path, [], Timings())
    result.shuffled_alike = watch.shuffled_alike()
    warnings = [line for line in format_summary(result).splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: ranks 0, 1 iterated a shuffling DistributedSampler at train.py:14 again with its"
                        " epoch still 2: every epoch reads the data in the same order; call sampler.set_epoch(epoch)"
                        " at the start of each epoch, before iterating its DataLoader"]
    record = json.loads(json.dumps(outcome_record(result)))
    assert record["shuffled_alike"] == {"train.py:14": {"epoch": 2, "ranks": [0, 1]}}


def test_an_epoch_never_set_is_said_as_epoch_0(tmp_path, monkeypatch):
    """set_epoch never called (the common case) leaves the epoch 0: said as 0, not as no epoch."""
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(progress, "_channel", None)
    progress.report_same_shuffle("train.py:30", 0)
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.shuffled_alike() == {"train.py:30": (0, (1,))}
