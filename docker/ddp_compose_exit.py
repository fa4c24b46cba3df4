"""Exit guard: let gloo's worker threads finish before the interpreter shuts down.

Installed in the node image (and the project's venv) and imported at interpreter start by a
``.pth`` file, so every Python process has it, a user's own script included, with no change
to the script.

Why: when a gloo collective completes, the worker thread that ran it (``ProcessGroupGloo::
runLoop``) still holds the work object and drops it a moment later; dropping it releases the
tensors' Python objects, for which the thread needs the GIL. A script's main thread usually
holds the GIL from its last collective through ``destroy_process_group()`` into interpreter
shutdown, so the worker thread gets the GIL only once the interpreter is finalising. Python
then ends that thread with ``pthread_exit``, whose forced unwind through a ``noexcept`` C++
frame calls ``std::terminate``: SIGABRT, "terminate called without an active exception".
Seen with every torch from 2.9 to 2.15 (benchmarks/exit_soundness.py).

The guard registers an ``atexit`` handler at start-up, so it runs after every handler the
program registers (``atexit`` runs them last-in, first-out), while the interpreter is still
whole. If ``torch.distributed`` was used, it releases the GIL for a moment, and any worker
thread waiting for it finishes its clean-up. Set ``DDP_EXIT_GUARD=0`` to turn it off.
"""
import atexit
import os
import sys
import time

# Long enough for threads that are already waiting for the GIL to run; short enough to be
# unnoticeable at exit.
DRAIN_SECONDS = 0.05


def _let_collective_threads_finish() -> None:
    if "torch.distributed" in sys.modules:
        time.sleep(DRAIN_SECONDS)


if os.environ.get("DDP_EXIT_GUARD", "1") != "0":
    atexit.register(_let_collective_threads_finish)
