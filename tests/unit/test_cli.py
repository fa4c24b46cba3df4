from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from orchestrate.cli.options import split_target

ROOT = Path(__file__).resolve().parents[2]


def orchestrate(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "orchestrate", *args], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=60)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--nodes", "0"], "argument --nodes: expected a positive integer, got '0'"),
        (["run", "--nodes", "abc"], "argument --nodes: expected a positive integer, got 'abc'"),
        (["run", "--nproc-per-node", "0"], "argument --nproc-per-node: expected a positive integer"),
        (["run", "--", "no_such_script.py"], "script 'no_such_script.py' not found in work directory"),
        (["run", "--", "tests"], "script 'tests' is a directory (work directory"),
        (["run", "--workdir", "/no/such/dir"], "work directory '/no/such/dir' does not exist"),
        (["run", "--", "-m"], "-m needs a module name"),
        (["run", "--bogus"], "unrecognized arguments: --bogus"),
        (["run", "--gpus-per-node", "2", "--nproc-per-node", "4"],
         "--nproc-per-node 4 is more than the 2 GPU(s) per node"),
        (["run", "--gpus-per-node", "4", "--nproc-per-node", "3"],
         "--gpus-per-node 4 cannot be split evenly among 3"),
        (["run", "--cpu", "--backend", "nccl"], "--backend nccl needs GPUs"),
        (["run", "--env", "NOVALUE"], "argument --env: expected KEY=VALUE, e.g. --env WANDB_MODE=offline"),
        (["run", "--env", "RANK=1"], "RANK is set by torchrun or the launcher"),
        (["run", "--env-file", "/no/such.env"], "--env-file /no/such.env: No such file or directory"),
        (["run", "--requirements", "/no/requirements.txt"], "--requirements file '/no/requirements.txt' not found"),
        (["run", "--dockerfile", "/no/Dockerfile"], "--dockerfile file '/no/Dockerfile' not found"),
        (["run", "--memory-per-node", "abc"], "--memory-per-node: expected a size like 512m or 2g. Given: 'abc'"),
        (["run", "--memory-per-node", "1k"], "at least 6m"),
        (["run", "--cpus-per-node", "0"], "--cpus-per-node: expected a positive number"),
        # the engine refused it at the bring-up ("CPU cfs quota can not be less than 1ms"), exit 2, after the image
        (["run", "--cpus-per-node", "0.001"], "--cpus-per-node: expected 0.01 CPUs or more (the engine's least CPU"
         " limit), got '0.001'"),
        # a deadline of 0 or less was taken, and waited for nothing
        (["run", "--ready-timeout", "0"], "--ready-timeout: expected seconds above 0, e.g. 60, got '0'"),
        (["run", "--rdzv", "c10d", "--rdzv-timeout", "-1"], "--rdzv-timeout: expected seconds above 0"),
        (["run", "--copy-env", ""], "--copy-env: expected a variable name or pattern"),
        (["image", "build", "--torch", "3.1"], "--torch must be a torch release like 2.9.1"),
        (["image", "build", "--offline", "--base-image", "python:3.12-slim"],
         "--base-image python:3.12-slim is the official path's base: --offline builds on a base of its own"),
        (["run", "--cpu", "--share-gpus"], "--share-gpus shares GPUs, and this run has none"),
        (["bench", "collectives", "--cpu", "--", "train.py", "--epochs", "3"],
         "bench takes no job after --, got: -- train.py --epochs 3"),
        (["ps", "--", "train.py"], "ps takes no job after --, got: -- train.py"),
        # a -- with nothing after it (a wrapper's empty "$@") ran the demo job in the user's directory
        (["run", "--nodes", "2", "--"], "nothing after --: give the job (a script relative to --workdir, or -m"
         " MODULE), or leave the -- out for the demo job (-m app.toy)"),
        (["chaos", "--"], "nothing after --: give the job"),
        (["bench", "ddp", "--cpu", "--sweep", "--batch-sizes", "4", "8"], "--sweep searches batch sizes from"
         " --batch-size, and --batch-sizes measures the sizes given: give one"),  # (--sweep was dropped silently)
        (["image", "build", "--image", "img@sha256:" + "0" * 64], "argument --image: a build tags a name, not a"
         " digest"),
        # an image name the engine would refuse (it said "engine error: no such image: ...", after a build began)
        (["image", "build", "--image", "Bad:Tag::"], "argument --image: expected an image name like"
         " ddp-compose-node:latest or registry:5000/team/image:tag (lower-case, then :TAG), got 'Bad:Tag::'"),
        (["run", "--image", "My-Image"], "argument --image: expected an image name like"),
        # what the benchmark's workers would refuse, or spin on for ever (sizes from 0), after the nodes came up
        (["bench", "collectives", "--cpu", "--min-size", "0"], "--min-size: expected a size above 0 bytes, e.g. 4 or"
         " 1K, got '0'"),
        (["bench", "collectives", "--cpu", "--min-size", "4M", "--max-size", "1M"], "--min-size 4M is above"
         " --max-size 1M"),
        (["bench", "collectives", "--cpu", "--max-size", "abc"], "--max-size: expected a size in bytes like 4, 1K or"
         " 64M, got 'abc'"),
        (["bench", "collectives", "--cpu", "--wire-bytes", "-1"], "--wire-bytes: expected a size of 0 bytes or more"),
        (["bench", "collectives", "--cpu", "--max-size", "inf"], "--max-size: expected a size in bytes like 4, 1K or"
         " 64M, got 'inf'"),
        (["bench", "collectives", "--cpu", "--ops", "bogus"], "argument --ops: invalid choice: 'bogus'"),
        (["bench", "collectives", "--cpu", "--min-time", "0"], "--min-time must be above 0 seconds, got 0"),
        (["bench", "ddp", "--cpu", "--buckets", "25", "0"], "--buckets: bucket sizes must be above 0 MB, got 25 0"),
        # a bench builds its own job: a batch script, faults and pdb have no place in it (--sbatch was refused as if
        # the user had given a job after --)
        (["bench", "collectives", "--cpu", "--scheduler", "slurm", "--sbatch", "x.sh"], "error: --sbatch is not for"
         " bench collectives, which builds and measures its own job: a batch script of your own would run in place"
         " of the job the bench builds; run a job of your own with python -m orchestrate run"),
        (["bench", "ddp", "--cpu", "--scheduler", "slurm", "--sbatch", "x.sh"], "--sbatch is not for bench ddp"),
        (["bench", "ddp", "--cpu", "--fault", "kill:node1@t=3", "--pdb"], "error: --fault, --pdb are not for bench"
         " ddp, which builds and measures its own job: a fault would be measured as if the link and nodes were that"
         " slow (a slower link: --link); the bench's programs are the tool's own"),
        (["bench", "collectives", "--cpu", "--pdb"], "--pdb is not for bench collectives"),
        (["logs", "r", "--tail", "-1"], "argument -n/--tail: expected an integer >= 0, got '-1'"),
        (["logs", "r", "--rank", "x"], "argument --rank: expected an integer >= 0, got 'x'"),
        # options a run would leave out without a word
        (["run", "--cpu", "--max-restarts", "3"], "--max-restarts 3 is for --rdzv c10d (elastic mode): a static"
         " job restarts nothing"),
        (["run", "--cpu", "--rdzv-timeout", "5"], "--rdzv-timeout 5 is for --rdzv c10d (elastic mode)"),
        (["run", "--cpu", "--rdzv", "c10d", "--master-port", "31000"], "--master-port 31000 is for a static job: an"
         " elastic job's c10d rendezvous is on port 29400"),
        (["run", "--cpu", "--gpus-per-node", "2"], "--cpu reserves no GPUs: drop --gpus-per-node 2, or --cpu"),
        (["run", "--dockerfile", "/no/Dockerfile", "--no-dockerfile"],
         "--dockerfile /no/Dockerfile and --no-dockerfile: give one of them"),
        (["run", "--scheduler", "slurm", "--cpu", "--link", "1gbe"], "--link is for --scheduler compose"),
        (["run", "--scheduler", "slurm", "--cpu", "--sbatch", "/no/job.sh", "--", "train.py", "--lr", "0.1"],
         "--sbatch /no/job.sh runs what that script runs: drop the job after -- (train.py --lr 0.1)"),
        (["run", "--scheduler", "slurm", "--cpu", "--sbatch", "tests/jobs/user_job.sbatch", "--nproc-per-node", "2",
          "--rdzv", "c10d", "--master-port", "3000"],
         "--sbatch tests/jobs/user_job.sbatch starts torchrun as that script says: drop --nproc-per-node, --rdzv,"
         " --master-port (--nodes sizes the cluster it runs on)"),
        (["plan", "--scheduler", "slurm", "--cpu", "--sbatch", "tests/jobs/user_job.sbatch", "--max-restarts", "1",
          "--rdzv-timeout", "5", "--nnodes", "1:2"],
         "drop --nnodes, --max-restarts, --rdzv-timeout"),
        (["run", "--scheduler", "slurm", "--cpu", "--sbatch", "tests/jobs/user_job.sbatch", "--hang-timeout", "60"],
         "--hang-timeout and --hang-diagnose-after need the generated batch script: --sbatch tests/jobs/user_job.sbatch"
         " starts its workers as it says, without the start-up hook that says where each rank waits"),
        (["run", "--scheduler", "slurm", "--cpu", "--sbatch", "tests/jobs/user_job.sbatch", "--hang-diagnose-after",
          "5"], "--hang-timeout and --hang-diagnose-after need the generated batch script"),
        (["run", "--fault", "kill-rank:9"], "--fault kill-rank:9: no rank 9 in this run (ranks 0-1)"),
        (["run", "--fault", "kill:node1@t=2..5"], "kill has no end"),
        (["run", "--scheduler", "slurm", "--cpu", "--fault", "slow:node1"],
         "under --scheduler slurm a fault is one of kill, pause, disconnect, restart, preempt, without an end"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    # No engine: bad input must be refused before one is even asked.
    proc = orchestrate(*args, env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, said", [
    (["run", "--nodes", "2", "train.py", "--epochs", "3"], "unrecognized arguments: train.py --epochs 3; the job"
     " goes after --: python -m orchestrate run --nodes 2 -- train.py --epochs 3"),
    # the job's own --seed looks like chaos's, and what followed a -- is the job's too: all of it moves
    (["-v", "chaos", "--faults", "1", "train.py", "--seed", "3", "--", "--lr", "0.1"], "unrecognized arguments:"
     " train.py; the job goes after --: python -m orchestrate -v chaos --faults 1 -- train.py --seed 3 --lr 0.1"),
    (["run", "--nodes", "2", "-m", "app.toy"], "unrecognized arguments: -m app.toy; the job goes after --:"
     " python -m orchestrate run --nodes 2 -- -m app.toy"),
    (["export", "--to", "slurm", "my train.py"], "unrecognized arguments: my train.py; the job goes after --:"
     " python -m orchestrate export --to slurm -- 'my train.py'"),
    # the job's first word is also the value of one of our options before it: the -- goes after that value
    (["run", "--nodes", "2", "2"], "unrecognized arguments: 2; the job goes after --: python -m orchestrate run"
     " --nodes 2 -- 2"),
    (["export", "train.py", "--to", "slurm"], "unrecognized arguments: train.py; the job goes after --:"
     " python -m orchestrate export -- train.py --to slurm"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["ps", "extra"], "unrecognized arguments: extra"),  # ps runs no job
    # a misspelt option of the command's own: the one meant
    (["run", "--enviroment", "X=1"], "unrecognized arguments: --enviroment X=1 (did you mean --env?)"),
    (["run", "--colective-timeout=3"], "unrecognized arguments: --colective-timeout=3 (did you mean"
     " --collective-timeout?)"),
    (["stop", "r1", "--timout", "3"], "unrecognized arguments: --timout 3 (did you mean --timeout?)"),
    # the nearest option, before one that only starts the word
    (["run", "--cpu-per-node", "2"], "unrecognized arguments: --cpu-per-node 2 (did you mean --cpus-per-node?)"),
    # a subcommand's own (image build)
    (["image", "build", "--ofline"], "unrecognized arguments: --ofline (did you mean --offline?)"),
])
def test_a_job_given_without_its_double_dash_is_told_where_it_goes(args, said, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    command = next(word for word in args if not word.startswith("-"))  # the command's own parser says it
    command += " build" * (command == "image")
    assert capsys.readouterr().err == f"python -m orchestrate {command}: error: {said} (see --help)\n"


@pytest.mark.parametrize("args, said", [
    # the job's own option is an abbreviation of two of ours: argparse stops there, and the -- is still shown
    (["run", "--nodes", "2", "train.py", "--hang", "3"], "ambiguous option: --hang could match --hang-timeout,"
     " --hang-diagnose-after; the job goes after --: python -m orchestrate run --nodes 2 -- train.py --hang 3"),
    # the job's own option is one of ours, with a value ours refuses
    (["run", "--nodes", "2", "train.py", "--nodes", "x"], "argument --nodes: expected a positive integer, got 'x';"
     " the job goes after --: python -m orchestrate run --nodes 2 -- train.py --nodes x"),
    (["run", "--nodes", "x", "train.py"], "argument --nodes: expected a positive integer, got 'x'"),  # ours: no hint
    (["run", "--hang", "3"], "ambiguous option: --hang could match --hang-timeout, --hang-diagnose-after"),
    (["logs", "--hang", "x"], "unrecognized arguments: --hang"),
])
def test_a_commands_own_error_over_a_job_given_without_its_double_dash_says_where_it_goes(args, said, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"python -m orchestrate {args[0]}: error: {said} (see --help)\n"


def test_unreachable_engine_is_one_line_and_exit_2(tmp_path):
    proc = orchestrate("run", "--runs-dir", str(tmp_path),
                       env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Docker engine" in lines[0], proc.stderr
    assert not list(tmp_path.glob("*/node0.log")), "no run may start without an engine"


def test_dry_run_prints_the_plan_without_docker(tmp_path):
    out = io.StringIO()
    code = main(["run", "--nodes", "3", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                 "--dry-run", "--", "-m", "app.hello"], out=out)
    text = out.getvalue()
    assert code == 0
    assert "world size W=6" in text
    assert "node2$ torchrun --nnodes 3 --node-rank 2 --nproc-per-node 2" in text
    assert [ln for ln in text.splitlines() if ln.startswith("node2$")][0].endswith("-m app.hello")


def test_plan_command_equals_dry_run(tmp_path):
    outs = []
    for args in (["plan"], ["run", "--dry-run"]):
        out = io.StringIO()
        assert main([*args, "--workdir", str(tmp_path)], out=out) == 0
        outs.append([ln for ln in out.getvalue().splitlines() if "$ torchrun" in ln])
    assert outs[0] == outs[1] and len(outs[0]) == 2


def test_dry_run_without_an_engine_plans_the_requested_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    out = io.StringIO()
    code = main(["plan", "--nodes", "2", "--gpus-per-node", "2", "--workdir", str(tmp_path)], out=out)
    assert code == 0
    rows = [ln.split() for ln in out.getvalue().splitlines() if ln.startswith("node1 ")]
    assert rows == [["node1", "1", "0", "2", "2"], ["node1", "1", "1", "3", "3"]]
    assert "backend nccl" in out.getvalue()


def test_every_run_option_is_defined_once_for_the_command_line_and_the_library():
    import dataclasses

    from orchestrate.config.options import OPTIONS_BY_DEST
    from orchestrate.config.request import RunRequest

    fields = {f.name for f in dataclasses.fields(RunRequest)} - {"target"}
    assert fields == set(OPTIONS_BY_DEST), "a RunRequest field without its option, or the other way round"
    help_text = orchestrate("run", "--help").stdout
    missing = [o.flag for o in OPTIONS_BY_DEST.values() if o.flag not in help_text]
    assert missing == []


def test_every_option_of_every_command_has_help_text():
    import argparse

    from orchestrate.cli.main import build_parser

    parser = build_parser()
    without = [f"{name} {' '.join(action.option_strings) or action.dest}"
               for name, command in {"": parser, **parser.commands}.items()
               for action in command._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
               and (not action.help or action.help == argparse.SUPPRESS)]
    assert without == []
    listed = {sub.dest: sub.help for sub in parser._subparsers._group_actions[0]._choices_actions}
    named = {name for name, command in parser.commands.items() if command.prog.endswith(f" {name}")}  # no alias
    assert set(listed) == named and all(listed.values())  # each command's line in --help


def test_the_command_line_and_keyword_options_make_the_same_request(tmp_path):
    from orchestrate.cli.main import build_parser
    from orchestrate.cli.options import request_from_args
    from orchestrate.config.request import RunRequest

    argv = ["run", "--nodes", "3", "--nproc-per-node", "2", "--link", "1gbe", "--env", "A=1", "--env", "B=2",
            "--fault", "kill:node1@t=5", "--memory-per-node", "2g", "--workdir", str(tmp_path), "--cpu", "-d"]
    from_cli = request_from_args(build_parser().parse_args(argv), ["train.py", "--epochs", "2"])
    from_keywords = RunRequest.from_options(("train.py", "--epochs", "2"), nodes=3, nproc_per_node=2, link="1gbe",
                                            env={"A": "1", "B": "2"}, faults=["kill:node1@t=5"],
                                            memory_per_node="2g", workdir=tmp_path, cpu=True, detach=True)
    assert from_cli == from_keywords
    assert from_cli.memory_per_node == 2 * 1024**3 and from_cli.link.rate_bits == 10**9


@pytest.mark.parametrize("options, message", [
    ({"nodes": "0"}, "--nodes: expected a positive integer, got '0'"),
    ({"link": "fast"}, "invalid --link 'fast'"),
    ({"backend": "mpi"}, "--backend must be one of auto, nccl, gloo"),
    ({"gpu": 1}, "no run option 'gpu'"),
])
def test_a_bad_keyword_option_is_refused_in_the_words_of_the_command_line(options, message):
    from orchestrate.config.request import RunRequest
    from orchestrate.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(message)):
        RunRequest.from_options(**options)


def test_split_target_keeps_everything_after_the_first_double_dash():
    assert split_target(["run", "--nodes", "2", "--", "train.py", "--", "x"]) == (
        ["run", "--nodes", "2"], ["train.py", "--", "x"])
    assert split_target(["run"]) == (["run"], [])


def test_orchestrate_does_not_import_torch():
    code = ("import sys, orchestrate.cli.main, orchestrate.launch.run, orchestrate.engine.images;"
            " print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "False", proc.stderr


def test_dry_run_shows_the_users_environment_sizes_and_derived_image(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("six\n")
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    out = io.StringIO()
    code = main(["plan", "--workdir", str(tmp_path), "--env", "WANDB_API_KEY=s3cret", "--copy-env", "NCCL_*",
                 "--cpus-per-node", "1.5", "--memory-per-node", "2g",
                 "--requirements", str(tmp_path / "requirements.txt")], out=out)
    text = out.getvalue()
    assert code == 0
    # The user's variables are named, their values never shown (--env, --env-file, --copy-env alike).
    assert "WANDB_API_KEY=***" in text and "s3cret" not in text
    assert "NCCL_DEBUG=***" in text and "INFO" not in text
    assert "each node: 1.5 CPUs, 2g memory; runs as uid:gid " in text
    assert f"+ pip install -r {tmp_path / 'requirements.txt'} + {tmp_path / 'Dockerfile'}" in text


def test_a_copy_env_that_copies_nothing_is_said_by_plan_and_export(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    said = "--copy-env 'WANDB_*': no variable of this machine's environment matches it; nothing copied"
    out = io.StringIO()
    assert main(["plan", "--workdir", str(tmp_path), "--copy-env", "NCCL_*", "--copy-env", "WANDB_*"], out=out) == 0
    assert [ln for ln in out.getvalue().splitlines() if "--copy-env" in ln] == [f"[orchestrate] {said}"]
    assert "NCCL_DEBUG=***" in out.getvalue()
    (tmp_path / "train.py").write_text("")
    assert main(["export", "--to", "slurm", "--workdir", str(tmp_path), "--cpus-per-node", "4", "--copy-env",
                 "WANDB_*", "--", "train.py"], out=io.StringIO()) == 0
    assert capsys.readouterr().err == f"note: {said}\n"


def test_a_workdir_dockerfile_is_ignored_with_no_dockerfile(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM debian\n")
    out = io.StringIO()
    assert main(["plan", "--workdir", str(tmp_path), "--no-dockerfile"], out=out) == 0
    assert "derived image" not in out.getvalue()
    assert main(["plan", "--workdir", str(tmp_path)], out=io.StringIO()) == 2


def test_image_build_tags_other_torch_versions_apart():
    from orchestrate.cli.image import image_tag_for

    assert image_tag_for("2.9.1") == "ddp-compose-node:latest"
    assert image_tag_for("2.14.1") == "ddp-compose-node:torch-2.14.1"


def test_ctrl_c_counts_from_before_the_imports_in_a_launcher_started_with_sigint_ignored():
    """`python -m orchestrate run ... &` in a script inherits SIGINT ignored; the handler must be
    set before the quarter second of imports, or a `kill -INT` then is lost and the run goes on."""
    import signal

    spy = (
        "import builtins, runpy, signal, sys\n"
        "real = builtins.__import__\n"
        "def spy(name, *args, **kwargs):\n"
        "    if name == 'orchestrate.cli.main':\n"
        "        print('default handler at import:', signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
        " flush=True)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = spy\n"
        "sys.argv = ['orchestrate', '--help']\n"
        "runpy.run_module('orchestrate', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", spy], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "default handler at import: True"
