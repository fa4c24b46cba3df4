"""Standard output as the commands write it, for when whoever reads it goes away
(``python -m orchestrate logs RUN | head``, ``run ... | grep -m1 loss``).

Python ignores SIGPIPE, so such a write raises BrokenPipeError wherever it happens: it was
taken for an engine error (``error: engine error: [Errno 32] Broken pipe``, exit 2), and a
foreground run recorded that as its failure. Here the first broken write sends the rest of
the output nowhere and raises :class:`~orchestrate.interrupts.SignalInterrupt` (SIGPIPE) in the
main thread, which writes the output: a run then stops as Ctrl-C stops it (SIGTERM to every node,
the stop grace, the teardown, its record), and the command ends with 141, as a tool that
SIGPIPE ended would.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import IO

from orchestrate.interrupts import SignalInterrupt


class ReaderAwareOutput:
    """``stream`` (a file with a descriptor: standard output), until its reader goes away."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.reader_gone = False
        self.main_told = False  # the main thread was interrupted for it

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._lost_reader()
        self._tell_main()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._lost_reader()
        self._tell_main()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def _lost_reader(self) -> None:
        """From now on the output goes to /dev/null (the interpreter's last flush included, which
        would say ``BrokenPipeError`` again); the main thread is interrupted as by SIGPIPE."""
        self.reader_gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())
        finally:
            os.close(devnull)

    def _tell_main(self) -> None:
        """Interrupt the main thread, once, at its first write since the reader went away (a
        thread's broken write waits for it); not while it handles an interrupt already: Ctrl-C
        on ``run ... | tee log`` ends the reader too, and a second interrupt would cut the
        nodes' stop grace short."""
        if self.reader_gone and not self.main_told and threading.current_thread() is threading.main_thread():
            self.main_told = True
            if not isinstance(sys.exc_info()[1], KeyboardInterrupt):
                raise SignalInterrupt(signal.SIGPIPE)
