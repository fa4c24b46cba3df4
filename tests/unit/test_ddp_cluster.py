"""The pytest plugin's fixture, where it decides without an engine: what it refuses and what it
says at a test's end."""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Iterator

import pytest

from orchestrate.config.fault_spec import FaultAction
from orchestrate.errors import UsageError
from orchestrate.testing.cluster import DdpCluster

pytest_plugins = ["pytester"]


def test_chaos_refuses_a_static_rendezvous_it_would_have_replaced(tmp_path):
    cluster = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO())
    with pytest.raises(UsageError, match=r"ddp_cluster.chaos runs every run elastic \(c10d\), which its faults"
                                         r" need: drop rdzv='static'"):
        cluster.chaos("train.py", rdzv="static")
    assert cluster.checks == 0 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("keep, failed, said", [
    (True, True, True),    # a failing test under --ddp-keep: the check's runs are not kept, and it is said
    (True, False, False),  # a passing one: nothing to say
    (False, True, False),  # no --ddp-keep: nothing was asked
])
def test_a_failing_test_under_ddp_keep_says_its_chaos_runs_were_not_kept(tmp_path, keep, failed, said):
    cluster = DdpCluster(tmp_path, tmp_path / "runs", keep_failed=keep, out=io.StringIO())
    cluster.checks = 1
    lines = cluster.finish(test_failed=failed)
    assert lines == ([f"the chaos check's runs are not kept (--ddp-keep keeps ddp_cluster.run's): their logs and"
                      f" pages are under {tmp_path / 'runs'}"] if said else [])


@pytest.mark.parametrize("failed", [False, True])
def test_a_run_whose_teardown_failed_is_said_at_the_tests_end_though_it_succeeded(tmp_path, make_job, failed):
    """A passing test's captured summary is never shown: its run's project, left behind, went unsaid."""
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.node_result import NodeResult
    from orchestrate.outcome.states import NodePhase

    left = "could not remove project ddp-r1; run: docker compose -p ddp-r1 down -v"
    nodes = [NodeResult(node, NodePhase.SUCCEEDED, 0) for node in make_job(nodes=2).nodes]
    cluster = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO())
    cluster.results = [RunResult("r1", tmp_path / "runs" / "r1", nodes, Timings(), teardown_error=left),
                       RunResult("r2", tmp_path / "runs" / "r2", nodes, Timings())]
    assert cluster.finish(test_failed=failed) == [f"run r1: TEARDOWN FAILED (exit code 2, succeeded=True): {left}"]


def test_a_tests_own_time_limit_ends_a_runs_job_in_time_to_stop_it_and_say_why(tmp_path, make_run):
    """pytest-timeout's 40 s for a test: its runs' jobs end with the nodes' grace and a margin to
    spare, so the run's time limit (its look at every rank, its summary) comes before the test's;
    a run's own shorter limit is left as it is."""
    import time

    from orchestrate.testing.cluster import STOP_MARGIN_S

    now = time.monotonic()
    cluster = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO(), test_limit=lambda: (now + 40.0, 40.0))
    at, why = cluster.ends_by(stop_grace_s=10.0)
    assert at == now + 40.0 - 10.0 - STOP_MARGIN_S
    assert why == "the test's own time limit, pytest-timeout's 40 s, left it no longer"
    assert DdpCluster(tmp_path, tmp_path / "runs").ends_by(10.0) is None  # no limit: nothing to end by

    job = make_run(timeout_s=600)
    job.ends_by = (job.clock() + 25.0, why)
    limit, said = job.time_limit()
    assert 24.0 <= limit <= 25.0 and limit == int(limit) and said == why  # what the test's limit leaves
    job.timeout_s = 10.0
    assert job.time_limit() == (10.0, "")  # the run's own limit comes first
    job.ends_by = (job.clock() - 5.0, why)
    assert job.time_limit() == (1.0, why)  # already past: at once, never a negative limit


def test_a_chaos_check_under_a_tests_own_time_limit_ends_its_runs_by_it_too(tmp_path, monkeypatch):
    """pytest-timeout's 300 s: each run of the check ends by the limit less the grace and margin, so
    the check ends INCONCLUSIVE with why, not killed by pytest-timeout with the launcher's threads."""
    import time

    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.testing.cluster import STOP_MARGIN_S

    now = time.monotonic()
    cluster = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO(), test_limit=lambda: (now + 300.0, 300.0))
    (tmp_path / "train.py").write_text("print('hi')\n")
    seen = []

    def run(check):
        seen.append(check.ends_by)
        raise KeyboardInterrupt  # nothing more is needed of it
    monkeypatch.setattr(ChaosCheck, "run", run)
    with pytest.raises(KeyboardInterrupt):
        cluster.chaos("train.py", nodes=2, cpu=True, stop_grace=5)
    assert seen == [(now + 300.0 - 5.0 - STOP_MARGIN_S,
                     "the test's own time limit, pytest-timeout's 300 s, left it no longer")]


