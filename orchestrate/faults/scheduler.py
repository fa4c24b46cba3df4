"""The fault scheduler: fires each requested fault when its time or training step comes.

``@step=N`` faults are exact: the ranks that reach step N wait on the progress channel until
the fault is injected (:func:`mark_fired` lets them go on), so
no rank gets past step N first. Used by the supervisor of a Compose run and by the Slurm backend.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from orchestrate.config.fault_spec import FaultSpec
from orchestrate.engine.errors import engine_errors
from orchestrate.errors import OrchestrateError
from orchestrate.node.progress import TRIGGERS_FILE
from orchestrate.outcome.model import FaultRecord

# How long a run with @step faults may run with no progress reported before we say so.
NO_PROGRESS_WARNING_S = 30.0


def injection_errors() -> tuple[type[BaseException], ...]:
    """What an injection into a node that already ended raises (an engine error, a network
    that could not be found)."""
    return (*engine_errors(), OrchestrateError)


class FaultScheduler:
    """Holds the faults still to fire; :meth:`fire_due` injects those whose time has come."""

    def __init__(self, faults: tuple[FaultSpec, ...], inject: Callable[[FaultSpec], None], progress_dir: Path,
                 say: Callable[[str], None], record: Callable[..., None]) -> None:
        self.pending = list(faults)
        self.inject = inject
        self.progress_dir = progress_dir
        self.say = say
        self.record = record
        self.fired: list[FaultRecord] = []
        self.failed: list[FaultRecord] = []
        self.warned_no_progress = False

    @property
    def step_faults(self) -> list[FaultSpec]:
        return [f for f in self.pending if f.at_step is not None]

    def announce(self) -> None:
        """Say how step faults fire (before the job's first step)."""
        if self.step_faults:
            self.say(f"{' '.join(str(f) for f in self.step_faults)}: fires when a worker reports that step through"
                     " orchestrate.progress.report(step) (app/ does, every step); ranks wait at that step"
                     " until the fault is injected")

    def fire_due(self, elapsed_s: float, step: Optional[int]) -> list[FaultSpec]:
        """Inject every fault whose time or step has come; return those injected."""
        injected = []
        for fault in [f for f in self.pending if f.due(elapsed_s, step)]:
            self.pending.remove(fault)
            try:
                self.inject(fault)
            except injection_errors() as exc:  # a node that already ended cannot be faulted
                reason = f"could not be injected: {str(exc).splitlines()[0][:160]}"
                self.say(f"fault {fault} {reason}")
                self.record("fault-failed", node=fault.node, spec=str(fault), error=str(exc)[:500])
                self.failed.append(FaultRecord(str(fault), fault.node, fired=False, reason=reason))
                continue
            finally:
                if fault.at_step is not None:
                    mark_fired(self.progress_dir, fault.at_step)
            fired = FaultRecord(str(fault), fault.node, True, elapsed_s, step)
            self.fired.append(fired)
            injected.append(fault)
            self.say(f"fault injected: {fired.describe()}")
            self.record("fault", node=fault.node, spec=str(fault), action=fault.action.value, step=step)
        return injected

    def records(self, elapsed_s: float, step: Optional[int], progress_seen: bool) -> list[FaultRecord]:
        """Every fault asked for: those that fired, then those that did not, with why (the job
        ending ``elapsed_s`` in, having reached training ``step``)."""
        unfired = []
        for fault in self.pending:
            if fault.at_step is not None and not progress_seen:
                reason = ("no worker reported a training step (report them with orchestrate.progress.report(step)"
                          " in the training loop)")
            elif fault.at_step is not None:
                reason = f"the workers reached step {step} only, not step {fault.at_step}"
            else:
                reason = f"the job ended {elapsed_s:.1f} s in, before t={fault.at_seconds or 0:g} s"
            unfired.append(FaultRecord(str(fault), fault.node, fired=False, reason=reason))
        return [*self.fired, *self.failed, *unfired]

    def warn_if_no_progress(self, progress_seen: bool, since_first_worker_s: Optional[float]) -> None:
        """Say once that step faults cannot fire when no worker has reported a step for long."""
        if (self.warned_no_progress or progress_seen or not self.step_faults or since_first_worker_s is None
                or since_first_worker_s <= NO_PROGRESS_WARNING_S):
            return
        self.warned_no_progress = True
        steps = " ".join(str(f) for f in self.step_faults)
        self.say(f"no worker has reported a training step in {NO_PROGRESS_WARNING_S:.0f} s: {steps} cannot"
                 " fire; report steps with orchestrate.progress.report(step) in the training loop")


def write_triggers(directory: Path, steps: list[int]) -> None:
    """List the steps at which ranks wait for a fault (before the job starts)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / TRIGGERS_FILE).write_text(json.dumps({"steps": sorted(set(steps))}))


def mark_fired(directory: Path, step: int) -> None:
    """Let the ranks waiting at ``step`` go on: its fault has been injected."""
    (directory / f"fired-{step}").touch()
