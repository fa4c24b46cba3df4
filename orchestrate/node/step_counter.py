"""Training steps from any script: the workers' start-up hook counts every optimizer's steps
(torch's global ``register_optimizer_step_post_hook``) and reports them on the progress channel,
so ``@step`` faults, the report's step times and the hang watchdog work on plain scripts. A
script that reports its own steps (``orchestrate.progress.report``) wins: its numbering stands.

With several optimizers (a GAN's two, a model's per-part ones), the count is the one that has
stepped most often; a step is reported once, when that count grows. An optimizer that carries
its own step count (Adam and its kin: ``state[param]["step"]``) tells where a resumed job
starts: if its first step here is its step N + 1, the job resumed from step N, said with
``report_resumed`` and counted on from there.

A step that changes nothing is not counted: at learning rate 0 with every gradient zero. That is
how ``torch.distributed.checkpoint``'s ``get_state_dict`` gives a fresh optimizer its state
before a resume loads into it; counted, it would hide where the resumed job starts.

Nothing is reported before the second step: a script that reports its own steps does so after
its first, and the counter then stays out of the channel altogether. A step held so is reported
with the time it was taken, not the second step's: a file saved between the two is then after
step 1, as it was. A step still held when the process ends (an attempt that took one step: a
resume with one step left) is reported then, before the hook says the script finished
(:func:`flush_installed`), or at exit where the script failed. Standard library only; torch's optimizer is reached through the hook's
arguments. Where the run compares its steps (chaos --compare-steps), each step reported carries
the stepped parameters' digest (:mod:`orchestrate.node.params_digest`) as its metric.
"""
from __future__ import annotations

import atexit
import time
from typing import Any, Callable, Dict, List, Optional

from orchestrate.node.params_digest import DIGEST_METRIC, digest_wanted, params_digest


def carried_step(optimizer: Any) -> Optional[int]:
    """The highest step count the optimizer's state carries (Adam's ``state[p]["step"]``), if any."""
    steps = []
    for state in getattr(optimizer, "state", {}).values():
        value = state.get("step") if isinstance(state, dict) else None
        if value is None:
            continue
        try:
            steps.append(int(float(value.item() if hasattr(value, "item") else value)))
        except (TypeError, ValueError):
            continue
    return max(steps) if steps else None


def changes_nothing(optimizer: Any) -> bool:
    """A step at learning rate 0 with every gradient zero (or none): a state initialization, not
    training. The gradients are looked at only when every learning rate is 0."""
    groups = getattr(optimizer, "param_groups", None) or []
    try:
        if not groups or any(float(group.get("lr", 1.0)) != 0.0 for group in groups):
            return False
        return all(p.grad is None or not bool(p.grad.any()) for group in groups for p in group.get("params", []))
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return False


class StepCounter:
    """Counts optimizer steps (see the module's text); ``report`` and ``report_resumed`` are the
    progress channel's (each given a step and the epoch time it was taken), ``script_reports``
    says whether the script reports its own, ``clock`` gives the time."""

    def __init__(self, report: Callable[[int, float, Dict[str, float]], None],
                 report_resumed: Callable[[int, float], None], script_reports: Callable[[], bool],
                 clock: Callable[[], float] = time.time,
                 digest: Optional[Callable[[Any], Optional[float]]] = None) -> None:
        self.report = report
        self.digest = digest  # the metric of a reported step: the stepped parameters' digest (chaos --compare-steps)
        self.report_resumed = report_resumed
        self.script_reports = script_reports
        self.clock = clock
        self.counts: Dict[int, int] = {}
        self.reported = 0
        self.held: List[Callable[[], None]] = []  # the first step's reports, until the second
        self.started = False

    def after_step(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        """torch's post-step hook: one more step of ``optimizer``."""
        if changes_nothing(optimizer):
            return
        key = id(optimizer)
        taken = self.clock()
        if key not in self.counts:
            carried = carried_step(optimizer)
            self.counts[key] = carried - 1 if carried is not None and carried > 1 else 0
            if self.counts[key] > self.reported:
                self.reported = resumed = self.counts[key]
                self.say(lambda: self.report_resumed(resumed, taken))
        self.counts[key] += 1
        if self.counts[key] > self.reported:
            self.reported = step = self.counts[key]
            metrics = self.metrics_of(optimizer)
            self.say(lambda: self.report(step, taken, metrics))
            self.started = True

    def metrics_of(self, optimizer: Any) -> Dict[str, float]:
        """The metrics of the step ``optimizer`` just took: its parameters' digest, where asked
        for (and not where the script reports its own steps, whose numbering stands)."""
        if self.digest is None or self.script_reports():
            return {}
        value = self.digest(optimizer)
        return {} if value is None else {DIGEST_METRIC: value}

    def say(self, report: Callable[[], None]) -> None:
        """Report now, or hold it until the second step (see the module's text)."""
        if self.script_reports():
            self.held.clear()
            return
        if not self.started:
            self.held.append(report)
            return
        for held in self.held:
            held()
        self.held.clear()
        report()

    def flush(self) -> None:
        """Report what is still held: the process ends after a single step, so no second step
        will come to say it (a script that reports its own steps has none held)."""
        if self.script_reports():
            self.held.clear()
            return
        held, self.held = self.held, []
        for report in held:
            report()


# The counter the workers' start-up hook installed in this process (None: torch.optim not imported).
_installed: Optional[StepCounter] = None


def flush_installed() -> None:
    """Report the installed counter's held step, if any (the process is ending)."""
    if _installed is not None:
        _installed.flush()


def install() -> StepCounter:
    """Register a counter on every optimizer of this process (torch is imported by then)."""
    from orchestrate.node.progress import report_counted, report_resumed_at, script_reports
    from torch.optim.optimizer import register_optimizer_step_post_hook

    counter = StepCounter(report_counted, report_resumed_at, script_reports,
                          digest=params_digest if digest_wanted() else None)
    register_optimizer_step_post_hook(counter.after_step)
    global _installed
    _installed = counter
    atexit.register(counter.flush)  # a script that failed after one step: its step is said too
    return counter
