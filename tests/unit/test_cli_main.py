"""The command line's own work, in process (what mutation testing can see): how ``main`` reads its
words, where it prints, how it ends on an interrupt or a reader gone, what ``run`` and ``plan``
print around the library's plan and run, and the signals a command installs.

test_cli.py runs the same command line in subprocesses, as a user meets it; a mutant is invisible
there (mutmut chooses tests by in-process coverage)."""
from __future__ import annotations

import _thread
import functools
import io
import logging
import os
import signal
import sys
import threading

import pytest

from orchestrate.cli import run as run_command
from orchestrate.cli.invocation import Invocation
from orchestrate.cli.main import build_parser, command_of, main
from orchestrate.cli.signals import TEARDOWN_SIGNALS, install_teardown_signals, interrupt_exit_code
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.engine.labels import COMMAND_LABEL
from orchestrate.engine.runs import list_runs
from orchestrate.interrupts import SignalInterrupt
from orchestrate.launch.run import Run
from tests.fakes import FakeCompose, FakeDockerClient, Script


def plan_words(tmp_path, *more: str) -> list[str]:
    return ["plan", "--cpu", "--workdir", str(tmp_path), *more]


def test_the_command_is_the_first_word_that_is_no_option():
    assert command_of(["-v", "run", "--nodes", "2"]) == "run"
    assert command_of(["-v"]) == "" and command_of([]) == ""


def test_main_reads_the_processs_own_words_when_given_none(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["orchestrate", *plan_words(tmp_path, "--nodes", "3")])
    out = io.StringIO()
    assert main(out=out) == 0
    assert "node2$ torchrun --nnodes 3 --node-rank 2" in out.getvalue()


def test_no_command_prints_the_help_and_exits_2():
    out = io.StringIO()
    assert main([], out=out) == 2
    assert out.getvalue().startswith("usage: python -m orchestrate [-h] [-v] COMMAND ...")


def test_a_command_that_runs_no_job_refuses_one_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["ps", "--", "train.py", "--lr", "0.1"], client=FakeDockerClient())
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("python -m orchestrate: error: ps takes no job after --, got: -- train.py --lr"
                                       " 0.1 (see --help)\n")


