"""Interrupts: the one a signal raises (:class:`SignalInterrupt`), and steps that an interrupt
must not leave half done (a teardown, a record, killing nodes)."""
from __future__ import annotations

from typing import Any, Callable


class SignalInterrupt(KeyboardInterrupt):
    """An interrupt that names its signal (``signum``: 15 for SIGTERM), to unwind like Ctrl-C;
    raised in the main thread when a teardown signal arrives, or again by a caller that saw a
    run interrupted."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def uninterrupted(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``step`` to its end: an interrupt during it (a second Ctrl-C) is set aside and the
    step runs again, so that a teardown or a record is never left half done."""
    while True:
        try:
            return step(*args, **kwargs)
        except KeyboardInterrupt:
            continue
