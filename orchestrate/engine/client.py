"""The one place that creates a Docker SDK client."""
from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Optional

from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import EngineUnavailableError

log = logging.getLogger(__name__)


# How long the engine has to answer its version and a ping before a command gives up on it: an
# engine that takes the connection and never answers (a wedged dockerd, a tunnel to a machine that
# went away) would otherwise hold every command for the whole request timeout, saying nothing.
REACH_TIMEOUT_S = 20


def connect(timeout_s: int = 120, reach_timeout_s: float = REACH_TIMEOUT_S) -> Any:
    """Return a Docker client for the engine of the environment (DOCKER_HOST or the socket),
    whose requests wait up to ``timeout_s``, once the engine has answered within
    ``reach_timeout_s``.

    Raises:
        EngineUnavailableError: When no engine answers.
    """
    import os

    import docker

    try:
        client = docker.from_env(timeout=reach_timeout_s)
        client.ping()
    except engine_errors() as exc:
        where = os.environ.get("DOCKER_HOST") or "the local socket"
        said = describe(exc)
        if "timed out" in said.lower():
            raise EngineUnavailableError(
                f"the Docker engine at {where} did not answer within {reach_timeout_s:g} s (a stuck dockerd, or a"
                " host or tunnel gone); restart it, or point DOCKER_HOST at one that answers"
            ) from None
        raise EngineUnavailableError(
            f"cannot reach the Docker engine at {where} ({unreachable_why(said)}); start it (dockerd) or set"
            " DOCKER_HOST"
        ) from None
    client.api.timeout = timeout_s  # each request's own limit from here on
    return client


def unreachable_why(said: str) -> str:
    """Why the engine could not be reached, from what the SDK said (pure): the system's own words
    (``Connection refused``, ``No such file or directory``) where it names them, else what it
    said, cut at a word and marked so (the SDK's nests URLs and reprs a line cannot hold)."""
    found = re.findall(r"\[Errno -?\d+\] ([^'\"()\]]+)|Error\(\d+, '([^']+)'\)", said)
    if found:
        return next(a or b for a, b in reversed(found)).strip()
    if len(said) <= UNREACHABLE_SAID:
        return said
    return said[:UNREACHABLE_SAID].rsplit(" ", 1)[0] + " ..."


# The most of the SDK's words an unreachable engine's error quotes, where no system error is named.
UNREACHABLE_SAID = 160


def exec_output(client: Any, container: Any, argv: list[str], *, user: str = "", workdir: Optional[str] = None,
                environment: Optional[dict[str, str]] = None) -> tuple[int, str]:
    """Run ``argv`` in ``container`` to completion (as ``user``, in ``workdir``, with
    ``environment`` where given); return its exit code and output."""
    exec_id = client.api.exec_create(container.id, argv, stdout=True, stderr=True, user=user, workdir=workdir,
                                     environment=environment)["Id"]
    output = client.api.exec_start(exec_id, stream=False)
    code = client.api.exec_inspect(exec_id).get("ExitCode")
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    return (code if code is not None else -1), text


# How often a command whose answer came back short is run again (it must only read).
EXEC_ASKS = 3


def exec_answer(client: Any, container: Any, argv: list[str], whole: Callable[[str], bool], **options: Any
                ) -> tuple[int, str]:
    """:func:`exec_output` of a command that only reads, run again (:data:`EXEC_ASKS` times in
    all) while it succeeds with an answer that is not ``whole``: docker's exec can lose a short
    command's output (docker/docker-py#2042). The last exit code and output."""
    code, text = -1, ""
    for _ in range(EXEC_ASKS):
        code, text = exec_output(client, container, argv, **options)
        if code != 0 or whole(text):
            break
    return code, text


def stream_lines(chunks: Iterable[bytes], unfinished: Optional[list[bytes]] = None) -> Iterator[bytes]:
    """The complete lines of a byte stream (a container's log, an exec's output), then the
    unfinished last one (put in ``unfinished`` instead, where given). A stream that breaks off
    (its container went away) just ends."""
    pending = b""
    try:
        for chunk in chunks:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield from complete
    except engine_errors() as exc:  # the stream broke off; anything else is a bug, and raised
        log.debug("stream ended: %s", exc)
    if pending and unfinished is not None:
        unfinished.append(pending)
    elif pending:
        yield pending


def engine_now(client: Any) -> float:
    """The engine's clock, in epoch seconds (``docker info``'s SystemTime): what its log stamps
    are to be compared with, the host's own clock where the engine cannot say. A remote
    DOCKER_HOST's clock may be minutes off the host's."""
    import time

    try:
        now = engine_time(str((client.info() or {}).get("SystemTime") or ""))
    except engine_errors():
        now = None
    return now if now is not None else time.time()


def engine_time(text: str) -> Optional[float]:
    """Epoch seconds of an engine timestamp (RFC 3339, nanoseconds, ``Z``); None if unset."""
    if not text or text.startswith("0001-"):
        return None
    main, _, rest = text.rstrip("Z").partition(".")
    fraction = (rest[:6] or "0").ljust(6, "0")
    try:
        return datetime.fromisoformat(f"{main}.{fraction}+00:00").timestamp()
    except ValueError:
        return None

