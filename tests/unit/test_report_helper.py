"""The report helper: a real process that writes a run's report page while the launcher tears down."""
from __future__ import annotations

import json
import os
import signal

from orchestrate.launch.teardown import finish_while_tearing_down
from orchestrate.outcome.model import RunResult, Timings
from orchestrate.report.helper import ReportHelper
from tests.unit.test_report import plan, started


def a_run_dir(tmp_path, name: str = "20261121-101010-abcdef"):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(plan()))
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in started()) + "\n")
    return run_dir


def test_the_helper_writes_the_page_it_is_asked_for_then_exits(tmp_path):
    run_dir = a_run_dir(tmp_path)
    with ReportHelper.start() as helper:
        assert helper.proc is not None and os.getsid(helper.proc.pid) != os.getsid(0)  # Ctrl-C is not its own
        assert helper.request(run_dir)
        assert not helper.request(run_dir)  # one page per helper
        assert helper.wait()
    assert helper.proc.returncode == 0
    assert "One lane per node" in (run_dir / "report.html").read_text()


def test_a_helper_never_asked_ends_at_once_when_closed(tmp_path):
    helper = ReportHelper.start()
    helper.close()  # a run that failed before its end: nothing to wait for
    assert helper.proc.returncode == -signal.SIGKILL
    assert not helper.request(a_run_dir(tmp_path))  # too late: the launcher draws it itself


def test_a_helper_that_cannot_write_the_page_says_so(tmp_path):
    with ReportHelper.start() as helper:
        assert helper.request(tmp_path / "gone")
        assert not helper.wait()


class FailingHelper(ReportHelper):
    """Takes the request, then writes nothing (as a helper killed meanwhile would)."""

    def __init__(self) -> None:
        super().__init__(None)

    def request(self, run_dir):
        self.requested = True
        return True

    def wait(self, timeout_s: float = 120.0) -> bool:
        return False


def test_the_launcher_draws_the_page_itself_when_the_helper_fails_or_is_missing(tmp_path):
    for i, helper in enumerate((FailingHelper(), ReportHelper(None), None)):
        run_dir = a_run_dir(tmp_path, f"run{i}")
        outcome = RunResult("r1", run_dir, [], Timings())
        finish_while_tearing_down(outcome, None, print, lambda: 0.0, helper)
        assert "One lane per node" in (run_dir / "report.html").read_text(), helper
        assert json.loads((run_dir / "outcome.json").read_text())["run_id"] == "r1"
