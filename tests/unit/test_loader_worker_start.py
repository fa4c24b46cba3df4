"""A DataLoader worker that spawn or forkserver starts is a fresh interpreter without the hook:
the rank routes torch's workers through the hook's own start, which a spawned worker imports by
its pickled name from the rank's ``sys.path``; never where that name would lead to a user's own
``orchestrate`` package, or to none (tests/workers/test_collective_record.py runs spawned
workers for real)."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.node import loader_workers, snapshot

ROOT = Path(__file__).resolve().parents[2]
# a spawned worker: no site (no editable install's finder), the rank's sys.path, the target unpickled
UNPICKLE = ("import json, pickle, sys; sys.path[:] = json.loads(sys.argv[1]);"
            " f = pickle.loads(bytes.fromhex(sys.argv[2])); print(f.__qualname__, f.__code__.co_filename)")


@pytest.fixture
def torch_worker():
    """torch's worker module, put back as it was after the test (its loop, no ``__getattr__``)."""
    from torch.utils.data._utils import worker

    torch_loop, hook_state = vars(worker)["_worker_loop"], list(loader_workers._TORCH_WORKER_LOOP)
    try:
        yield worker
    finally:
        vars(worker).pop("__getattr__", None)
        worker._worker_loop = torch_loop
        loader_workers._TORCH_WORKER_LOOP[:] = hook_state


def in_a_spawned_worker(target, path: list[str]) -> str:
    done = subprocess.run([sys.executable, "-S", "-c", UNPICKLE, json.dumps(path), pickle.dumps(target).hex()],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_spawned_worker_starts_at_the_hook_which_it_imports_by_name(torch_worker, monkeypatch):
    torch_loop = torch_worker._worker_loop
    loader_workers.route_data_loader_workers()
    loader_workers.route_data_loader_workers()  # once is all it takes: torch's loop is not lost
    assert loader_workers._TORCH_WORKER_LOOP == [torch_loop]
    monkeypatch.setattr(sys, "path", ["/nowhere", str(ROOT), *[p for p in sys.path if p not in ("", str(ROOT))]])
    assert torch_worker._worker_loop is loader_workers.start_loader_worker
    assert in_a_spawned_worker(torch_worker._worker_loop, sys.path) == f"start_loader_worker {loader_workers.__file__}"


def test_where_the_name_leads_elsewhere_or_nowhere_a_worker_gets_torchs_own_loop(torch_worker, monkeypatch, tmp_path):
    (tmp_path / "orchestrate").mkdir()
    (tmp_path / "orchestrate" / "__init__.py").write_text("")  # theirs: a spawned worker would import it
    torch_loop = torch_worker._worker_loop
    others = [p for p in sys.path if p not in ("", str(ROOT))]
    loader_workers.route_data_loader_workers()
    # the choice is made as each worker starts: the script put its own package first meanwhile
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(ROOT), *others])
    assert torch_worker._worker_loop is torch_loop
    pickled = pickle.dumps(torch_worker._worker_loop)  # by torch's name (unpickled, it is torch's loop)
    assert b"torch.utils.data._utils.worker" in pickled and b"orchestrate" not in pickled
    monkeypatch.setattr(sys, "path", others)  # nowhere to import the hook from
    assert torch_worker._worker_loop is torch_loop
    monkeypatch.setattr(sys, "path", [str(ROOT), str(tmp_path), *others])  # theirs after ours
    assert torch_worker._worker_loop is loader_workers.start_loader_worker
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        torch_worker.no_such_name
    # one answer per sys.path: pickle looks the target up again, to check it is the same object
    monkeypatch.setattr(loader_workers, "hook_importable", lambda: pytest.fail("asked again for one sys.path"))
    assert torch_worker._worker_loop is loader_workers.start_loader_worker


def test_a_forked_worker_runs_torchs_loop_with_the_hook_it_inherited(monkeypatch):
    ran = []
    monkeypatch.setattr(loader_workers, "_TORCH_WORKER_LOOP", [lambda *a, **k: ran.append((a, k)) or "done"])
    monkeypatch.setattr(loader_workers, "answer_in_data_loader_workers", lambda *a: pytest.fail("installed twice"))
    assert loader_workers.start_loader_worker(1, two=2) == "done" and ran == [((1,), {"two": 2})]


@pytest.mark.parametrize("fails", [False, True], ids=["installed", "failing"])
def test_a_spawned_worker_puts_the_hook_in_then_runs_torchs_loop_even_if_that_fails(
        torch_worker, monkeypatch, tmp_path, capsys, fails):
    ran, installed = [], []

    def install(*args):
        installed.append(args)
        if fails:
            raise RuntimeError("a torch the hook does not know")

    monkeypatch.setattr(loader_workers, "_TORCH_WORKER_LOOP", [])  # a fresh interpreter's
    monkeypatch.setattr(torch_worker, "_worker_loop", lambda *a: ran.append(a))  # its torch's own
    monkeypatch.setattr(loader_workers, "answer_in_data_loader_workers", install)
    monkeypatch.setenv(snapshot.DEBUG_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    loader_workers.start_loader_worker("dataset")
    assert installed == [(str(tmp_path), 3)] and ran == [("dataset",)]  # the worker runs either way
    said = capsys.readouterr().err
    assert ("answer_in_this_loader_worker skipped: RuntimeError: a torch the hook does not know" in said) == fails
