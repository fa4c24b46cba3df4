"""Storage faults: their specs, the launcher's arming and reading back, and the workers' side
(open() and torch.save reached, a write torn at a byte, ENOSPC while the disk is full), run
here in-process over temporary directories (the node's work directory is one of them)."""
from __future__ import annotations

import errno
import io
import json
import multiprocessing
import os
import re
import tempfile
import time

import pytest

from orchestrate.chaos.schedule import Reference, draw_schedule
from orchestrate.config.fault_spec import FaultAction, FaultSpec, parse_fault
from orchestrate.errors import UsageError
from orchestrate.faults import storage
from orchestrate.faults.scheduler import FaultScheduler
from orchestrate.node import storage_faults


@pytest.mark.parametrize("text, expected", [
    ("torn-write:node1@step=5", FaultSpec(FaultAction.TORN_WRITE, "node1", at_step=5)),
    ("torn-write:node0,path=ckpt/*.pt", FaultSpec(FaultAction.TORN_WRITE, "node0", path="ckpt/*.pt")),
    ("disk-full:node1,path=model.*@t=5..20",
     FaultSpec(FaultAction.DISK_FULL, "node1", 5.0, until_seconds=20.0, path="model.*")),
    ("disk-full:node0@step=3", FaultSpec(FaultAction.DISK_FULL, "node0", at_step=3)),
])
def test_storage_fault_specs_parse_and_print_back(text, expected):
    assert parse_fault(text) == expected
    assert parse_fault(str(expected)) == expected


