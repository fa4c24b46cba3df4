"""Whether the engine's kernel has netem (delay and loss need it)."""
from __future__ import annotations

from typing import Any, Optional

from orchestrate.engine.errors import engine_errors

PROBE_COMMAND = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
# How long the probe's container may take to run tc, at most (it takes well under a second).
PROBE_TIMEOUT_S = 60
PROBE_LABEL = "io.ddp-compose.probe"  # on the probe's container: what it is, were it ever left


def probe_netem(client: Any, image: str) -> Optional[str]:
    """Try netem in a throwaway container of ``image``; None when it works, else tc's error.

    The kernel decides (``sch_netem``), not the image; the container only lends ``tc``. The
    container is removed whatever happens, a Ctrl-C or an engine error too (docker-py's
    ``run(remove=True)`` removed it only once its wait returned, and left it where ``tc`` could
    not start).

    Raises:
        docker.errors.APIError: When the engine refuses to create or start it (an image without
            ``tc``).
    """
    container = client.containers.create(image, PROBE_COMMAND, cap_add=["NET_ADMIN"], user="0:0", entrypoint=[],
                                         labels={PROBE_LABEL: "netem"})
    try:
        container.start()
        status = container.wait(timeout=PROBE_TIMEOUT_S)
        if status.get("StatusCode") == 0:
            return None
        error = container.logs(stdout=False, stderr=True)
        return error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    finally:
        try:
            container.remove(force=True)
        except engine_errors():
            pass  # gone already
