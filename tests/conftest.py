from __future__ import annotations

import collections
import io
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrate.config.request import HostFacts  # noqa: E402
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


# A fake run's job ends within seconds; one that does not (the code under test stopped nothing, a
# mutant) is stopped and fails after this long, never waits for the suite's time limit.
JOB_LIMIT_S = 20.0


@pytest.fixture
def make_run(tmp_path: Path):
    """A Run whose work and runs directories live in tmp_path, with no host environment or
    user unless ``host`` gives them, on the CPU unless GPUs are asked for; ``client`` and ``out``
    are the caller's."""
    from orchestrate.config.request import RunRequest
    from orchestrate.launch.run import Run
    from tests.fakes import FakeCompose

    def make(run_id: str = "test-run", *, client=None, out=None, target=(), timeout_s: float = JOB_LIMIT_S,
             host: Optional[HostFacts] = None, **options) -> Run:
        options = {"workdir": tmp_path, "runs_dir": tmp_path / "runs", **options}
        options.setdefault("cpu", not options.get("gpus_per_node"))
        request = RunRequest.from_options(tuple(target), **options)
        return Run(request, client=client, out=out or io.StringIO(), host=host or HostFacts(), run_id=run_id,
                   compose_factory=FakeCompose, timeout_s=timeout_s)

    return make


def start_order(item: pytest.Item) -> int:
    """The slow tests first, then the other real-process ones (tests/integration, tests/workers),
    the unit tests last: xdist hands tests out in this order, so the short ones fill the workers
    at the end instead of a slow test running on alone after every other one has ended."""
    if item.get_closest_marker("slow"):
        return 0
    return 2 if "tests/unit/" in item.nodeid else 1


def spread_by_file(items: list[pytest.Item]) -> dict[str, float]:
    """Each test's place among its own file's tests, as a fraction (a file of 4: 0, 0.25, 0.5,
    0.75), by node id: sorted by it, each file's tests are spread evenly through the list."""
    paths = [item.nodeid.split("::", 1)[0] for item in items]
    sizes = collections.Counter(paths)
    seen: collections.Counter[str] = collections.Counter()
    places = {}
    for item, path in zip(items, paths):
        places[item.nodeid] = seen[path] / sizes[path]
        seen[path] += 1
    return places


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The slow tests are spread by file: one file's slow tests are alike (the chaos checks all
    # sleep through a job's 15 s start-up), and started side by side they left the cores idle.
    places = spread_by_file([item for item in items if start_order(item) == 0])
    items.sort(key=lambda item: (start_order(item), places.get(item.nodeid, 0.0)))  # stable
