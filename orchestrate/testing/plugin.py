"""The pytest plugin (registered through the ``pytest11`` entry point, so installing the package
is enough): the ``ddp_cluster`` fixture and its options.

::

    def test_trains_on_two_nodes(ddp_cluster):
        result = ddp_cluster.run("train.py", "--epochs", "1", nodes=2, nproc_per_node=2, cpu=True)
        assert result.succeeded          # a failure shows the root cause and the rank's last lines
        assert "replicas identical" in result.output

Options: ``--ddp-image IMAGE`` (every run's node image), ``--ddp-keep`` (keep a failing test's
nodes for a look). Runs get unique projects, so tests may run at once under pytest-xdist.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import pytest

from orchestrate.testing.cluster import DdpCluster


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("ddp-compose", "multi-node DDP runs (the ddp_cluster fixture)")
    group.addoption("--ddp-image", default=None, metavar="IMAGE",
                    help="node image of every ddp_cluster run (default: ddp-compose-node:latest)")
    group.addoption("--ddp-keep", action="store_true",
                    help="keep the nodes of a failing test's runs for a look (they are removed when it passes)")


def pytest_configure(config: Any) -> None:
    """Note when the session began: a file a job loads that was written since is another test's save."""
    config.ddp_session_began = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    """Let the fixture know whether its test failed (for --ddp-keep)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.ddp_test_failed = report.failed


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: Any, settings: Any) -> None:
    """pytest-timeout's limit for this test, as it starts its timer (before the fixtures, or, with
    func_only, before the test's body): a ``ddp_cluster`` run then ends its job with where every
    rank waits, and tears down, before that limit ends the test with no word of the ranks.
    Returns None: pytest-timeout sets its timer as ever."""
    item.ddp_test_limit = (time.monotonic() + float(settings.timeout), float(settings.timeout))


@pytest.fixture
def ddp_cluster(request: Any, tmp_path: Any) -> Iterator[DdpCluster]:
    """Runs jobs across simulated nodes; see :class:`orchestrate.testing.cluster.DdpCluster`.
    The work directory defaults to the directory of the test file, which its tests share: a job
    that loads a file it held before the run, written since the session began (another test's save),
    is warned of (:class:`~orchestrate.testing.cluster.LoadedFromBeforeWarning`)."""
    cluster = DdpCluster(request.path.parent, tmp_path / "runs", image=request.config.getoption("--ddp-image"),
                         keep_failed=request.config.getoption("--ddp-keep"),
                         test_limit=lambda: getattr(request.node, "ddp_test_limit", None),
                         session_began=getattr(request.config, "ddp_session_began", None))
    yield cluster
    print_past_the_capture(request.config, cluster.finish(getattr(request.node, "ddp_test_failed", True)))


def print_past_the_capture(config: Any, lines: list[str]) -> None:
    """Print ``lines`` (what ``--ddp-keep`` kept) on the terminal as the test ends, past pytest's
    capture, as ``capsys.disabled()`` does, but through the capture manager itself: the fixture
    asks for no capture fixture, which would keep its test from asking for another (``capfd``:
    "cannot use capfd and capsys at the same time")."""
    if not lines:
        return
    capture = config.pluginmanager.getplugin("capturemanager")  # None under -p no:capture: nothing to pass
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        for line in lines:
            print(f"\n[ddp-compose] {line}", flush=True)
