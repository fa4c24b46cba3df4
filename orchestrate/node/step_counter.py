"""Training steps from any script: the workers' start-up hook counts every optimizer's steps
(torch's global ``register_optimizer_step_post_hook``) and reports them on the progress channel,
so ``@step`` faults, the report's step times and the hang watchdog work on plain scripts. A
script that reports its own steps (``orchestrate.progress.report``) wins: its numbering stands.

With several optimizers (a GAN's two, a model's per-part ones), the count is the one that has
stepped most often; a step is reported once, when that count grows. An optimizer that carries
its own step count (Adam and its kin: ``state[param]["step"]``) tells where a resumed job
starts: if its first step here is its step N + 1, the job resumed from step N, said with
``report_resumed`` and counted on from there.

A step that changes nothing is not counted: at learning rate 0 with every gradient zero (how
``torch.distributed.checkpoint``'s ``get_state_dict`` gives a fresh optimizer its state before a
resume loads into it), or a step of an optimizer not yet counted with every gradient zero that
left its parameters as they were (a script's own warm-up step that creates Adam's state before a
load: Adam, SGD, RMSprop and their kin change nothing there; AdamW's weight decay does, and such a
step counts until a load says otherwise, below). The parameters are summed before and after
(:func:`orchestrate.node.params_digest.params_digest`) only on such a step: the gradients are
looked at only until the optimizer's first counted step, or at learning rate 0. Counted, it would
hide where the resumed job starts. The carried count such steps left is not the job's: where no
load came after them, the job's steps start after it.

A load of optimizer state after the optimizer's first step here (``load_state_dict``, DCP's
``set_state_dict``, or ``dcp.load`` into what its ``state_dict()`` returned, in place) moves its
carried count: the counter reads it again at the next step after any ``state_dict()`` or
``load_state_dict()`` of it (torch's per-optimizer hooks, registered at its first step), and where
the count moved ahead of what its steps here make it, the job resumed from there (said with
``report_resumed``); a first step still held then was the state's creation, not the job's, and is
dropped. Reading the count only then keeps a step's cost as it was: no value is read back from a
device at a step that follows neither.

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
import weakref
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


def every_gradient_zero(optimizer: Any) -> bool:
    """Every gradient the optimizer would step is zero or absent (False where it cannot be told)."""
    groups = getattr(optimizer, "param_groups", None) or []
    try:
        return all(p.grad is None or not bool(p.grad.any()) for group in groups for p in group.get("params", []))
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return False


def changes_nothing(optimizer: Any) -> bool:
    """A step at learning rate 0 with every gradient zero (or none): a state initialization, not
    training. The gradients are looked at only when every learning rate is 0."""
    groups = getattr(optimizer, "param_groups", None) or []
    try:
        if not groups or any(float(group.get("lr", 1.0)) != 0.0 for group in groups):
            return False
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return False
    return every_gradient_zero(optimizer)


class StepCounter:
    """Counts optimizer steps (see the module's text); ``report`` and ``report_resumed`` are the
    progress channel's (each given a step and the epoch time it was taken), ``script_reports``
    says whether the script reports its own, ``clock`` gives the time."""

    def __init__(self, report: Callable[[int, float, Dict[str, float]], None],
                 report_resumed: Callable[[int, float], None], script_reports: Callable[[], bool],
                 clock: Callable[[], float] = time.time,
                 digest: Optional[Callable[[Any], Optional[float]]] = None,
                 parameters_sum: Callable[[Any], Optional[float]] = params_digest) -> None:
        self.report = report
        self.digest = digest  # the metric of a reported step: the stepped parameters' digest (chaos --compare-steps)
        self.parameters_sum = parameters_sum  # before and after a zero-gradient step of an optimizer not yet counted
        self.report_resumed = report_resumed
        self.script_reports = script_reports
        self.clock = clock
        self.counts: Dict[int, int] = {}
        self.reported = 0
        self.held: List[Callable[[], None]] = []  # the first step's reports, until the second
        self.started = False
        self.sums_before: Dict[int, float] = {}  # a zero-gradient step's parameters' sum before it
        self.uncounted_carried: Dict[int, int] = {}  # the carried count steps that changed nothing left
        self.expected_carried: Dict[int, Optional[int]] = {}  # the carried count its steps here make it
        self.followed: weakref.WeakSet = weakref.WeakSet()  # optimizers whose loads are followed
        self.reread: set = set()  # optimizers whose state may have been loaded since their last step

    def before_step(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        """torch's pre-step hook: the parameters' sum before a zero-gradient step of an optimizer
        not yet counted (a warm-up that creates its state, if it changes nothing)."""
        key = id(optimizer)
        self.sums_before.pop(key, None)
        if key in self.counts or not every_gradient_zero(optimizer):
            return
        total = self.parameters_sum(optimizer)
        if total is not None:
            self.sums_before[key] = total

    def left_unchanged(self, optimizer: Any) -> bool:
        """The step just taken had every gradient zero and left the parameters' sum as it was."""
        before = self.sums_before.pop(id(optimizer), None)
        return before is not None and self.parameters_sum(optimizer) == before

    def after_step(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        """torch's post-step hook: one more step of ``optimizer``."""
        key = id(optimizer)
        self.follow_loads(optimizer)
        if changes_nothing(optimizer) or self.left_unchanged(optimizer):
            carried = self.expected_carried[key] = carried_step(optimizer)  # (such steps are rare: read it)
            if key not in self.counts and carried is not None:
                self.uncounted_carried[key] = carried
            return
        taken = self.clock()
        if key not in self.counts:
            self.reread.discard(key)
            carried = self.expected_carried[key] = carried_step(optimizer)
            # what a warm-up before it left is not the job's, unless a load came since (it replaced that)
            warmed_up = self.uncounted_carried.pop(key, 0)
            self.counts[key] = max(0, carried - 1 - warmed_up) if carried is not None else 0
            if self.counts[key] > self.reported:
                self.reported = resumed = self.counts[key]
                self.say(lambda: self.report_resumed(resumed, taken))
        elif key in self.reread:
            self.take_a_load(optimizer, taken)
        else:
            expected = self.expected_carried.get(key)
            self.expected_carried[key] = None if expected is None else expected + 1
        self.counts[key] += 1
        if self.counts[key] > self.reported:
            self.reported = step = self.counts[key]
            metrics = self.metrics_of(optimizer)
            self.say(lambda: self.report(step, taken, metrics))
            self.started = True

    def follow_loads(self, optimizer: Any) -> None:
        """Have the optimizer's ``state_dict()`` and ``load_state_dict()`` mark it for a second
        look at its carried count at its next step (once per optimizer; torch's own hooks)."""
        try:
            if optimizer in self.followed:
                return
            self.followed.add(optimizer)
            optimizer.register_state_dict_pre_hook(self.mark_loaded)
            optimizer.register_load_state_dict_post_hook(self.mark_loaded)
        except (AttributeError, TypeError, RuntimeError):
            pass  # a torch without them: a load after the first step is not followed, as before

    def mark_loaded(self, optimizer: Any, *args: Any) -> None:
        """Its state may be loaded now (into what ``state_dict()`` gave, or by ``load_state_dict``)."""
        self.reread.add(id(optimizer))
        self.uncounted_carried.pop(id(optimizer), None)  # a load replaces the count a warm-up left

    def take_a_load(self, optimizer: Any, taken: float) -> None:
        """After a ``state_dict()`` or ``load_state_dict()`` of the optimizer: where its carried count
        moved ahead of the job's step, other than by this step, a load set it: the job resumed there."""
        key = id(optimizer)
        self.reread.discard(key)
        expected = self.expected_carried.get(key)
        carried = self.expected_carried[key] = carried_step(optimizer)
        if carried is None or expected is None or carried == expected + 1 or carried - 1 <= self.counts[key]:
            return  # no load, or one that went back: counted on (the job's steps reported stay in order)
        self.counts[key] = resumed = carried - 1
        if self.held:  # nothing said yet: the first step, still held, made the state the load replaced
            self.held.clear()
            self.started = False  # the job's first step here is this one: held until the next, as a first is
        if resumed > self.reported:
            self.reported = resumed
            self.say(lambda: self.report_resumed(resumed, taken))

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
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    counter = StepCounter(report_counted, report_resumed_at, script_reports,
                          digest=params_digest if digest_wanted() else None)
    register_optimizer_step_pre_hook(counter.before_step)
    register_optimizer_step_post_hook(counter.after_step)
    global _installed
    _installed = counter
    atexit.register(counter.flush)  # a script that failed after one step: its step is said too
    return counter
