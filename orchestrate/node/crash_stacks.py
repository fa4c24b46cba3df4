"""Where a worker was when it crashed: a native crash (a segfault in an extension, a C++
exception that aborts, as gloo's ``EnforceNotMet`` on a collective whose sizes differ) ends the
process with no Python traceback, so nothing says which line of the script made the call.
Python's ``faulthandler`` writes every thread's stack when one of those signals comes, from the
signal handler itself; this points it at a file of the run's debug directory, one per rank
(``rank3.crash``), where the launcher reads it (:mod:`orchestrate.outcome.crash_dump`).

A DataLoader worker process (forked from the rank) writes to its rank's file too: torch puts
its own handlers for SIGSEGV, SIGBUS and SIGFPE in every such worker, which only say that one
came, so the dump is put in front of them (:func:`keep_in_data_loader_workers`).

A DataLoader worker started by spawn or forkserver is a fresh interpreter: it opens its rank's
file itself, to append (:func:`keep_in_spawned_loader_worker`, called as
:mod:`orchestrate.node.loader_workers` starts the worker). torch's ``@record`` turns faulthandler on to stderr as it starts the script's
main; it is pointed back at the file then (:func:`keep_after_torch_record`).

A script that turned ``faulthandler`` on itself (``PYTHONFAULTHANDLER``, ``-X faulthandler``,
its own ``enable``) keeps its own: its stacks go where it asked.

Where a worker was when torchrun ended it is worth as much: a rank that never reached the
collective its peers timed out in, or the ``monitored_barrier`` that names it, is ended by
SIGTERM before anyone asked it. :func:`dump_when_stopped` has ``faulthandler`` write every thread's
stack to ``rank3.stopped`` on SIGTERM, then lets the signal end the process as it would have.
A process the worker forks does not write there (its own SIGTERM, a DataLoader worker's, is no
end of the rank's), and a script's own SIGTERM handler replaces it. Standard library only.
"""
from __future__ import annotations

import atexit
import faulthandler
import functools
import itertools
import os
import signal
from typing import IO, Any, Optional

SUFFIX = ".crash"
STOPPED_SUFFIX = ".stopped"
# the open file faulthandler writes to: it keeps only the descriptor, so the file must stay open
_dump: Optional[IO[str]] = None
# the process that opened it (a forked child inherits _dump, not the file's ownership)
_owner: Optional[int] = None
# the open file faulthandler writes a SIGTERM's stacks to, and the process that opened it
_stopped: Optional[IO[str]] = None
_stopped_owner: Optional[int] = None


def crash_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}{SUFFIX}")


def stopped_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}{STOPPED_SUFFIX}")


def dump_when_stopped(directory: str, rank: int) -> bool:
    """On SIGTERM, write every thread's stack to ``rank{rank}.stopped`` in ``directory``, then
    end as SIGTERM ends the process. The file holds this worker's stacks only (a predecessor's
    goes); it is removed at a normal exit, where nothing stopped the worker. Returns whether it
    did (not where SIGTERM already has a handler, or the file cannot be opened)."""
    global _stopped, _stopped_owner
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    try:
        _stopped = open(stopped_file(directory, rank), "w", encoding="utf-8")
    except OSError:
        return False
    _stopped_owner = os.getpid()
    faulthandler.register(signal.SIGTERM, file=_stopped, all_threads=True, chain=True)
    os.register_at_fork(after_in_child=_not_in_a_child)
    atexit.register(_remove_stopped_if_empty)
    return True


def _not_in_a_child() -> None:
    """A forked child's SIGTERM is its own end, not the rank's: it writes no stacks for it. Only
    while the handler is still ours (Python's table says SIG_DFL): unregistering puts SIG_DFL
    back, which would drop a handler the script set since."""
    if _stopped is not None and _stopped_owner != os.getpid() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        faulthandler.unregister(signal.SIGTERM)


