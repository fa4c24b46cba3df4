"""Integration tests: the real Docker engine, real Compose v2, the real node image.

They skip, with the reason, only where no engine can be had; under CI (CI=true) a missing
engine, Compose or image is a failure, since .ci/run installs and starts all three.
"""
from __future__ import annotations

import io
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from orchestrate.cli.main import main
from orchestrate.config.run_config import DEFAULT_IMAGE

PROJECT_LABEL = "com.docker.compose.project"
RUN_DIR_LABEL = "io.ddp-compose.run-dir"


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must provide this, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def compose_cli() -> None:
    """Compose v2 itself (``config`` needs no engine)."""
    from orchestrate.engine.compose_cli import compose_command
    from orchestrate.errors import EngineUnavailableError

    try:
        compose_command()
    except EngineUnavailableError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # any failure to reach the engine
        unavailable(f"no Docker engine reachable ({str(exc).splitlines()[0][:120]}); "
                    "run scripts/run-tests.sh to set one up")
    from orchestrate.engine.compose_cli import compose_command
    from orchestrate.errors import EngineUnavailableError

    try:
        compose_command()
    except EngineUnavailableError as exc:
        unavailable(str(exc))
    try:
        client.images.get(DEFAULT_IMAGE)
    except Exception:
        unavailable(f"node image {DEFAULT_IMAGE} missing; build it with"
                    " `python -m orchestrate image build`")
    return client


def leftovers(client, project: str) -> list[str]:
    """Every container, network and volume still carrying the Compose project's label."""
    label = {"label": f"{PROJECT_LABEL}={project}"}
    found = [f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters=label)]
    found += [f"network {n.name}" for n in client.networks.list(filters=label)]
    found += [f"volume {v.name}" for v in client.volumes.list(filters=label)]
    return found


def containers_under(client, directory: Path) -> list[str]:
    """The containers of every run whose run directory lies under ``directory`` (a test's own
    tmp_path): what a test made, whatever other runs come and go on the engine meanwhile."""
    root = str(directory)
    return [c.name for c in client.containers.list(all=True, ignore_removed=True, filters={"label": RUN_DIR_LABEL})
            if c.labels.get(RUN_DIR_LABEL, "").startswith(root)]


def remove_project(client, project: str) -> None:
    """Force-remove whatever a failed test left of a project."""
    label = {"label": f"{PROJECT_LABEL}={project}"}
    for container in client.containers.list(all=True, ignore_removed=True, filters=label):
        container.remove(force=True)
    for network in client.networks.list(filters=label):
        network.remove()
    for volume in client.volumes.list(filters=label):
        volume.remove(force=True)


@dataclass
class RunResult:
    code: int
    output: str
    run_id: str
    run_dir: Path

    @property
    def project(self) -> str:
        return f"ddp-{self.run_id}"


@pytest.fixture
def orchestrate_run(docker_client, tmp_path):
    """Run ``python -m orchestrate run ...`` in-process; clean up its project afterwards."""
    projects: list[str] = []
    counter = iter(range(10**6))
    lock = threading.Lock()

    def run(*args: str) -> RunResult:
        with lock:
            runs_dir = tmp_path / f"runs-{next(counter)}"
        options, target = list(args), []
        if "--" in options:
            i = options.index("--")
            options, target = options[:i], ["--", *options[i + 1:]]
        out = io.StringIO()
        code = main(["run", "--runs-dir", str(runs_dir), *options, *target], out=out)
        run_dirs = sorted(runs_dir.iterdir()) if runs_dir.exists() else []
        run_dir = run_dirs[0] if run_dirs else runs_dir
        result = RunResult(code, out.getvalue(), run_dir.name, run_dir)
        with lock:
            projects.append(result.project)
        return result

    yield run
    for project in projects:
        remove_project(docker_client, project)


