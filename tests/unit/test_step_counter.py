"""Training steps counted from any script's optimizers (the workers' start-up hook), without
torch: optimizers are stand-ins with torch's ``state`` layout."""
from __future__ import annotations

from orchestrate.node.step_counter import StepCounter, carried_step


class Optimizer:
    def __init__(self, step=None) -> None:
        self.state = {} if step is None else {"weight": {"step": step, "exp_avg": 0.0}}


class FloatTensor:
    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def counter(script_reports: bool = False) -> tuple[StepCounter, list]:
    said: list = []
    return StepCounter(lambda s, _, m: said.append(("step", s)), lambda s, _: said.append(("resumed", s)),
                       lambda: script_reports), said


def test_a_held_first_step_is_reported_with_the_time_it_was_taken_not_the_seconds():
    said: list = []
    clock = iter([100.0, 107.5, 109.0])
    count = StepCounter(lambda s, t, m: said.append(("step", s, t)), lambda s, t: said.append(("resumed", s, t)),
                        lambda: False, clock=lambda: next(clock))
    adam = Optimizer(step=FloatTensor(5.0))  # resumed from step 4: its first step here is its 5th
    count.after_step(adam)  # taken at 100.0, held
    adam.state["weight"]["step"] = FloatTensor(6.0)
    count.after_step(adam)  # taken at 107.5 (a save between the two took 7 s)
    count.after_step(adam)
    assert said == [("resumed", 4, 100.0), ("step", 5, 100.0), ("step", 6, 107.5), ("step", 7, 109.0)]


def test_steps_are_counted_and_the_first_held_until_the_second():
    count, said = counter()
    sgd = Optimizer()
    count.after_step(sgd)
    assert said == []  # a script that reports its own would have done so by now
    for _ in range(3):
        count.after_step(sgd)
    assert said == [("step", 1), ("step", 2), ("step", 3), ("step", 4)]


def test_a_script_that_reports_its_own_steps_keeps_the_counter_out():
    count, said = counter(script_reports=True)
    sgd = Optimizer()
    for _ in range(5):
        count.after_step(sgd)
    assert said == []


def test_with_two_optimizers_the_one_that_steps_most_often_counts_each_step_once():
    count, said = counter()
    generator, critic = Optimizer(), Optimizer()
    for _ in range(3):  # the critic steps twice per generator step
        count.after_step(critic)
        count.after_step(critic)
        count.after_step(generator)
    assert said == [("step", s) for s in range(1, 7)]


def test_an_optimizer_that_carries_its_step_tells_where_the_job_resumed():
    count, said = counter()
    adam = Optimizer(step=FloatTensor(13.0))  # torch's Adam: after this first step here, its 13th
    count.after_step(adam)
    adam.state["weight"]["step"] = FloatTensor(14.0)
    count.after_step(adam)
    assert said == [("resumed", 12), ("step", 13), ("step", 14)]
    fresh, said = counter()
    fresh.after_step(Optimizer(step=FloatTensor(1.0)))
    fresh.after_step(Optimizer(step=FloatTensor(1.0)))
    assert ("resumed", 0) not in said and all(kind == "step" for kind, _ in said)


def test_the_carried_step_is_read_from_tensors_numbers_or_nothing():
    assert carried_step(Optimizer(step=FloatTensor(7.0))) == 7
    assert carried_step(Optimizer(step=3)) == 3
    assert carried_step(Optimizer()) is None


def test_where_the_run_compares_steps_each_reported_step_carries_its_parameters_digest_taken_then():
    said: list = []
    weights = [1.0]
    script_reports = [False]
    count = StepCounter(lambda s, t, m: said.append((s, m)), lambda s, t: None, lambda: script_reports[0],
                        digest=lambda optimizer: weights[0])
    sgd = Optimizer()
    count.after_step(sgd)  # held until the second, with the digest of its own moment
    weights[0] = 2.0
    count.after_step(sgd)
    weights[0] = 3.0
    count.after_step(sgd)
    assert said == [(1, {"params": 1.0}), (2, {"params": 2.0}), (3, {"params": 3.0})]
    undigested = StepCounter(lambda s, t, m: said.append((s, m)), lambda s, t: None, lambda: False,
                             digest=lambda optimizer: None)
    for _ in range(2):
        undigested.after_step(sgd)
    assert said[-2:] == [(1, {}), (2, {})]  # a digest that could not be taken: the step still counts