@pytest.mark.parametrize("call", ["run", "chaos"])
def test_a_tests_own_time_limit_that_leaves_a_run_no_time_is_refused_before_anything_is_brought_up(tmp_path,
                                                                                                  monkeypatch, call):
    """pytest-timeout's 3 s: the run once brought its nodes up, then ended its job at once ("did not end within
    1 s"), or pytest-timeout ended the test mid bring-up."""
    import time

    cluster, runs = runs_asked(tmp_path, monkeypatch)
    _, checks = checks_asked(tmp_path, monkeypatch)
    cluster.test_limit = lambda: (time.monotonic() + 3.0, 3.0)
    with pytest.raises(UsageError) as refused:
        getattr(cluster, call)("train.py", cpu=True)
    assert str(refused.value) == (
        f"ddp_cluster.{call}: the test's own time limit, pytest-timeout's 3 s, leaves this run no time: it ends its job"
        " 20 s before that limit (stop_grace=10 s to stop its nodes, 10 s to look at every rank and tear down), and its"
        " nodes need up to ready_timeout=60 s to come up before the job runs: give the test a longer limit"
        " (@pytest.mark.timeout)")
    assert not runs and not checks and cluster.checks == 0


def test_a_tests_own_time_limit_shorter_than_the_ready_timeout_gives_the_nodes_what_it_leaves_and_says_so(
        tmp_path, monkeypatch):
    """pytest-timeout's 40 s and the nodes' 60 s to come up: a slow bring-up was ended by pytest-timeout, not by the
    run with its teardown and its word of why."""
    import time

    cluster, asked = runs_asked(tmp_path, monkeypatch)
    cluster.test_limit = lambda: (time.monotonic() + 40.0, 40.0)
    with pytest.raises(Started):
        cluster.run("train.py", cpu=True)
    [request] = asked
    assert request.ready_timeout in (19.0, 20.0)  # 40 s less the stop grace (10 s) and the margin (10 s)
    assert cluster.out.getvalue() == (
        f"[ddp-compose] the test's own time limit, pytest-timeout's 40 s, leaves this run {request.ready_timeout:g} s"
        f" to bring its nodes up and run its job, less than ready_timeout=60 s: its nodes get"
        f" {request.ready_timeout:g} s to come up, so that the run, not the limit, ends a slower bring-up\n")
    cluster.test_limit = lambda: (time.monotonic() + 300.0, 300.0)
    with pytest.raises(Started):
        cluster.run("train.py", cpu=True, ready_timeout=30)
    assert asked[1].ready_timeout == 30.0  # a limit that leaves it whole: nothing said


@pytest.mark.timeout(60)
def test_a_job_ended_by_the_tests_own_time_limit_says_so_in_its_error(make_run):
    from tests.fakes import FakeDockerClient, Script, fake_engine

    job = make_run(nodes=1, stop_grace=1)
    job.ends_by = (job.clock() + 3.0, "the test's own time limit, pytest-timeout's 15 s, left it no longer")
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)])
    limits = []  # what the limit left once the nodes were up: 2 s where a loaded machine took over 0.5 s to bring them
    time_limit = job.time_limit
    job.time_limit = lambda: limits.append(time_limit()) or limits[-1]
    result = job.run()
    assert limits and 1.0 <= limits[0][0] <= 3.0
    assert result.error == (f"timed out: the job did not end within {limits[0][0]:g} s (the test's own time limit,"
                            " pytest-timeout's 15 s, left it no longer)")
    assert result.limited_by == "the test's own time limit, pytest-timeout's 15 s, left it no longer"
    from orchestrate.outcome.record import outcome_record
    assert outcome_record(result)["limited_by"] == result.limited_by  # outcome.json: told from its own timeout


