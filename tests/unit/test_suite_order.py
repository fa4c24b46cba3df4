"""The suite's own start order (tests/conftest.py) and its default worker count
(scripts/run-tests.sh): the slow tests first, the unit tests last; one worker more than the
cores, capped by memory; and the installed pytest and pytest-xdist keeping each xdist_group on
one worker."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, pytest_collection_modifyitems


class Collected:
    """What the ordering reads of a collected test: its node id and its marks."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name: str):
        return pytest.mark.slow.mark if name in self.marks else None


def test_each_files_slow_tests_are_spread_through_the_slow_ones():
    items = [Collected("tests/integration/test_chaos.py::one", "slow"),
             Collected("tests/integration/test_chaos.py::two", "slow"),
             Collected("tests/integration/test_chaos.py::three", "slow"),
             Collected("tests/integration/test_chaos.py::four", "slow"),
             Collected("tests/integration/test_bench.py::one", "slow"), Collected("tests/unit/test_b.py::one"),
             Collected("tests/workers/test_train.py::one", "slow"),
             Collected("tests/workers/test_train.py::two", "slow")]
    pytest_collection_modifyitems(items)
    assert [item.nodeid for item in items] == [
        "tests/integration/test_chaos.py::one", "tests/integration/test_bench.py::one",
        "tests/workers/test_train.py::one", "tests/integration/test_chaos.py::two",
        "tests/integration/test_chaos.py::three", "tests/workers/test_train.py::two",
        "tests/integration/test_chaos.py::four", "tests/unit/test_b.py::one"]


def test_slow_tests_start_first_and_unit_tests_last_each_kind_in_collection_order():
    items = [Collected("tests/integration/test_a.py::quick"), Collected("tests/unit/test_b.py::one"),
             Collected("tests/integration/test_c.py::long", "slow"), Collected("tests/unit/test_b.py::two"),
             Collected("tests/workers/test_d.py::host"), Collected("tests/workers/test_e.py::long", "slow")]
    pytest_collection_modifyitems(items)
    assert [item.nodeid for item in items] == [
        "tests/integration/test_c.py::long", "tests/workers/test_e.py::long",
        "tests/integration/test_a.py::quick", "tests/workers/test_d.py::host",
        "tests/unit/test_b.py::one", "tests/unit/test_b.py::two"]


def shell_function(name: str) -> str:
    """The text of run-tests.sh's own bash function NAME, to run apart from the set-up it sources."""
    script = (ROOT / "scripts" / "run-tests.sh").read_text()
    function = script[script.index(f"{name}() {{"):]
    return function[:function.index("\n}\n") + 3]


@pytest.mark.parametrize("cores, mem_gib, workers", [(2, 23, 3), (8, 64, 9), (16, 24, 8), (1, 2, 2)])
def test_the_default_worker_count_follows_the_cores_within_the_memory(tmp_path: Path, cores, mem_gib, workers):
    # stand-ins for nproc and /proc/meminfo, read by the script's own function
    function = shell_function("default_workers")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {mem_gib * 1048576} kB\nMemFree:        1 kB\n")
    shell = (f"nproc() {{ echo {cores}; }}\n" + function.replace("/proc/meminfo", str(meminfo))
             + "default_workers\n")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(workers)


@pytest.mark.parametrize("args, one_session", [
    # the whole suite, filtered or not: two sessions, the unit tests beside the rest
    ((), False),
    (("-k", "failing_rank"), False),
    (("-m", "not integration", "-x"), False),
    (("-n", "4"), False),
    (("--numprocesses=4", "--timeout=900"), False),
    # an option's value that is also a path here is no test path: -k tests, -c pyproject.toml
    (("-k", "tests"), False),
    (("-c", "pyproject.toml", "-p", "tests", "--ignore", "tests/workers"), False),
    (("--deselect", "tests/unit/test_cli.py::test_x", "--basetemp", "tests"), False),
    # a test path, one process, or the cache of failures: one session
    (("tests/unit",), True),
    (("-q", "tests/unit/test_cli.py"), True),
    (("tests/unit/test_cli.py::test_no_such_test",), True),
    (("-k", "x", "tests"), True),
    (("-n", "0"), True),
    (("-n0",), True),
    (("--numprocesses", "0"), True),
    (("--numprocesses=0",), True),
    (("--lf",), True),
    (("-x", "--last-failed"), True),
    (("--ff",), True), (("--failed-first",), True), (("--nf",), True), (("--new-first",), True),
    (("--sw",), True), (("--stepwise",), True), (("--sw-skip",), True), (("--stepwise-skip",), True),
    # a path that does not exist is a filter pytest will refuse, not a test path
    (("no/such/dir",), False),
])
def test_the_whole_suite_runs_two_sessions_and_a_named_test_path_or_one_process_one(args, one_session):
    shell = shell_function("names_tests") + 'names_tests "$@"\n'
    done = subprocess.run(["bash", "-c", shell, "run-tests.sh", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == (0 if one_session else 1), (args, done.stderr)


# A suite of four tests in two groups, each writing down the xdist worker that ran it. Without
# grouping, xdist hands the four out in turn to the two workers, so each group's pair is split.
GROUPED_SUITE = """
import os
import pytest

def ran(name):
    with open(os.path.join(os.environ["RAN_DIR"], name), "w") as handle:
        handle.write(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.xdist_group("first")
def test_first_1(): ran("first_1")

@pytest.mark.xdist_group("first")
def test_first_2(): ran("first_2")

@pytest.mark.xdist_group("second")
def test_second_1(): ran("second_1")

@pytest.mark.xdist_group("second")
def test_second_2(): ran("second_2")
"""


def test_the_installed_pytest_and_xdist_keep_each_group_on_one_worker(tmp_path: Path):
    # pytest 9.2 with pytest-xdist 3.8.0 silently spread grouped tests (pytest-xdist#1386): this
    # fails there, which is why pyproject.toml keeps pytest below 9.2
    (tmp_path / "test_grouped.py").write_text(GROUPED_SUITE)
    ran = tmp_path / "ran"
    ran.mkdir()
    env = {**os.environ, "RAN_DIR": str(ran)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-q", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers = {path.name: path.read_text() for path in ran.iterdir()}
    assert len(workers) == 4, workers
    assert workers["first_1"] == workers["first_2"], workers
    assert workers["second_1"] == workers["second_2"], workers
