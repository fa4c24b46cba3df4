"""A file that several ranks write whole: each worker names the shared files it writes
(orchestrate/node/shared_writes.py) on the progress channel, and the launcher warns of those
that more than one rank wrote."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from orchestrate.node import progress, shared_writes, snapshot
from orchestrate.node.shared_writes import shared_path, watching_open, watching_save
from orchestrate.outcome.progress import ProgressReader
from orchestrate.plan.layout import NODE_NAME_ENV, SIGTERM_MARK_PREFIX
from orchestrate.supervise.progress import ProgressWatch
from tests.conftest import ROOT


@pytest.fixture
def dirs(tmp_path) -> tuple[str, str]:
    """A work directory and a shared one, as the nodes mount /workspace and /shared."""
    (tmp_path / "ws" / "ckpt").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    return str(tmp_path / "ws"), str(tmp_path / "shared")


def test_the_shared_directories_are_those_the_plan_mounts_in_every_node():
    from orchestrate.plan.layout import SHARED_DIR, WORKSPACE_DIR

    assert shared_writes.SHARED_DIRS == (WORKSPACE_DIR, SHARED_DIR)


def test_a_path_under_a_shared_directory_is_named_from_the_work_directory(tmp_path, dirs, monkeypatch):
    work, shared = dirs
    assert shared_path(f"{work}/model.pt", dirs) == "model.pt"
    assert shared_path(Path(work) / "ckpt" / ".." / "ckpt" / "a.pt", dirs) == "ckpt/a.pt"
    assert shared_path(f"{shared}/b.pt".encode(), dirs) == f"{shared}/b.pt"  # outside the work directory: in full
    monkeypatch.chdir(work)
    assert shared_path("model.pt", dirs) == "model.pt"  # relative to where the script runs
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "elsewhere")
    assert shared_path(f"{work}/link/x.pt", dirs) is None  # it lands outside: a node's own
    assert shared_path(f"{work}foo/model.pt", dirs) is None  # a name that only starts like it
    assert shared_path(str(tmp_path / "model.pt"), dirs) is None
    assert shared_path(io.BytesIO(), dirs) is None and shared_path(3, dirs) is None  # not a path


@pytest.mark.parametrize("mode, reported", [("w", True), ("wb", True), ("w+", True), ("a", False), ("x", False),
                                            ("r+", False), ("r", False)])
def test_a_file_opened_to_be_written_whole_is_reported_once_it_opened(dirs, mode, reported):
    work, _ = dirs
    (Path(work) / "model.pt").write_text("old")
    said: list[str] = []
    opener = watching_open(open, said.append, dirs)
    if mode == "x":
        with pytest.raises(FileExistsError):  # it did not open: nothing written
            opener(f"{work}/model.pt", mode)
        with opener(f"{work}/new.pt", mode) as handle:
            handle.write("x")
    else:
        with opener(f"{work}/model.pt", mode) as handle:
            assert handle.mode == mode
    assert said == (["model.pt"] if reported else [])
    with pytest.raises(FileNotFoundError):
        opener(f"{work}/missing/model.pt", "w")  # an open that fails reports nothing
    assert said == (["model.pt"] if reported else [])


@pytest.mark.parametrize("mode, reported", [("w", True), ("ab", True), ("x", True), ("r+", True), ("r", False),
                                            ("rb", False)])
def test_a_file_written_on_the_nodes_own_disk_is_reported_in_full_in_any_mode_that_writes(tmp_path, dirs, mode,
                                                                                          reported):
    local = tmp_path / "cache" / "vocab.json"  # tmp_path is outside the shared directories: the node's own
    local.parent.mkdir()
    if mode != "x":
        local.write_text("{}")
    shared: list[str] = []
    here: list[str] = []
    opener = watching_open(open, shared.append, dirs, here.append)
    with opener(local, mode):
        pass
    assert here == ([str(local)] if reported else []) and shared == []
    with opener(f"{dirs[0]}/log.txt", "w"):  # a shared file: reported as one, never as the node's own
        pass
    with opener(f"{dirs[0]}/log.txt", "a"):
        pass
    assert shared == ["log.txt"] and here == ([str(local)] if reported else [])
    with opener(tmp_path / "cache" / ".." / "cache" / "link.json", "w"):
        pass
    assert here[-1] == str(local.parent / "link.json")  # as the kernel resolves it



def test_a_file_torchs_own_code_writes_on_the_nodes_disk_is_not_the_scripts(tmp_path, dirs):
    """torch writes its compiler's caches and a generated module in /tmp, each rank its own: no
    clue to a file another node cannot find. A library's write (numpy's) is the script's."""
    here: list[str] = []
    opener = watching_open(open, lambda path: None, dirs, here.append)

    def writer(filename: str):
        namespace: dict = {}
        exec(compile("def write(opener, path):\n    with opener(path, 'w'):\n        pass\n", filename, "exec"),
             namespace)
        return namespace["write"]

    writer("/opt/venv/lib/python3.11/site-packages/torch/distributed/nn/jit/instantiator.py")(
        opener, tmp_path / "_remote_module.py")
    assert here == []
    writer("/opt/venv/lib/python3.11/site-packages/numpy/lib/_npyio_impl.py")(opener, tmp_path / "vocab.npy")
    assert here == [str(tmp_path / "vocab.npy")]


