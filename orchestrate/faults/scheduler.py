"""The fault scheduler: fires each requested fault when its time or training step comes.

``@step=N`` faults are exact: the ranks that reach step N wait on the progress channel until
the fault is injected (:func:`mark_fired` lets them go on), so
no rank gets past step N first. Used by the supervisor of a Compose run and by the Slurm backend.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from orchestrate.config.fault_spec import FaultSpec
from orchestrate.engine.errors import describe, engine_errors
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
    """Holds the faults still to fire; :meth:`fire_due` injects those whose time has come, and
    undoes those whose end has come.

    ``inject`` does a fault and returns the node it landed on (a rank fault finds its node
    then); ``undo`` ends a lasting fault on that node.
    """

    def __init__(self, faults: tuple[FaultSpec, ...], inject: Callable[[FaultSpec], str], progress_dir: Path,
                 say: Callable[[str], None], record: Callable[..., None],
                 undo: Optional[Callable[[FaultSpec, str], None]] = None) -> None:
        self.pending = list(faults)
        self.inject = inject
        self.undo = undo
        self.progress_dir = progress_dir
        self.say = say
        self.record = record
        self.fired: list[FaultRecord] = []
        self.failed: list[FaultRecord] = []
        self.lasting: list[tuple[FaultSpec, str]] = []  # fired, with an end still to come
        self.stopped_first: list[FaultSpec] = []  # still to fire when the run was stopped
        self.warned_no_progress = False

    def cancel(self) -> None:
        """Fire nothing more and end nothing more (the run is being stopped)."""
        self.stopped_first.extend(self.pending)
        self.pending.clear()
        self.lasting.clear()

    @property
    def waiting(self) -> bool:
        """Faults still to fire, or to end."""
        return bool(self.pending or self.lasting)

    @property
    def step_faults(self) -> list[FaultSpec]:
        return [f for f in self.pending if f.at_step is not None]

    def announce(self) -> None:
        """Say how step faults fire (before the job's first step)."""
        if self.step_faults:
            self.say(f"{' '.join(str(f) for f in self.step_faults)}: fires when a worker reaches that step (its"
                     " optimizer's steps, counted, or its own orchestrate.progress.report(step)); ranks wait at"
                     " that step until the fault is injected")

    def fire_due(self, elapsed_s: float, step: Optional[int]) -> list[FaultSpec]:
        """Inject every fault whose time or step has come, and undo every fault whose end has
        come; return those injected."""
        injected = []
        for fault in [f for f in self.pending if f.due(elapsed_s, step)]:
            self.pending.remove(fault)
            try:
                node = self.inject(fault) or fault.node
            except injection_errors() as exc:  # a node that already ended cannot be faulted
                reason = f"could not be injected: {describe(exc)}"
                self.say(f"fault {fault} {reason}")
                self.record("fault-failed", node=fault.node, spec=str(fault), error=str(exc)[:500])
                self.failed.append(FaultRecord(str(fault), fault.node, fired=False, reason=reason))
                continue
            finally:
                if fault.at_step is not None:
                    mark_fired(self.progress_dir, fault.at_step)
            fired = FaultRecord(str(fault), node, True, elapsed_s, step)
            self.fired.append(fired)
            injected.append(fault)
            if fault.has_end:
                self.lasting.append((fault, node))
            self.say(f"fault injected: {fired.describe()}")
            self.record("fault", node=node, spec=str(fault), action=fault.action.value, step=step,
                        **({"rank": fault.rank} if fault.rank is not None else {}))
        for fault, node in [(f, n) for f, n in self.lasting if f.end_due(elapsed_s, step)]:
            self.lasting.remove((fault, node))
            self.end(fault, node, elapsed_s)
        return injected

    def end(self, fault: FaultSpec, node: str, elapsed_s: float) -> None:
        """Undo a lasting fault whose end has come; say so, or why it could not be undone."""
        try:
            if self.undo is not None:
                self.undo(fault, node)
        except injection_errors() as exc:  # the node ended meanwhile: nothing left to undo
            self.say(f"fault {fault} could not be ended: {describe(exc)}")
            self.record("fault-end-failed", node=node, spec=str(fault), error=str(exc)[:500])
            return
        self.fired = [replace(r, ended_s=elapsed_s) if r.spec == str(fault) and r.ended_s is None else r
                      for r in self.fired]
        self.say(f"fault ended: {fault} ({elapsed_s:.1f} s into the job)")
        self.record("fault-ended", node=node, spec=str(fault), action=fault.action.value)

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
        unfired += [FaultRecord(str(f), f.node, fired=False, reason="the run was stopped before it fired")
                    for f in self.stopped_first]
        return [*self.fired, *self.failed, *unfired]

    def warn_if_no_progress(self, progress_seen: bool, since_first_worker_s: Optional[float]) -> None:
        """Say once that step faults cannot fire when no worker has reported a step for long."""
        if (self.warned_no_progress or progress_seen or not self.step_faults or since_first_worker_s is None
                or since_first_worker_s <= NO_PROGRESS_WARNING_S):
            return
        self.warned_no_progress = True
        steps = " ".join(str(f) for f in self.step_faults)
        self.say(f"no worker has reported a training step in {NO_PROGRESS_WARNING_S:.0f} s: {steps} cannot"
                 " fire; no optimizer stepped (its steps are counted), and the script reports none with"
                 " orchestrate.progress.report(step)")


def write_triggers(directory: Path, steps: list[int]) -> None:
    """List the steps at which ranks wait for a fault (before the job starts)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / TRIGGERS_FILE).write_text(json.dumps({"steps": sorted(set(steps))}))


def mark_fired(directory: Path, step: int) -> None:
    """Let the ranks waiting at ``step`` go on: its fault has been injected."""
    (directory / f"fired-{step}").touch()