def test_the_plugin_takes_the_tests_limit_as_pytest_timeout_sets_its_timer(pytester):
    pytester.makepyfile(test_limit="""
        import time
        import pytest

        @pytest.mark.timeout(30)
        def test_marked(request):
            ends_at, seconds = request.node.ddp_test_limit
            assert seconds == 30.0 and 25 < ends_at - time.monotonic() <= 30

        @pytest.mark.timeout(30, func_only=True)
        def test_body_only(request, ddp_cluster):
            ends_at, seconds = ddp_cluster.test_limit()  # set after the fixtures, read as a run starts
            assert seconds == 30.0 and 25 < ends_at - time.monotonic() <= 30

        def test_unlimited(ddp_cluster):
            assert ddp_cluster.test_limit() is None
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-o", "timeout=0")
    outcome.assert_outcomes(passed=3)


def test_a_bad_option_fails_the_test_at_its_own_line_with_runs_one_line_error(pytester):
    pytester.makepyfile(train="print('hi')\n")
    pytester.makepyfile(test_bad="""
        def test_typo(ddp_cluster):
            ddp_cluster.run("train.py", nodes=2, colective_timeout=10)

        def test_flag_spelling(ddp_cluster):
            ddp_cluster.run("train.py", fault=["kill:node1@t=1"])

        def test_no_script(ddp_cluster):
            ddp_cluster.run("trian.py")

        def test_chaos_typo(ddp_cluster):
            ddp_cluster.chaos("train.py", colective_timeout=10)
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcome.assert_outcomes(failed=4)
    text = outcome.stdout.str()
    assert "E       orchestrate.errors.UsageError: no run option 'colective_timeout': did you mean" \
           " 'collective_timeout'? (options: " in text
    assert "E       orchestrate.errors.UsageError: no run option 'fault': --fault's keyword is 'faults'" in text
    assert "E       orchestrate.errors.UsageError: script 'trian.py' not found in work directory" in text
    # the test's own line, and none of the plugin's or the library's frames
    assert text.count('>       ddp_cluster.run("train.py", nodes=2, colective_timeout=10)') == 1
    assert "orchestrate/testing/cluster.py" not in text and "orchestrate/config/" not in text
    assert "orchestrate/launch/" not in text and "During handling" not in text


def test_the_fixture_leaves_every_capture_fixture_to_its_test_and_still_shows_what_it_kept(pytester):
    """It once asked for capsys to print --ddp-keep's lines, so a test of its could not ask for capfd
    ("cannot use capfd and capsys at the same time"); its lines still reach the terminal, past the capture."""
    pytester.makeconftest("""
        import pytest
        from orchestrate.testing.cluster import DdpCluster

        @pytest.fixture(autouse=True)
        def kept(monkeypatch):
            monkeypatch.setattr(DdpCluster, "finish", lambda self, test_failed: ["kept run r1 for a look"])
    """)
    pytester.makepyfile(test_capture="""
        def test_capsys(capsys, ddp_cluster):
            print("hello")
            assert capsys.readouterr().out == "hello\\n"

        def test_capfd(capfd, ddp_cluster):
            print("hello")
            assert capfd.readouterr().out == "hello\\n"

        def test_capsysbinary(capsysbinary, ddp_cluster):
            print("hello")
            assert capsysbinary.readouterr().out == b"hello\\n"

        def test_capfdbinary(capfdbinary, ddp_cluster):
            print("hello")
            assert capfdbinary.readouterr().out == b"hello\\n"
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcome.assert_outcomes(passed=4)
    assert outcome.stdout.str().count("\n[ddp-compose] kept run r1 for a look\n") == 4


def checks_asked(tmp_path, monkeypatch) -> tuple[DdpCluster, list]:
    """A cluster whose chaos checks are recorded as they would start, and started no further."""
    from orchestrate.chaos.check import ChaosCheck

    (tmp_path / "train.py").write_text("print('hi')\n")
    asked = []

    def run(check):
        asked.append(check)
        raise Started  # nothing more is needed of it
    monkeypatch.setattr(ChaosCheck, "run", run)
    return DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO()), asked


class Started(Exception):
    """Raised where a recorded run or check would have started."""


@pytest.mark.parametrize("kinds, compare, parsed, paths", [
    ("kill", "final.pt", ("kill",), ("final.pt",)),  # one alone: once "compared f: ...", "compared i: ..."
    (["kill", "restart"], ["final.pt", "log.txt"], ("kill", "restart"), ("final.pt", "log.txt")),
    ("kill,pause", [Path("ckpt") / "final.pt"], ("kill", "pause"), ("ckpt/final.pt",)),
    (["kill,restart", FaultAction.PREEMPT], (), ("kill", "restart", "preempt"), ()),  # as --kinds parses each
    (["kill", "pause:store"], (), ("kill", "pause:store"), ()),
])
def test_a_chaos_check_takes_one_kind_or_path_alone_or_a_list_of_them(tmp_path, monkeypatch, kinds, compare, parsed,
                                                                       paths):
    cluster, asked = checks_asked(tmp_path, monkeypatch)
    with pytest.raises(Started):
        cluster.chaos("train.py", kinds=kinds, compare=compare)
    [check] = asked
    assert tuple(str(kind) for kind in check.kinds) == parsed and check.compare == paths
    assert all(type(kind.action) is FaultAction for kind in check.kinds)  # (a name alone equals its kind, has no .lasting)


@pytest.mark.parametrize("options, said", [
    ({"kinds": ["kill", 3]}, "ddp_cluster.chaos: kinds takes fault kinds, e.g. 'kill,restart' or ['kill', 'restart'],"
                             " got 3, of type int"),
    ({"kinds": 3}, "ddp_cluster.chaos: kinds takes fault kinds, e.g. 'kill,restart' or ['kill', 'restart'], got 3"),
    ({"kinds": ["kil"]}, "--kinds: no fault kind 'kil' (kinds chaos draws: "),
    ({"compare": ["final.pt", None]}, "ddp_cluster.chaos: compare takes a path or a list of paths, got None,"
                                      " of type NoneType"),
    ({"compare": 1}, "ddp_cluster.chaos: compare takes a path or a list of paths, got 1"),
])
def test_a_chaos_check_refuses_what_is_not_a_kind_or_a_path_before_any_run(tmp_path, monkeypatch, options, said):
    """A list of kinds once failed with an AttributeError, after the undisturbed run was spent."""
    cluster, asked = checks_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as refused:
        cluster.chaos("train.py", **options)
    assert str(refused.value).startswith(said)
    assert not asked and cluster.checks == 0 and not (tmp_path / "runs").exists()


def runs_asked(tmp_path, monkeypatch) -> tuple[DdpCluster, list]:
    """A cluster whose runs' requests are recorded as the runs would start, and started no further."""
    from orchestrate.testing import cluster

    (tmp_path / "train.py").write_text("print('hi')\n")
    asked = []

    def started(request, **_):
        asked.append(request)
        raise Started
    monkeypatch.setattr(cluster, "Run", started)
    return DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO()), asked


@pytest.mark.parametrize("faults, specs", [
    ("kill-rank:1@step=5", ["kill-rank:1@step=5"]),  # one alone, as mounts= and copy_env= take one: once its characters
    (["kill-rank:1@step=5", "kill:node1@t=5"], ["kill-rank:1@step=5", "kill:node1@t=5"]),
    ((), []),
])
def test_a_run_takes_one_fault_alone_or_a_list_of_them(tmp_path, monkeypatch, faults, specs):
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(Started):
        cluster.run("train.py", faults=faults)
    [request] = asked
    assert [str(fault) for fault in request.faults] == specs


def test_a_number_or_a_path_among_a_scripts_arguments_is_taken_as_its_text(tmp_path, monkeypatch):
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(Started):
        cluster.run(Path("train.py"), "--steps", 2, "--lr", 0.5, "--data", Path("data") / "x")
    [request] = asked
    assert request.target == ("train.py", "--steps", "2", "--lr", "0.5", "--data", "data/x")


def test_a_numpy_number_among_a_scripts_arguments_is_taken_as_its_text_as_a_python_one_is(tmp_path, monkeypatch):
    """``np.int64`` is no ``int`` (nor ``np.float32`` a ``float``): they were once refused as not text."""
    np = pytest.importorskip("numpy")
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(Started):
        cluster.run("train.py", "--epochs", np.int64(2), "--workers", np.uint8(3), "--lr", np.float32(0.5),
                    "--wd", np.float64(0.25))
    [request] = asked
    assert request.target == ("train.py", "--epochs", "2", "--workers", "3", "--lr", "0.5", "--wd", "0.25")


@pytest.mark.parametrize("keyword, number", [
    ("nodes", 0), ("nodes", -1), ("nodes", 2.5), ("nproc_per_node", 0), ("gpus_per_node", -1), ("ready_timeout", -5),
    ("ready_timeout", 0), ("cpus_per_node", 0), ("cpus_per_node", 0.001), ("hang_timeout", 0), ("stop_grace", -1),
    ("rdzv_timeout", float("inf")), ("max_restarts", -1), ("master_port", 0),
])
def test_a_number_given_to_an_option_is_refused_by_the_command_lines_rule_in_its_words(tmp_path, monkeypatch, capsys,
                                                                                    keyword, number):
    """A number went round the option's parser, which only text met: ``nodes=0`` and ``hang_timeout=0`` were
    refused later in other words, ``ready_timeout=-5`` and ``cpus_per_node=0.001`` not at all (the nodes came up)."""
    from orchestrate.cli.main import build_parser
    from orchestrate.config.options import OPTIONS_BY_DEST

    flag = OPTIONS_BY_DEST[keyword].flag
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", flag, str(number)])
    cli_said = capsys.readouterr().err.strip()  # python -m orchestrate run: error: argument --nodes: ... (see --help)
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as refused:
        cluster.run("train.py", **{keyword: number})
    assert cli_said == f"python -m orchestrate run: error: argument {refused.value} (see --help)"
    assert not asked


def test_a_numpy_number_given_to_an_option_meets_the_same_rule_and_is_taken_as_a_python_one(tmp_path, monkeypatch):
    np = pytest.importorskip("numpy")
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError, match=r"^--nodes: expected a positive integer, got '0'$"):
        cluster.run("train.py", nodes=np.int64(0))
    with pytest.raises(Started):
        cluster.run("train.py", nodes=np.int64(3), cpus_per_node=np.float32(0.5))
    [request] = asked
    assert (request.nodes, request.cpus_per_node) == (3, 0.5) and type(request.nodes) is int


