"""The end of a foreground run: the nodes are removed, then the record is finished (outcome, the
``run-ended`` event, the report page), in the launcher's own process."""
from __future__ import annotations

import json

import pytest

from orchestrate.errors import OrchestrateError
import orchestrate.launch.teardown as teardown_steps
from orchestrate.launch.teardown import tear_down_and_record
from orchestrate.outcome.events import read_events
from orchestrate.outcome.model import RunResult, Timings
from tests.unit.test_report import plan, started


def a_run_dir(tmp_path):
    run_dir = tmp_path / "20261121-101010-abcdef"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(plan()))
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in started()) + "\n")
    return run_dir


class Compose:
    """A project whose removal is recorded (or fails, as an engine that never answers would)."""

    project_name = "ddp-r1"

    def __init__(self, run_dir, fails: bool = False) -> None:
        self.run_dir, self.fails, self.seen_at_down = run_dir, fails, []

    def down(self) -> None:
        self.seen_at_down = sorted(p.name for p in self.run_dir.iterdir())
        if self.fails:
            raise OrchestrateError("engine gone")


def events(run_dir) -> list[str]:
    return [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_the_outcome_is_written_before_the_teardown_and_the_page_after_it(tmp_path):
    run_dir = a_run_dir(tmp_path)
    compose = Compose(run_dir)
    clock = iter([10.0, 12.5])
    tear_down_and_record(RunResult("r1", run_dir, [], Timings()), compose, print, lambda: next(clock))
    assert "outcome.json" in compose.seen_at_down and "report.html" not in compose.seen_at_down
    assert events(run_dir)[-1] == "run-ended"
    outcome = json.loads((run_dir / "outcome.json").read_text())
    assert outcome["run_id"] == "r1" and outcome["timings"]["teardown_s"] == 2.5  # written again after it
    assert "One lane per node" in (run_dir / "report.html").read_text()


def test_a_failed_teardown_is_recorded_and_the_page_still_written(tmp_path, monkeypatch):
    monkeypatch.setattr(teardown_steps, "TEARDOWN_ATTEMPTS", 1)
    run_dir = a_run_dir(tmp_path)
    result = RunResult("r1", run_dir, [], Timings())
    tear_down_and_record(result, Compose(run_dir, fails=True), print, lambda: 0.0)
    assert result.teardown_error.startswith("could not remove project ddp-r1")
    assert events(run_dir)[-2:] == ["run-ended", "teardown-failed"]
    assert "One lane per node" in (run_dir / "report.html").read_text()


def last_event(run_dir, kind: str) -> dict:
    entry = [e for e in read_events(run_dir) if e["event"] == kind][-1]
    return {k: v for k, v in entry.items() if k not in ("time", "event")}


def test_the_records_last_events_carry_how_the_run_ended(tmp_path, monkeypatch):
    monkeypatch.setattr(teardown_steps, "TEARDOWN_ATTEMPTS", 1)
    run_dir = a_run_dir(tmp_path)
    result = RunResult("r1", run_dir, [], Timings(), error="compose up failed", error_exit_code=2)
    tear_down_and_record(result, Compose(run_dir, fails=True), print, lambda: 0.0)
    assert last_event(run_dir, "run-ended") == {"exit_code": 2, "succeeded": False, "interrupted": False,
                                                "error": "compose up failed"}
    assert last_event(run_dir, "teardown-failed") == {
        "error": "could not remove project ddp-r1; run: docker compose -p ddp-r1 down -v", "exit_code": 2}


def test_a_run_followed_to_its_end_from_another_terminal_gets_its_last_event_and_page(tmp_path):
    run_dir = a_run_dir(tmp_path)
    teardown_steps.finish_record(RunResult("r1", run_dir, [], Timings(), interrupted=True, signal_number=15))
    assert last_event(run_dir, "run-ended") == {"exit_code": 143, "succeeded": False, "interrupted": True,
                                                "error": ""}
    assert "One lane per node" in (run_dir / "report.html").read_text()


class Flaky:
    """An engine that fails ``failures`` removals, then removes the project."""

    project_name = "ddp-r1"

    def __init__(self, failures: int, error: BaseException = OrchestrateError("engine gone")) -> None:
        self.failures, self.error, self.attempts = failures, error, 0

    def down(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error


def test_a_teardown_retries_with_a_backoff_and_says_each_failed_attempt(monkeypatch):
    waits = []

    def backoff(state) -> float:  # what tenacity asks between attempts
        waits.append(state.attempt_number)
        return 0.0

    monkeypatch.setattr(teardown_steps, "TEARDOWN_BACKOFF", backoff)
    compose, said = Flaky(2), []
    assert teardown_steps.teardown(compose, said.append) == ""
    assert compose.attempts == 3 and waits == [1, 2]
    assert said == ["teardown attempt 1 failed: engine gone", "teardown attempt 2 failed: engine gone"]


def test_a_bug_in_the_teardown_is_raised_at_once_not_retried(monkeypatch):
    monkeypatch.setattr(teardown_steps, "TEARDOWN_BACKOFF", __import__("tenacity").wait_none())
    compose = Flaky(5, TypeError("a bug of ours"))
    with pytest.raises(TypeError, match="a bug of ours"):
        teardown_steps.teardown(compose, print)
    assert compose.attempts == 1  # only an engine that did not answer is asked again


def test_the_crash_files_no_worker_wrote_to_are_gone_after_the_run_and_a_written_one_stays(tmp_path):
    """A worker ended by SIGKILL (or by SIGTERM its script handles) leaves the empty files its
    hook opened as it began: once the run has ended they are removed, whichever end records it;
    not where its nodes were kept (--keep), whose workers may still write to them."""
    from orchestrate.hangs.snapshots import debug_dir
    from orchestrate.launch.teardown import finish_record

    def torn_down(result: RunResult) -> None:  # a foreground run's end
        tear_down_and_record(result, Compose(result.run_dir), print, lambda: 0.0)

    def kept(result: RunResult) -> None:  # --keep: no project to remove
        tear_down_and_record(result, None, print, lambda: 0.0)
        assert result.timings.teardown_s is None  # no teardown, so no time for it (it said "teardown 0.0 s")

    for finish in (torn_down, finish_record, kept):  # finish_record: the end a follower of a detached run records
        (tmp_path / finish.__name__).mkdir()
        run_dir = a_run_dir(tmp_path / finish.__name__)
        debug = debug_dir(run_dir)
        debug.mkdir(parents=True)
        for name in ("rank0.crash", "rank1.crash", "rank1.stopped", "rank0.crash.1", "rank2.snapshot.json"):
            (debug / name).write_text("")
        (debug / "rank1.crash").write_text("Fatal Python error: Segmentation fault\n")
        (debug / "rank0.stopped").write_text('Thread 0x1 (most recent call first):\n  File "t.py", line 3 in f\n')
        finish(RunResult("r1", run_dir, [], Timings()))
        left = ["rank0.crash.1", "rank0.stopped", "rank1.crash", "rank2.snapshot.json"]
        if finish is kept:
            left = ["rank0.crash", *left[:3], "rank1.stopped", left[3]]
        assert sorted(p.name for p in debug.iterdir()) == left, finish.__name__
