"""Tearing a run down and closing its record."""
from __future__ import annotations

from typing import Any, Callable, Optional

from orchestrate.engine.compose_cli import ComposeProject
from orchestrate.errors import OrchestrateError
from orchestrate.outcome.events import record_event
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.record import write_outcome
from orchestrate.report.helper import ReportHelper


def teardown(compose: ComposeProject, say: Callable[[str], Any]) -> str:
    """Remove the project; a second Ctrl-C during teardown does not stop it.

    Returns:
        "" when it was removed, else what went wrong and how to remove it by hand.
    """
    for attempt in range(3):
        try:
            compose.down()
            return ""
        except KeyboardInterrupt:
            say("teardown in progress; please wait")
        except OrchestrateError as exc:
            say(f"teardown attempt {attempt + 1} failed: {exc}")
    return (f"could not remove project {compose.project_name}; run:"
            f" docker compose -p {compose.project_name} down -v")


def end_fields(result: RunResult) -> dict[str, Any]:
    """The ``run-ended`` event's fields."""
    return {"exit_code": result.exit_code, "succeeded": result.succeeded, "interrupted": result.interrupted,
            "error": result.error}


def finish_record(result: RunResult) -> None:
    """The run's last event, then its report page (neither may fail the run)."""
    from orchestrate.report.page import end_record

    end_record(result.run_dir, **end_fields(result))


def finish_while_tearing_down(result: RunResult, compose: Optional[ComposeProject], say: Callable[[str], Any],
                              clock: Callable[[], float], helper: Optional[ReportHelper] = None) -> None:
    """Remove the nodes (unless ``compose`` is None: ``--keep``) while the run's record is finished.

    The record (``outcome.json``, the ``run-ended`` event, the report page) needs no node, and
    drawing the report is CPU work while the removal is the engine's: the report helper draws
    it meanwhile, which keeps it off the run's wall time. Without a helper, or when it fails,
    this process draws it after the teardown. ``outcome.json`` is written again with the
    teardown's time; a teardown that fails changes the exit code, and the record then says so.
    """
    from orchestrate.report.page import write_report_quietly

    write_outcome(result)
    record_event(result.run_dir, "run-ended", **end_fields(result))
    helped = helper is not None and helper.request(result.run_dir)
    started = clock()
    if compose is not None:
        result.teardown_error = teardown(compose, say)
    result.timings.teardown_s = clock() - started
    drawn = helped and helper.wait()  # type: ignore[union-attr]
    write_outcome(result)  # only now: the helper read the first one
    if result.teardown_error:
        record_event(result.run_dir, "teardown-failed", error=result.teardown_error, exit_code=result.exit_code)
    if not drawn or result.teardown_error:
        write_report_quietly(result.run_dir)