def _remove_stopped_if_empty() -> None:
    """At the worker's normal exit: no file where nothing stopped it (only the process that made
    it removes it)."""
    if _stopped is None or _stopped_owner != os.getpid():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # still ours (see _not_in_a_child)
        faulthandler.unregister(signal.SIGTERM)
    try:
        if os.fstat(_stopped.fileno()).st_size == 0:
            os.remove(_stopped.name)
    except OSError:
        pass
    _stopped.close()


def install(directory: str, rank: int) -> bool:
    """Dump every thread's stack to ``rank{rank}.crash`` in ``directory`` on a fatal signal. The
    file holds this worker's dump only: a predecessor's (an earlier attempt's, under elastic
    restarts) is kept beside it as ``rank{rank}.crash.1``, ``.2``, ... Returns whether it did
    (not where the script's own faulthandler is on, or the file cannot be opened)."""
    global _dump, _owner
    if faulthandler.is_enabled():
        return False
    path = crash_file(directory, rank)
    try:
        if os.path.getsize(path) > 0:
            kept = next(f"{path}.{n}" for n in itertools.count(1) if not os.path.exists(f"{path}.{n}"))
            os.replace(path, kept)
        else:  # a predecessor's empty one (it was stopped): this worker's is a file of its own
            os.remove(path)
    except OSError:
        pass  # none yet
    try:
        _dump = open(path, "w", encoding="utf-8")
    except OSError:
        return False
    _owner = os.getpid()
    faulthandler.enable(file=_dump, all_threads=True)
    atexit.register(_remove_if_empty)
    return True


def _remove_if_empty() -> None:
    """At a worker's normal exit: no file where nothing crashed (a predecessor's dump stays).
    Only the process that made it removes it, and only the very file it made: a forked child's
    exit, or an older worker of the same rank that ends after its successor started, leaves the
    current one alone."""
    if _dump is None or _owner != os.getpid():
        return
    faulthandler.disable()
    try:
        mine, now = os.fstat(_dump.fileno()), os.stat(_dump.name)
        if (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino) and now.st_size == 0:
            os.remove(_dump.name)
    except OSError:
        pass
    _dump.close()


def keep_in_spawned_loader_worker(directory: str, rank: int) -> None:
    """In a DataLoader worker that spawn or forkserver started: dump to the rank's file too,
    appended, where the rank keeps one (not where the script's own faulthandler is on: its
    ``PYTHONFAULTHANDLER`` reaches the worker as well). The worker never removes the file: the
    rank owns it."""
    global _dump
    path = crash_file(directory, rank)
    if faulthandler.is_enabled() or not os.path.exists(path):
        return
    _dump = open(path, "a", encoding="utf-8")
    faulthandler.enable(file=_dump, all_threads=True)
    keep_in_data_loader_workers()


def keep_in_data_loader_workers() -> None:
    """After torch sets a DataLoader worker's signal handlers, dump the worker's stacks first
    (to its rank's file) where a fatal signal comes; torch's handlers only name the signal."""
    from torch.utils.data._utils import signal_handling

    original = signal_handling._set_worker_signal_handlers

    @functools.wraps(original)
    def set_worker_signal_handlers(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if _dump is not None and not _dump.closed:
            # enable() is a no-op while enabled; disable() puts back the handlers from before
            # faulthandler, so torch's go in again, to be called after the dump
            faulthandler.disable()
            original(*args, **kwargs)
            faulthandler.enable(file=_dump, all_threads=True)
        return result

    signal_handling._set_worker_signal_handlers = set_worker_signal_handlers


def keep_after_torch_record() -> None:
    """torch's ``@record`` (its ``ErrorHandler.initialize``) turns faulthandler on with no file,
    which points it at stderr: point it back at the rank's file after."""
    from torch.distributed.elastic.multiprocessing.errors import error_handler

    original = error_handler.ErrorHandler.initialize

    @functools.wraps(original)
    def initialize(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _dump is not None and not _dump.closed and faulthandler.is_enabled():
            faulthandler.enable(file=_dump, all_threads=True)  # while enabled: only the file changes
        return result

    error_handler.ErrorHandler.initialize = initialize
