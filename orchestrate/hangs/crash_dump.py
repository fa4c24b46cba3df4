"""Where a worker was when it crashed: the last stack dump ``faulthandler`` wrote for it in the
run's debug directory (:mod:`orchestrate.node.crash_stacks`), read as "in all_reduce at
train.py:42". Pure but for reading that file."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrate.hangs.snapshots import Frame, debug_dir
from orchestrate.hangs.stacks import call_made, summary, users_frame
from orchestrate.node.crash_stacks import STOPPED_SUFFIX, SUFFIX, crash_file, stopped_file
from orchestrate.node.snapshot import HOOK_DIR, calls_wrapped, is_hook_file  # calls_wrapped: for outcome's
from orchestrate.plan.layout import PROJECT_MOUNT_DIR

_FATAL = re.compile(r"^Fatal Python error: (?P<what>.+?)\s*$")
# (newer Pythons name the thread: "Thread 0x00007f [MainThread] (most recent call first):")
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+(?: \[[^\]]*\])? \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>.+?)\s*$')
# A DataLoader worker process's loop (a forked worker also shows the rank's frames below it).
_LOADER_WORKER = "torch/utils/data/_utils/worker.py"
# The hook as the workers ran it: from the project's mount in the nodes, from this checkout on
# the host (torchrun --standalone over it).
HOOK_DIRS = (f"{PROJECT_MOUNT_DIR}/orchestrate/node/", HOOK_DIR)


def is_workers_hook_file(filename: str) -> bool:
    """Whether a frame a worker wrote (in a dump, a traceback) is the hook's, not the script's."""
    return is_hook_file(filename, HOOK_DIRS)


@dataclass(frozen=True)
class ThreadStack:
    """One thread of a dump: its frames outermost first, and whether it was the one that crashed."""

    frames: tuple[Frame, ...]
    current: bool


@dataclass(frozen=True)
class CrashDump:
    """faulthandler's last dump of one process."""

    fatal: str  # "Segmentation fault", "Aborted"
    threads: tuple[ThreadStack, ...]

    @property
    def in_data_loader_worker(self) -> bool:
        """Whether a DataLoader worker process crashed (not the rank's own process)."""
        return any(frame.function == "_worker_loop" and frame.file.endswith(_LOADER_WORKER)
                   for thread in self.threads if thread.current for frame in thread.frames)

    def script_thread(self) -> Optional[tuple[ThreadStack, str]]:
        """The thread that ran the script's code (the one that crashed first, then the main thread:
        not one a ``threading.Thread`` of the script's began) and the call it was in, ``all_reduce
        at train.py:42``; None when no thread was in the script's code."""
        def order(thread: ThreadStack) -> tuple[bool, bool]:
            started = bool(thread.frames) and thread.frames[0].file.endswith(_THREAD_START)
            return not thread.current, started
        for thread in sorted(self.threads, key=order):
            mine = users_frame(thread.frames)
            if mine is not None:
                return thread, f"{call_made(thread.frames, mine)} at {mine.where}"
        return None

    def where(self) -> str:
        """Where the script was: ``in all_reduce at train.py:42``, said of the thread that
        crashed where it ran the script's code, else of the thread that did: a native thread
        (gloo's, NCCL's) is not in the dump, and ``in a native thread, while the script was in
        all_reduce at train.py:42`` says so; "" when no thread was in the script's code."""
        found = self.script_thread()
        if found is None:
            return ""
        thread, call = found
        place = f"in {call}"
        if thread.current:
            return f"{place} (in a DataLoader worker process)" if self.in_data_loader_worker else place
        crashed = next((thread for thread in self.threads if thread.current), None)
        if crashed is None or not crashed.frames:
            return f"in a native thread, while the script was {place}"
        return f"in another thread, while the script was {place}"


