"""The chaos check's pure parts: the seeded schedule, the comparison of two runs' files (the
script a node runs, here under the test's own torch), and the verdict."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.chaos.compare import COMPARE_SCRIPT, compare_files
from orchestrate.chaos.schedule import DEFAULT_KINDS, Reference, draw_schedule, parse_kinds
from orchestrate.chaos.verdict import ChaosVerdict, FileComparison
from orchestrate.config.fault_spec import FaultAction
from orchestrate.errors import UsageError
from orchestrate.outcome.model import FaultRecord, RunResult, Timings
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.states import NodePhase
from tests.unit.test_cli import orchestrate

NODES = ["node0", "node1", "node2"]


# --- the schedule ---------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    reference = Reference(last_step=100, job_s=60.0)
    first = draw_schedule(7, 3, DEFAULT_KINDS, NODES, reference)
    assert first == draw_schedule(7, 3, DEFAULT_KINDS, NODES, reference)
    others = {draw_schedule(seed, 3, DEFAULT_KINDS, NODES, reference) for seed in range(8, 18)}
    assert first not in others and len(others) > 5


def test_faults_at_steps_fall_one_in_each_stretch_never_at_the_first_or_last_step():
    reference = Reference(last_step=41, job_s=60.0)  # steps 2..40: four stretches of 9.75 steps
    for seed in range(50):
        steps = [f.at_step for f in draw_schedule(seed, 4, DEFAULT_KINDS, NODES, reference)]
        assert all(s is not None for s in steps)
        assert steps == sorted(steps) and len(set(steps)) == 4
        assert 2 <= steps[0] <= 11 and 11 <= steps[1] <= 21 and 21 <= steps[2] <= 31 and 31 <= steps[3] <= 40, steps


def test_without_steps_faults_fall_at_times_spread_over_the_middle_of_the_reference():
    reference = Reference(last_step=None, job_s=100.0)
    for seed in range(50):
        schedule = draw_schedule(seed, 2, DEFAULT_KINDS, NODES, reference)
        times = [f.at_seconds for f in schedule]
        assert all(f.at_step is None for f in schedule)
        assert 10.0 <= times[0] <= 50.0 <= times[1] <= 90.0, times


def test_only_the_kinds_and_nodes_asked_for_are_drawn_and_all_of_them_come_up():
    kinds = parse_kinds("kill, disconnect,kill")
    assert kinds == (FaultAction.KILL, FaultAction.DISCONNECT)
    drawn = [f for seed in range(40) for f in draw_schedule(seed, 3, kinds, NODES, Reference(30, 20.0))]
    assert {f.action for f in drawn} == set(kinds)
    assert {f.node for f in drawn} == set(NODES)


def test_a_reference_too_short_for_the_faults_and_an_unknown_kind_are_usage_errors():
    with pytest.raises(UsageError, match="reached step 4: no room for 3 faults"):
        draw_schedule(1, 3, DEFAULT_KINDS, NODES, Reference(4, 60.0))
    with pytest.raises(UsageError, match="too short for 5 faults"):
        draw_schedule(1, 5, DEFAULT_KINDS, NODES, Reference(None, 5.0))
    with pytest.raises(UsageError, match="no fault kind 'explode'"):
        parse_kinds("kill,explode")


def test_each_runs_copy_of_the_work_directory_leaves_the_runs_directory_out(tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "x.txt").write_text("x")
    (work / "runs" / "old-run").mkdir(parents=True)
    for runs_dir in (work / "runs", work):  # ./runs, or the work directory itself (--runs-dir .)
        request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=runs_dir, nodes=2, cpu=True)
        check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS)
        base = runs_dir.resolve() / f"chaos-{runs_dir.name}"
        for copy in check.copies(base):
            assert (copy / "data" / "x.txt").read_text() == "x"
            assert not (copy / "runs").exists() if runs_dir != work else not (copy / base.name).exists()


# --- the comparison -------------------------------------------------------------------------

@pytest.fixture
def torch():
    """torch, for the tests that write tensors (the launcher itself runs without it)."""
    return pytest.importorskip("torch")


def compare_in_process(rtol: float, first: Path, second: Path, *paths: str) -> list[dict]:
    """The node's comparison script, run by this interpreter (which has torch)."""
    import json

    done = subprocess.run([sys.executable, "-c", COMPARE_SCRIPT, f"{rtol:g}", str(first), str(second), *paths],
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


class LocalEngine:
    """Stands for the engine's ``containers.run``: the same script, with the mounts as paths."""

    def __init__(self) -> None:
        self.containers = self

    def run(self, image, command, volumes, **kwargs) -> bytes:
        mounts = {spec["bind"]: host for host, spec in volumes.items()}
        args = [mounts.get(a, a) for a in command[3:]]
        return subprocess.run([sys.executable, "-c", command[2], *args], capture_output=True, check=True).stdout


def two_copies(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "undisturbed", tmp_path / "with-faults"
    first.mkdir()
    second.mkdir()
    return first, second


def test_tensors_compare_exactly_and_name_the_largest_difference_and_where(tmp_path, torch):
    first, second = two_copies(tmp_path)
    state = {"model": {"w": torch.ones(3, 3), "b": torch.zeros(3)}, "optimizer": {"state": {0: {"momentum": torch.ones(4)}}},
             "step": 10}
    torch.save(state, first / "final.pt")
    torch.save(state, second / "same.pt")
    torch.save(state, first / "same.pt")
    changed = {**state, "optimizer": {"state": {0: {"momentum": torch.tensor([1.0, 1.23, 1.0, 0.9])}}}}
    torch.save(changed, second / "final.pt")
    rows = {r["path"]: r for r in compare_in_process(0.0, first, second, "final.pt", "same.pt")}
    assert rows["same.pt"]["equal"] is True and rows["same.pt"]["max_difference"] == 0.0
    assert rows["final.pt"]["equal"] is False
    assert rows["final.pt"]["max_difference"] == pytest.approx(0.23, abs=1e-6)
    assert rows["final.pt"]["where"] == "optimizer.state.0.momentum"


def test_a_relative_tolerance_lets_small_differences_pass_and_not_large_ones(tmp_path, torch):
    first, second = two_copies(tmp_path)
    torch.save({"w": torch.tensor([1.0, 2.0])}, first / "a.pt")
    torch.save({"w": torch.tensor([1.0, 2.0 + 1e-5])}, second / "a.pt")
    assert compare_in_process(0.0, first, second, "a.pt")[0]["equal"] is False
    assert compare_in_process(1e-4, first, second, "a.pt")[0]["equal"] is True
    torch.save({"w": torch.tensor([1.0, 2.1])}, second / "a.pt")
    assert compare_in_process(1e-4, first, second, "a.pt")[0]["equal"] is False


def test_a_changed_shape_or_key_is_a_difference_without_a_number(tmp_path, torch):
    first, second = two_copies(tmp_path)
    torch.save({"w": torch.zeros(2), "extra": 1}, first / "a.pt")
    torch.save({"w": torch.zeros(2)}, second / "a.pt")
    torch.save({"w": torch.zeros(2)}, first / "b.pt")
    torch.save({"w": torch.zeros(3)}, second / "b.pt")
    rows = compare_in_process(0.0, first, second, "a.pt", "b.pt")
    assert [r["equal"] for r in rows] == [False, False]
    assert [r["max_difference"] for r in rows] == [None, None]
    assert "keys differ: ['extra']" in rows[0]["where"] and "shape (2,)" in rows[1]["where"]


def test_files_torch_cannot_load_compare_byte_for_byte_and_a_missing_file_is_named(tmp_path, torch):
    first, second = two_copies(tmp_path)
    (first / "log.txt").write_text("loss 0.5\n")
    (second / "log.txt").write_text("loss 0.5\n")
    (first / "metrics.txt").write_text("acc 0.9\n")
    (second / "metrics.txt").write_text("acc 0.8\n")
    (first / "only-here.pt").write_text("x")
    comparisons = compare_files(LocalEngine(), "img", first, second, ["log.txt", "metrics.txt", "only-here.pt"], 0.0)
    assert [(c.path, c.kind, c.equal) for c in comparisons] == [
        ("log.txt", "bytes", True), ("metrics.txt", "bytes", False), ("only-here.pt", "bytes", False)]
    assert comparisons[2].describe() == "only-here.pt: missing in the run with faults"


# --- the verdict ----------------------------------------------------------------------------

def result(make_job, tmp_path: Path, *, ok: bool = True, faults=(), job_s: float = 30.0, run_id: str = "r") -> RunResult:
    plan = make_job(nodes=2)
    state, code = (NodePhase.SUCCEEDED, 0) if ok else (NodePhase.FAILED, 1)
    results = [NodeResult(node, state, code, ended_at=1.0) for node in plan.nodes]
    return RunResult(run_id, tmp_path / run_id, results, Timings(1.0, 1.0, job_s), faults=list(faults))


def test_the_verdict_holds_when_the_job_completed_every_fault_fired_and_the_files_match(make_job, tmp_path):
    fired = FaultRecord("kill:node1@step=12", "node1", elapsed_s=8.5, step=12)
    verdict = ChaosVerdict(7, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[fired], job_s=41.5, run_id="dis"),
                           ["kill:node1@step=12"], [FileComparison("final.pt", "tensors", True, 0.0, "w")])
    assert verdict.holds and verdict.exit_code == 0 and verdict.failures == []
    text = verdict.format()
    assert "VERDICT HOLDS: the job survived 1 fault(s)" in text
    assert "time lost +11.5 s" in text
    assert verdict.fault_rows() == [("kill:node1@step=12", "yes", "8.5 s", "12", "")]
    assert verdict.record()["holds"] is True


def test_the_verdict_names_a_file_that_differs_and_a_fault_that_never_fired(make_job, tmp_path):
    unfired = FaultRecord("restart:node0@step=30", "node0", fired=False, reason="the workers never reached step 30")
    verdict = ChaosVerdict(3, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[unfired], run_id="dis"), ["restart:node0@step=30"],
                           [FileComparison("final.pt", "tensors", False, 0.23, "optimizer.state.0.momentum_buffer")])
    assert not verdict.holds and verdict.exit_code == 1
    assert verdict.failures == [
        "fault restart:node0@step=30 did not fire: the workers never reached step 30",
        "final.pt: differs (tensors; largest difference 0.23 at optimizer.state.0.momentum_buffer)"]
    assert "VERDICT DOES NOT HOLD:" in verdict.format()


def test_a_job_that_failed_under_the_faults_or_a_reference_that_failed_is_the_reason(make_job, tmp_path):
    broken = ChaosVerdict(1, result(make_job, tmp_path, run_id="ref"), result(make_job, tmp_path, ok=False, run_id="d"),
                          ["kill:node1@t=5.0"])
    assert broken.failures[0].startswith("the job did not complete under the faults")
    no_reference = ChaosVerdict(1, result(make_job, tmp_path, ok=False, run_id="ref"), None, [])
    assert no_reference.failures == ["the undisturbed run failed (exit code 1): nothing to compare with"]
    assert no_reference.exit_code == 1


# --- the command's input --------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--faults", "0"], "--faults"),
    (["--kinds", "kill,nope"], "no fault kind 'nope'"),
    (["--rtol", "-1"], "--rtol"),
    (["--compare", "/etc/passwd"], "give a path relative to the work directory"),
    (["--detach"], "unrecognized arguments: --detach"),
])
def test_bad_chaos_input_is_one_line_and_exit_2(argv, message, tmp_path):
    (tmp_path / "job.py").write_text("print('hi')\n")
    proc = orchestrate("chaos", "--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"), *argv, "--",
                       "job.py", env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing copied, nothing run