def test_a_number_alone_given_to_a_repeated_option_is_one_value_the_parser_refuses(tmp_path, monkeypatch):
    """``faults=3`` once raised ``TypeError: 'int' object is not iterable``, from the library's frames."""
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError, match=r"^invalid --fault '3': usage: KIND:TARGET"):
        cluster.run("train.py", faults=3)
    assert not asked


@pytest.mark.parametrize("keyword, number, taken", [
    ("nodes", 3, 3), ("cpus_per_node", 0.5, 0.5), ("ready_timeout", 30, 30.0), ("memory_per_node", 2**30, 2**30),
    ("nproc_per_node", 2, 2),
])
def test_a_good_number_given_to_an_option_is_taken_as_the_command_line_takes_its_text(tmp_path, monkeypatch, keyword,
                                                                                     number, taken):
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(Started):
        cluster.run("train.py", **{keyword: number})
    [request] = asked
    assert getattr(request, keyword) == taken and type(getattr(request, keyword)) is type(taken)


@pytest.mark.parametrize("timeout, said", [
    (0, "timeout: expected seconds above 0, e.g. 60, got '0' (None: no limit)"),
    (-5, "timeout: expected seconds above 0, e.g. 60, got '-5' (None: no limit)"),
    (float("nan"), "timeout: expected seconds, e.g. 60, got 'nan' (None: no limit)"),
    (True, "timeout, True, is of type bool: it is the job's time limit in seconds, a number above 0 (None: no limit)"),
    ("60", "timeout, '60', is of type str: it is the job's time limit in seconds, a number above 0 (None: no limit)"),
])
def test_a_job_time_limit_that_is_no_number_above_0_is_refused_at_the_call_before_any_run(tmp_path, monkeypatch,
                                                                                         timeout, said):
    """``timeout=0`` (or less) ended the job as TIMED OUT once its nodes had come up, ``True`` was taken as 1 s,
    and ``"60"`` failed with a TypeError from the launcher's frames."""
    cluster, asked = runs_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as refused:
        cluster.run("train.py", timeout=timeout)
    assert str(refused.value) == f"ddp_cluster.run: {said}"
    assert not asked and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("timeout, taken", [(600, 600.0), (0.5, 0.5), (None, None), ("np.int64", 30.0),
                                            ("Fraction", 0.5)])
