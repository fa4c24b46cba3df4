"""Tearing a run down and closing its record."""
from __future__ import annotations

from typing import Any, Callable, Optional

from tenacity import (
    RetryCallState,
    Retrying,
    TryAgain,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from orchestrate.engine.compose_cli import ComposeProject
from orchestrate.errors import OrchestrateError
from orchestrate.interrupts import uninterrupted
from orchestrate.outcome.events import record_event
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.record import write_outcome
from orchestrate.report.helper import ReportHelper

# Attempts at `docker compose down`, and the backoff between them: an engine that went away
# for a moment (a daemon restart) is waited for about half a minute; no new attempt starts
# after TEARDOWN_GIVE_UP_S, so a hung engine costs minutes, not each attempt's whole limit.
TEARDOWN_ATTEMPTS = 5
TEARDOWN_BACKOFF = wait_exponential(multiplier=1, min=1, max=15)
TEARDOWN_GIVE_UP_S = 90.0


def teardown(compose: ComposeProject, say: Callable[[str], Any]) -> str:
    """Remove the project, retrying while the engine does not answer; an interrupt during the
    teardown does not stop it.

    Returns:
        "" when it was removed, else what went wrong and how to remove it by hand.
    """
    def down() -> None:
        try:
            compose.down()
        except KeyboardInterrupt:
            say("teardown in progress; please wait")
            raise TryAgain from None

    def said(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is not None and not isinstance(exc, TryAgain):
            say(f"teardown attempt {state.attempt_number} failed: {exc}")

    try:
        Retrying(stop=stop_after_attempt(TEARDOWN_ATTEMPTS) | stop_after_delay(TEARDOWN_GIVE_UP_S),
                 wait=TEARDOWN_BACKOFF, after=said,
                 retry=retry_if_exception_type((OrchestrateError, TryAgain)), reraise=True)(down)
        return ""
    except (OrchestrateError, TryAgain):
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

    helped = False
    try:
        uninterrupted(write_outcome, result)
        uninterrupted(record_event, result.run_dir, "run-ended", **end_fields(result))
        helped = helper is not None and uninterrupted(helper.request, result.run_dir)
    finally:  # the teardown, whatever the record did
        started = clock()
        if compose is not None:
            result.teardown_error = uninterrupted(teardown, compose, say)
        result.timings.teardown_s = clock() - started
    drawn = helped and uninterrupted(helper.wait)  # type: ignore[union-attr]
    uninterrupted(write_outcome, result)  # only now: the helper read the first one
    if result.teardown_error:
        uninterrupted(record_event, result.run_dir, "teardown-failed", error=result.teardown_error,
                      exit_code=result.exit_code)
    if not drawn or result.teardown_error:
        uninterrupted(write_report_quietly, result.run_dir)
