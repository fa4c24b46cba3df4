"""Where a worker was when it crashed: a native crash (a segfault in an extension, a C++
exception that aborts, as gloo's ``EnforceNotMet`` on a collective whose sizes differ) ends the
process with no Python traceback, so nothing says which line of the script made the call.
Python's ``faulthandler`` writes every thread's stack when one of those signals comes, from the
signal handler itself; this points it at a file of the run's debug directory, one per rank
(``rank3.crash``), where the launcher reads it (:mod:`orchestrate.outcome.crash_dump`).

A script that turned ``faulthandler`` on itself (``PYTHONFAULTHANDLER``, ``-X faulthandler``,
its own ``enable``) keeps its own: its stacks go where it asked. Standard library only.
"""
from __future__ import annotations

import faulthandler
import os
from typing import IO, Optional

SUFFIX = ".crash"
# the open file faulthandler writes to: it keeps only the descriptor, so the file must stay open
_dump: Optional[IO[str]] = None


def crash_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}{SUFFIX}")


def install(directory: str, rank: int) -> bool:
    """Dump every thread's stack to ``rank{rank}.crash`` in ``directory`` on a fatal signal,
    appended (a restarted worker keeps its predecessor's). Returns whether it did (not where
    the script's own faulthandler is on, or the file cannot be opened)."""
    global _dump
    if faulthandler.is_enabled():
        return False
    try:
        _dump = open(crash_file(directory, rank), "a", encoding="utf-8")
    except OSError:
        return False
    faulthandler.enable(file=_dump, all_threads=True)
    return True
