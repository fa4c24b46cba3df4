"""The files a job writes in its work directory, as the launcher follows them: what is walked,
what counts as written and when, how often it looks, and when it gives up."""
from __future__ import annotations

import os
from pathlib import Path

from orchestrate.supervise import workdir_writes
from orchestrate.supervise.workdir_writes import WorkdirWrites


def write(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    os.utime(path, (mtime, mtime))


def test_hidden_directories_caches_and_the_runs_directory_are_left_out(tmp_path):
    for name in ("ckpt/model.pt", "log.txt", ".git/objects/ab", ".cache/x", "__pycache__/m.pyc",
                 "src/__pycache__/n.pyc", "node_modules/p/index.js", "runs/20261202-1/node0.log", "runs/index.json",
                 "src/.hidden/y", "src/runs/kept.txt"):
        write(tmp_path / name, 1000.0)
    writes = WorkdirWrites(tmp_path, since=500.0, skip=[tmp_path / "runs"])
    writes.walk()
    # only the runs directory given is skipped, not another of that name; a hidden file is a write
    assert sorted(w.path for w in writes.files()) == ["ckpt/model.pt", "log.txt", "src/runs/kept.txt"]
    (tmp_path / ".env").write_text("x")
    os.utime(tmp_path / ".env", (1000.0, 1000.0))
    writes.walk()
    assert ".env" in [w.path for w in writes.files()]


def test_a_file_is_written_from_the_runs_start_on_with_its_modification_time_then(tmp_path):
    write(tmp_path / "before.txt", 499.0)
    write(tmp_path / "at.txt", 500.0)
    write(tmp_path / "after.pt", 700.5)
    writes = WorkdirWrites(tmp_path, since=500.0)
    writes.walk()
    assert [(w.path, w.time, w.kept) for w in writes.files()] == [("at.txt", 500.0, True), ("after.pt", 700.5, True)]
    os.utime(tmp_path / "before.txt", (800.0, 800.0))  # changed during the run: written now
    os.utime(tmp_path / "after.pt", (900.0, 900.0))  # written again: its first write's time stays
    writes.walk()
    assert [(w.path, w.time) for w in writes.files()] == [("at.txt", 500.0), ("after.pt", 700.5), ("before.txt", 800.0)]
    assert writes.latest() == "after.pt"  # the newest modification


def test_the_latest_write_is_the_newest_modification_not_the_newest_file(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "data").mkdir()
    writes = WorkdirWrites(tmp_path, since=0.0)
    (tmp_path / "ckpt" / "model.pt").write_text("1")
    os.utime(tmp_path / "ckpt" / "model.pt", (1000, 1000))
    writes.walk()
    (tmp_path / "data" / "downloaded.bin").write_text("x")
    os.utime(tmp_path / "data" / "downloaded.bin", (2000, 2000))
    writes.walk()
    assert writes.latest() == "data/downloaded.bin"
    os.utime(tmp_path / "ckpt" / "model.pt", (3000, 3000))  # saved again: the latest save
    writes.walk()
    assert writes.latest() == "ckpt/model.pt"
    assert [w.path for w in writes.files()] == ["ckpt/model.pt", "data/downloaded.bin"]  # first writes, in order


def test_a_file_gone_by_the_last_walk_is_written_but_not_kept(tmp_path):
    writes = WorkdirWrites(tmp_path, since=0.0)
    (tmp_path / "checkpoint.pt.tmp").write_text("1")
    writes.walk()  # caught between the write and the rename
    assert [(w.path, w.kept) for w in writes.files()] == [("checkpoint.pt.tmp", True)]
    (tmp_path / "checkpoint.pt.tmp").replace(tmp_path / "checkpoint.pt")
    writes.walk()
    assert sorted((w.path, w.kept) for w in writes.files()) == [("checkpoint.pt", True), ("checkpoint.pt.tmp", False)]
    (tmp_path / "checkpoint.pt.tmp").write_text("2")  # the next save's: there again
    writes.walk()
    assert sorted((w.path, w.kept) for w in writes.files()) == [("checkpoint.pt", True), ("checkpoint.pt.tmp", True)]


def test_a_file_gone_between_the_listing_and_its_stat_is_skipped_not_the_rest(tmp_path, monkeypatch):
    write(tmp_path / "a.pt", 1000.0)
    write(tmp_path / "b.pt", 1000.0)
    monkeypatch.setattr(workdir_writes.os, "walk", lambda root: iter([(str(root), [], ["gone.tmp", "a.pt", "b.pt"])]))
    writes = WorkdirWrites(tmp_path, since=0.0)
    writes.walk()
    assert [w.path for w in writes.files()] == ["a.pt", "b.pt"]


def test_it_looks_at_once_then_spends_at_most_about_5_percent_of_the_time_walking(tmp_path):
    write(tmp_path / "a.pt", 1000.0)
    ticks = iter([100.0, 100.5, 100.5,  # a walk of 0.5 s: the next 10 s after it
                  111.0, 111.01, 111.01])  # a walk of 10 ms: the next 2 s after it
    writes = WorkdirWrites(tmp_path, since=0.0, clock=lambda: next(ticks))
    writes.poll(0.0)  # the first poll walks
    assert [w.path for w in writes.files()] == ["a.pt"] and writes.next_at == 110.5
    write(tmp_path / "b.pt", 1000.0)
    writes.poll(110.4)
    assert [w.path for w in writes.files()] == ["a.pt"]  # not yet
    writes.poll(110.5)
    assert [w.path for w in writes.files()] == ["a.pt", "b.pt"] and writes.next_at == 113.01


def test_more_entries_than_it_walks_gives_up_and_says_nothing_of_the_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir_writes, "MAX_ENTRIES", 8)
    for name in ("a/1", "a/2", "a/3", "b/1", "b/2", "b/3"):  # 2 directories and 6 files: 8 entries
        write(tmp_path / name, 1000.0)
    writes = WorkdirWrites(tmp_path, since=0.0)
    writes.walk()
    assert len(writes.files()) == 6 and writes.followed
    write(tmp_path / "b" / "4", 1000.0)  # 9, over the limit
    writes.walk()
    assert (writes.followed, writes.files(), writes.latest()) == (False, None, None)
    (tmp_path / "b" / "4").unlink()
    writes.poll(1e9)  # no longer followed: never walked again
    assert writes.files() is None


