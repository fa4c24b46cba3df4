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
thread waiting for it finishes its clean-up.

The same handler then spares the process a cost at exit: the interpreter's final garbage
collections walk every object still alive, and a process that imported torch holds over a
million of them. The handler moves every live object to the collector's permanent generation
(``gc.freeze()``), which those collections skip: a whole ``python3 -c "import torch"`` process
costs 1.08 core-s instead of 1.24 in the node image (benchmarks/suite_cost.py). Objects are
still freed as the interpreter clears its modules, and the program's own ``atexit`` handlers
and ``weakref.finalize`` callbacks have all run by then. What changes: an object that is
still part of a reference cycle at exit is never finalized, so its ``__del__`` does not run
(stock Python runs it in those final collections, though it does not promise to). A script
that relies on ``__del__`` to flush or delete something at exit, rather than on ``close()``,
a ``with`` block or ``atexit``, should set ``DDP_EXIT_FREEZE=0``.

A signal that arrives in the guard's pause, and whose handler raises (torchrun's agent turns
SIGTERM into ``SignalException``), ends the pause without a word: the process is exiting
already, with its own status.

``DDP_EXIT_FREEZE=0`` turns the freeze off; ``DDP_EXIT_GUARD=0`` turns both off.
"""
import atexit
import gc
import os
import sys
import time

# Long enough for threads that are already waiting for the GIL to run; short enough to be
# unnoticeable at exit.
DRAIN_SECONDS = 0.05


def _at_exit() -> None:
    if "torch.distributed" in sys.modules:
        try:
            time.sleep(DRAIN_SECONDS)  # let gloo's threads finish while the interpreter is whole
        except BaseException:  # noqa: B036
            # A signal's handler raised in the pause: torchrun's agent raises SignalException on
            # the SIGTERM that srun, or a stop, sends every node as the job ends. The process is
            # ending already, with its own exit status; Python would print the exception as
            # "Exception ignored in atexit callback", a traceback of ours in the user's output.
            pass
    if os.environ.get("DDP_EXIT_FREEZE", "1") != "0":
        gc.freeze()  # the final collections skip what is alive now


if os.environ.get("DDP_EXIT_GUARD", "1") != "0":
    atexit.register(_at_exit)