@pytest.mark.parametrize("text, message", [
    ("torn-write:node1@t=2..5", "torn-write has no end"),
    ("torn-write:1", "torn-write aims at a node"),
    ("disk-full:node0,path=/etc/*", "path is a glob relative to the work directory"),
    ("disk-full:node0,path=../x", "path is a glob relative to the work directory"),
    ("torn-write:node0,cpus=1", "torn-write takes path="),
])
def test_bad_storage_fault_specs_are_refused(text, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_fault(text)


def test_a_storage_fault_reaches_the_directory_of_the_last_save_or_any_file():
    assert storage.default_glob(None) == "*"
    assert storage.default_glob("ckpt/step-3.pt") == "ckpt/*"
    assert storage.default_glob("model.pt") == "*"


def test_arming_lists_the_fault_for_its_node_and_disarming_takes_it_off(tmp_path):
    armed = storage.ArmedStorageFaults(tmp_path)
    torn, full = parse_fault("torn-write:node1"), parse_fault("disk-full:node0,path=ckpt/*")
    torn_armed, full_armed = armed.arm(torn, "ckpt/a.pt"), armed.arm(full)
    assert (torn_armed.glob, full_armed.glob) == ("ckpt/*", "ckpt/*")
    listed = storage.armed(tmp_path)
    assert [(f["kind"], f["node"], f["path"], f["key"]) for f in listed] == [
        ("torn-write", "node1", "ckpt/*", torn_armed.key), ("disk-full", "node0", "ckpt/*", full_armed.key)]
    worker = storage_faults.StorageFaults(str(tmp_path), "node1", workspace=str(tmp_path / "ws"))
    assert [f["kind"] for f in worker.armed()] == ["torn-write"]  # its own node's only
    armed.end(torn)
    assert [f["kind"] for f in storage.armed(tmp_path)] == ["disk-full"]
    assert worker.armed() == []


def test_launchers_arming_at_once_lose_none_of_each_others_faults(tmp_path):
    # the run's launcher and a `fault RUN` beside it, each a process of its own
    def arm_many(node: str) -> None:
        for _ in range(25):
            storage.arm(tmp_path, parse_fault(f"disk-full:{node}"), node, "*")

    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=arm_many, args=(f"node{i}",)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    listed = storage.armed(tmp_path)
    assert sorted({f["node"] for f in listed}) == ["node0", "node1", "node2", "node3"]
    assert len(listed) == 100


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A worker's side over a progress directory and a work directory, ``arm(kind, glob)``
    listing a fault for it."""
    progress, workspace = tmp_path / "progress", tmp_path / "ws"
    progress.mkdir()
    workspace.mkdir()
    monkeypatch.setenv("RANK", "3")
    faults = storage_faults.StorageFaults(str(progress), "node1", workspace=str(workspace))
    opener = storage_faults.wrap_open(faults)

    def arm(kind: str, glob: str = "*") -> None:
        storage.arm(progress, FaultSpec(FaultAction(kind), "node1"), "node1", glob)

    return faults, opener, arm, progress, workspace


def test_a_torn_write_cuts_the_file_at_a_byte_records_it_and_stops_the_worker(node, monkeypatch):
    faults, opener, arm, progress, workspace = node
    died = []
    monkeypatch.setattr(storage_faults, "die_torn", lambda: died.append(True))
    reader = storage.StorageEvents(progress)  # the launcher follows from now on
    with opener(workspace / "other.txt", "w") as file:  # nothing armed yet: written whole
        file.write("x" * 100)
    arm("torn-write", "ckpt/*")
    with opener(workspace / "log.txt", "w") as file:  # not matched
        file.write("y" * 100)
    (workspace / "ckpt").mkdir()
    with opener(workspace / "ckpt" / "a.pt", "wb") as file:
        file.write(b"z" * 1000)
    assert died == [True]
    assert (workspace / "other.txt").stat().st_size == 100 and (workspace / "log.txt").stat().st_size == 100
    cut = (workspace / "ckpt" / "a.pt").stat().st_size
    assert 1 <= cut < 1000
    events = reader.poll()
    assert [(e.kind, e.file, e.byte, e.size, e.rank, e.node) for e in events] == [
        ("torn-write", "ckpt/a.pt", cut, 1000, 3, "node1")]
    assert events[0].describe() == f"rank 3's write of ckpt/a.pt was cut at byte {cut} of 1000"
    # the fault is one worker's: a second file is not torn
    with opener(workspace / "ckpt" / "b.pt", "wb") as file:
        file.write(b"z" * 1000)
    assert (workspace / "ckpt" / "b.pt").stat().st_size == 1000 and died == [True]


def test_reading_is_never_reached_and_files_outside_the_work_directory_neither(node, tmp_path, monkeypatch):
    faults, opener, arm, progress, workspace = node
    monkeypatch.setattr(storage_faults, "die_torn", lambda: pytest.fail("torn"))
    (workspace / "data.bin").write_bytes(b"d" * 10)
    arm("torn-write")
    with opener(workspace / "data.bin", "rb") as file:
        assert file.read() == b"d" * 10
    with opener(tmp_path / "outside.bin", "wb") as file:
        file.write(b"o" * 10)
    assert (tmp_path / "outside.bin").stat().st_size == 10


def test_a_full_disk_fails_writes_with_enospc_while_armed_and_records_each_file_once(node):
    faults, opener, arm, progress, workspace = node
    reader = storage.StorageEvents(progress)
    arm("disk-full", "*.pt")
    with opener(workspace / "notes.txt", "w") as file:
        file.write("fine")
    file = opener(workspace / "model.pt", "wb")
    assert file.name == str(workspace / "model.pt") and not file.closed  # a str, as open() names a path-like one
    assert file.write(b"abc") == 3  # kept in Python's buffer, as on a full disk: the system is not asked yet
    for _ in range(2):
        with pytest.raises(OSError) as raised:
            file.flush()
        assert raised.value.errno == errno.ENOSPC and raised.value.filename is None  # as the system's names none
    with pytest.raises(OSError, match="No space left on device"):  # unbuffered: at the write itself
        opener(workspace / "raw.pt", "wb", buffering=0).write(b"abc")
    storage.disarm(progress, storage.armed(progress)[0]["key"])
    file.write(b"def")  # the disk has room again: what the buffer kept is written too
    file.close()
    assert (workspace / "model.pt").read_bytes() == b"abcdef" and (workspace / "notes.txt").read_text() == "fine"
    events = reader.poll()
    assert storage.StorageEvents(progress).poll() == []  # a later follower (attach) does not act on them again
    assert [(e.kind, e.file, e.rank) for e in events] == [("disk-full", "model.pt", 3), ("disk-full", "raw.pt", 3)]
    assert events[0].describe() == "rank 3's write to model.pt failed: no space left on device (ENOSPC)"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, where every write fails with ENOSPC")
@pytest.mark.parametrize("mode, data", [("w", "x" * 10), ("wb", b"x" * 10), ("w", "x" * 100_000), ("a", "line\n"),
                                        ("w+", "x" * 10)])
def test_a_file_on_the_full_disk_fails_where_and_as_a_file_on_dev_full_does(node, mode, data):
    faults, opener, arm, progress, workspace = node
    arm("disk-full")

    def what_happens(path: str) -> list[str]:
        seen = []
        file = opener(path, mode)
        for step in (lambda: file.write(data), file.flush, file.close):
            try:
                step()
                seen.append("ok")
            except OSError as exc:
                seen.append(f"{type(exc).__name__}: {exc}")
        return seen

    assert what_happens(str(workspace / "ckpt.txt")) == what_happens("/dev/full")


def test_a_file_opened_from_a_descriptor_is_reached_by_the_path_it_was_opened_at(node, monkeypatch):
    faults, opener, arm, progress, workspace = node
    monkeypatch.setattr(os, "fdopen", lambda fd, *args, **kwargs: opener(fd, *args, **kwargs))  # as io.open, patched
    reader = storage.StorageEvents(progress)
    arm("disk-full", "ckpt/*")
    (workspace / "ckpt").mkdir()
    descriptor, temporary = tempfile.mkstemp(prefix=".model.", suffix=".tmp", dir=workspace / "ckpt")
    with pytest.raises(OSError, match=r"^\[Errno 28\] No space left on device$"):
        with os.fdopen(descriptor, "wb") as file:  # an atomic save's temporary file
            assert file.fileno() == descriptor  # the caller's number, still (os.fsync(descriptor) syncs this file)
            file.write(b"x" * 10)
    with pytest.raises(OSError):
        os.fstat(descriptor)  # closed with the file, as closefd=True says
    descriptor, elsewhere = tempfile.mkstemp(dir=workspace)  # not matched: written whole
    with os.fdopen(descriptor, "wb") as file:
        file.write(b"y" * 10)
    assert os.path.getsize(elsewhere) == 10 and os.path.getsize(temporary) == 0
    assert [(e.kind, e.file) for e in reader.poll()] == [("disk-full", f"ckpt/{os.path.basename(temporary)}")]
    monkeypatch.setattr(io, "open", opener)  # tempfile's own files: a directory's name, opened with an opener
    with pytest.raises(OSError):
        with tempfile.NamedTemporaryFile(dir=workspace / "ckpt", prefix="nt.") as named:
            named.write(b"y" * 10)
            named.flush()
    assert [(e.kind, e.file.startswith("ckpt/nt.")) for e in reader.poll()] == [("disk-full", True)]
    keep = os.open(workspace / "ckpt" / "kept.bin", os.O_WRONLY | os.O_CREAT)
    file = opener(keep, "wb", closefd=False)
    file.write(b"z")
    with pytest.raises(OSError):
        file.close()
    os.fstat(keep)  # closefd=False: the caller's descriptor stays open, as it would
    os.close(keep)


@pytest.fixture
def full_disk_torch(node, monkeypatch):
    """torch, its ``torch.save`` wrapped by the workers' hook (undone after the test), and a full
    disk armed for ``*.pt``."""
    torch = pytest.importorskip("torch")
    faults, opener, arm, progress, workspace = node
    monkeypatch.setattr(torch, "save", torch.save)
    monkeypatch.setattr(torch.serialization, "save", torch.serialization.save)
    storage_faults.wrap_torch_save(faults)
    arm("disk-full", "*.pt")
    return torch


def test_torch_save_on_the_full_disk_raises_torchs_own_error_as_on_dev_full(node, full_disk_torch):
    torch = full_disk_torch
    faults, opener, arm, progress, workspace = node
    raised = []
    for path in (str(workspace / "model.pt"), "/dev/full"):
        with pytest.raises(Exception) as error:
            torch.save({"w": torch.zeros(1000)}, path)
        raised.append(error.value)
    assert [type(e) for e in raised] == [RuntimeError, RuntimeError], raised  # torch's, not the ENOSPC itself
    assert isinstance(raised[0].__context__, OSError) and raised[0].__context__.errno == errno.ENOSPC
    assert getattr(raised[0].__context__, storage_faults.AS_THE_SYSTEM)  # its traceback leaves the hook out
    # a save small enough for the buffer: torch's writer of a path returns, its bytes lost, on /dev/full as here
    returned = [torch.save({"w": torch.zeros(1)}, path) for path in (str(workspace / "small.pt"), "/dev/full")]
    assert returned == [None, None] and (workspace / "small.pt").stat().st_size < 100


def test_a_torch_save_that_returned_on_the_full_disk_is_said_to_have_gone_on_unaware(node, full_disk_torch):
    """A trial (session 112): disk-full:node0@step=4 on a plain script whose small checkpoint
    torch.save returned all the same (as on /dev/full); it renamed the empty file onto its
    checkpoint, and the run SUCCEEDED saying only that the write failed. The worker records that
    the save returned, once per file, and the launcher says the script went on unaware."""
    torch = full_disk_torch
    faults, opener, arm, progress, workspace = node
    with pytest.raises(RuntimeError):
        torch.save({"w": torch.zeros(1000)}, str(workspace / "model.pt"))  # raised: the script knows
    for _ in range(2):
        assert torch.save({"w": torch.zeros(1)}, str(workspace / "small.pt")) is None
    events = storage.StorageEvents(progress, from_start=True).poll()
    assert [(e.file, e.returned) for e in events] == [("model.pt", False), ("small.pt", False), ("small.pt", True)]
    assert events[-1].describe() == (
        "rank 3's torch.save to small.pt returned with no error all the same, as torch's writer of a path does on a"
        " full disk: the file lacks the bytes lost, and the script went on")


def test_torch_save_to_a_path_is_reached_though_torch_writes_it_from_cpp(node, monkeypatch):
    torch = pytest.importorskip("torch")
    faults, opener, arm, progress, workspace = node
    died = []
    monkeypatch.setattr(storage_faults, "die_torn", lambda: died.append(True))
    monkeypatch.setattr(torch, "save", torch.save)
    monkeypatch.setattr(torch.serialization, "save", torch.serialization.save)
    storage_faults.wrap_torch_save(faults)
    torch.save({"w": torch.zeros(100)}, str(workspace / "whole.pt"))  # nothing armed: torch's own path
    assert torch.load(workspace / "whole.pt")["w"].shape == (100,)
    arm("torn-write")
    torch.save({"w": torch.zeros(1000)}, str(workspace / "torn.pt"))
    assert died == [True]
    with pytest.raises(Exception):
        torch.load(workspace / "torn.pt")


def test_events_are_read_as_whole_lines_only(tmp_path):
    events = storage.StorageEvents(tmp_path)
    line = json.dumps({"kind": "disk-full", "key": "s1", "node": "node0", "file": "a", "rank": 0})
    (tmp_path / storage_faults.EVENTS_FILE).write_text(line + "\n" + line[:10])
    assert len(events.poll()) == 1
    with open(tmp_path / storage_faults.EVENTS_FILE, "a") as file:
        file.write(line[10:] + "\n")
    assert [e.file for e in events.poll()] == ["a"] and events.poll() == []
    with open(tmp_path / storage_faults.EVENTS_FILE, "a") as file:  # a line that is not an event is passed
        file.write('{"kind": "disk-full"}\n' + line.replace('"a"', '"b"') + "\n")
    assert [e.file for e in events.poll()] == ["b"]


def test_a_torn_write_that_cut_nothing_did_not_fire_and_one_that_did_says_where(tmp_path):
    lines = []
    scheduler = FaultScheduler((parse_fault("torn-write:node0@step=2"), parse_fault("torn-write:node1@step=3")),
                               inject=lambda f: f.node, progress_dir=tmp_path, say=lines.append,
                               record=lambda *a, **k: None)
    scheduler.fire_due(5.0, 3)
    scheduler.note(parse_fault("torn-write:node0@step=2"), "rank 0's write of a.pt was cut at byte 7 of 9")
    records = {r.spec: r for r in scheduler.records(9.0, 4, True)}
    assert records["torn-write:node0@step=2"].fired
    assert records["torn-write:node0@step=2"].describe().endswith(": rank 0's write of a.pt was cut at byte 7 of 9")
    assert not records["torn-write:node1@step=3"].fired
    assert "no worker of node1 wrote a file it reaches" in records["torn-write:node1@step=3"].reason


def test_chaos_aims_storage_faults_at_the_node_of_rank_0():
    schedule = draw_schedule(4, 3, (FaultAction.TORN_WRITE,), ["node0", "node1", "node2"],
                             Reference(last_step=30, job_s=30.0))
    assert [f.node for f in schedule] == ["node0"] * 3


def test_installing_wraps_both_builtins_open_and_io_open(tmp_path):
    """The hook's install wraps open for real: run in a child interpreter, so this one keeps its own."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import builtins, io, sys; sys.path.insert(0, %r);"
            "from orchestrate.node import storage_faults as s; f = s.install(%r, 'n');"
            "print(builtins.open is io.open, builtins.open.__wrapped__ is s._original_open)") % (root, str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_chaos_refuses_to_draw_a_partition_whose_groups_are_the_users_to_choose():
    from orchestrate.chaos.schedule import parse_kinds
    assert [kind.action for kind in parse_kinds("kill,torn-write")] == [FaultAction.KILL, FaultAction.TORN_WRITE]
    with pytest.raises(UsageError, match="chaos does not draw partitions"):
        parse_kinds("kill,partition")


def test_an_appended_file_is_torn_in_what_was_appended_only_and_reads_line_by_line(node, monkeypatch):
    faults, opener, arm, progress, workspace = node
    monkeypatch.setattr(storage_faults, "die_torn", lambda: None)
    (workspace / "log.txt").write_text("kept\n" * 20)  # 100 bytes before
    arm("torn-write", "log.txt")
    with opener(workspace / "log.txt", "a+") as file:
        file.write("new\n" * 50)
        file.seek(0)
        assert next(file) == "kept\n"
    assert 100 < (workspace / "log.txt").stat().st_size < 300
    assert (workspace / "log.txt").read_text().startswith("kept\n" * 20)


def test_a_save_whose_full_disk_only_its_close_meets_is_said_to_have_returned(node, monkeypatch):
    """A zipfile writer that leaves its last bytes in the file's buffer (no flush of its own): the
    full disk is met at the close, which the save outlives as torch's writer of a path does, and
    that is recorded as at a flush."""
    torch = pytest.importorskip("torch")
    faults, opener, arm, progress, workspace = node

    def writes_without_a_flush(obj, f, *args, **kwargs):
        f.write(b"x" * 10)

    monkeypatch.setattr(torch, "save", torch.save)
    monkeypatch.setattr(torch.serialization, "save", writes_without_a_flush)
    storage_faults.wrap_torch_save(faults)
    arm("disk-full", "*.pt")
    assert torch.save({"w": 1}, str(workspace / "tiny.pt")) is None
    events = storage.StorageEvents(progress, from_start=True).poll()
    assert [(e.file, e.returned) for e in events] == [("tiny.pt", False), ("tiny.pt", True)]


@pytest.mark.parametrize("size", [1, 100_000], ids=["in-the-buffer", "past-it"])
@pytest.mark.parametrize("by_place", [False, True], ids=["by-keyword", "by-place"])
def test_a_legacy_torch_save_meets_the_full_disk_as_torch_raises_it(node, monkeypatch, size, by_place):
    """torch's legacy writer (``_use_new_zipfile_serialization=False``) writes and closes the file
    in Python, and raises the full disk's OSError, small save or large, as on /dev/full; the hook
    took it for the zipfile writer's unchecked flush, returned None over an empty file, and
    recorded that torch returns there (a review of session 112)."""
    torch = pytest.importorskip("torch")
    faults, opener, arm, progress, workspace = node
    monkeypatch.setattr(torch, "save", torch.save)
    monkeypatch.setattr(torch.serialization, "save", torch.serialization.save)
    with pytest.raises(OSError) as on_dev_full:
        torch.save({"w": torch.zeros(size)}, "/dev/full", _use_new_zipfile_serialization=False)
    assert on_dev_full.value.errno == errno.ENOSPC  # torch's own, without the hook
    storage_faults.wrap_torch_save(faults)
    arm("disk-full", "*.pt")
    legacy = ((torch.serialization.pickle, 2, False), {}) if by_place else ((), {"_use_new_zipfile_serialization": False})
    with pytest.raises(OSError) as raised:
        torch.save({"w": torch.zeros(size)}, str(workspace / "old.pt"), *legacy[0], **legacy[1])
    assert raised.value.errno == errno.ENOSPC
    events = storage.StorageEvents(progress, from_start=True).poll()
    assert [(e.file, e.returned) for e in events] == [("old.pt", False)]


def test_an_event_the_hook_cannot_record_leaves_the_scripts_save_as_the_fault_makes_it(node, full_disk_torch,
                                                                                       monkeypatch, capsys):
    """The progress directory refuses the record (full, or read-only): the script's save still
    returns as torch's does on a full disk, not with an error of the hook's own record; the
    record's loss is said on stderr."""
    torch = full_disk_torch
    faults, opener, arm, progress, workspace = node
    faults.armed()  # (read while the directory still answers)
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(storage_faults.EVENTS_FILE):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(storage_faults.os, "open", refused)
    assert torch.save({"w": torch.zeros(1)}, str(workspace / "small.pt")) is None
    assert "ddp-compose: the disk-full fault of small.pt went unrecorded: [Errno 13] Permission denied" in (
        capsys.readouterr().err)


def test_a_full_disks_event_says_which_attempt_of_the_worker_group_met_it_and_when(node, monkeypatch):
    """torchrun numbers each restart in place of a node's worker group (TORCHELASTIC_RESTART_COUNT):
    the launcher reads it to know that a restarted attempt met the same full disk again."""
    faults, opener, arm, progress, workspace = node
    reader = storage.StorageEvents(progress)
    arm("disk-full", "*.pt")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    before = time.time()
    with pytest.raises(OSError):
        opener(workspace / "raw.pt", "wb", buffering=0).write(b"abc")
    [event] = reader.poll()
    assert event.attempt == 2 and event.time is not None and before <= event.time <= time.time()
