"""A terminal's session with one rank's debugger: the lines typed go to the rank's pdb, what pdb
says comes back, until the rank goes on (``continue``, ``quit``) or the input ends (Ctrl-D), which
lets the rank go on."""
from __future__ import annotations

import codecs
import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterator, Optional

from orchestrate.errors import OrchestrateError
from orchestrate.node.remote_debugger import socket_name
from orchestrate.plan.layout import DEBUG_SUBDIR

# The longest socket path connect() takes whole (sun_path is 108 bytes on Linux, with its NUL);
# a longer one is reached through the directory's descriptor.
LONGEST_SOCKET_PATH = 107
# How long a session waits for the rank's next words once the input ended (from the end of the
# input, then from each answer: a busy machine answers slowly, but answers), and how often it looks.
LINGER_S = 5.0
# How many times LINGER_S a session lasts at most after its input ended, however the rank talks on
# (a breakpoint's own ``commands`` print at every stop, and never read the input's end).
LINGER_CAP = 10
POLL_S = 0.2


def socket_path(run_dir: Path, rank: int) -> Path:
    """Where ``rank``'s debugger listens, on the host."""
    return run_dir / DEBUG_SUBDIR / socket_name(rank)


def connect(path: Path) -> socket.socket:
    """A connection to the debugger listening at ``path``; OrchestrateError where none listens
    there (the rank went on, its process ended, or another terminal holds it)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    directory: Optional[int] = None
    try:
        target = str(path)
        if len(os.fsencode(target)) > LONGEST_SOCKET_PATH:  # a checkout deep in the tree
            directory = os.open(path.parent, os.O_RDONLY)
            target = f"/proc/self/fd/{directory}/{path.name}"
        connection.connect(target)
    except OSError as exc:
        connection.close()
        raise OrchestrateError(f"no debugger listens at {path}: {exc.strerror or exc}") from None
    finally:
        if directory is not None:
            os.close(directory)
    return connection


def talk(connection: socket.socket, typed: IO[str], out: IO[str], linger_s: float = LINGER_S) -> int:
    """Send the lines ``typed`` to the debugger and write what it says to ``out``, until it closes
    the connection; the end of ``typed`` is sent as end-of-input (pdb then lets the rank go on).
    An interrupt sends end-of-input too, reads the debugger's last words, and is raised again
    (taken between two reads, so that nothing pdb said is lost: see :func:`interrupts_between_reads`). A
    rank that runs on in the session (to a breakpoint set in it) reads end-of-input only when it
    next stops: the connection is closed once it has said nothing for ``linger_s`` since the input
    ended (at most ``LINGER_CAP`` times that after it), and the rank, meeting a closed terminal
    there, goes on. Returns how many bytes the debugger sent (none: another
    terminal took the rank first)."""
    ended: list[float] = []  # when the input ended

    def send_lines() -> None:
        try:
            for line in iter(typed.readline, ""):
                connection.sendall(line.encode("utf-8", errors="replace"))
        except (OSError, ValueError):  # the debugger closed first, or the input did
            return
        end_input(connection, ended)

    heard = 0
    interrupted: list[int] = []
    try:  # (an interrupt as soon as the input's thread runs still ends the session as one)
        with interrupts_between_reads(interrupted):
            threading.Thread(target=send_lines, name="debug-input", daemon=True).start()
            heard = receive_all(connection, out, ended, linger_s, interrupted)
            if interrupted:  # came after the last read
                raise InterruptedBetweenReads
    except KeyboardInterrupt as exc:
        end_input(connection, ended)
        if isinstance(exc, InterruptedBetweenReads) or not interrupted:  # a second Ctrl-C ends it now
            receive_all(connection, out, ended, linger_s)  # its last words (a second Ctrl-C ends this too)
        raise
    finally:
        connection.close()
    return heard


class InterruptedBetweenReads(KeyboardInterrupt):
    """A session's first Ctrl-C, raised between two reads from the debugger (its last words are
    still to be read); a second one is Python's own KeyboardInterrupt."""


@contextlib.contextmanager
def interrupts_between_reads(interrupted: list[int]) -> Iterator[None]:
    """A first Ctrl-C only lands in ``interrupted`` while this lasts, for :func:`receive_all` to
    raise between two reads: Python's own KeyboardInterrupt may come between a read and its write,
    and what the debugger said in that read would be lost. A second Ctrl-C is Python's own again
    (a write blocked on a stalled terminal never gets back to look). Nothing changes off the main
    thread (no handler can be set there) or where SIGINT is not Python's to take (ignored, or a
    handler of the caller's)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is not signal.default_int_handler:
        yield
        return

    def first_interrupt(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, first_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def receive_all(connection: socket.socket, out: IO[str], ended: list[float], linger_s: float,
                interrupted: Optional[list[int]] = None) -> int:
    """Write what the debugger says until it closes the connection, or until it has said nothing
    for ``linger_s`` since the input ended (``ended``), or ``LINGER_CAP`` times that has passed
    since; how many bytes it said. Raises KeyboardInterrupt once ``interrupted`` holds a signal,
    with what was read written."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two reads
    heard, last_heard = 0, 0.0
    connection.settimeout(POLL_S)
    while True:
        try:
            data = connection.recv(4096)
            last_heard = time.monotonic()
        except socket.timeout:
            data = None
        except OSError:
            data = b""
        if data:
            heard += len(data)
            out.write(decoder.decode(data))
            out.flush()
        if interrupted:
            raise InterruptedBetweenReads
        now = time.monotonic()
        if data == b"" or (ended and (now - max(ended[0], last_heard) >= linger_s
                                      or now - ended[0] >= LINGER_CAP * linger_s)):
            out.write(decoder.decode(b"", final=True))
            out.flush()
            return heard


def end_input(connection: socket.socket, ended: list[float]) -> None:
    """Send end-of-input, once."""
    if ended:
        return
    ended.append(time.monotonic())
    try:
        connection.shutdown(socket.SHUT_WR)
    except OSError:
        pass
