"""The progress channel: workers report steps, fault steps make them wait, the launcher reads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import orchestrate.node.progress as progress
from orchestrate.faults.scheduler import mark_fired, write_triggers
from orchestrate.node import worker_start
from orchestrate.outcome.progress import ProgressReader


@pytest.mark.parametrize("progress_dir", [None, "missing"])
def test_report_writes_nothing_outside_ddp_compose(tmp_path, monkeypatch, progress_dir):
    # A script that reports its steps runs unchanged under plain torchrun: nothing is
    # written anywhere, and a step that would be a fault's trigger does not wait.
    monkeypatch.chdir(tmp_path)
    if progress_dir is None:
        monkeypatch.delenv("DDP_PROGRESS_DIR", raising=False)
    else:
        monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path / progress_dir))
    monkeypatch.setattr(progress, "_channel", None)
    started = time.monotonic()
    for step in range(3):
        progress.report(step, loss=0.1)
    progress.report_resumed(1)
    assert time.monotonic() - started < 1.0
    assert list(tmp_path.iterdir()) == []


def test_steps_and_resumes_reach_the_reader_and_torn_lines_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(progress, "_channel", None)
    reader = ProgressReader(tmp_path)
    progress.report_resumed(8)
    progress.report(9, loss=0.25)
    with open(tmp_path / "rank3.jsonl", "a") as handle:
        handle.write('{"rank": 3, "step": 10, "ti')  # a line still being written
    records = reader.poll()
    assert [(r.rank, r.resumed, r.step) for r in records] == [(3, 8, None), (3, None, 9)]
    assert records[1].metrics == {"loss": 0.25}
    with open(tmp_path / "rank3.jsonl", "a") as handle:
        handle.write('me": 5.0}\n')
    assert [r.step for r in reader.poll()] == [10]


def test_counted_steps_and_resumes_keep_the_time_they_were_taken_and_say_they_were_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(progress, "_channel", None)
    progress.report_resumed_at(3, 1000.25)
    progress.report_counted(4, 1000.25)
    progress.report_counted(5, 1002.5)
    records = ProgressReader(tmp_path).poll()
    assert [(r.resumed, r.step, r.time, r.counted) for r in records] == [
        (3, None, 1000.25, False), (None, 4, 1000.25, True), (None, 5, 1002.5, True)]


def test_a_finished_rank_says_after_which_step_and_is_no_step_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(progress, "_channel", None)
    progress.report(4)
    progress.report(5)
    progress.report_finished()
    records = ProgressReader(tmp_path).poll()
    assert [(r.step, r.finished, r.after_step, r.metrics) for r in records] == [
        (4, False, None, {}), (5, False, None, {}), (None, True, 5, {})]
    monkeypatch.setattr(progress, "_channel", None)
    (tmp_path / "rank1.jsonl").unlink()
    progress.report_finished()  # a script that reported no step
    assert [(r.finished, r.after_step) for r in ProgressReader(tmp_path).poll()] == [(True, None)]


@pytest.mark.parametrize("ending, code, finished", [
    ("pass", 0, True), ("sys.exit(0)", 0, True), ("sys.exit()", 0, True), ("sys.exit(False)", 0, True),
    ("sys.exit(3)", 3, False), ("sys.exit(0.0)", 1, False), ("sys.exit('no data')", 1, False),
    ("raise ValueError('bad batch')", 1, False),
    ("import os; os._exit(0)", 0, True), ("import os; os._exit(4)", 4, False),
    # a forked child (a DataLoader worker) that ends by os._exit(0) is not the rank finishing
    ("import os\nif os.fork() == 0: os._exit(0)\nos.wait(); os._exit(5)", 5, False),
])
def test_the_hook_says_a_script_finished_only_when_it_returned_or_exited_0(tmp_path, ending, code, finished):
    (tmp_path / "job.py").write_text(f"import sys\nfrom orchestrate.node.progress import report\nreport(7)\n{ending}\n")
    env = {**os.environ, "DDP_PROGRESS_DIR": str(tmp_path), "RANK": "2",
           "PYTHONPATH": str(Path(worker_start.__file__).parents[2])}
    done = subprocess.run([sys.executable, worker_start.__file__, "--", "job.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == code, done.stderr
    records = ProgressReader(tmp_path).poll()
    assert [r.step for r in records if not r.finished] == [7]
    assert [(r.rank, r.after_step) for r in records if r.finished] == ([(2, 7)] if finished else [])


def test_a_finished_rank_says_how_many_collectives_it_made_in_each_group_but_its_point_to_point_ones(tmp_path):
    """The launcher compares them across the ranks of a run that succeeded: the hook says them with
    its finished record (a stand-in torch.distributed here, wrapped as torch's own is)."""
    c10d = tmp_path / "torch" / "distributed"
    c10d.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (c10d / "distributed_c10d.py").write_text(
        "def init_process_group(*args, **kwargs):\n    return None\n\n\n"
        "def all_reduce(tensor, op=None, group=None, async_op=False):\n    return None\n\n\n"
        "def barrier(group=None, async_op=False, device_ids=None):\n    return None\n\n\n"
        "def send(tensor, dst=None, group=None, tag=0):\n    return None\n")
    (c10d / "__init__.py").write_text("from torch.distributed.distributed_c10d import *\n")
    (tmp_path / "job.py").write_text("import torch.distributed as dist\ndist.all_reduce([1.0])\n"
                                     "dist.send([1.0], dst=0)\ndist.barrier()\n")
    env = {**os.environ, "DDP_PROGRESS_DIR": str(tmp_path), "RANK": "1", "WORLD_SIZE": "2",
           "PYTHONPATH": str(Path(worker_start.__file__).parents[2])}
    done = subprocess.run([sys.executable, worker_start.__file__, "--", "job.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    [finished] = [r for r in ProgressReader(tmp_path).poll() if r.finished]
    assert finished.collectives == {"counts": {"default": 2}, "world": "2", "calls": [
        ["default", 1, "all_reduce", "", "job.py:2"], ["default", 2, "barrier", "", "job.py:4"]]}


def test_a_rank_at_a_fault_step_waits_until_the_fault_is_injected(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(progress, "_channel", None)
    write_triggers(tmp_path, [12])
    progress.report(11)  # not a fault step: returns at once
    released = threading.Event()

    def worker() -> None:
        progress.report(12)
        released.set()

    threading.Thread(target=worker, daemon=True).start()
    assert not released.wait(0.3)  # waiting at step 12
    assert json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[-1])["step"] == 12  # reported first
    mark_fired(tmp_path, 12)
    assert released.wait(2)


def test_a_rank_that_never_reports_a_fault_step_waits_at_the_first_step_past_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(progress, "_channel", None)
    write_triggers(tmp_path, [0, 15])  # @step=0 on steps counted from 1; @step=15 on every tenth step reported

    def reports_in_a_thread(*steps: int) -> threading.Event:
        released = threading.Event()

        def worker() -> None:
            for step in steps:
                progress.report(step)
            released.set()

        threading.Thread(target=worker, daemon=True).start()
        return released

    released = reports_in_a_thread(1)
    assert not released.wait(0.3)  # its first step is past step 0: it waits there
    mark_fired(tmp_path, 0)
    assert released.wait(2)
    released = reports_in_a_thread(10, 20)
    assert not released.wait(0.3)  # step 10 is short of 15: it waits at step 20
    assert json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[-1])["step"] == 20
    mark_fired(tmp_path, 15)
    assert released.wait(2)
    assert reports_in_a_thread(25, 30).wait(2)  # each fault step is waited for once
    monkeypatch.setattr(progress, "_channel", None)  # a later attempt, resumed past both: they fired
    assert reports_in_a_thread(31).wait(2)


def test_a_fault_step_the_launcher_never_marks_is_waited_out_once_not_at_every_later_step(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(progress, "_channel", None)
    write_triggers(tmp_path, [4])  # a fault the stop of the run cancelled: never marked fired
    waited: list[str] = []
    monkeypatch.setattr(progress._Channel, "wait_for_fault", lambda self, key: waited.append(key))
    for step in (3, 5, 6, 7):
        progress.report(step)
    assert waited == ["4"]


def test_a_rank_waits_at_its_nth_step_in_an_attempt_listed_before_it_began_and_records_carry_the_attempt(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    write_triggers(tmp_path, [], [(2, "a1")])
    monkeypatch.setattr(progress, "_channel", None)  # a new worker process: a new attempt
    progress.report(7)  # resumed at 7: its first step here
    released = threading.Event()

    def worker() -> None:
        progress.report(7)  # the same step again is not a second one
        progress.report(8)
        released.set()

    threading.Thread(target=worker, daemon=True).start()
    assert not released.wait(0.3)  # waiting at its second step
    mark_fired(tmp_path, "a1")
    assert released.wait(2)
    records = ProgressReader(tmp_path).poll()
    assert [r.step for r in records] == [7, 7, 8] and len({r.attempt for r in records}) == 1 and records[0].attempt
    monkeypatch.setattr(progress, "_channel", None)
    progress.report(1)
    assert ProgressReader(tmp_path).poll()[-1].attempt != records[0].attempt
