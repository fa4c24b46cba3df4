"""A DataLoader worker that spawn or forkserver starts is a fresh interpreter without the hook:
the rank routes torch's workers through the hook's own start, which a spawned worker finds by
its pickled name on the rank's ``sys.path``; never where that name would lead to a user's own
``orchestrate`` package (tests/workers/test_collective_record.py runs spawned workers)."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from orchestrate.node import snapshot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch_worker(monkeypatch):
    """torch's worker module, its loop and the hook's state put back after the test."""
    from torch.utils.data._utils import worker

    monkeypatch.setattr(worker, "_worker_loop", worker._worker_loop)
    monkeypatch.setattr(snapshot, "_TORCH_WORKER_LOOP", [])
    return worker


def test_workers_start_at_the_hook_which_a_spawned_worker_imports_by_name(torch_worker, monkeypatch):
    torch_loop = torch_worker._worker_loop
    monkeypatch.setattr(sys, "path", ["/nowhere", *[p for p in sys.path if p not in ("", str(ROOT))]])
    snapshot.route_data_loader_workers()
    assert torch_worker._worker_loop is snapshot.start_loader_worker
    assert snapshot._TORCH_WORKER_LOOP == [torch_loop]
    assert sys.path[0] == "/nowhere" and sys.path[-1] == str(ROOT)  # the script's entry kept; the hook's at the end
    assert pickle.loads(pickle.dumps(torch_worker._worker_loop)) is snapshot.start_loader_worker


def test_a_users_own_orchestrate_package_keeps_torchs_start(torch_worker, monkeypatch, tmp_path):
    (tmp_path / "orchestrate").mkdir()
    (tmp_path / "orchestrate" / "__init__.py").write_text("")  # theirs: a spawned worker would import it
    torch_loop = torch_worker._worker_loop
    monkeypatch.setattr(sys, "path", [str(tmp_path), *[p for p in sys.path if p not in ("", str(ROOT))]])
    snapshot.route_data_loader_workers()
    assert torch_worker._worker_loop is torch_loop and snapshot._TORCH_WORKER_LOOP == []
    assert str(ROOT) not in sys.path


def test_a_forked_worker_runs_torchs_loop_with_the_hook_it_inherited(monkeypatch):
    ran = []
    monkeypatch.setattr(snapshot, "_TORCH_WORKER_LOOP", [lambda *a, **k: ran.append((a, k)) or "done"])
    monkeypatch.setattr(snapshot, "answer_in_data_loader_workers", lambda *a: pytest.fail("installed twice"))
    assert snapshot.start_loader_worker(1, two=2) == "done" and ran == [((1,), {"two": 2})]


def test_a_spawned_worker_puts_the_hook_in_then_runs_torchs_loop(torch_worker, monkeypatch, tmp_path):
    ran, installed = [], []
    monkeypatch.setattr(torch_worker, "_worker_loop", lambda *a: ran.append(a))  # the fresh interpreter's own
    monkeypatch.setattr(snapshot, "answer_in_data_loader_workers", lambda *a: installed.append(a))
    monkeypatch.setenv(snapshot.DEBUG_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    snapshot.start_loader_worker("dataset")
    assert installed == [(str(tmp_path), 3)] and ran == [("dataset",)]