def last_dump(text: str) -> Optional[CrashDump]:
    """The last dump in a crash file (a restarted worker appends to its predecessor's), None
    when it holds none."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _FATAL.match(line)]
    if not starts:
        return None
    fatal = _FATAL.match(lines[starts[-1]])["what"]
    return CrashDump(fatal, thread_stacks(lines[starts[-1] + 1:]))


def thread_stacks(lines: list[str]) -> tuple[ThreadStack, ...]:
    """The threads of a faulthandler dump's lines, each one's frames outermost first (the hook's
    own frames left out)."""
    threads: list[ThreadStack] = []
    frames: list[Frame] = []
    current = False
    for line in lines + [""]:
        header = _THREAD.match(line)
        frame = _FRAME.match(line)
        if frame and not is_workers_hook_file(frame["file"]):
            frames.append(Frame(frame["file"], int(frame["line"]), frame["function"]))
        elif header or not line.strip():
            if frames or current:
                threads.append(ThreadStack(tuple(reversed(frames)), current))
            frames, current = [], bool(header) and header["current"] == "Current thread"
    return tuple(threads)


# A thread that Python's threading module started (not the one that runs the script).
_THREAD_START = "threading.py"


def hooked_workers_began(run_dir: Path) -> bool:
    """Whether a worker of the run began under the workers' hook, by the crash file it makes as it
    begins (none where the script's own faulthandler is on): such workers answer a look."""
    return any(debug_dir(run_dir).glob(f"rank*{SUFFIX}"))


def remove_empty_dumps(run_dir: Path) -> list[Path]:
    """Remove the crash and SIGTERM files no stack was written to, once the run's workers are
    gone: a worker ended by SIGKILL, or by SIGTERM where the script handles it, never reached the
    exit that removes its own. Returns what it removed (a file it cannot remove stays)."""
    removed = []
    for path in sorted(debug_dir(run_dir).glob("rank*")):
        if not path.name.endswith((SUFFIX, STOPPED_SUFFIX)):
            continue
        try:
            if path.is_file() and path.stat().st_size == 0:
                path.unlink()
                removed.append(path)
        except OSError:
            pass
    return removed


def where_stopped(directory: Path, rank: int, since: float = 0.0) -> str:
    """Where a rank's script was when SIGTERM ended it (torchrun ends every worker so when one
    fails), by the stacks it wrote then (:func:`orchestrate.node.crash_stacks.dump_when_stopped`):
    ``load_shard at sleeper.py:5``, of the thread that runs the script (the last such in the
    file); "" without them, or where they were written before ``since`` (Unix seconds: an
    earlier attempt's)."""
    path = Path(stopped_file(str(directory), rank))
    try:
        if path.stat().st_mtime < since:
            return ""
        threads = thread_stacks(path.read_text(errors="replace").splitlines())
    except OSError:
        return ""
    scripts = [t for t in threads if t.frames and not t.frames[0].file.endswith(_THREAD_START)
               and users_frame(t.frames) is not None]
    return summary(scripts[-1].frames) if scripts else ""


def rank_dump(directory: Path, rank: int) -> Optional[CrashDump]:
    """The last dump faulthandler wrote for a rank in a run's debug directory (None: none)."""
    try:
        return last_dump(Path(crash_file(str(directory), rank)).read_text(errors="replace"))
    except OSError:
        return None


def where_it_crashed(run_dir: Path, rank: int, crashed_itself: bool) -> str:
    """Where a failed rank, or its DataLoader worker process, crashed, by the stacks its
    faulthandler wrote (``Segmentation fault in string_at at train.py:42; every thread's stack:
    runs/ID/debug/rank3.crash``), or "" without them. ``crashed_itself``: the rank died by a
    fatal signal; else only a DataLoader worker's dump explains its failure (torch then raises
    "DataLoader worker (pid 16) is killed by signal", or meets the dead worker's connection),
    not one of another child it forked, which its own error may have nothing to do with."""
    path = Path(crash_file(str(debug_dir(run_dir)), rank))
    dump = rank_dump(debug_dir(run_dir), rank)
    if dump is None or not (crashed_itself or dump.in_data_loader_worker):
        return ""
    where = dump.where()
    return f"{dump.fatal}{' ' + where if where else ''}; every thread's stack: {path}"
