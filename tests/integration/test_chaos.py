"""``chaos`` on real nodes: a job whose resume is right survives killed nodes in three trials and
ends where the undisturbed run ends (exit 0); one whose resume forgets the optimizer's momentum
is caught (exit 1, naming the file and its largest difference). A user's own script, which
saves with torch.distributed.checkpoint after 15 s of start-up and reports no steps: a right
resume holds, a forgotten optimizer does not, and a job that saves only at its end is
INCONCLUSIVE."""
from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import leftovers, remove_project

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


@pytest.fixture
def chaos(docker_client, tmp_path):
    """Run ``chaos`` in-process on a copy of tests/jobs/resume_training.py; remove every run's
    project afterwards, whatever happened."""
    runs_dir = tmp_path / "runs"

    def check(*args: str, job: str = "resume_training.py") -> tuple[int, str]:
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        shutil.copy(JOBS / job, workdir)
        out = io.StringIO()
        code = main(["chaos", "--nodes", "2", "--workdir", str(workdir), "--runs-dir", str(runs_dir),
                     "--rdzv-timeout", "30", "--collective-timeout", "20", "--compare", "final.pt", *args], out=out)
        return code, out.getvalue()

    yield check
    for run_dir in runs_dir.glob("chaos-*/runs/*"):
        remove_project(docker_client, f"ddp-{run_dir.name}")


def run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("runs/chaos-*/runs/*"))


@pytest.mark.slow
def test_a_right_resume_survives_a_killed_node_in_three_trials_and_ends_where_the_undisturbed_run_ends(
        chaos, docker_client, tmp_path):
    code, output = chaos("--faults", "1", "--seed", "5", "--kinds", "kill", "--trials", "3", "--compare-steps", "--",
                         "resume_training.py", "--steps", "30")
    assert code == 0, output[-5000:]
    assert "[chaos] the undisturbed job: 30 steps in" in output and "it first wrote checkpoint.pt, before step" in output
    schedules = re.findall(r"\[chaos\] run (\d) of 4: the same job with 1 fault\(s\) drawn from seed (\d):"
                           r" (kill:node\d@step=(\d+))", output)
    assert [(run, seed) for run, seed, _, _ in schedules] == [("2", "5"), ("3", "6"), ("4", "7")], output[-5000:]
    for _, seed, spec, step in schedules:
        # each fault after the first save, and the attempt after it resumed from the checkpoint before (the
        # save named, never checkpoint.pt.tmp where a walk caught it before its rename: "+1 more" then), which both
        # ranks loaded (resume_training.py)
        row = re.search(rf"{re.escape(spec)} +[\d.]+ s, step {step} +{step} step\(s\), [\d.]+ s training +yes:"
                        rf" checkpoint\.pt(?: \(\+1 more\))? +resumed from step (\d+)"
                        rf" \(checkpoint\.pt, loaded by ranks 0, 1\): (\d+) step\(s\) redone", output)
        assert row and int(row[1]) == int(step) and int(row[2]) == 0, output[-5000:]  # it saved every step
        assert int(step) >= 3
    assert len(re.findall(r"compared final\.pt: matches \(tensors; every value equal\)", output)) == 3
    assert len(re.findall(r"compared per-step metrics: \d+ value\(s\) match the undisturbed run's", output)) == 3
    assert "VERDICT HOLDS: every one of 3 trials held" in output
    assert re.search(r"^5 +kill:node\d@step=\d+ +1 +0 +HOLDS$", output, re.M), output[-2000:]

    undisturbed, *trials = run_dirs(tmp_path)
    assert len(trials) == 3
    for disturbed in trials:
        record = json.loads((disturbed / "chaos.json").read_text())
        assert record["holds"] is True and record["reference_run"] == undisturbed.name
        page = (disturbed / "report.html").read_text()
        assert 'id="chaos-verdict"' in page and "The verdict holds" in page
        assert f'href="../{undisturbed.name}/report.html"' in page  # the report links to the reference
    # each run in its own copy: the work directory itself has no checkpoint, each copy its own
    assert not (tmp_path / "work" / "checkpoint.pt").exists()
    assert len(list((tmp_path / "runs").glob("chaos-*/with-faults-seed*/final.pt"))) == 3
    for run_dir in (undisturbed, *trials):
        assert leftovers(docker_client, f"ddp-{run_dir.name}") == []


