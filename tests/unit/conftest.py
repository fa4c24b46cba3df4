"""Unit tests never reach a real engine: the environment's points nowhere, and the tests that
need an engine are given the fake one (tests/fakes.py)."""
from __future__ import annotations

import signal
import threading
import time

import pytest


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch, tmp_path_factory):
    missing = tmp_path_factory.getbasetemp() / "no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")


@pytest.fixture(autouse=True)
def fake_scripts_end_with_the_test():
    """A fake container's script that hangs runs in a thread until it is killed: one the test left
    running ends with it, so threads do not pile up in the process that runs the tests."""
    from tests.fakes import stop_every_script

    yield
    stop_every_script()


@pytest.fixture(autouse=True)
def ctrl_c_reaches_python():
    """A Ctrl-C a test simulates (``_thread.interrupt_main``) raises KeyboardInterrupt, as the CLI
    makes sure it does (``cli/signals.py``), even where the process that runs the tests ignores
    SIGINT (a mutation tool's workers do): it would otherwise be swallowed. The handlers a command
    installs (SIGTERM, SIGHUP, SIGQUIT tear down as Ctrl-C does) are the test's: given back after."""
    from orchestrate.cli.signals import TEARDOWN_SIGNALS

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    numbers = [signal.SIGINT] + [getattr(signal, name) for name in TEARDOWN_SIGNALS if hasattr(signal, name)]
    before = {number: signal.getsignal(number) for number in numbers}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.fixture
def when():
    """``when(condition, then)``: do ``then`` once ``condition`` holds (polled in a thread).
    Each watcher must have fired by the test's end; none outlives it (an interrupt from a
    watcher left running would land in a later test)."""
    done = threading.Event()
    watchers: list[tuple[threading.Thread, list[bool]]] = []

    def start(condition, then, timeout_s: float = 20.0) -> None:
        fired: list[bool] = []

        def watch() -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not done.is_set():
                if condition():
                    fired.append(True)
                    then()
                    return
                time.sleep(0.01)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        watchers.append((thread, fired))

    yield start
    done.set()
    for thread, _ in watchers:
        thread.join(timeout=5)
    assert all(fired for _, fired in watchers), "a watcher's condition never held"
