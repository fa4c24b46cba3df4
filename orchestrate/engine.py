"""The one place that creates a Docker SDK client."""
from __future__ import annotations

from typing import Any

from orchestrate.errors import EngineUnavailableError


def connect(timeout_s: int = 120) -> Any:
    """Return a Docker client for the engine of the environment (DOCKER_HOST or the socket).

    Raises:
        EngineUnavailableError: When no engine answers.
    """
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except docker.errors.DockerException as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineUnavailableError(
            f"cannot reach the Docker engine ({reason[:160]}); start it (dockerd) or set DOCKER_HOST"
        ) from None
    return client