def test_a_file_in_the_runs_directory_is_reported_as_no_nodes_own(tmp_path, dirs, monkeypatch):
    run = tmp_path / "ddp-run"  # as every node mounts the run's directory
    run.mkdir()
    monkeypatch.setattr(shared_writes, "NOT_NODE_LOCAL", (str(run), "/proc", "/sys", "/dev"))
    here: list[str] = []
    opener = watching_open(open, lambda path: None, dirs, here.append)
    with opener(run / "rank0.jsonl", "a"), opener(tmp_path / "mine.txt", "w"):
        pass
    assert here == [str(tmp_path / "mine.txt")]


def test_the_run_directory_and_the_kernels_files_are_on_no_nodes_own_disk():
    from orchestrate.plan.layout import RUN_DIR_MOUNT

    assert shared_writes.NOT_NODE_LOCAL[0] == RUN_DIR_MOUNT  # every node mounts the run's directory
    assert not shared_writes.node_local("/ddp-run/progress/rank0.jsonl")
    assert not shared_writes.node_local("/proc/self/status") and not shared_writes.node_local("/dev/null")
    assert not shared_writes.node_local("/workspace/x") and not shared_writes.node_local("/shared")
    assert shared_writes.node_local("/tmp/x") and shared_writes.node_local("/root/.cache/x")
    assert shared_writes.node_local("/devices/x") and shared_writes.node_local("/ddp-runs/x")  # only names alike


def test_a_save_to_a_shared_path_is_reported_once_it_saved():
    said: list[str] = []
    saved: list[object] = []

    def save(obj, f, pickle_module=None):
        if f == "/ws/fails.pt":
            raise OSError("No space left on device")
        saved.append((obj, f))

    watched = watching_save(save, said.append, ("/ws", "/shared"))
    watched({"step": 1}, "/ws/model.pt")
    watched({"step": 1}, io.BytesIO())
    with pytest.raises(OSError):
        watched({"step": 1}, "/ws/fails.pt")
    assert said == ["model.pt"] and len(saved) == 2