def test_a_work_directory_that_is_not_there_is_not_followed(tmp_path):
    writes = WorkdirWrites(tmp_path / "missing", since=0.0)
    writes.poll(0.0)
    assert (writes.followed, writes.files(), writes.latest()) == (False, None, None)


def test_a_file_held_before_the_run_and_loaded_before_the_run_wrote_it_is_loaded_from_before(tmp_path):
    """A user trial: the first test's ckpt.pt stayed in the test file's directory, and the second test's job resumed
    from it ("resuming after step 6"), trained nothing and succeeded."""
    write(tmp_path / "ckpt.pt", 400.0)  # an earlier run's save
    write(tmp_path / "resaved.pt", 400.0)
    write(tmp_path / "pretrained.pt", 300.0)
    write(tmp_path / "fresh.pt", 600.0)  # this run's own
    writes = WorkdirWrites(tmp_path, since=500.0)
    writes.walk()
    os.utime(tmp_path / "resaved.pt", (650.0, 650.0))  # the run saved it before it loaded it
    writes.walk()
    loads = {"ckpt.pt": 620.0, "./resaved.pt": 700.0, "fresh.pt": 700.0, "/data/shard.pt": 510.0}
    assert writes.held_when_loaded(loads) == ("ckpt.pt",)
    # the fact, a shipped file too: the ddp_cluster fixture warns only of those written in its session
    assert writes.held_when_loaded({**loads, "pretrained.pt": 510.0}) == ("ckpt.pt", "pretrained.pt")
    os.utime(tmp_path / "ckpt.pt", (900.0, 900.0))  # saved again after the load: still loaded from before
    writes.walk()
    assert writes.held_when_loaded(loads) == ("ckpt.pt",)
    assert WorkdirWrites(tmp_path / "missing", since=0.0).held_when_loaded(loads) == ()
    # an attach, following from 500 s a job begun at 450 s: a file the job wrote at 460 s was not there before it
    write(tmp_path / "early.pt", 460.0)
    attached = WorkdirWrites(tmp_path, since=500.0, began=450.0)
    attached.walk()
    assert attached.held_when_loaded({"early.pt": 510.0, "pretrained.pt": 510.0}) == ("pretrained.pt",)