def test_a_job_time_limit_of_seconds_above_0_or_none_is_taken(tmp_path, monkeypatch, timeout, taken):
    from fractions import Fraction

    from orchestrate.testing import cluster as plugin_cluster

    if timeout == "np.int64":
        timeout = pytest.importorskip("numpy").int64(30)
    elif timeout == "Fraction":
        timeout = Fraction(1, 2)  # a real number of any kind (its text, "1/2", is no duration's)
    cluster, _ = runs_asked(tmp_path, monkeypatch)
    limits = []

    def started(request, **options):
        limits.append(options["timeout_s"])
        raise Started
    monkeypatch.setattr(plugin_cluster, "Run", started)
    with pytest.raises(Started):
        cluster.run("train.py", timeout=timeout)
    assert limits == [taken] and type(limits[0]) is type(taken)


@pytest.mark.parametrize("call", ["run", "chaos"])
@pytest.mark.parametrize("target, args, said", [
    ("train.py", (["--steps", "2"],), "argument 1 after the target, ['--steps', '2'], is of type list"),
    ("train.py", ("--steps", "2", "--fast", True), "argument 4 after the target, True, is of type bool"),
    ("train.py", ("--data", None), "argument 2 after the target, None, is of type NoneType"),
    (None, (), "the target, None, is of type NoneType"),
])
def test_a_scripts_argument_that_is_not_text_is_refused_at_the_call_before_any_run(tmp_path, monkeypatch, call,
                                                                                  target, args, said):
    """It once reached the engine, which refused it once the nodes were asked for ("services.node0.command.34
    must be a string"), after five tries at the teardown."""
    cluster, runs = runs_asked(tmp_path, monkeypatch)
    _, checks = checks_asked(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as refused:
        getattr(cluster, call)(target, *args)
    assert str(refused.value) == (f"ddp_cluster.{call}: {said}: each of the script's arguments is text of its own"
                                  " (a number or a path is taken as its text; a list goes as *args)")
    assert not runs and not checks and cluster.checks == 0 and not (tmp_path / "runs").exists()


def test_an_image_that_cannot_be_had_is_named_by_the_option_that_asked_for_it(tmp_path, monkeypatch):
    """--ddp-image names every run's image: its refusal says to drop --ddp-image, not run's --image
    (which the test never gave); an image the test asks for itself is still its own."""
    from orchestrate.config.run_config import DEFAULT_IMAGE
    from orchestrate.errors import ImageNotFoundError
    from orchestrate.launch import run as run_module
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    monkeypatch.setattr(run_module, "connect", lambda: client)
    monkeypatch.setattr(run_module, "find_compose_meanwhile", lambda find_cli: lambda: None)
    (tmp_path / "train.py").write_text("")
    cluster = DdpCluster(tmp_path, tmp_path / "runs", image="no/such:1", out=io.StringIO())
    for call in (lambda: cluster.run("train.py", cpu=True), lambda: cluster.chaos("train.py", cpu=True)):
        with pytest.raises(ImageNotFoundError) as refused:
            call()
        assert str(refused.value) == ("image no/such:1 is not in the engine and cannot be pulled: build or pull it"
                                      f" first, or drop --ddp-image to use {DEFAULT_IMAGE}")
    with pytest.raises(ImageNotFoundError, match=r"^image my/own:1 .* drop --image to use"):
        cluster.run("train.py", cpu=True, image="my/own:1")
    assert [call for call in client.calls if call[0] == "images.pull"] == [
        ("images.pull", "no/such:1"), ("images.pull", "no/such:1"), ("images.pull", "my/own:1")]


def ran(tmp_path, monkeypatch, make_job, *, state, faults=(), **fields) -> tuple[DdpCluster, list]:
    """A cluster whose runs end, without nodes, in ``state`` on every node with ``faults`` as their records (and
    the result's other ``fields``)."""
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.node_result import NodeResult
    from orchestrate.testing import cluster

    (tmp_path / "train.py").write_text("print('hi')\n")
    nodes = [NodeResult(node, state, 0) for node in make_job(nodes=2).nodes]
    monkeypatch.setattr(cluster, "Run", lambda request, **_: request)
    monkeypatch.setattr(cluster, "run_and_report", lambda request, **_: RunResult(
        "r1", tmp_path / "runs" / "r1", nodes, Timings(), faults=list(faults), **fields))
    made = DdpCluster(tmp_path, tmp_path / "runs", out=io.StringIO())
    return made, made.results


UNFIRED = "kill-rank:1@step=100"


def test_a_fault_that_never_fired_fails_the_test_though_the_run_failed_as_the_test_expected(tmp_path, monkeypatch,
                                                                                            make_job):
    """A user trial's "my job fails when rank 1 is killed": the fault at step 100 of a 10-step job never fired, the
    run FAILED (exit code 1) for it, and ``assert not result.succeeded`` passed."""
    from orchestrate.outcome.model import FaultRecord
    from orchestrate.outcome.states import NodePhase

    unfired = FaultRecord(UNFIRED, "node0", fired=False, reason="the workers reached step 10 only, not step 100")
    cluster, results = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, faults=[unfired])
    with pytest.raises(pytest.fail.Exception) as failed:
        cluster.run("train.py", faults=UNFIRED)
    assert str(failed.value) == (
        "ddp_cluster.run: 1 fault(s) asked for never fired, so the run did not test what the test asked (the job"
        " itself succeeded): kill-rank:1@step=100 did not fire: the workers reached step 10 only, not step 100: give"
        " each a step or a time the job reaches, or allow_unfired_faults=True where a fault that does not fire is what"
        " the test expects")
    assert len(results) == 1  # still torn down, or kept for a look, at the test's end
    result = cluster.run("train.py", faults=UNFIRED, allow_unfired_faults=True)
    assert not result.succeeded and result.exit_code == 1 and result.unfired_faults == [unfired]