class Sum:
    """A stand-in for a parameter's float64 sum on a device."""

    def __init__(self, value: float, device: str) -> None:
        self.value, self.device = value, device

    def __add__(self, other: "Sum") -> "Sum":
        return Sum(self.value + other.value, self.device)

    def item(self) -> float:
        return self.value


class Parameter:
    def __init__(self, value: float, device: str = "cpu") -> None:
        self.sum_ = Sum(value, device)

    def detach(self) -> "Parameter":
        return self

    def sum(self, dtype=None) -> Sum:
        assert dtype == "float64"  # summed in float64, without a float64 copy of the parameter
        return self.sum_


class Stepping:
    def __init__(self, *groups: list) -> None:
        self.param_groups = [{"params": params} for params in groups]


def test_the_parameters_digest_is_their_sum_over_every_group_and_device_and_none_for_no_parameters(monkeypatch):
    import sys
    import types

    from orchestrate.node.params_digest import params_digest

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(float64="float64"))

    assert params_digest(Stepping([Parameter(1.5), Parameter(2.0, "cuda:0")], [Parameter(-0.25)])) == 3.25
    assert params_digest(Stepping([])) is None
    assert params_digest(Stepping([object()])) is None  # not a tensor: no digest
    monkeypatch.delitem(sys.modules, "torch")
    assert params_digest(Stepping([Parameter(1.0)])) is None  # no torch imported: no tensor either


def test_an_attempt_that_took_one_step_reports_it_when_the_process_ends(monkeypatch):
    # a kill at step 39 of 40: the resumed attempt took step 40 alone and ended. Held for a second
    # step that never came, it was never said: chaos saw "no new attempt reported a step"
    from orchestrate.node import step_counter

    count, said = counter()
    adam = Optimizer(step=FloatTensor(40.0))  # resumed from step 39: its first step here is its 40th
    count.after_step(adam)
    assert said == []
    monkeypatch.setattr(step_counter, "_installed", count)
    step_counter.flush_installed()  # the hook's end of the script
    assert said == [("resumed", 39), ("step", 40)]
    count.flush()  # and at exit: said once
    assert said == [("resumed", 39), ("step", 40)]
    # a script that reported its own step meanwhile keeps the counter out, to the end
    own, said_by_own = counter(script_reports=True)
    own.after_step(Optimizer())
    own.flush()
    assert said_by_own == []


class Gradient:
    def __init__(self, value: float) -> None:
        self.value = value

    def any(self) -> bool:
        return self.value != 0.0


class Weight:
    def __init__(self, grad: float = 0.0) -> None:
        self.grad = Gradient(grad)


class Adam:
    """torch's Adam as the counter sees it: its state's carried ``step``, its parameters'
    gradients, and its ``state_dict()`` and ``load_state_dict()`` hooks (torch calls the first
    before it makes the dict, the second after it loaded one)."""

    def __init__(self, grad: float = 0.1) -> None:
        self.weight = Weight(grad)
        self.param_groups = [{"lr": 0.01, "params": [self.weight]}]
        self.state: dict = {}
        self.before_state_dict: list = []
        self.after_load: list = []

    def register_state_dict_pre_hook(self, hook) -> None:
        self.before_state_dict.append(hook)

    def register_load_state_dict_post_hook(self, hook) -> None:
        self.after_load.append(hook)

    def step(self, count: StepCounter) -> None:
        count.before_step(self)
        self.state.setdefault("weight", {"step": FloatTensor(0.0)})
        self.state["weight"]["step"] = FloatTensor(self.state["weight"]["step"].item() + 1)
        count.after_step(self)

    def state_dict(self) -> dict:
        for hook in self.before_state_dict:
            hook(self)
        return self.state  # (torch's holds the same tensors: a dcp.load into it loads in place)

    def load_state_dict(self, step: float) -> None:
        self.state = {"weight": {"step": FloatTensor(step)}}
        for hook in self.after_load:
            hook(self)


