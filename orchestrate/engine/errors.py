"""What an engine error means, decided once.

The docker SDK raises its own errors (``NotFound``, ``APIError`` with an HTTP status), the HTTP
stack below it raises others (a refused or reset connection, a read timeout), and a stream
that breaks off mid-way raises urllib3's. Each means one thing, and only the right one may
be read as "the container is gone":

- ``NOT_FOUND``: the object is gone (404);
- ``CONFLICT``: the object is not in the state the request needs (409: not running, paused);
- ``LOST``: the engine cannot be reached (its socket refused, a connection reset or cut);
- ``TIMEOUT``: the engine did not answer in time;
- ``REFUSED``: any other answer of the engine's (4xx, 5xx).

Anything else (a ``KeyError``, a ``TypeError``) is a bug, never an engine error.
"""
from __future__ import annotations

from enum import Enum
from typing import Optional

from orchestrate.text import first_line


class EngineFault(str, Enum):
    """What an engine error means (see the module's text)."""

    NOT_FOUND = "not found"
    CONFLICT = "conflict"
    LOST = "lost"
    TIMEOUT = "timeout"
    REFUSED = "refused"


def engine_errors() -> tuple[type[BaseException], ...]:
    """Every exception type that an engine request or stream may raise."""
    import docker.errors
    import requests
    import urllib3.exceptions

    return (docker.errors.DockerException, requests.exceptions.RequestException, urllib3.exceptions.HTTPError,
            ConnectionError, TimeoutError)


def classify(exc: BaseException) -> Optional[EngineFault]:
    """What ``exc`` means for the engine; None when it is not an engine error."""
    import docker.errors
    import requests
    import urllib3.exceptions

    if isinstance(exc, docker.errors.NotFound):
        return EngineFault.NOT_FOUND
    if isinstance(exc, docker.errors.APIError):
        status = exc.status_code
        if status == 404:
            return EngineFault.NOT_FOUND
        if status == 409:
            return EngineFault.CONFLICT
        return EngineFault.REFUSED
    if isinstance(exc, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return EngineFault.TIMEOUT
    if isinstance(exc, (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, ConnectionError)):
        return EngineFault.LOST
    if isinstance(exc, docker.errors.DockerException):  # no engine configured, a bad DOCKER_HOST
        return EngineFault.LOST
    return None


def describe(exc: BaseException) -> str:
    """One line of an engine error: the engine's own explanation where it gave one."""
    return first_line(str(getattr(exc, "explanation", None) or exc))[:300] or type(exc).__name__
