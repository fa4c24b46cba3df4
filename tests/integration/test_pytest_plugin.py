"""The pytest plugin as a user's suite uses it, run by pytest itself (pytester) against real
nodes: a passing job and a failing rank, two tests at once under xdist, and --ddp-keep."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.integration.conftest import ROOT, remove_project

pytestmark = pytest.mark.integration
pytest_plugins = ["pytester"]

USERS_TESTS = '''
def test_a_world_of_four(ddp_cluster):
    result = ddp_cluster.run("-m", "app.hello", nodes=2, nproc_per_node=2, cpu=True)
    assert result.succeeded and result.exit_code == 0
    assert any("world_size=4" in line for line in result.rank_output(3))
    assert result.report.is_file() and result.run_dir.is_dir()
    assert result.faults == [] and result.recoveries == []


def test_rank_3_fails(ddp_cluster):
    result = ddp_cluster.run("fail_rank.py", "--fail-rank", "3", nodes=2, nproc_per_node=2, cpu=True)
    assert result.exit_code == 1
    assert (result.root_cause.node, result.root_cause.rank) == ("node1", 3)
    assert "injected failure on rank 3" in result.root_cause.exception
    assert result.succeeded  # fails on purpose: its message must say why
'''


def projects_of(text: str) -> set[str]:
    return {f"ddp-{run}" for run in re.findall(r"run (\d{8}-\d{6}-[0-9a-f]{6})", text)}


def test_the_fixture_runs_a_passing_job_and_names_a_failing_rank_two_tests_at_once(pytester, docker_client):
    shutil.copy(ROOT / "tests" / "jobs" / "fail_rank.py", pytester.path / "fail_rank.py")
    pytester.makepyfile(test_users_job=USERS_TESTS)
    outcome = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-rA", timeout=600)
    text = outcome.stdout.str()
    try:
        outcome.assert_outcomes(passed=1, failed=1)
        # The failed assertion on `succeeded` says why: the root cause first, the failing rank's
        # last lines last, and the run's summary with the whole traceback in the captured output.
        explained = re.search(r"where False = (RunResult\(.*)\.succeeded", text)
        assert explained, text[-4000:]
        assert re.match(r"RunResult\(\S+: FAILED \(exit code 1\): node1 rank 3 failed \(exit code 1\):"
                        r" RuntimeError: inj", explained[1]), explained[1]
        assert explained[1].endswith("| RuntimeError: injected failure on rank 3)"), explained[1]
        assert 'raise RuntimeError(f"injected failure on rank {rank}")' in text
        assert "FAILED: node1 rank 3 failed (exit code 1): RuntimeError: injected failure on rank 3" in text
        assert len(projects_of(text)) == 2  # each test had its own run
        assert [c.name for c in docker_client.containers.list(all=True, ignore_removed=True)
                if any(c.name.startswith(p) for p in projects_of(text))] == []
    finally:
        for project in projects_of(text):
            remove_project(docker_client, project)


@pytest.mark.slow
def test_ddp_keep_keeps_a_failing_tests_nodes_and_removes_a_passing_ones(pytester, docker_client):
    shutil.copy(ROOT / "tests" / "jobs" / "fail_rank.py", pytester.path / "fail_rank.py")
    pytester.makepyfile(test_users_job=USERS_TESTS)
    outcome = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ddp-keep", "-s", timeout=600)
    text = outcome.stdout.str()
    try:
        outcome.assert_outcomes(passed=1, failed=1)
        kept = re.findall(r"\[ddp-compose\] kept run (\S+) for a look .* remove it with: python -m orchestrate down \1",
                          text)
        assert len(kept) == 1, text[-3000:]
        live = {c.labels.get("com.docker.compose.project") for c in docker_client.containers.list(all=True, ignore_removed=True)}
        assert f"ddp-{kept[0]}" in live  # the failing test's nodes, kept
        assert not (projects_of(text) - {f"ddp-{kept[0]}"}) & live  # the passing test's, removed
    finally:
        for project in projects_of(text):
            remove_project(docker_client, project)


def test_the_ci_recipes_tests_pass_as_its_pytest_command_runs_them(docker_client, tmp_path):
    # examples/ci/ stands for a user's repository: its recipe's pytest command, run there
    recipe = ROOT / "examples" / "ci"
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/multinode", "-n", "2", "-ra", "-p", "no:cacheprovider",
                           f"--basetemp={tmp_path / 'ddp-test-runs'}"], cwd=recipe, capture_output=True, text=True,
                          timeout=900)
    text = done.stdout + done.stderr
    try:
        assert done.returncode == 0, text[-4000:]
        assert re.search(r"\b2 passed\b", text), text[-2000:]
        assert len(list((tmp_path / "ddp-test-runs").glob("**/report.html"))) == 2  # what the recipe keeps
    finally:
        for project in projects_of(text):
            remove_project(docker_client, project)


USERS_CHAOS_TESTS = '''
def test_resume_survives_a_killed_node(ddp_cluster):
    verdict = ddp_cluster.chaos("resume_training.py", "--steps", "20", faults=1, seed=2, kinds="kill",
                                compare=["final.pt"], cpu=True)
    assert verdict.holds, verdict.format()
    assert verdict.status == "HOLDS" and verdict.trials[0].strikes[0].resumed


def test_a_forgotten_momentum_is_caught(ddp_cluster):
    verdict = ddp_cluster.chaos("resume_training.py", "--steps", "20", "--forget-momentum", faults=1, seed=2,
                                kinds="kill", compare=["final.pt"], cpu=True)
    assert verdict.status == "DOES NOT HOLD" and verdict.exit_code == 1
    assert verdict.failures[0].startswith("final.pt: differs")
'''


@pytest.mark.slow
def test_the_fixtures_chaos_returns_the_verdict_of_a_right_and_a_broken_resume(pytester, docker_client):
    shutil.copy(ROOT / "tests" / "jobs" / "resume_training.py", pytester.path / "resume_training.py")
    pytester.makepyfile(test_users_chaos=USERS_CHAOS_TESTS)
    outcome = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-rA", timeout=600)
    text = outcome.stdout.str()
    try:
        outcome.assert_outcomes(passed=2)
        assert len(projects_of(text)) >= 4, text[-3000:]  # a reference and a trial each
        live = {c.labels.get("com.docker.compose.project") for c in docker_client.containers.list(all=True, ignore_removed=True)}
        assert not projects_of(text) & live
    finally:
        for project in projects_of(text):
            remove_project(docker_client, project)
