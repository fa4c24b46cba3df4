from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrate.config.run_config import RunConfig  # noqa: E402
from orchestrate.plan.make import make_plan  # noqa: E402
from orchestrate.plan.model import JobPlan


@pytest.fixture
def make_job(tmp_path: Path):
    """Plan a job whose work and runs directories live in tmp_path."""

    def make(run_id: str = "test-run", **overrides) -> JobPlan:
        options = dict(workdir=tmp_path, runs_dir=tmp_path / "runs")
        options.update(overrides)
        return make_plan(RunConfig(**options), run_id)

    return make
