"""The summary printed at the end of every run."""
from __future__ import annotations

import signal
from typing import Optional

from orchestrate.outcome.judge import died_at_exit
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.states import NodePhase
from orchestrate.text import format_table


def format_summary(outcome: RunResult) -> str:
    """Render the table printed at the end of every run, followed by its verdict."""
    header = ("node", "ranks", "state", "exit code", "wall time")
    rows = [
        (
            r.node.name,
            ",".join(str(g) for g in r.node.global_ranks) or "elastic",
            r.state.value,
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.wall_s:.1f} s",
        )
        for r in outcome.results
    ]
    t = outcome.timings
    def seconds(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.1f} s"

    lines = ["", f"=== run {outcome.run_id} summary ===", *format_table(header, rows)]
    lines.append(
        f"bring-up {seconds(t.bring_up_s)} | rendezvous {seconds(t.rendezvous_s)} | job {t.job_s:.1f} s"
        f" | teardown {seconds(t.teardown_s)}"
    )
    for recovery in t.recoveries:
        lines.append(f"recovery: {recovery.describe()}")
    lines.append(f"logs: {outcome.run_dir}")
    if outcome.teardown_error:
        lines.append(f"TEARDOWN FAILED: {outcome.teardown_error}")
    if outcome.succeeded:
        lines.append(f"SUCCEEDED: all {len(outcome.results)} nodes exited 0")
        return "\n".join(lines)
    if outcome.interrupted:
        lines.append(f"INTERRUPTED by {signal.Signals(outcome.signal_number).name}: every node was stopped")
    elif outcome.error:
        lines.append(f"FAILED: {outcome.error}")
    failure = outcome.failure
    if failure is not None:
        lines.append(f"FAILED: {failure.describe()}")
        others = [r for r in outcome.results
                  if r.state is NodePhase.FAILED and r.node.name != failure.node and r.root_cause]
        for other in others:
            lines.append(f"  then {other.node.name} rank {other.root_cause.rank}:"
                         f" {other.root_cause.exception or 'exit code ' + str(other.exit_code)}")
        advice = died_at_exit(outcome)
        if advice:
            lines.append(advice)
        if failure.traceback:
            lines.append(f"traceback from the error file of {failure.node}/rank{failure.rank}:")
            lines += [f"  | {ln}" for ln in failure.traceback.rstrip().splitlines()[-15:]]
        elif failure.last_lines:
            lines.append(f"last lines of {failure.node}" + (
                f"/rank{failure.rank}:" if failure.rank is not None else ":"))
            lines += [f"  | {ln}" for ln in failure.last_lines]
    elif not outcome.interrupted and not outcome.error:
        lines.append("FAILED: not every node exited 0")
    return "\n".join(lines)