def test_a_dcp_checkpoint_directory_held_before_the_run_and_loaded_is_loaded_from_before(tmp_path):
    """A user trial: a job that dcp.loads an earlier run's ckpt/step_9/ was not noted, while the same job with
    torch.load was: DCP's load is said by its directory, and the walk holds files. Its .metadata tells."""
    from orchestrate.text import loaded_from_before

    for name in (".metadata", "__0_0.distcp", "__1_0.distcp"):
        write(tmp_path / "ckpt" / "step_9" / name, 400.0)  # an earlier run's save
        write(tmp_path / "ckpt" / "step_3" / name, 400.0)
    write(tmp_path / "ckpt.pt", 400.0)
    writes = WorkdirWrites(tmp_path, since=500.0)
    writes.walk()
    os.utime(tmp_path / "ckpt" / "step_3" / ".metadata", (650.0, 650.0))  # the run saved it again before it loaded it
    writes.walk()
    loads = {"ckpt/step_9": 620.0, "./ckpt/step_3": 700.0, "ckpt.pt": 610.0, "ckpt": 610.0}
    assert writes.held_when_loaded(loads) == ("ckpt.pt", "ckpt/step_9/")
    assert loaded_from_before(writes.held_when_loaded(loads)).startswith(
        "the job loaded ckpt.pt with torch.load and ckpt/step_9/ with dcp.load, which its work directory held before"
        " this run (")
    assert loaded_from_before(["ckpt/step_9/"]).startswith("the job loaded ckpt/step_9/ with dcp.load, which its")


def test_the_launcher_notes_a_file_held_before_the_run_that_a_rank_loaded_and_the_record_keeps_it(tmp_path,
                                                                                                    monkeypatch):
    import json

    from orchestrate.node import progress
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.summary import format_summary
    from orchestrate.supervise.progress import ProgressWatch

    work, channel = tmp_path / "work", tmp_path / "progress"
    channel.mkdir()
    write(work / "ckpt.pt", 400.0)
    writes = WorkdirWrites(work, since=500.0)
    writes.walk()
    monkeypatch.setenv("DDP_PROGRESS_DIR", str(channel))
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(progress, "_channel", None)  # another worker process
        progress.report_loaded("ckpt.pt")
        progress.report_loaded("")  # a stream: no file
    watch = ProgressWatch(channel, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert list(watch.loaded) == ["ckpt.pt"]
    result = RunResult("r1", tmp_path, [], Timings(), loaded_from_before=writes.held_when_loaded(watch.loaded))
    notes = [line for line in format_summary(result).splitlines() if line.startswith("note: the job loaded")]
    # the fact, with advice that fits a file shipped for the job too (a review: "remove it before the run" did not)
    assert notes == ["note: the job loaded ckpt.pt with torch.load, which its work directory held before this run"
                     " (an earlier run's save? where the job should not resume from it, remove it or give each run a"
                     " directory of its own)"]
    assert json.loads(json.dumps(outcome_record(result)))["loaded_from_before"] == ["ckpt.pt"]


def test_a_run_says_the_files_its_job_loaded_that_the_work_directory_held_before_it(make_run, tmp_path):
    """The supervisor's part, on the fake engine: the work directory (tmp_path) held ckpt.pt from an earlier run."""
    import json
    import time

    from tests.fakes import FakeDockerClient, Script
    from tests.unit.test_launcher import run

    write(tmp_path / "ckpt.pt", 400.0)
    job = make_run(nodes=1)

    def resumes() -> None:
        # its own, loaded after it wrote it: not from before (dated past the launcher's start, which a loaded machine
        # may bring after the fake node's script)
        write(tmp_path / "final.pt", time.time() + 60.0)
        with open(job.run_dir / "progress" / "rank0.jsonl", "a") as handle:
            for path in ("ckpt.pt", "final.pt"):
                handle.write(json.dumps({"rank": 0, "loaded": path, "time": time.time() + 61.0}) + "\n")
    result, _, _ = run(job, FakeDockerClient(), node0=[Script(["[0|0]:resuming after step 6"], then=resumes)])
    assert result.succeeded and result.loaded_from_before == ("ckpt.pt",)
