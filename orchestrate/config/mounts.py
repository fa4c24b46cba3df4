"""Host paths mounted into every node beside the work directory (``--mount``): a dataset, a
model cache, a checkpoint store, at the path the script names.

``--mount HOST[:NODE][:ro]``: ``HOST`` is a file or directory on the host (``~`` and relative
paths are taken from where the run is asked); ``NODE`` is where the nodes see it, an absolute
path, by default ``HOST``'s own, so that a script that names ``/data/imagenet`` reads the
same path in the nodes as on the host and on a cluster that mounts it there; ``ro`` mounts it
read-only (``rw``, the default, does not). Pure parsing: the host path is checked by the run's
configuration, the node path against the node's own paths by the plan.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrate.errors import UsageError

USAGE = "usage: --mount HOST[:NODE][:ro], e.g. --mount ~/datasets/mnist:/data/mnist:ro"
MODES = ("ro", "rw")


@dataclass(frozen=True)
class Mount:
    """One host path in every node: ``source`` on the host, ``target`` in the nodes (None:
    the source's own absolute path), read-only or not."""

    source: Path
    target: Optional[str] = None
    read_only: bool = False

    def resolved(self, base: Path) -> "Mount":
        """With ``source`` absolute (``~`` expanded, relative to ``base``, links followed) and
        ``target`` set."""
        source = (base / self.source.expanduser()).resolve()
        return Mount(source, self.target or str(source), self.read_only)

    def __str__(self) -> str:
        mode = ":ro" if self.read_only else ""
        return f"{self.source}:{self.target}{mode}" if self.target else f"{self.source}{mode}"


def parse_mount(text: str) -> Mount:
    """Parse ``HOST[:NODE][:ro|rw]``.

    Raises:
        UsageError: For an empty host path, a node path that is not absolute, or too many parts.
    """
    parts = str(text).split(":")
    read_only = False
    if len(parts) > 1 and parts[-1] in MODES:
        read_only = parts.pop() == "ro"
    if len(parts) > 2 or not parts[0]:
        raise UsageError(f"bad --mount {text!r}: {USAGE}")
    target = None
    if len(parts) == 2:
        if not parts[1].startswith("/"):
            raise UsageError(f"bad --mount {text!r}: the node path {parts[1]!r} must be absolute; {USAGE}")
        target = posixpath.normpath(parts[1])
    return Mount(Path(parts[0]), target, read_only)