def test_a_fault_that_fired_leaves_the_result_to_the_test(tmp_path, monkeypatch, make_job):
    from orchestrate.outcome.model import FaultRecord
    from orchestrate.outcome.states import NodePhase

    fired = FaultRecord("kill-rank:1@step=5", "node0", fired=True, step=5)
    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.FAILED, faults=[fired])
    result = cluster.run("train.py", faults="kill-rank:1@step=5")
    assert not result.succeeded and result.exit_code == 1


def test_a_fault_that_never_fired_fails_the_test_at_its_own_line_in_one_line(pytester):
    pytester.makepyfile(train="print('hi')\n")
    pytester.makepyfile(test_unfired="""
        from orchestrate.outcome.model import FaultRecord, RunResult, Timings
        from orchestrate.testing import cluster

        def test_rank_1_killed_fails_the_job(ddp_cluster, monkeypatch):
            monkeypatch.setattr(cluster, "Run", lambda request, **_: request)
            unfired = FaultRecord("kill-rank:1@step=100", "node0", fired=False, reason="the workers reached step 10")
            monkeypatch.setattr(cluster, "run_and_report", lambda run, **_: RunResult(
                "r1", ddp_cluster.runs_dir / "r1", [], Timings(), faults=[unfired]))
            result = ddp_cluster.run("train.py", faults="kill-rank:1@step=100")
            assert not result.succeeded
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcome.assert_outcomes(failed=1)
    said = outcome.stdout.str()
    assert '>       result = ddp_cluster.run("train.py", faults="kill-rank:1@step=100")' in said
    assert "Failed: ddp_cluster.run: 1 fault(s) asked for never fired" in said
    assert "fail_where_a_fault_never_fired" not in said and "def run(" not in said  # the plugin's frames left out


def test_a_job_that_loaded_another_tests_save_of_this_session_is_warned_of_at_the_tests_line(
        tmp_path, monkeypatch, make_job):
    """A user trial: the first test's ckpt.pt stayed in the test file's directory (the default work directory), the
    second test's job resumed from it, trained nothing, succeeded, and its test passed without a word."""
    import os

    from orchestrate.outcome.states import NodePhase
    from orchestrate.testing.cluster import LoadedFromBeforeWarning

    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, loaded_from_before=("ckpt.pt",))
    cluster.session_began = 1000.0
    (tmp_path / "ckpt.pt").write_bytes(b"saved")
    os.utime(tmp_path / "ckpt.pt", (1000.0, 1000.0))  # saved by another test of this session
    with pytest.warns(LoadedFromBeforeWarning) as warned:
        result = cluster.run("train.py")
    assert result.succeeded
    [warning] = warned
    assert str(warning.message) == (
        "ddp_cluster.run (run r1): the job loaded ckpt.pt with torch.load, which its work directory held before this"
        " run (an earlier run's save? where the job should not resume from it, remove it or give each run a directory"
        " of its own); written since the test session began, by another test's run? (workdir=...: a directory of the"
        " test's own, e.g. a copy under tmp_path; allow_loads_from_before=True where the test means it)")
    assert warning.filename == __file__  # the test's own line