def counted_with(weights: list) -> tuple[StepCounter, list]:
    """A counter whose parameters' sum is ``weights[0]``: a step changes the parameters where the
    test changes it."""
    said: list = []
    return StepCounter(lambda s, _, m: said.append(("step", s)), lambda s, _: said.append(("resumed", s)),
                       lambda: False, parameters_sum=lambda optimizer: weights[0]), said


def test_a_zero_gradient_warm_up_that_changes_nothing_is_not_counted_and_the_load_after_it_says_the_resume():
    # a user's DCP resume: one step with zero gradients creates Adam's state (lr 0.01, not 0: it
    # changes nothing all the same), then dcp.load fills it in place (step 3) and load_state_dict
    # loads it. Counted, the warm-up was step 1 and the resume was not seen: "resumed from step 2"
    for load_in_place in (False, True):
        count, said = counted_with([5.0])
        adam = Adam(grad=0.0)
        adam.step(count)  # the warm-up: every gradient zero, the parameters as they were
        if load_in_place:
            adam.state_dict()["weight"]["step"] = FloatTensor(3.0)  # dcp.load into it
        else:
            adam.load_state_dict(3.0)
        adam.weight.grad = Gradient(0.2)
        for _ in range(3):
            adam.step(count)
        assert said == [("resumed", 3), ("step", 4), ("step", 5), ("step", 6)], load_in_place


def test_a_warm_up_that_changed_the_parameters_counts_until_a_load_says_where_the_job_resumed():
    # AdamW's weight decay changes the parameters even at zero gradients: the warm-up counts, held
    # as a first step is; the load after it moves the carried count to 3, and the held step is dropped
    weights = [5.0]
    count, said = counted_with(weights)
    adamw = Adam(grad=0.0)
    count.before_step(adamw)
    weights[0] = 4.99  # decayed
    adamw.state["weight"] = {"step": FloatTensor(1.0)}
    count.after_step(adamw)
    assert said == []
    adamw.load_state_dict(3.0)
    adamw.weight.grad = Gradient(0.2)
    adamw.step(count)
    assert said == []  # the job's first step here: held until the second, as a first is
    adamw.step(count)
    assert said == [("resumed", 3), ("step", 4), ("step", 5)]


def test_a_save_is_no_load_and_a_warm_up_on_a_fresh_start_leaves_the_count_at_the_jobs():
    count, said = counted_with([5.0])
    adam = Adam(grad=0.0)
    adam.step(count)  # a warm-up on a fresh start too: no load follows it
    adam.weight.grad = Gradient(0.2)
    for step in range(1, 7):
        adam.step(count)
        if step % 3 == 0:
            adam.state_dict()  # a save: its carried count (one ahead of the job's: the warm-up) moved by the step
    assert said == [("step", s) for s in range(1, 7)]
    # a load of an earlier save in the same process goes back: counted on, the job's steps in order
    adam.load_state_dict(2.0)
    adam.step(count)
    assert said[-1] == ("step", 7)


def test_a_step_with_gradients_is_never_summed_and_a_counted_optimizer_never_again():
    sums: list = []
    count = StepCounter(lambda s, _, m: None, lambda s, _: None, lambda: False,
                        parameters_sum=lambda optimizer: sums.append(1) or 5.0)
    adam = Adam(grad=0.3)
    adam.step(count)
    adam.weight.grad = Gradient(0.0)  # a zero-gradient step later in training: a step of the job
    adam.step(count)
    assert sums == [] and count.counts[id(adam)] == 2
