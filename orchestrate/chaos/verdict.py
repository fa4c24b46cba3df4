"""The chaos verdict (pure): it holds only if the disturbed job completed, every scheduled
fault fired, and every compared file matches the undisturbed run's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from orchestrate.outcome.model import FaultRecord, RunResult
from orchestrate.text import format_table


@dataclass(frozen=True)
class FileComparison:
    """One ``--compare`` file of the two runs: ``kind`` is ``tensors`` (compared with torch.load,
    ``max_difference`` its largest absolute difference, ``where`` the key it is at) or
    ``bytes``; ``problem`` says what could not be compared (a missing file)."""

    path: str
    kind: str
    equal: bool
    max_difference: Optional[float] = None
    where: str = ""
    problem: str = ""

    def describe(self) -> str:
        if self.problem:
            return f"{self.path}: {self.problem}"
        if self.kind == "bytes":
            return f"{self.path}: {'identical' if self.equal else 'differs'} (bytes)"
        at = f" at {self.where}" if self.where else ""
        return (f"{self.path}: {'matches' if self.equal else 'differs'} (tensors; largest difference"
                f" {self.max_difference:.3g}{at})")


@dataclass
class ChaosVerdict:
    """The check's result: the two runs, the schedule, the comparisons."""

    seed: int
    reference: RunResult
    disturbed: Optional[RunResult]
    schedule: list[str]
    comparisons: list[FileComparison] = field(default_factory=list)
    rtol: float = 0.0

    @property
    def failures(self) -> list[str]:
        """Why the verdict does not hold, one line each (none: it holds)."""
        reasons = []
        if not self.reference.succeeded:
            reasons.append(f"the undisturbed run failed (exit code {self.reference.exit_code}): nothing to compare with")
        if self.disturbed is None:
            return reasons
        if not self.disturbed.job_succeeded:
            failure = self.disturbed.failure
            reasons.append("the job did not complete under the faults"
                           + (f": {failure.describe()}" if failure else f" (exit code {self.disturbed.exit_code})"))
        reasons += [f"fault {f.describe()}" for f in self.disturbed.unfired_faults]
        reasons += [f"{c.describe()}" for c in self.comparisons if not c.equal]
        return reasons

    @property
    def holds(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.holds else 1

    @property
    def steps_lost(self) -> Optional[int]:
        lost = [r.steps_lost for r in self.disturbed.recoveries] if self.disturbed else []
        return sum(s for s in lost if s is not None) if lost and any(s is not None for s in lost) else None

    @property
    def time_lost_s(self) -> Optional[float]:
        if self.disturbed is None:
            return None
        return self.disturbed.timings.job_s - self.reference.timings.job_s

    def fault_rows(self) -> list[tuple[str, ...]]:
        records: dict[str, FaultRecord] = {f.spec: f for f in (self.disturbed.faults if self.disturbed else [])}
        rows = []
        for spec in self.schedule:
            record = records.get(spec)
            if record is None or not record.fired:
                rows.append((spec, "no", "-", "-", record.reason if record else "the run did not get there"))
            else:
                rows.append((spec, "yes", f"{record.elapsed_s:.1f} s", "-" if record.step is None else str(record.step), ""))
        return rows

    def format(self) -> str:
        """The table and the verdict, as ``chaos`` prints them."""
        lines = ["", f"=== chaos check (seed {self.seed}) ==="]
        lines += format_table(("fault", "fired", "at", "at step", "why not"), self.fault_rows())
        if self.disturbed is not None:
            for recovery in self.disturbed.recoveries:
                lines.append(f"recovery: {recovery.describe()}")
            lost = self.steps_lost
            lines.append(f"recoveries {len(self.disturbed.recoveries)} | steps lost {'-' if lost is None else lost}"
                         f" | time lost {self.time_lost_s:+.1f} s (job {self.disturbed.timings.job_s:.1f} s against"
                         f" {self.reference.timings.job_s:.1f} s undisturbed)")
        for comparison in self.comparisons:
            lines.append(f"compared {comparison.describe()}")
        lines.append(f"runs: undisturbed {self.reference.run_dir}"
                     + (f", with faults {self.disturbed.run_dir}" if self.disturbed else ""))
        if self.holds:
            lines.append(f"VERDICT HOLDS: the job survived {len(self.schedule)} fault(s) and ended where the"
                         " undisturbed run ended")
        else:
            lines.append("VERDICT DOES NOT HOLD:")
            lines += [f"  {reason}" for reason in self.failures]
        return "\n".join(lines)

    def record(self) -> dict:
        """``chaos.json``: what the report page shows."""
        return {"seed": self.seed, "holds": self.holds, "failures": self.failures, "rtol": self.rtol,
                "schedule": [dict(zip(("fault", "fired", "at", "at_step", "why_not"), row)) for row in self.fault_rows()],
                "comparisons": [{"path": c.path, "kind": c.kind, "equal": c.equal, "max_difference": c.max_difference,
                                 "where": c.where, "problem": c.problem} for c in self.comparisons],
                "steps_lost": self.steps_lost, "time_lost_s": self.time_lost_s,
                "reference_run": self.reference.run_id,
                "disturbed_run": self.disturbed.run_id if self.disturbed else None}
