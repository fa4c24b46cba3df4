"""The end of a foreground run: the nodes are removed, then the record is finished (outcome, the
``run-ended`` event, the report page), in the launcher's own process."""
from __future__ import annotations

import json

from orchestrate.errors import OrchestrateError
import orchestrate.launch.teardown as teardown_steps
from orchestrate.launch.teardown import tear_down_and_record
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