def test_a_job_that_succeeded_with_its_collectives_apart_is_warned_of_at_the_tests_line(tmp_path, monkeypatch,
                                                                                        make_job):
    """A job whose rank 0 alone evaluated its DDP model succeeded (gloo paired the extra broadcast with the others'
    next forward pass), and its test passed without a word unless it asserted on result.ended_apart."""
    from orchestrate.outcome.states import NodePhase
    from orchestrate.testing.cluster import EndedApartWarning
    from orchestrate.text import ENDED_APART_HINT

    apart = "in the default group, the ranks made different numbers of collectives: rank 0 made 2, rank 1 made 1"
    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, ended_apart=apart)
    with pytest.warns(EndedApartWarning) as warned:
        result = cluster.run("train.py")
    assert result.succeeded and result.ended_apart == apart
    [warning] = warned
    assert str(warning.message) == (f"ddp_cluster.run (run r1): the job succeeded, but the ranks' collectives ended"
                                    f" apart: {apart}; hint: {ENDED_APART_HINT}")
    assert warning.filename == __file__  # the test's own line
    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cluster.run("train.py").ended_apart == ""  # nothing apart: no warning


def test_a_job_that_loaded_a_file_shipped_with_the_tests_is_not_warned_of(tmp_path, monkeypatch, make_job):
    """A review: a job that loads a model shipped beside the test file (older than the session) was warned of, and
    failed under filterwarnings = error; a save of this session beside it still is, alone."""
    import os

    from orchestrate.outcome.states import NodePhase
    from orchestrate.testing.cluster import LoadedFromBeforeWarning

    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED,
                     loaded_from_before=("ckpt.pt", "pretrained.pt"))
    cluster.session_began = 1000.0
    for name, written in (("pretrained.pt", 999.0), ("ckpt.pt", 1001.0)):
        (tmp_path / name).write_bytes(b"saved")
        os.utime(tmp_path / name, (written, written))
    with pytest.warns(LoadedFromBeforeWarning) as warned:
        cluster.run("train.py")
    [warning] = warned
    assert "loaded ckpt.pt with" in str(warning.message) and "pretrained.pt" not in str(warning.message)
    only_shipped, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED,
                          loaded_from_before=("pretrained.pt",))
    only_shipped.session_began = 1000.0
    with warnings_as_errors():
        assert only_shipped.run("train.py").succeeded