@pytest.mark.slow
def test_a_resume_that_forgets_the_momentum_is_caught_naming_the_file_and_the_difference(chaos, tmp_path):
    code, output = chaos("--faults", "1", "--seed", "5", "--kinds", "kill", "--", "resume_training.py", "--steps", "30",
                         "--forget-momentum")
    assert code == 1, output[-5000:]
    assert "SUCCEEDED" in output  # the job itself ended well: only the comparison can tell
    difference = re.search(r"final\.pt: differs \(tensors; largest difference ([\d.e-]+) at (\w+)\)", output)
    assert difference and float(difference[1]) > 1e-4, output[-3000:]
    assert "VERDICT DOES NOT HOLD:" in output
    record = json.loads((run_dirs(tmp_path)[1] / "chaos.json").read_text())
    assert record["holds"] is False and record["status"] == "DOES NOT HOLD" and record["comparisons"][0]["equal"] is False


# A user's script: DCP saves every 3 steps, 15 s of start-up, no steps reported (Adam's are counted)
DCP_JOB = ("--seed", "3", "--", "dcp_resume.py", "--steps", "30", "--startup", "15")


@pytest.mark.slow
def test_a_users_dcp_resume_holds_with_every_fault_after_a_checkpoint_and_a_resumed_attempt(chaos):
    code, output = chaos("--faults", "2", "--compare-steps", *DCP_JOB, job="dcp_resume.py")
    assert code == 0, output[-5000:]
    # no metric of its own: the digests of its parameters at each counted step match, every attempt's
    compared = re.search(r"compared per-step metrics: (\d+) value\(s\) match the undisturbed run's", output)
    assert compared and int(compared[1]) >= 60, output[-5000:]  # 30 steps and those redone, on 2 ranks
    assert re.search(r"it first wrote ckpt/step_3/\S+, before step 4", output), output[-5000:]
    first, second = re.search(r"drawn from seed 3: (\S+@step=\d+) (\S+@step=\+\d+)", output).groups()
    for spec in (first, second):  # in training time, after a checkpoint, followed by a resume
        # (the directory the resume loaded named, by both ranks: dcp.load is seen as torch.load is)
        assert re.search(rf"{re.escape(spec)} .* [1-9]\d* step\(s\), [\d.]+ s training +yes: ckpt/\S+ .*"
                         r"resumed from step ([1-9]\d*) \(ckpt/step_\1, loaded by ranks 0, 1\): \d+ step\(s\) redone",
                         output), output[-5000:]
    assert "VERDICT HOLDS" in output


@pytest.mark.slow
def test_a_users_dcp_resume_that_forgets_the_optimizer_does_not_hold(chaos):
    code, output = chaos("--faults", "1", "--compare-steps", *DCP_JOB, "--forget-optimizer", job="dcp_resume.py")
    assert code == 1, output[-5000:]
    assert re.search(r"final\.pt: differs \(tensors; largest difference [\d.e-]+ at", output), output[-5000:]
    # and where it went wrong: the digest of its parameters at the first step after the resume
    first = re.search(r"per-step metrics: params first differs at step (\d+) \(rank \d, attempt 2\): \S+ against \S+"
                      r" undisturbed: the first step after the resume from step (\d+), so what the resume restored",
                      output)
    assert first and int(first[1]) == int(first[2]) + 1, output[-5000:]
    assert "VERDICT DOES NOT HOLD:" in output


@pytest.mark.slow
def test_a_job_that_saves_only_at_its_end_is_inconclusive_never_a_hold(chaos):
    code, output = chaos("--faults", "1", *DCP_JOB, "--save-every", "30", job="dcp_resume.py")
    assert code == 1, output[-5000:]
    assert "VERDICT INCONCLUSIVE: the check could not have caught a broken resume:" in output
    assert "no fault struck after the job had written a file in its work directory" in output
    assert "compared final.pt: matches" in output  # the files alone would have said it held
