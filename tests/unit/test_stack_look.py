"""A worker's look at every thread's stack never deadlocks it: CPython 3.11 before 3.11.9 (the
nodes' Python is 3.11.2) deadlocks in ``sys._current_frames()`` when a collection it starts frees
a ``threading.local`` (gh-106883)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


# Threads whose frames have no frame object yet (the look makes them, which may start a
# collection), and garbage only the collector frees that holds a threading.local: on CPython 3.11
# before 3.11.9 a collection inside sys._current_frames() frees it and waits for a lock the call
# holds, for ever.
LOOK_WHILE_COLLECTING = """
import gc, sys, threading
from orchestrate.node.snapshot import thread_stacks
release = threading.Event()
for _ in range(8):
    threading.Thread(target=release.wait, daemon=True).start()
class Holder: pass
gc.set_threshold(1)
for _ in range(300):
    holder = Holder(); holder.local = threading.local(); holder.me = holder; del holder
    stacks = thread_stacks(threading.get_ident(), None)
assert len(stacks) == 9, len(stacks)
print("looked 300 times", flush=True)
"""


def test_a_look_at_every_threads_stack_never_deadlocks_a_worker_while_the_collector_frees_a_thread_local():
    """The snapshot thread's look, taken while collections free ``threading.local`` objects (torch
    and the script's own make them), in a process of its own: a deadlock there is a time-out."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", LOOK_WHILE_COLLECTING], cwd=root, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and done.stdout == "looked 300 times\n", done.stderr[-2000:]
