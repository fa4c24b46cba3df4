"""Calls to the engine that may not return for long (a ``docker stop`` that waits out its grace, a
``ps`` stuck on a process in the kernel, an engine that stopped answering), each in a daemon thread
of its own: an interrupt is not held until they return, and the process exits without them."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable


def in_background(call: Callable[..., Any], *args: Any, name: str = "ddp-engine") -> Future:
    """Start ``call(*args)`` in a daemon thread; its result (or exception) comes in the future."""
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # handed to whoever waits on it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