@pytest.fixture
def compose_project(docker_client):
    """A unique Compose project name for the checked-in compose.yaml, removed afterwards."""
    import secrets

    name = f"ddp-compose-test-{secrets.token_hex(4)}"
    yield name
    subprocess.run(["docker", "compose", "-p", name, "-f", "compose.yaml", "-f", "compose.cpu.yaml",
                    "down", "--volumes", "--timeout", "2"], capture_output=True,
                   cwd=Path(__file__).resolve().parents[2])
    remove_project(docker_client, name)


ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs"


def job_workdir(tmp_path: Path, job: str) -> Path:
    """A work directory under ``tmp_path`` holding a copy of tests/jobs/``job``."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    shutil.copy(JOBS / job, workdir)
    return workdir


def start_run(tmp_path: Path, *args: str, sigint_ignored: bool = False,
              env: Optional[dict[str, str]] = None) -> tuple[subprocess.Popen, "queue.Queue[Optional[str]]"]:
    """The launcher as a child process (with ``env`` added to its environment);
    ``sigint_ignored``: started as a shell starts a background job without job control
    (``cmd &`` in a script), with SIGINT ignored."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "run", "--runs-dir", str(tmp_path), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(END_OF_OUTPUT)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


END_OF_OUTPUT = None  # what start_run's queue holds once the launcher's output has ended


def read_to_end(proc: subprocess.Popen, lines: "queue.Queue[Optional[str]]", seen: list[str],
                timeout_s: float = 120) -> str:
    """Wait for the launcher to end and take in every line it printed; return them all."""
    proc.wait(timeout=timeout_s)
    while (line := lines.get(timeout=30)) is not END_OF_OUTPUT:
        seen.append(line)
    lines.put(END_OF_OUTPUT)  # for whoever reads on
    return "".join(seen)


def read_so_far(lines: "queue.Queue[Optional[str]]", seen: list[str]) -> str:
    """Take in the lines the launcher has printed so far, without waiting; return them all."""
    while not lines.empty():
        line = lines.get()
        if line is END_OF_OUTPUT:
            lines.put(END_OF_OUTPUT)
            break
        seen.append(line)
    return "".join(seen)


def wait_for(lines: "queue.Queue[Optional[str]]", pattern: str, seen: list[str], timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is END_OF_OUTPUT:
            lines.put(END_OF_OUTPUT)
            raise AssertionError(f"the launcher's output ended with no line matching {pattern!r};"
                                 f" last lines:\n{''.join(seen[-15:])}")
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    launcher = [line for line in seen if line.startswith("[orchestrate]")]
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s; the launcher said:\n{''.join(launcher)}"
                         f"\nlast lines:\n{''.join(seen[-15:])}")


# Runs that several tests only read: each is made once per session (and the tests that share
# one are kept on one xdist worker by their xdist_group).
LONG_TOY = ("--", "-m", "app.toy", "--steps", "100000000", "--log-every", "10")
HUNG_TIMEOUT_S = 8  # the collective timeout of the runs whose node1 hangs or is cut off
ELASTIC_TRAIN = ("-m", "app.train", "--data", "synthetic", "--data-dir", "data", "--train-size", "1024",
                 "--test-size", "256", "--epochs", "2", "--checkpoint-every", "4", "--resume")
ELASTIC = ("--nodes", "2", "--rdzv", "c10d", "--rdzv-timeout", "30", "--collective-timeout", "20")


@dataclass
class FaultedRun:
    """A run with a fault injected into node1 at step 30, followed to its end."""

    code: int
    output: str
    seconds_after_fault: float
    run_dir: Path
    project: str
    leftovers: list[str]


