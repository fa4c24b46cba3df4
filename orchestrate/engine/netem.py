"""Whether the engine's kernel has netem (delay and loss need it)."""
from __future__ import annotations

from typing import Any, Optional


def probe_netem(client: Any, image: str) -> Optional[str]:
    """Try netem in a throwaway container of ``image``; None when it works, else tc's error.

    The kernel decides (``sch_netem``), not the image; the container only lends ``tc``.
    """
    import docker.errors

    try:
        client.containers.run(image, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                              remove=True, cap_add=["NET_ADMIN"], user="0:0", entrypoint=[])
        return None
    except docker.errors.ContainerError as exc:
        return (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
