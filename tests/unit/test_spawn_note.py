"""The note a torchrun worker gets when it starts processes of its own with torch.multiprocessing
(orchestrate/node/spawn_note.py), on stand-ins for torch's module: said once, on local rank 0
alone, before the call, which goes through unchanged; torch's package name for the function is
wrapped too, and a torch without the function is left alone. tests/workers runs it in torch."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrate.node import spawn_note


def started(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    return ("started", fn, args, nprocs, join, start_method)


def test_the_note_comes_before_the_first_call_alone_and_the_call_is_unchanged(monkeypatch):
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "8")
    said = []
    noted = spawn_note.wrap(started, said.append)
    assert noted(print, (1,), 3, start_method="fork") == ("started", print, (1,), 3, True, "fork")
    assert noted(print, nprocs=1) == ("started", print, (), 1, True, "spawn")
    assert said == [spawn_note.note({"RANK": "4", "WORLD_SIZE": "8"}, 3)]
    assert said[0].startswith("[ddp-compose] rank 4 starts 3 processes of its own with torch.multiprocessing under"
                              " torchrun, which already starts one process per rank (8 in all):")
    assert spawn_note.note({}, 1).startswith("[ddp-compose] rank ? starts 1 process of its own")
    assert spawn_note.note({}, None).startswith("[ddp-compose] rank ? starts processes of its own")


def test_no_note_on_another_local_rank_and_errors_pass_through(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    said = []

    def fails(fn, args=(), nprocs=1):
        raise RuntimeError("process 0 terminated with exit code 1")
    with pytest.raises(RuntimeError, match="exit code 1"):
        spawn_note.wrap(fails, said.append)(print, (), 2)
    assert said == []


def test_install_wraps_the_module_and_the_packages_name_for_it_and_leaves_a_torch_without_it():
    module = SimpleNamespace(start_processes=started)
    package = SimpleNamespace(start_processes=started)
    spawn_note.install(module, package)
    assert module.start_processes is not started and module.start_processes.__wrapped__ is started
    assert package.start_processes is module.start_processes
    other = SimpleNamespace(start_processes=print)  # a package whose name is not torch's function: left
    spawn_note.install(SimpleNamespace(start_processes=started), other)
    assert other.start_processes is print
    bare = SimpleNamespace()
    spawn_note.install(bare, None)
    assert vars(bare) == {}
