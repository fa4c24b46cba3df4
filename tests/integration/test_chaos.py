"""``chaos`` on real nodes: a job whose resume is right survives a killed node and ends where the
undisturbed run ends (exit 0); one whose resume forgets the optimizer's momentum is caught
(exit 1, naming the file and its largest difference)."""
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

    def check(*args: str) -> tuple[int, str]:
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        shutil.copy(JOBS / "resume_training.py", workdir)
        out = io.StringIO()
        code = main(["chaos", "--nodes", "2", "--workdir", str(workdir), "--runs-dir", str(runs_dir),
                     "--rdzv-timeout", "30", "--collective-timeout", "20", "--faults", "1", "--seed", "5",
                     "--kinds", "kill", "--compare", "final.pt", *args], out=out)
        return code, out.getvalue()

    yield check
    for run_dir in runs_dir.glob("chaos-*/runs/*"):
        remove_project(docker_client, f"ddp-{run_dir.name}")


def run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("runs/chaos-*/runs/*"))


def test_a_right_resume_survives_a_killed_node_and_ends_where_the_undisturbed_run_ends(chaos, docker_client,
                                                                                       tmp_path):
    code, output = chaos("--", "resume_training.py", "--steps", "30")
    assert code == 0, output[-5000:]
    schedule = re.search(r"\[chaos\] run 2 of 2: the same job with 1 fault\(s\) drawn from seed 5 over steps 2\.\.29:"
                         r" (kill:node\d@step=(\d+))", output)
    assert schedule, output[-5000:]
    spec, step = schedule[1], int(schedule[2])
    assert re.search(rf"{re.escape(spec)} +yes +[\d.]+ s +{step}", output), output[-3000:]
    assert re.search(r"compared final\.pt: matches \(tensors; largest difference 0 at \w+\)", output)
    assert "VERDICT HOLDS: the job survived 1 fault(s)" in output
    assert re.search(r"recovery: node\d rejoined after injected fault", output)

    undisturbed, disturbed = run_dirs(tmp_path)
    record = json.loads((disturbed / "chaos.json").read_text())
    assert record["holds"] is True and record["schedule"][0]["fault"] == spec
    page = (disturbed / "report.html").read_text()
    assert 'id="chaos-verdict"' in page and "The verdict holds" in page and spec in page
    # each run in its own copy: the work directory itself has no checkpoint, each copy its own
    assert not (tmp_path / "work" / "checkpoint.pt").exists()
    assert list((tmp_path / "runs").glob("chaos-*/undisturbed/final.pt"))
    for run_dir in (undisturbed, disturbed):
        assert leftovers(docker_client, f"ddp-{run_dir.name}") == []


def test_a_resume_that_forgets_the_momentum_is_caught_naming_the_file_and_the_difference(chaos, tmp_path):
    code, output = chaos("--", "resume_training.py", "--steps", "30", "--forget-momentum")
    assert code == 1, output[-5000:]
    assert "SUCCEEDED" in output  # the job itself ended well: only the comparison can tell
    difference = re.search(r"final\.pt: differs \(tensors; largest difference ([\d.e-]+) at (\w+)\)", output)
    assert difference and float(difference[1]) > 1e-4, output[-3000:]
    assert "VERDICT DOES NOT HOLD:" in output
    record = json.loads((run_dirs(tmp_path)[1] / "chaos.json").read_text())
    assert record["holds"] is False and record["comparisons"][0]["equal"] is False
