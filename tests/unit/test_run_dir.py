"""A run's directory: a ``--runs-dir`` no directory can be made in is refused in one line, before
the engine is asked anything, and what could not be foreseen is said in one line too."""
from __future__ import annotations

import errno
import functools
import io
import os
from pathlib import Path

import pytest

from orchestrate.errors import RunDirError, UsageError
from orchestrate.launch.run_dir import check_runs_dir, prepare_run_dir, runs_dir_problem, writing_run_dir


def test_a_runs_dir_in_a_writable_directory_is_fine_made_or_not(tmp_path: Path):
    assert runs_dir_problem(tmp_path) == ""
    assert runs_dir_problem(tmp_path / "runs" / "deeper") == ""  # made on the run's first use


def test_a_runs_dir_that_is_a_file_or_under_one_is_refused(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert runs_dir_problem(script) == f"{script} is not a directory"
    assert runs_dir_problem(script / "runs") == f"{script} is not a directory"  # the nearest part that exists
    with pytest.raises(UsageError, match=rf"^--runs-dir {script}: no run's directory can be made there: {script}"
                                         r" is not a directory$"):
        check_runs_dir(script)


def test_a_runs_dir_this_user_cannot_write_is_refused(tmp_path: Path, monkeypatch):
    # (the suite may run as root, which may write anywhere: the access check itself is what is held)
    asked = []
    monkeypatch.setattr("orchestrate.launch.run_dir.os.access", lambda path, mode: asked.append((Path(path), mode)))
    assert runs_dir_problem(tmp_path / "runs") == f"{tmp_path} is not writable by this user"
    import os
    assert asked == [(tmp_path, os.W_OK | os.X_OK)]


def test_a_run_directory_the_system_will_not_make_is_said_in_one_line(make_job, tmp_path: Path):
    plan = make_job(runs_dir=Path("/proc/ddp-compose-no-such-dir"))
    with pytest.raises(RunDirError, match=r"^cannot make the run's directory /proc/ddp-compose-no-such-dir/test-run:"
                                         r" No such file or directory \(--runs-dir /proc/ddp-compose-no-such-dir\)$"):
        prepare_run_dir(plan)


def test_run_refuses_a_runs_dir_that_is_a_file_before_asking_the_engine(tmp_path: Path, capsys):
    from orchestrate.cli.main import main

    (tmp_path / "train.py").write_text("print('hi')\n")

    class NoEngine:
        def __getattr__(self, name):
            raise AssertionError(f"the engine was asked {name}")

    out = io.StringIO()
    assert main(["run", "--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "train.py"), "--", "train.py"],
                out=out, client=NoEngine()) == 2
    assert capsys.readouterr().err == (f"error: --runs-dir {tmp_path}/train.py: no run's directory can be made there:"
                                       f" {tmp_path}/train.py is not a directory\n")


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_the_run_directory_is_written_is_one_line_and_leaves_none(make_job, tmp_path: Path,
                                                                                   monkeypatch):
    monkeypatch.setattr("orchestrate.launch.run_dir.write_triggers", full_disk)
    plan = make_job()
    with pytest.raises(RunDirError, match=rf"^cannot write the run's directory {plan.run_dir}: No space left on"
                                          rf" device \(--runs-dir {tmp_path}/runs\)$") as refused:
        prepare_run_dir(plan)
    assert refused.value.exit_code == 2
    assert not plan.run_dir.exists() and (tmp_path / "runs").is_dir()  # the runs directory itself stays


def test_an_error_that_is_not_the_file_systems_passes_through_the_run_directorys_writes(tmp_path: Path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    with pytest.raises(OSError, match="^engine connection refused$"):
        with writing_run_dir(run_dir):
            raise OSError("engine connection refused")  # as requests' errors are: OSErrors with no errno
    assert run_dir.is_dir()


def test_run_on_a_disk_that_fills_as_its_compose_file_is_written_says_so_and_starts_nothing(tmp_path: Path,
                                                                                            monkeypatch, capsys):
    from orchestrate.cli import run as run_command
    from orchestrate.cli.main import main
    from orchestrate.config.run_config import DEFAULT_IMAGE
    from orchestrate.launch.run import Run
    from tests.fakes import FakeCompose, FakeDockerClient

    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE)
    FakeCompose.engine = client
    monkeypatch.setattr(run_command, "Run", functools.partial(Run, compose_factory=FakeCompose))
    monkeypatch.setattr("orchestrate.launch.compose_backend.write_compose_file", full_disk)
    runs = tmp_path / "runs"
    assert main(["run", "--cpu", "--workdir", str(tmp_path), "--runs-dir", str(runs)], out=io.StringIO(),
                client=client) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write the run's directory {runs}/") and err.count("\n") == 1, err
    assert err.endswith(f": No space left on device (--runs-dir {runs})\n")
    assert list(runs.iterdir()) == [] and client.containers.list(all=True) == []
