"""Training steps from a plain script under real torchrun: the workers' start-up hook counts the
optimizer's steps onto the progress channel, and a script that reports its own is left alone."""
from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from orchestrate.node.params_digest import STEP_DIGEST_ENV
from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOBS = ROOT / "tests" / "jobs"


def run_hooked(tmp_path: Path, script: Path, *args: str, **extra_env: str) -> dict[int, list[dict]]:
    progress = tmp_path / "progress"
    progress.mkdir()
    env = host_env(tmp_path, DDP_PROGRESS_DIR=str(progress), PYTHONPATH=str(ROOT), **extra_env)
    done = subprocess.run(hooked_torchrun(2, "--", str(script), *args), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {rank: [json.loads(line) for line in (progress / f"rank{rank}.jsonl").read_text().splitlines()]
            for rank in (0, 1)}


def test_a_plain_scripts_optimizer_steps_reach_the_progress_channel_with_their_parameters_digest(tmp_path):
    # (as in a run of chaos --compare-steps: the digest is asked for)
    records = run_hooked(tmp_path, JOBS / "plain_sgd.py", "--steps", "12", "--step-seconds", "0.1",
                         **{STEP_DIGEST_ENV: "1"})
    digests = {rank: [r["params"] for r in records[rank] if "step" in r] for rank in (0, 1)}
    # DDP keeps the ranks' parameters equal: so are their digests, step by step, and each step moves them
    assert digests[0] == digests[1] and len(digests[0]) == 12 and len(set(digests[0])) == 12, digests
    for rank in (0, 1):
        asked, made, *steps, last = records[rank]
        assert asked["init_asked"]["world_size"] == 2  # the call as it was made, first
        assert made["init_call"]["world_size"] == 2  # then the group it made
        assert [r["step"] for r in steps] == list(range(1, 13))
        assert {r["counted"] for r in steps} == {"optimizer"}
        # step 1, held until step 2, keeps its own time: 0.1 s of sleep after each step
        assert all(later["time"] - earlier["time"] >= 0.09 for earlier, later in zip(steps, steps[1:])), steps
        assert (last["finished"], last["after_step"]) == (True, 12)  # the hook's word that the script returned


def test_a_script_that_reports_its_own_steps_keeps_its_numbering(tmp_path):
    records = run_hooked(tmp_path, JOBS / "resume_training.py", "--steps", "6")
    for rank in (0, 1):
        steps = [r for r in records[rank] if "step" in r]
        assert [r["step"] for r in steps] == list(range(1, 7))
        assert not any("counted" in r for r in records[rank])


@pytest.mark.slow
def test_a_dcp_resume_with_adam_is_told_by_the_carried_step_and_a_fresh_adam_counts_from_one(tmp_path):
    # get_state_dict gives a fresh optimizer its state with a step at learning rate 0: not counted
    script = JOBS / "dcp_resume.py"
    (tmp_path / "first").mkdir()
    run_hooked(tmp_path / "first", script, "--steps", "5", "--startup", "0", "--sleep", "0")  # saves at step 3
    (tmp_path / "first" / "ckpt").rename(tmp_path / "ckpt")
    resumed = run_hooked(tmp_path, script, "--steps", "9", "--startup", "0", "--sleep", "0")
    for rank in (0, 1):
        assert [r.get("resumed") for r in resumed[rank] if "resumed" in r] == [3]
        assert [r["step"] for r in resumed[rank] if "step" in r] == [4, 5, 6, 7, 8, 9]
    (tmp_path / "progress").rename(tmp_path / "progress-resumed")
    (tmp_path / "ckpt" / "LATEST").write_text("3")  # from step 3 again, with a fresh Adam
    forgot = run_hooked(tmp_path, script, "--steps", "9", "--startup", "0", "--sleep", "0", "--forget-optimizer")
    assert [r["step"] for r in forgot[0] if "step" in r] == [1, 2, 3, 4, 5, 6]
    assert not any("resumed" in r for r in forgot[0])


@pytest.mark.parametrize("optimizer_kind", ["Adam", "AdamW"])
def test_a_resume_that_warms_adam_up_then_loads_into_it_is_told_by_the_carried_step_of_the_load(optimizer_kind):
    # A user's DCP resume (a trial's dcp_train.py): one optimizer step with zero gradients creates
    # Adam's state, then dcp.load fills what state_dict() returned in place, or load_state_dict
    # loads a save. The warm-up (lr 0.01) was counted as step 1 and the load's step 3 never read:
    # chaos said "resumed from step 2: 4 step(s) redone" where the script redid 3. AdamW's decay
    # changes the parameters at zero gradients: that warm-up counts until the load replaces it.
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from orchestrate.node.step_counter import StepCounter

    def train(optimizer, steps: int) -> None:
        for _ in range(steps):
            optimizer.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            optimizer.step()

    def warm_up(optimizer) -> None:
        for parameter in model.parameters():
            parameter.grad = torch.zeros_like(parameter)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    make = getattr(torch.optim, optimizer_kind)
    first = make(model.parameters(), lr=0.01)
    train(first, 3)  # before the counter: the save of step 3
    for load in ("load_state_dict", "in place"):
        saved = copy.deepcopy(first.state_dict())  # (a load keeps its tensors: the steps after move them)
        said: list = []
        count = StepCounter(lambda s, _, m: said.append(("step", s)), lambda s, _: said.append(("resumed", s)),
                            lambda: False)
        handles = [register_optimizer_step_pre_hook(count.before_step),
                   register_optimizer_step_post_hook(count.after_step)]
        try:
            resumed = make(model.parameters(), lr=0.01)
            warm_up(resumed)
            if load == "load_state_dict":
                resumed.load_state_dict(saved)
            else:  # dcp.load into resumed.state_dict(): its tensors are the optimizer's own
                for key, state in resumed.state_dict()["state"].items():
                    for name, value in state.items():
                        value.copy_(saved["state"][key][name])
            train(resumed, 3)
            count.flush()
        finally:
            for handle in handles:
                handle.remove()
        assert said == [("resumed", 3), ("step", 4), ("step", 5), ("step", 6)], (optimizer_kind, load)