def test_torchs_own_save_is_watched_where_it_is_called(dirs, monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.serialization as serialization

    monkeypatch.setattr(serialization, "save", serialization.save)  # put back after the test
    monkeypatch.setattr(torch, "save", torch.save)
    monkeypatch.setattr(shared_writes, "SHARED_DIRS", dirs)
    said: list[str] = []
    monkeypatch.setattr(shared_writes, "watching_save",
                        lambda original, report, report_local: watching_save(original, report, dirs, report_local))
    here: list[str] = []
    shared_writes.watch_torch_save(said.append, here.append)
    torch.save({"w": torch.ones(2)}, f"{dirs[0]}/ckpt/model.pt")
    assert said == ["ckpt/model.pt"] and here == []
    local = Path(dirs[0]).parent / "local.pt"  # outside the shared directories: the node's own
    torch.save({"w": torch.ones(2)}, local)
    assert said == ["ckpt/model.pt"] and here == [str(local)]
    assert torch.load(f"{dirs[0]}/ckpt/model.pt", weights_only=True)["w"].tolist() == [1.0, 1.0]


def test_each_file_is_reported_once_per_worker_and_the_launcher_names_those_of_several_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    for rank, files in ((0, ["model.pt", "model.pt", "final.pt"]), (1, ["model.pt", "log-1.txt"]), (2, ["model.pt"])):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(progress, "_channel", None)  # another worker process
        for path in files:
            progress.report_written(path)
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [line["wrote"] for line in lines] == ["model.pt", "final.pt"]  # once each
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.written_whole() == {"final.pt": (0,), "log-1.txt": (1,), "model.pt": (0, 1, 2)}
    assert watch.max_step is None and not watch.seen  # a write is not a step
    assert [r.wrote for r in ProgressReader(tmp_path).poll() if r.rank == 1] == ["model.pt", "log-1.txt"]


def test_each_file_on_a_nodes_own_disk_is_reported_once_per_worker_up_to_a_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    for rank, files in ((0, ["/tmp/a", "/tmp/a", "/tmp/b", "/tmp/c", "/tmp/d"]), (1, ["/tmp/a"])):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(progress, "_channel", None)  # another worker process
        progress.report_written_locally(str(tmp_path / f"rank{rank}.jsonl"), most=3)  # the channel's own: never
        for path in files:
            progress.report_written_locally(path, most=3)
        progress.report_written("model.pt")  # a shared file is counted apart
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [line.get("wrote_locally") for line in lines] == ["/tmp/a", "/tmp/b", "/tmp/c", None]
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.written_on_nodes_disks() == {"/tmp/a": (0, 1), "/tmp/b": (0,), "/tmp/c": (0,)}
    assert watch.written_whole() == {"model.pt": (0, 1)}
    assert watch.max_step is None and not watch.seen  # no step


def test_the_files_on_a_nodes_own_disk_keep_the_order_they_were_written_in(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(progress, "_channel", None)
    for path in ("/tmp/z-first", "/tmp/a-second", "/tmp/m-third"):
        progress.report_written_locally(path, most=10)
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert list(watch.written_on_nodes_disks()) == ["/tmp/z-first", "/tmp/a-second", "/tmp/m-third"]  # the latest last


def test_the_summary_warns_of_each_file_several_ranks_wrote_and_the_record_keeps_them(tmp_path):
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.summary import WRITTEN_BY_SEVERAL_SHOWN, format_summary

    result = RunResult("r1", tmp_path, [], Timings())
    assert "warning" not in format_summary(result)
    result.written_shared = {"final.pt": (0,), "model.pt": (0, 1)}
    assert result.written_by_several == {"model.pt": (0, 1)}
    warning = [line for line in format_summary(result).splitlines() if line.startswith("warning:")]
    assert warning == ["warning: ranks 0, 1 each wrote model.pt whole, in a directory every node shares: writers of"
                       " one file race, so it holds whichever finished last (parts of each, where they wrote different"
                       " bytes), and a rank that reads it meanwhile may find it half-written; write it on one rank (if"
                       " dist.get_rank() == 0:), or a file per rank"]
    result.written_shared = {f"f{i}.pt": (0, 3) for i in range(WRITTEN_BY_SEVERAL_SHOWN + 2)}
    warning = [line for line in format_summary(result).splitlines() if line.startswith("warning:")]
    assert len(warning) == WRITTEN_BY_SEVERAL_SHOWN + 1 and warning[1] == "warning: ranks 0, 3 each wrote f1.pt whole, too"
    assert warning[-1] == "warning: 2 more files written by several ranks (outcome.json: written_by_several)"
    assert outcome_record(result)["written_by_several"]["f0.pt"] == [0, 3]


def a_worker(monkeypatch, directory, rank: int, node: str = "") -> None:
    """This process as worker ``rank`` of ``node`` (none: no node named), with a channel of its own."""
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(directory))
    monkeypatch.setenv("RANK", str(rank))
    if node:
        monkeypatch.setenv("DDP_NODE", node)
    else:
        monkeypatch.delenv("DDP_NODE", raising=False)
    monkeypatch.setattr(progress, "_channel", None)


def test_a_file_written_again_after_its_nodes_sigterm_is_said_once_more(tmp_path, monkeypatch):
    a_worker(monkeypatch, tmp_path, 1, "node1")
    progress.report_written("ckpt.pt")
    progress.report_written("ckpt.pt")  # each step's save: said once
    progress.report_written_locally("/tmp/a", most=1)
    progress.report_written_locally("/tmp/a", most=1)
    (tmp_path / "sigterm-node0").touch()  # another node's SIGTERM
    progress.report_written("ckpt.pt")
    progress.report_written_locally("/tmp/a", most=1)
    assert len((tmp_path / "rank1.jsonl").read_text().splitlines()) == 2  # not this node's: nothing said again
    (tmp_path / f"{SIGTERM_MARK_PREFIX}node1").touch()  # the launcher's mark, as a preempt sends node1 SIGTERM
    for _ in range(progress.SAID_AGAIN + 2):
        progress.report_written("ckpt.pt")  # the saves on the way out: said again a few times, then not
        progress.report_written_locally("/tmp/a", most=1)  # (the limit counts files, not sayings)
    progress.report_written_locally("/tmp/b", most=1)  # past the limit still
    records = [json.loads(line) for line in (tmp_path / "rank1.jsonl").read_text().splitlines()]
    assert [r.get("wrote") or r.get("wrote_locally") for r in records] == (
        ["ckpt.pt", "/tmp/a"] + ["ckpt.pt", "/tmp/a"] * progress.SAID_AGAIN)
    assert progress.SAID_AGAIN >= 2  # a routine save between the mark and the signal leaves one for the signal's
    assert {r["node"] for r in records} == {"node1"}


def test_without_a_node_name_a_file_is_never_said_again(tmp_path, monkeypatch):
    a_worker(monkeypatch, tmp_path, 0)
    (tmp_path / f"{SIGTERM_MARK_PREFIX}").touch()
    for _ in range(2):
        progress.report_written("ckpt.pt")
    assert len((tmp_path / "rank0.jsonl").read_text().splitlines()) == 1


def test_every_record_says_when_its_process_began_not_when_it_first_reported(tmp_path):
    child = ("import time; time.sleep(0.6); from orchestrate.node import progress; progress.report(1)")
    subprocess.run([sys.executable, "-c", child], check=True, timeout=60, cwd=ROOT,
                   env={**os.environ, "DDP_PROGRESS_DIR": str(tmp_path), "RANK": "0", "DDP_NODE": "node0",
                        "PYTHONPATH": str(ROOT)})
    [record] = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert record["node"] == "node0"
    assert 0.5 <= record["time"] - record["began"] < 30, record


def test_a_mark_that_cannot_be_read_leaves_the_users_write_alone(tmp_path, monkeypatch):
    a_worker(monkeypatch, tmp_path, 0, "node0")
    progress.report_written("ckpt.pt")

    def unreadable(self):
        raise OSError(116, "Stale file handle")

    monkeypatch.setattr(Path, "exists", unreadable)
    progress.report_written("ckpt.pt")  # no error reaches the script's open()
    assert len((tmp_path / "rank0.jsonl").read_text().splitlines()) == 1


def test_the_sigterm_mark_is_named_alike_by_the_launcher_and_the_workers():
    assert progress.SIGTERM_MARK_PREFIX == SIGTERM_MARK_PREFIX


def test_the_node_is_named_to_the_workers_in_the_variable_the_plan_sets():
    assert progress.NODE_ENV == snapshot.NODE_ENV == NODE_NAME_ENV


def test_a_save_by_torch_save_is_said_so_and_each_file_loaded_once_per_worker_up_to_a_limit(tmp_path, monkeypatch):
    a_worker(monkeypatch, tmp_path, 0)
    progress.report_written("ckpt.pt")  # opened to be written first (torch's legacy format), then torch.save's
    progress.report_written("ckpt.pt", by_torch_save=True)
    progress.report_written("ckpt.pt", by_torch_save=True)
    for path in ["ckpt.pt", "ckpt.pt", ""] + [f"shard{i}.pt" for i in range(progress.LOADS_NOTED)]:
        progress.report_loaded(path)
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [(line.get("wrote"), line.get("torch_save")) for line in lines[:2]] == [("ckpt.pt", None), ("ckpt.pt", True)]
    loaded = [line["loaded"] for line in lines if "loaded" in line]
    assert loaded[:3] == ["ckpt.pt", "", "shard0.pt"] and len(loaded) == progress.LOADS_NOTED
    records = ProgressReader(tmp_path).poll()
    assert [(r.wrote, r.torch_save) for r in records if r.wrote] == [("ckpt.pt", False), ("ckpt.pt", True)]
    assert [r.loaded for r in records][2:5] == ["ckpt.pt", "", "shard0.pt"] and records[0].loaded is None
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.max_step is None and not watch.seen  # a load is not a step


def test_a_torch_save_to_a_file_object_is_said_by_the_file_it_writes_whole_and_dcps_own_saves_and_loads_are_not(
        dirs):
    """``with open(p, "wb") as f: torch.save(x, f)`` is a torch.save of ``p``; a file added to
    (appended), a stream and a descriptor's number name none; the torch.save and torch.load that
    torch.distributed.checkpoint makes of each tensor in its files are its own (its save and load
    are said by their directory)."""
    said: list[str] = []
    watched = watching_save(lambda obj, f: f.write(b"x"), said.append, dirs)
    with open(f"{dirs[0]}/ckpt/model.pt", "wb") as handle:
        watched({"step": 1}, handle)
    with open(f"{dirs[0]}/ckpt/log.pt", "ab") as handle:
        watched({"step": 1}, handle)
    watched({"step": 1}, io.BytesIO())
    descriptor = os.open(f"{dirs[0]}/ckpt/fd.pt", os.O_WRONLY | os.O_CREAT)
    with open(descriptor, "wb") as handle:  # (its name is the descriptor's number)
        watched({"step": 1}, handle)
    assert said == ["ckpt/model.pt"]
    loads: list[str] = []
    loaded = shared_writes.watching_load(lambda f: "tensor", loads.append, dirs)
    dcp_code = compile("def dcp_write(save, load, f):\n    save(1, f)\n    return load(f)\n",
                       os.path.join("site-packages", "torch", "distributed", "checkpoint", "filesystem.py"), "exec")
    scope: dict = {}
    exec(dcp_code, scope)
    with open(f"{dirs[0]}/ckpt/__0_0.distcp", "wb") as handle:
        assert scope["dcp_write"](watched, loaded, handle) == "tensor"
    assert said == ["ckpt/model.pt"] and loads == []
    assert loaded(f"{dirs[0]}/ckpt/model.pt") == "tensor" and loads == ["ckpt/model.pt"]


def test_a_dcp_save_and_load_are_said_by_their_directory_once_they_returned(dirs):
    """The directory: the call's checkpoint_id, else its storage's path (positional in the older
    save_state_dict and load_state_dict); a URL as given; what DCP returns and raises unchanged, and
    a report that fails is left unsaid."""
    from orchestrate.node import dcp_files

    said: list[str] = []

    class Storage:
        path = Path(dirs[0]) / "ckpt" / "step_4"

    def save(state_dict, storage_writer=None, *, checkpoint_id=None):
        if checkpoint_id == "missing":
            raise FileNotFoundError("missing")
        return "metadata"

    watched = dcp_files.watching(save, said.append, "storage_writer", dirs)
    assert watched({}, checkpoint_id=f"{dirs[0]}/ckpt") == "metadata"
    assert watched({}, Storage()) == "metadata" and watched({}, storage_writer=Storage()) == "metadata"
    watched({}, checkpoint_id="s3://bucket/ckpt", storage_writer=Storage())
    watched({}, checkpoint_id=f"{dirs[1]}/ckpt")
    watched({})  # (DCP itself raises for neither)
    with pytest.raises(FileNotFoundError):
        watched({}, checkpoint_id="missing")
    assert said == ["ckpt", "ckpt/step_4", "ckpt/step_4", "s3://bucket/ckpt", f"{os.path.realpath(dirs[1])}/ckpt"]

    def failing(path: str) -> None:
        raise OSError(116, "Stale file handle")

    assert dcp_files.watching(save, failing, "storage_writer", dirs)({}, checkpoint_id="ckpt") == "metadata"

    def load_state_dict(state_dict, storage_reader):  # DCP's older entry point, as torch deprecates it
        warnings.warn(load_state_dict.__deprecated__, FutureWarning, stacklevel=2)
        return undeprecated(state_dict, storage_reader)

    def undeprecated(state_dict, storage_reader):
        return "loaded"

    load_state_dict.__deprecated__, load_state_dict.__wrapped__ = "`load_state_dict` is deprecated", undeprecated
    with pytest.warns(FutureWarning, match="load_state_dict") as caught:
        assert dcp_files.watching(load_state_dict, said.append, "storage_reader", dirs)({}, Storage()) == "loaded"
    assert [w.filename for w in caught] == [__file__] and said[-1] == "ckpt/step_4"  # the caller's line, once


def test_a_dcp_save_and_load_are_said_on_the_channel_and_read_as_no_step_nor_a_file_several_ranks_write(
        tmp_path, monkeypatch):
    for rank in (0, 1):
        a_worker(monkeypatch, tmp_path, rank)
        progress.report_dcp_saved("ckpt")
        progress.report_dcp_saved("ckpt")  # each step's save into it: said once
        progress.report_dcp_saved("ckpt/step_4")
        progress.report_loaded("ckpt", by_dcp=True)
        progress.report_loaded("init.pt")
    records = ProgressReader(tmp_path).poll()
    assert [(r.rank, r.dcp_saved) for r in records if r.dcp_saved] == [(0, "ckpt"), (0, "ckpt/step_4"), (1, "ckpt"),
                                                                       (1, "ckpt/step_4")]
    assert [(r.loaded, r.loaded_by_dcp) for r in records if r.loaded and r.rank == 0] == [("ckpt", True),
                                                                                          ("init.pt", False)]
    assert all(r.metrics == {} for r in records)
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.max_step is None and not watch.seen and watch.written == {}
