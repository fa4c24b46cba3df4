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
from orchestrate.hangs.crash_dump import remove_empty_dumps
from orchestrate.interrupts import uninterrupted
from orchestrate.outcome.events import record_event
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.record import write_outcome

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
        exc = state.outcome.exception()  # called after an attempt: it has an outcome
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
    """The run's last event, then its report page (neither may fail the run), and no empty
    crash file left."""
    from orchestrate.report.page import end_record

    end_record(result.run_dir, **end_fields(result))
    remove_empty_dumps(result.run_dir)  # the run has ended: what none of its workers wrote to


def tear_down_and_record(result: RunResult, compose: Optional[ComposeProject], say: Callable[[str], Any],
                         clock: Callable[[], float]) -> None:
    """Remove the nodes (unless ``compose`` is None: ``--keep``), then finish the run's record.

    ``outcome.json`` and the ``run-ended`` event are written before the teardown, so that a
    teardown cut short leaves them; ``outcome.json`` is written again with the teardown's time,
    and the report page (about 2 ms of drawing) last. A teardown that fails changes the exit
    code, and the record then says so.
    """
    from orchestrate.report.page import write_report_quietly

    try:
        uninterrupted(write_outcome, result)
        uninterrupted(record_event, result.run_dir, "run-ended", **end_fields(result))
    finally:  # the teardown, whatever the record did
        started = clock()
        if compose is not None:  # (--keep: nothing is torn down, and no time is said for it)
            result.teardown_error = uninterrupted(teardown, compose, say)
            result.timings.teardown_s = clock() - started
    uninterrupted(write_outcome, result)
    if compose is not None:  # its workers are gone: what none of them wrote to (--keep: a kept node may run on)
        uninterrupted(remove_empty_dumps, result.run_dir)
    if result.teardown_error:
        uninterrupted(record_event, result.run_dir, "teardown-failed", error=result.teardown_error,
                      exit_code=result.exit_code)
    uninterrupted(write_report_quietly, result.run_dir)
