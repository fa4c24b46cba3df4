"""Signals, in one place: SIGTERM, SIGHUP and SIGQUIT stop a run the way Ctrl-C does."""
from __future__ import annotations

import signal
import threading

from orchestrate.interrupts import SignalInterrupt

# Signals that stop a run the way Ctrl-C does: a closed terminal (HUP), kill (TERM), Ctrl-\ (QUIT).
TEARDOWN_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise SignalInterrupt(signum)


def install_teardown_signals() -> None:
    """SIGTERM, SIGHUP and SIGQUIT tear down like Ctrl-C (main thread only). SIGINT itself is
    set too: a launcher started in the background of a script (``cmd &``, no job control)
    inherits SIGINT ignored, and Python then leaves it ignored, so that ``kill -INT`` would
    be lost instead of tearing the run down."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in TEARDOWN_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise_interrupt)


def interrupt_exit_code(exc: BaseException) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(exc, "signum", signal.SIGINT)
