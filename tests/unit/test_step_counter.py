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
    return StepCounter(lambda s, _: said.append(("step", s)), lambda s, _: said.append(("resumed", s)),
                       lambda: script_reports), said


def test_a_held_first_step_is_reported_with_the_time_it_was_taken_not_the_seconds():
    said: list = []
    clock = iter([100.0, 107.5, 109.0])
    count = StepCounter(lambda s, t: said.append(("step", s, t)), lambda s, t: said.append(("resumed", s, t)),
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
