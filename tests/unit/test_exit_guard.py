"""The node image's exit guard (docker/ddp_compose_exit.py), run for real in a fresh interpreter:
the program's own exit work all happens, its exit status is kept, and the final garbage
collections skip what was alive at exit (the CPU they cost a torch process), unless
``DDP_EXIT_GUARD=0``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GUARD_DIR = Path(__file__).resolve().parents[2] / "docker"

# A program that leaves a reference cycle with a finalizer alive at exit, registers exit work of
# its own, and exits 3. Each line it prints says what ran.
PROGRAM = """
import atexit, gc, sys, weakref

class InACycle:
    def __del__(self):
        print("cycle finalized", flush=True)

cycle = InACycle()
cycle.me = cycle
del cycle

class Resource:
    pass

resource = Resource()
weakref.finalize(resource, print, "weakref.finalize ran", flush=True)
atexit.register(lambda: print(f"atexit ran, frozen objects: {gc.get_freeze_count()}", flush=True))
gc.disable()  # the cycle stays uncollected until the interpreter's own final collections
sys.exit(3)
"""


def run(guard: str, freeze: str = "1") -> subprocess.CompletedProcess:
    # -S: no site, so no installed copy of the guard; the checkout's copy is imported first
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "DDP_EXIT_GUARD": guard, "DDP_EXIT_FREEZE": freeze}
    return subprocess.run([sys.executable, "-S", "-c", f"import ddp_compose_exit\n{PROGRAM}"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_programs_exit_work_runs_before_the_guard_and_its_exit_status_is_kept():
    done = run("1")
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert "atexit ran, frozen objects: 0" in lines  # nothing frozen before the program's handlers
    assert "weakref.finalize ran" in lines
    assert done.stderr == ""


def test_the_final_collections_skip_what_was_alive_at_exit_unless_the_freeze_is_off():
    guarded, unfrozen, unguarded = run("1"), run("1", freeze="0"), run("0")
    assert "cycle finalized" not in guarded.stdout.splitlines()  # frozen: not searched for cycles
    for done in (unfrozen, unguarded):  # the interpreter's own behaviour
        assert "cycle finalized" in done.stdout.splitlines()
        assert done.returncode == 3 and "weakref.finalize ran" in done.stdout


# A torchrun agent that exits while a SIGTERM arrives (srun ends every task of a job that one
# failed): its handler raises in the guard's pause, here made to raise at once.
SIGNALLED = """
import sys, time, types

sys.modules["torch.distributed"] = types.ModuleType("torch.distributed")  # the guard pauses for it

def interrupted(seconds):
    raise RuntimeError("Process 30 got signal: 15")  # as torchrun's SIGTERM handler raises

time.sleep = interrupted
sys.exit(1)
"""


def test_a_signal_whose_handler_raises_in_the_guards_pause_ends_it_quietly_and_keeps_the_status():
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "DDP_EXIT_GUARD": "1"}
    done = subprocess.run([sys.executable, "-S", "-c", f"import ddp_compose_exit\n{SIGNALLED}"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ""  # not "Exception ignored in atexit callback" and a traceback of the guard's
