"""Run in a node (as root, the only user who may read every process's environment): find the
worker process of a global rank and signal it, or list the worker processes with their state.

``python3 rank_signal.py signal RANK SIGNAL`` signals the process of RANK and prints its pid,
exiting :data:`NOT_HERE` where no process of RANK runs; ``python3 rank_signal.py workers`` prints
``RANK PID STATE`` for each worker process (the state letter of ``/proc/PID/stat``: ``T`` is
stopped), then :data:`END`; a rank it does not list has no process here. The launcher judges by
the exit status and the end line, not by the output alone: docker's exec can lose a short
command's output (docker/docker-py#2042).

A worker is a process that torchrun started: its environment has ``TORCHELASTIC_RUN_ID`` and
its ``RANK``. The processes it starts itself (data loader workers) inherit both; the rank's
process is the one whose parent is not of the same rank, and that leads its own session (torchrun
starts each worker so, and ends it with its process group) or shares its parent's. A worker's
child left behind when the worker died is neither: it was handed to the node's init, whose
session is not its own, and is not the rank's process. Standard library only: the launcher
sends this file's text to ``python3 -c`` (:mod:`orchestrate.faults.ranks`), so a node needs
nothing of ddp-compose installed. ``PROC`` is where the processes are listed (``/proc``).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Optional

PROC = "/proc"
NOT_HERE = 3  # the exit status of ``signal`` where no process of the rank runs
END = "end"  # the last line of ``workers``' answer


def environment(pid: str) -> dict[str, str]:
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            raw = handle.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def stat(pid: int) -> tuple[Optional[int], str, Optional[int]]:
    """A process's parent, state letter and session (None, "?", None where it is gone)."""
    try:
        with open(f"{PROC}/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None, "?", None
    return int(fields[1]), fields[0], int(fields[3])


def parent_and_state(pid: int) -> tuple[Optional[int], str]:
    parent, state, _ = stat(pid)
    return parent, state


def launched_so(pid: int) -> bool:
    """Whether a process is where a launcher put it: leading its own session, or in its parent's.
    A worker's child orphaned by the worker's death is in the dead worker's session, not its new
    parent's (the node's init)."""
    parent, _, session = stat(pid)
    return session == pid or (parent is not None and session is not None and stat(parent)[2] == session)


def workers() -> dict[int, str]:
    """Every worker process here and its global rank (its own children, and those it left behind
    when it died, left out)."""
    ranks = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            env = environment(name)
            if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
                ranks[int(name)] = env["RANK"]
    return {pid: rank for pid, rank in ranks.items()
            if ranks.get(parent_and_state(pid)[0]) != rank and launched_so(pid)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["signal"] and len(argv) == 3:
        signalled = [pid for pid, rank in workers().items() if rank == argv[1]]
        for pid in signalled:
            os.kill(pid, getattr(signal, argv[2]))
            print(pid)
        return 0 if signalled else NOT_HERE
    if argv == ["workers"]:
        for pid, rank in sorted(workers().items()):
            print(rank, pid, parent_and_state(pid)[1])
        print(END)
        return 0
    print("usage: rank_signal.py signal RANK SIGNAL | workers", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