def test_an_empty_job_after_dash_dash_is_refused_but_not_beside_a_users_own_batch_script(capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--nodes", "2", "--"], client=FakeDockerClient())
    assert exited.value.code == 2 and "nothing after --: give the job" in capsys.readouterr().err
    batch = tmp_path / "job.sh"
    batch.write_text("#!/bin/bash\n#SBATCH --nodes=2\nsrun python3 train.py\n")
    out = io.StringIO()  # a wrapper's empty "$@" after --sbatch: the batch script is the job
    assert main(["plan", "--scheduler", "slurm", "--sbatch", str(batch), "--"], out=out, client=FakeDockerClient()) == 0
    assert f"job: {batch}, submitted unchanged" in out.getvalue()


def test_bench_launcher_refuses_a_runs_dir_the_system_refuses_in_one_line_before_the_engine_is_asked(
        capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # asked first, it would say so instead
    client = None
    (tmp_path / "a-file").write_text("")
    assert main(["bench", "launcher", "--runs-dir", "/proc/nope"], client=client) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot make the bench's directory /proc/nope/bench-launcher-") and err.endswith(
        ": No such file or directory (--runs-dir /proc/nope)\n"), err
    assert main(["bench", "launcher", "--runs-dir", str(tmp_path / "a-file")], client=client) == 2
    assert capsys.readouterr().err == (f"error: --runs-dir {tmp_path / 'a-file'}: no run's directory can be made there:"
                                       f" {tmp_path / 'a-file'} is not a directory\n")


@pytest.mark.parametrize("verbose, level", [(True, logging.DEBUG), (False, logging.WARNING)])
def test_verbose_logs_debug_details_and_otherwise_warnings_alone(tmp_path, verbose, level):
    root = logging.getLogger()
    handlers, level_before = root.handlers[:], root.level
    root.handlers = []  # as a fresh process has it (pytest's own handlers would make basicConfig do nothing)
    try:
        assert main(["-v"] * verbose + plan_words(tmp_path), out=io.StringIO()) == 0
        [handler] = root.handlers
        assert root.level == level
        assert handler.formatter._fmt == "%(levelname)s %(name)s: %(message)s"
    finally:
        root.handlers, root.level = handlers, level_before


@pytest.fixture
def asked(monkeypatch):
    """What ``run`` hands the library: the request and the Invocation, each call's (run_request recorded)."""
    calls = []

    def recorded(request, inv):
        calls.append((request, inv))
        return 7, None
    monkeypatch.setattr(run_command, "run_request", recorded)
    return calls


def test_run_hands_the_library_its_words_job_engine_and_verbosity_and_exits_with_its_code(tmp_path, asked):
    client = FakeDockerClient()
    out = io.StringIO()
    argv = ["-v", "run", "--cpu", "--workdir", str(tmp_path), "--env", "TOKEN=s3cret", "--", "-m", "app.toy"]
    assert main(argv, out=out, client=client) == 7
    [(request, inv)] = asked
    assert (inv.argv, inv.target, inv.out, inv.client, inv.verbose) == (argv, ["-m", "app.toy"], out, client, True)
    assert request.target == ("-m", "app.toy")
    assert inv.command_line == ("python -m orchestrate -v run --cpu --workdir " + str(tmp_path) + " --env 'TOKEN=***'"
                                " -- -m app.toy")
    main(["run", "--cpu", "--workdir", str(tmp_path)], out=out, client=client)
    assert asked[1][1].verbose is False


@pytest.mark.parametrize("raised, code", [(KeyboardInterrupt(), 130), (SignalInterrupt(signal.SIGTERM), 143),
                                          (SignalInterrupt(signal.SIGHUP), 129)])
def test_an_interrupt_says_so_and_exits_128_and_its_signal(tmp_path, monkeypatch, capsys, raised, code):
    def interrupted(request, inv):
        raise raised
    monkeypatch.setattr(run_command, "show_plan", interrupted)
    assert main(plan_words(tmp_path), out=io.StringIO()) == code
    assert capsys.readouterr().err == "interrupted\n"


@pytest.fixture
def reader_gone(monkeypatch):
    """Makes standard output a pipe whose reader has gone away (``| head`` that has read enough):
    called in the test itself, after pytest's capture has set its own."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = open(write_end, "w", buffering=1)  # a line is written at once, and fails at once
    yield lambda: monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.undo()
    stdout.close()


def test_a_command_prints_to_standard_output_as_it_is_when_called(tmp_path, capsys):
    assert main(plan_words(tmp_path, "--nodes", "3")) == 0
    assert "node2$ torchrun --nnodes 3 --node-rank 2" in capsys.readouterr().out


def test_a_reader_gone_ends_the_command_as_sigpipe_would_without_a_word(tmp_path, reader_gone, capsys):
    reader_gone()
    assert main(plan_words(tmp_path)) == 128 + signal.SIGPIPE
    assert capsys.readouterr().err == ""


@pytest.mark.timeout(60)  # a run that missed its reader's going follows a node that never ends
def test_a_foreground_run_whose_reader_went_away_stops_and_says_where_its_summary_is(tmp_path, monkeypatch,
                                                                                      reader_gone, capsys):
    client = fake_runs(monkeypatch, Script(["[0|0]:step 1"], hang=True))
    runs = tmp_path / "runs"
    reader_gone()
    code = main(["run", "--cpu", "--nodes", "1", "--workdir", str(tmp_path), "--runs-dir", str(runs)], client=client)
    err = capsys.readouterr().err.splitlines()
    [run_dir] = runs.iterdir()
    assert code == 128 + signal.SIGPIPE
    assert err[-1] == (f"run {run_dir.name} stopped: whoever read its output went away; its summary and logs are in"
                       f" {run_dir}")
    assert "interrupted" not in err


def fake_runs(monkeypatch, *scripts: Script) -> FakeDockerClient:
    """An engine of fakes that ``run`` starts its nodes in: node0 runs ``scripts``."""
    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    client.script("node0", *scripts)
    monkeypatch.setattr(run_command, "Run", functools.partial(Run, compose_factory=FakeCompose))
    return client


@pytest.mark.timeout(60)  # a Ctrl-C that did not stop the run would follow a node that never ends
@pytest.mark.parametrize("verbose", ["", "before the command", "after it"])
def test_a_foreground_run_stopped_by_ctrl_c_says_nothing_of_a_reader_and_verbose_shows_torchruns_records(
        tmp_path, monkeypatch, capsys, when, verbose):
    agent_record = "I1204 10:00:00.000000 321 api.py:890] rendezvous round 1"
    client = fake_runs(monkeypatch, Script([agent_record, "[0|0]:step 1"], hang=True))
    out = io.StringIO()
    when(lambda: "step 1" in out.getvalue(), _thread.interrupt_main)
    code = main(["-v"] * (verbose == "before the command") + ["run"] + ["-v"] * (verbose == "after it")
                + ["--cpu", "--nodes", "1", "--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "runs")],
                out=out, client=client)
    assert code == 130 and "step 1" in out.getvalue()
    assert (agent_record in out.getvalue()) is bool(verbose)  # (the console's "or -v" notes: either place)
    assert "whoever read its output went away" not in capsys.readouterr().err


def test_a_detached_run_says_how_to_follow_it_and_what_nobody_watches_and_prints_its_id(tmp_path, monkeypatch,
                                                                                        capsys):
    client = fake_runs(monkeypatch, Script(hang=True))
    out = io.StringIO()
    words = ["run", "--cpu", "--nodes", "1", "--detach", "--hang-timeout", "60", "--workdir", str(tmp_path),
             "--runs-dir", str(tmp_path / "runs")]
    code = main(words, out=out, client=client)
    run_id = out.getvalue().strip()
    try:
        assert code == 0 and out.getvalue() == f"{run_id}\n"  # alone on standard output: ID=$(... run --detach)
        assert [d.name for d in (tmp_path / "runs").iterdir()] == [run_id]
        [run] = list_runs(client)
        assert run.labels[COMMAND_LABEL] == "python -m orchestrate " + " ".join(words)  # for ps and the report
        assert capsys.readouterr().err.splitlines()[-6:] == [
            f"[orchestrate] run {run_id} is running detached; follow it with:",
            f"  python -m orchestrate logs {run_id} -f      # its output",
            f"  python -m orchestrate attach {run_id}       # its output and summary",
            f"  python -m orchestrate stacks {run_id}       # where every rank is, if it goes quiet",
            f"  python -m orchestrate stop {run_id} / down {run_id}",
            "[orchestrate] --hang-timeout 60 acts only while `attach` follows the run: nobody watches it while it is"
            " detached",
        ]
    finally:
        assert main(["down", run_id], out=io.StringIO(), client=client) == 0


def without_run_id(plan_text: str) -> str:
    """A plan's text with its run id (each plan has one of its own, on its first line) taken out."""
    return plan_text.replace(plan_text.split()[1], "RUN_ID")


def test_a_plan_is_printed_whole_and_its_gpu_topology_after_it_when_the_engine_has_the_image(tmp_path, monkeypatch):
    client = FakeDockerClient()
    client.gpus = ("0", "1")
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    asked = []
    monkeypatch.setattr("orchestrate.engine.gpus.gpu_topology",
                        lambda engine, plan: asked.append((engine, plan.config.gpus_per_node)) or "GPU0 X")
    words = ["plan", "--nodes", "2", "--gpus-per-node", "1", "--workdir", str(tmp_path)]
    without_image = io.StringIO()
    assert main(words, out=without_image, client=client) == 0
    assert asked == []
    plan_text = without_image.getvalue()
    assert plan_text.endswith("\n") and not plan_text.endswith("\n\n") and "XX" not in plan_text
    client.images.add(DEFAULT_IMAGE)
    with_image = io.StringIO()
    assert main(words, out=with_image, client=client) == 0
    assert asked == [(client, 1)]
    assert without_run_id(with_image.getvalue()) == (without_run_id(plan_text) + "\nGPU topology seen from node0"
                                                     " (nvidia-smi topo -m):\nGPU0 X\n")


def test_a_slurm_plan_is_printed_whole(tmp_path):
    out = io.StringIO()
    assert main(["plan", "--scheduler", "slurm", "--cpu", "--workdir", str(tmp_path)], out=out) == 0
    text = out.getvalue()
    assert text.endswith("\n") and not text.endswith("\n\n") and "XX" not in text
    assert "#!/bin/bash" in text


def test_an_options_refusal_names_it_once_and_a_choice_outside_its_list_is_refused(tmp_path, capsys):
    for words, said in ((["--memory-per-node", "abc"], "argument --memory-per-node: expected a size like 512m or 2g."
                         " Given: 'abc'"),
                        (["--backend", "mpi"], "argument --backend: invalid choice: 'mpi' (choose from 'auto', 'nccl',"
                         " 'gloo')")):
        with pytest.raises(SystemExit) as exited:
            main(plan_words(tmp_path, *words), out=io.StringIO())
        assert exited.value.code == 2
        assert capsys.readouterr().err == f"python -m orchestrate plan: error: {said} (see --help)\n"


def test_the_help_names_each_options_value_as_its_metavar(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"], out=io.StringIO())
    assert exited.value.code == 0
    assert "--gpus-per-node G " in capsys.readouterr().out


@pytest.fixture
def signals_restored():
    names = ("SIGINT", *TEARDOWN_SIGNALS)
    before = {name: signal.getsignal(getattr(signal, name)) for name in names}
    yield
    for name, handler in before.items():
        signal.signal(getattr(signal, name), handler)


def test_teardown_signals_raise_an_interrupt_that_names_them_set_from_the_main_thread_alone(signals_restored):
    for name in TEARDOWN_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a launcher started with `cmd &`
    elsewhere = threading.Thread(target=install_teardown_signals)
    elsewhere.start()
    elsewhere.join(10)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a thread sets no handler (and raises nothing)
    install_teardown_signals()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    for name in TEARDOWN_SIGNALS:
        number = getattr(signal, name)
        with pytest.raises(SignalInterrupt) as raised:
            signal.getsignal(number)(number, None)
        assert raised.value.signum == number


def test_an_interrupts_exit_code_is_128_and_its_signal_ctrl_c_when_it_names_none():
    assert interrupt_exit_code(KeyboardInterrupt()) == 130
    assert interrupt_exit_code(SignalInterrupt(signal.SIGTERM)) == 143
    assert interrupt_exit_code(SignalInterrupt(signal.SIGPIPE)) == 141


def test_an_invocation_connects_the_environments_engine_once_and_says_a_line_at_once(monkeypatch):
    engines = []
    monkeypatch.setattr("orchestrate.engine.client.connect", lambda: engines.append(object()) or engines[-1])
    inv = Invocation([], [], io.StringIO())
    assert inv.engine() is inv.engine() is engines[0] and len(engines) == 1

    class Flushed(io.StringIO):
        flushed_at: list[str] = []

        def flush(self) -> None:
            self.flushed_at.append(self.getvalue())

    out = Flushed()
    Invocation([], [], out).say("nodes up")
    assert out.flushed_at == ["nodes up\n"]


def test_verbose_is_taken_after_every_command_and_subcommand_and_never_from_the_job(tmp_path):
    from orchestrate.cli.main import build_parser

    parser = build_parser()
    for words in (["run", "-v"], ["image", "build", "-v"], ["bench", "ddp", "-v"], ["ps", "-v"], ["-v", "logs", "r1"]):
        assert parser.parse_known_args(words)[0].verbose is True, words
    assert parser.parse_known_args(["image", "build"])[0].verbose is False
    # a job's own -v, after --, is the job's
    out = io.StringIO()
    assert main(["plan", "--cpu", "--workdir", str(tmp_path), "--", "-m", "app.toy", "-v"], out=out) == 0
    assert "-m app.toy -v" in out.getvalue()


def test_a_run_gone_from_the_engine_whose_directory_stays_is_named_with_where_its_logs_are(tmp_path, monkeypatch,
                                                                                           capsys):
    from tests.fakes import FakeDockerClient

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "20261206-024200-7f5e9c").mkdir(parents=True)  # a foreground run that ended
    for words in (["attach", "7f5e9c"], ["down", "20261206-024200-7f5e9c"], ["stop", "7f5e9c"]):
        assert main(words, out=io.StringIO(), client=FakeDockerClient()) == 2
        assert capsys.readouterr().err == (
            f"error: no run {words[1]} in the engine (see `python -m orchestrate ps`); it ended and was removed, and its"
            " logs stay in runs/20261206-024200-7f5e9c (python -m orchestrate logs 20261206-024200-7f5e9c, report"
            " 20261206-024200-7f5e9c)\n")
    assert main(["attach", "0facef"], out=io.StringIO(), client=FakeDockerClient()) == 2  # no directory of it either
    assert capsys.readouterr().err == "error: no run 0facef in the engine (see `python -m orchestrate ps`)\n"


def usage_lines(text: str) -> list[str]:
    """The usage block of a help text: its lines up to the first blank one."""
    return text.split("\n\n")[0].rstrip("\n").split("\n")


@pytest.mark.parametrize("command", ["run", "plan", "chaos", "export"])
def test_a_command_that_runs_a_job_shows_it_after_its_options_in_the_usage_and_says_what_it_is(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser().commands[command]
    lines = usage_lines(parser.format_help())
    assert lines[-1].endswith(" [-- TARGET ...]") and all(len(line) <= 78 for line in lines), lines
    assert sum(line.count("[-- TARGET ...]") for line in lines) == 1
    # on a continuation line, as indented as the options' own lines
    assert len(lines[-1]) - len(lines[-1].lstrip()) == len(lines[1]) - len(lines[1].lstrip())
    assert parser.format_usage().rstrip("\n").endswith("[-- TARGET ...]")
    assert "TARGET (after --) is what torchrun runs" in parser.format_help()
    assert "Default: -m app.toy." in " ".join(parser.format_help().split())


def test_a_usage_line_with_room_left_takes_the_job_on_its_last_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    lines = usage_lines(build_parser().commands["plan"].format_help())
    assert lines[-1].endswith(" [--memory-per-node SIZE] [-v] [-- TARGET ...]"), lines


@pytest.mark.parametrize("command", ["ps", "logs", "stop", "down", "fault", "image"])
def test_a_command_that_runs_no_job_shows_none_in_its_usage(command):
    parser = build_parser().commands[command]
    assert "TARGET" not in parser.format_usage() and "[-- " not in parser.format_help()


def test_a_slow_fault_in_a_run_without_a_cpu_limit_is_compared_with_the_engines_cpus_before_anything_starts(
        tmp_path, monkeypatch, capsys):
    client = fake_runs(monkeypatch, Script(["[0|0]:hi"]))
    runs = tmp_path / "runs"
    for command in (["plan"], ["run", "--dry-run"], ["run", "--cpu"]):
        out = io.StringIO()
        assert main([*command, "--nodes", "2", "--fault", "slow:node1,cpus=2", "--workdir", str(tmp_path),
                     "--runs-dir", str(runs)], out=out, client=client) == 2, command
        assert out.getvalue() == "" and capsys.readouterr().err == (
            "error: --fault slow:node1,cpus=2: a slow node's cpus must be below the engine's 2 CPUs, all a node"
            " without --cpus-per-node has (cpus=2 would leave node1 as fast, or make it faster); e.g. cpus=1\n")
    assert not runs.exists() and client.containers_by_name == {}
    out = io.StringIO()
    assert main(["plan", "--nodes", "2", "--fault", "slow:node1,cpus=1.5", "--workdir", str(tmp_path)], out=out,
                client=client) == 0
    assert "faults: slow:node1,cpus=1.5" in out.getvalue()


@pytest.mark.parametrize("sizes, refused", [
    (["--cpus-per-node", "100"], "--cpus-per-node 100 is more than the engine's 2 CPUs"),
    (["--memory-per-node", "100g"], "--memory-per-node 102400m is more than the engine's 24576m of memory"),
])
def test_node_sizes_the_engine_cannot_give_are_refused_by_plan_and_run_before_anything_starts(
        tmp_path, monkeypatch, capsys, sizes, refused):
    client = fake_runs(monkeypatch, Script(["[0|0]:hi"]))
    runs = tmp_path / "runs"
    for command in (["plan", "--cpu"], ["plan"], ["run", "--dry-run", "--cpu"], ["run", "--cpu"]):
        out = io.StringIO()
        assert main([*command, "--nodes", "1", *sizes, "--workdir", str(tmp_path), "--runs-dir", str(runs)],
                    out=out, client=client) == 2, command
        assert out.getvalue() == "" and capsys.readouterr().err == f"error: {refused}\n"
    assert not runs.exists() and client.containers_by_name == {}
    assert [call for call in client.calls if call[0].startswith("images")] == []  # refused before the image step
    # where no engine answers, a dry run plans all the same: there is nothing to check the sizes against
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    out = io.StringIO()
    assert main(["plan", "--cpu", "--nodes", "1", *sizes, "--workdir", str(tmp_path)], out=out) == 0
    assert "node0$ torchrun" in out.getvalue()


def test_a_shaped_runs_link_and_node_sizes_are_in_its_plan_record_summary_and_report(tmp_path, monkeypatch):
    import json
    import shutil

    client = fake_runs(monkeypatch, Script(["[0|0]:hi"]), Script(["[0|0]:hi"]))
    runs = tmp_path / "runs"
    out = io.StringIO()
    assert main(["run", "--cpu", "--nodes", "1", "--link", "1gbe", "--cpus-per-node", "1.5", "--memory-per-node",
                 "512m", "--workdir", str(tmp_path), "--runs-dir", str(runs)], out=out, client=client) == 0
    [run_dir] = runs.iterdir()
    recorded = json.loads((run_dir / "run.json").read_text())
    assert (recorded["link"], recorded["cpus_per_node"], recorded["memory_per_node"]) == ("rate=1gbit", 1.5, 512 << 20)
    summary = out.getvalue().split("summary ===\n")[1].splitlines()
    said = "link rate=1gbit; each node 1.5 CPUs, 512m memory"
    timings = next(i for i, line in enumerate(summary) if line.startswith("bring-up "))
    assert summary[timings - 1] == said and said not in summary[:timings - 1]  # under the table, over the timings
    assert f'<p id="conditions">Nodes: {said}</p>' in (run_dir / "report.html").read_text()
    # a run given neither says nothing of them: its summary is as it ever was
    shutil.rmtree(runs)
    out = io.StringIO()
    assert main(["run", "--cpu", "--nodes", "1", "--workdir", str(tmp_path), "--runs-dir", str(runs)], out=out,
                client=client) == 0
    [run_dir] = runs.iterdir()
    recorded = json.loads((run_dir / "run.json").read_text())
    assert (recorded["link"], recorded["cpus_per_node"], recorded["memory_per_node"]) == (None, None, None)
    summary = out.getvalue().split("summary ===\n")[1].splitlines()
    timings = next(i for i, line in enumerate(summary) if line.startswith("bring-up "))
    assert summary[timings - 1].startswith("node0 ")  # the table's last row
    assert 'id="conditions"' not in (run_dir / "report.html").read_text()


def test_bench_launcher_whose_image_cannot_be_had_leaves_no_directory_behind(tmp_path, capsys):
    client = FakeDockerClient()
    runs = tmp_path / "runs"
    assert main(["bench", "launcher", "--image", "nosuch:img", "--runs-dir", str(runs)], client=client,
                out=io.StringIO()) == 2
    [err] = capsys.readouterr().err.splitlines()
    assert err.startswith("error: ") and "nosuch:img" in err
    assert not runs.exists()  # neither its bench-launcher-<id> nor the runs directory it made for it
    runs.mkdir()
    (runs / "earlier").mkdir()
    assert main(["bench", "launcher", "--image", "nosuch:img", "--runs-dir", str(runs)], client=client,
                out=io.StringIO()) == 2
    assert [p.name for p in runs.iterdir()] == ["earlier"]  # what was there before stays