def test_a_dcp_directory_loaded_from_before_is_warned_of_by_when_its_metadata_was_written(tmp_path, monkeypatch,
                                                                                           make_job):
    """A checkpoint directory DCP loaded is dated by its .metadata (DCP writes it last): the directory's own time
    moves with any file made in it, and stays where a save again writes its files in place."""
    import os

    from orchestrate.outcome.states import NodePhase
    from orchestrate.testing.cluster import LoadedFromBeforeWarning

    shipped, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, loaded_from_before=("ckpt/step_9/",))
    shipped.session_began = 1000.0
    (tmp_path / "ckpt" / "step_9").mkdir(parents=True)
    metadata = tmp_path / "ckpt" / "step_9" / ".metadata"
    metadata.write_bytes(b"saved")
    os.utime(metadata, (999.0, 999.0))  # shipped with the tests; the directory itself is dated now
    with warnings_as_errors():
        assert shipped.run("train.py").succeeded
    os.utime(metadata, (1001.0, 1001.0))  # saved in this session
    os.utime(metadata.parent, (999.0, 999.0))
    again, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, loaded_from_before=("ckpt/step_9/",))
    again.session_began = 1000.0
    with pytest.warns(LoadedFromBeforeWarning, match="loaded ckpt/step_9/ with dcp.load"):
        again.run("train.py")


def test_a_test_that_means_its_job_to_load_an_earlier_save_is_not_warned_of(tmp_path, monkeypatch, make_job):
    """A save and then a resume in one test, on purpose: allow_loads_from_before=True, as allow_unfired_faults."""
    from orchestrate.outcome.states import NodePhase

    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED, loaded_from_before=("ckpt.pt",))
    cluster.session_began = 0.0
    (tmp_path / "ckpt.pt").write_bytes(b"saved")
    with warnings_as_errors():
        assert cluster.run("train.py", allow_loads_from_before=True).loaded_from_before == ("ckpt.pt",)


@contextlib.contextmanager
def warnings_as_errors() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_the_plugin_tells_the_fixture_when_the_session_began(pytester):
    import time

    pytester.makepyfile(test_began=f"""
        import time

        def test_began(ddp_cluster):
            assert {time.time()!r} <= ddp_cluster.session_began <= time.time()
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist").assert_outcomes(passed=1)


def test_a_job_that_loaded_nothing_from_before_the_run_is_not_warned_of(tmp_path, monkeypatch, make_job):
    import warnings

    from orchestrate.outcome.states import NodePhase

    cluster, _ = ran(tmp_path, monkeypatch, make_job, state=NodePhase.SUCCEEDED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cluster.run("train.py").succeeded