@pytest.fixture(scope="session")
def faulted_run(docker_client, tmp_path_factory):
    """``faulted_run(action)``: the run whose node1 gets ``pause`` or ``disconnect`` at step 30,
    made once per action."""
    made: dict[str, FaultedRun] = {}

    def make(action: str) -> FaultedRun:
        if action not in made:
            tmp = tmp_path_factory.mktemp(f"{action}-run")
            proc, lines = start_run(tmp, "--nodes", "2", "--collective-timeout", str(HUNG_TIMEOUT_S),
                                    "--fault", f"{action}:node1@step=30", *LONG_TOY)
            seen: list[str] = []
            run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
            try:
                wait_for(lines, rf"fault injected: {action}:node1@step=30", seen)
                injected = time.monotonic()
                # timed to when the launcher finds out, not to its exit (a teardown on a busy engine)
                wait_for(lines, r"node1 stopped answering: ", seen, timeout=120)
                took = time.monotonic() - injected
                proc.wait(timeout=120)
                output = read_to_end(proc, lines, seen)
                made[action] = FaultedRun(proc.returncode, output, took, tmp / run_id, f"ddp-{run_id}",
                                          leftovers(docker_client, f"ddp-{run_id}"))
            finally:
                if proc.poll() is None:
                    proc.kill()
                remove_project(docker_client, f"ddp-{run_id}")
        return made[action]

    return make


class LogsFollower:
    """``logs RUN -f`` in a thread, begun as soon as the nodes of the run in ``runs_dir`` are in
    the engine, as a user in another terminal would; what it printed and its exit code."""

    def __init__(self, docker_client, runs_dir: Path, appear_within_s: float = 120.0) -> None:
        self.client, self.runs_dir, self.appear_within_s = docker_client, runs_dir, appear_within_s
        self.out, self.code, self.error = io.StringIO(), None, ""
        self.thread = threading.Thread(target=self.follow, name="logs-follower", daemon=True)
        self.thread.start()

    def follow(self) -> None:
        deadline = time.monotonic() + self.appear_within_s
        while time.monotonic() < deadline:
            ours = [c.labels["io.ddp-compose.run-id"] for c in self.client.containers.list(
                        all=True, ignore_removed=True, filters={"label": RUN_DIR_LABEL})
                    if Path(c.labels[RUN_DIR_LABEL]).parent == self.runs_dir]
            if ours:
                self.code = main(["logs", ours[0], "-f"], out=self.out)
                return
            time.sleep(0.2)  # polled, with a deadline
        self.error = f"no run of {self.runs_dir} appeared in the engine within {self.appear_within_s:g} s"

    def lines(self, timeout_s: float = 60.0) -> list[str]:
        """Its lines, spaces squeezed, once it has ended (it must, within ``timeout_s``)."""
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "logs -f went on after its run ended"
        assert self.code == 0, self.error or f"logs -f exited {self.code}"
        return [" ".join(line.split()) for line in self.out.getvalue().splitlines()]


@dataclass
class ElasticRecovery:
    """The elastic run whose node1 was killed at step 12 and rejoined."""

    run: RunResult
    workdir: Path
    leftovers: list[str]
    followed: LogsFollower  # ``logs RUN -f`` from its start to its end


@pytest.fixture(scope="session")
def elastic_recovery(docker_client, tmp_path_factory):
    """The elastic run whose node1 is killed at step 12, recovers and ends (its parameters in
    hit.pt of its work directory), made once."""
    workdir = tmp_path_factory.mktemp("elastic-recovery")
    runs_dir = workdir / "runs"
    out = io.StringIO()
    followed = LogsFollower(docker_client, runs_dir)
    code = main(["run", "--runs-dir", str(runs_dir), *ELASTIC, "--workdir", str(workdir),
                 "--fault", "kill:node1@step=12", "--", *ELASTIC_TRAIN, "--checkpoint-dir", "ck-hit",
                 "--save-params", "hit.pt"], out=out)
    run_dirs = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    run_dir = run_dirs[0] if run_dirs else runs_dir
    run = RunResult(code, out.getvalue(), run_dir.name, run_dir)
    yield ElasticRecovery(run, workdir, leftovers(docker_client, run.project), followed)
    remove_project(docker_client, run.project)
