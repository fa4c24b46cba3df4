"""A worker's answer to "where are you now?": every thread's Python stack, the threads that
ended with an error, its last collectives, its CPU time and the bytes its TCP sockets moved, written by the worker itself, so no
privileges are needed.

The launcher (``stacks RUN``, the hang watchdog) writes :data:`REQUEST_FILE` in the run's debug
directory (mounted in every node); a daemon thread in each worker sees it within
:data:`POLL_S` and writes ``rank<RANK>.json`` beside it. The thread runs while the main thread
waits in a collective (collectives release the GIL). A worker that is stopped (SIGSTOP, a paused
container) cannot answer: the launcher tells those apart. A collective that fails writes the
record at once (``reason: "collective failed"``), so that it outlives the process.

A DataLoader's worker processes (``num_workers > 0``) answer too, each in
``loader-rank<RANK>-<PID>.json``: a rank that waits for its next batch waits for them, and a
fork carries none of the rank's threads, so each starts its own as torch starts its loop. A
worker started by spawn or forkserver (Python 3.14's default on Linux) is a fresh interpreter
without the hook: :mod:`orchestrate.node.loader_workers` puts it in there.

Standard library only.
"""
from __future__ import annotations

import collections
import functools
import gc
import inspect
import json
import os
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any, Deque, Dict, List, Optional, Tuple

from orchestrate.node.collective_log import CollectiveLog, relative
from orchestrate.node.ddp_detail_guard import wanted as collectives_checked
from orchestrate.node.hook_frames import HOOK_DIR, is_hook_file  # noqa: F401 - the rule, as the launcher reads it here
from orchestrate.node.remote_debugger import examined_stack, stopped_in_debugger
from orchestrate.node.thread_errors import ThreadErrors, install as keep_thread_errors

DEBUG_DIR_ENV = "DDP_DEBUG_DIR"
NODE_ENV = "DDP_NODE"  # the node's name (node0, ...), set per node by the plan
REQUEST_FILE = "request.json"
LOADER_PREFIX = "loader-"
POLL_S = 0.25
# The snapshot thread's last looks at the process's CPU time, one each POLL_S: an answer says the
# share of a core the process used over them (about 2 s), so that one look tells a rank that
# computes from one that waits (the launcher's single look as a collective's timeout ends the job).
CPU_SAMPLES = 9
# Why a worker wrote a record unasked: a collective (or its init_process_group) failed.
FAILED_REASON = "collective failed"
# ... or a store call of the script's own raised (its store's timeout ended a get, a wait, a TCPStore).
STORE_FAILED_REASON = "store call failed"
# How each of the hook's wrappers calls what it wraps: ``original(...)``.
WRAPPED_CALL = "original("


def calls_wrapped(source_line: str) -> bool:
    """Whether a wrapper's line (the innermost of an error's traceback) is its call of what it
    wraps: an error there is the wrapped call's (``open`` of a missing file), which raises from C
    with no frame of its own, not the hook's."""
    return WRAPPED_CALL in source_line


def snapshot_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}.json")


def loader_snapshot_file(directory: str, rank: int, pid: int) -> str:
    return os.path.join(directory, f"{LOADER_PREFIX}rank{rank}-{pid}.json")


# A running generator's frame with no caller: caught as it resumed, before CPython 3.11 links its
# caller (seen: a generator expression in a worker's loop, alone 4 looks in 5). A running frame
# has one; a generator's may be missing only for that moment: look again.
GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
LOOKS = 20


def current_frames() -> Dict[int, Any]:
    """``sys._current_frames()`` with the garbage collector off while it runs (where it was on).
    CPython 3.11 before 3.11.9 (the nodes' Debian Python is 3.11.2) deadlocks there for good when
    a collection that the frames it makes start frees a ``threading.local`` (gh-106883): the
    worker, the user's training with it, would hang for the look that was to find hangs. The
    fixed versions turn the collector off in there themselves."""
    was_on = gc.isenabled()
    if was_on:
        gc.disable()
    try:
        return sys._current_frames()
    finally:
        if was_on:
            gc.enable()


def linked(ident: int, frame: Any) -> Any:
    """The thread's innermost frame, looked at again while it is a generator's without a caller."""
    for _ in range(LOOKS):
        if frame.f_back is not None or not frame.f_code.co_flags & GENERATOR_FLAGS:
            break
        time.sleep(0.001)  # the thread runs on meanwhile
        frame = current_frames().get(ident, frame)
    return frame


def children_cpu_s(pid: int, proc: str = "/proc") -> float:
    """The CPU seconds the live descendants of process ``pid`` used so far, as ``proc`` lists
    them: a rank that computes in a child (a multiprocessing pool, a subprocess it waits for) uses
    none of its own, and was taken as hung. 0.0 where ``proc`` cannot be read: it runs in the
    user's process, and never raises."""
    try:
        return _descendants_cpu_s(pid, proc)
    except Exception:  # noqa: BLE001 - a look at the rank is a help; it must never fail the rank
        return 0.0


def _descendants_cpu_s(pid: int, proc: str) -> float:
    names = os.listdir(proc)
    children: Dict[int, List[int]] = {}
    used: Dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), "rb") as handle:
                text = handle.read().decode("ascii", "replace")
            fields = text[text.rindex(")") + 2:].split()  # past the command's name, which may hold anything
            parent, user, system = int(fields[1]), int(fields[11]), int(fields[12])
        except (OSError, ValueError, IndexError):  # ended meanwhile, or not a process's
            continue
        children.setdefault(parent, []).append(int(name))
        used[int(name)] = (user + system) / tick
    total, left, seen = 0.0, list(children.get(pid, ())), {pid}
    while left:
        child = left.pop()
        if child in seen:  # (a pid used again while the listing was read: no process is counted twice)
            continue
        seen.add(child)
        total += used.get(child, 0.0)
        left += children.get(child, ())
    return round(total, 3)


# Where the kernel's ``struct tcp_info`` (getsockopt TCP_INFO, Linux 4.1 on) holds ``tcpi_bytes_acked``
# and ``tcpi_bytes_received``, two u64 side by side: the bytes a socket sent that its peer took, and
# those it received.
TCP_INFO_BYTES_AT = 120
TCP_INFO_LENGTH = TCP_INFO_BYTES_AT + 16
# A socket object made over a descriptor with this in its type takes it as non-blocking as it is,
# and changes none of its flags (see socket_bytes).
NONBLOCKING = getattr(socket, "SOCK_NONBLOCK", 0)


def socket_bytes(fd_dir: str = "/proc/self/fd") -> Optional[int]:
    """The bytes this process's open TCP sockets (gloo's pairs, its store's) have sent and
    received so far, by the kernel's count of each: a rank in a collective that moves a large
    buffer over a slow link uses next to no CPU, and was taken as hung. Its sockets only, both
    ways: ``/proc/self/io`` counts neither what gloo receives (``recv``) nor apart from file
    writes (this record's own), and the network namespace's counters count the node's other
    processes. None where nothing can be read (no /proc, no TCP_INFO); it runs in the user's
    process, and never raises."""
    option = getattr(socket, "TCP_INFO", None)
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    if option is None:
        return None
    total = 0
    for name in names:
        try:
            if not os.readlink(os.path.join(fd_dir, name)).startswith("socket:"):
                continue
            copy = os.dup(int(name))
        except (OSError, ValueError):  # closed meanwhile, or not a descriptor
            continue
        try:
            # a socket object over a duplicate of the user's descriptor, closed here. Made as a
            # non-blocking one, it sets no flag: socket.fromfd under socket.setdefaulttimeout() sets
            # O_NONBLOCK, which the duplicate shares with the user's descriptor (one open file), so
            # a look made the user's blocking sockets (a store's, a client's) fail with EAGAIN
            duplicate = socket.socket(socket.AF_INET, socket.SOCK_STREAM | NONBLOCKING, 0, copy)
        except OSError:
            os.close(copy)
            continue
        try:
            info = duplicate.getsockopt(socket.IPPROTO_TCP, option, TCP_INFO_LENGTH)
            if len(info) >= TCP_INFO_LENGTH:
                sent, received = struct.unpack_from("QQ", info, TCP_INFO_BYTES_AT)
                total += sent + received
        except OSError:  # not a TCP socket (a Unix one)
            pass
        finally:
            duplicate.close()
    return total


def thread_stacks(main_ident: Optional[int], server_ident: Optional[int]) -> List[Dict[str, Any]]:
    """Every thread's stack but the answering thread's (``server_ident``), outermost frame
    first; the main thread first (where a post-mortem examines an error, that thread's are the
    error's frames up to the user's: the thread itself is in the debugger's code)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks = []
    examined = examined_stack()
    for ident, frame in current_frames().items():
        if ident == server_ident:
            continue
        frame = linked(ident, frame)
        entries = examined[1] if examined is not None and ident == examined[0] else traceback.extract_stack(frame)
        frames = [[relative(entry.filename), entry.lineno, entry.name, (entry.line or "").strip()]
                  for entry in entries
                  if not is_hook_file(entry.filename)]
        stacks.append({"thread": names.get(ident, str(ident)), "main": ident == main_ident, "frames": frames})
    stacks.sort(key=lambda s: not s["main"])
    return stacks


class SnapshotWriter:
    """Answers the launcher's requests for this worker (see the module's text)."""

    def __init__(self, directory: str, rank: int, log: CollectiveLog) -> None:
        self.directory = directory
        self.rank = rank
        self.log = log
        self.main_ident = threading.get_ident()  # the thread that runs the script (or a loader's loop)
        self.answered: Optional[str] = None
        self.server_ident: Optional[int] = None
        self.write_lock = threading.Lock()
        self.cpu_samples: Deque[Tuple[float, float]] = collections.deque(maxlen=CPU_SAMPLES)
        # the collectives completed when a collective failed: until the rank completes another (it
        # went on), its record of the failure is what it answers with, never overwritten by a later
        # look at a rank that is only going down (the launcher asks as the first failure ends a job)
        self.failed_at: Optional[int] = None
        self.thread_errors: Optional[ThreadErrors] = None  # the rank's threads that ended with an error

    def write(self, request: str, reason: str, from_server: bool = False) -> None:
        """Write this worker's snapshot for ``request`` (atomically: readers never see half);
        ``from_server``: on the snapshot thread, which may ask the GPU how far it got."""
        record = {
            "request": request, "reason": reason, "rank": self.rank, "pid": os.getpid(),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "node": os.environ.get(NODE_ENV) or socket.gethostname(),
            "time": time.time(), "cpu_s": time.process_time(), "cpu_recent": self.recent_cpu_share(),
            "children_cpu_s": children_cpu_s(os.getpid()), "socket_bytes": socket_bytes(),
            "collectives": self.log.snapshot(settle=from_server),
            "completed": self.log.completed, "lines": self.log.call_lines(),
            "passes": self.log.pass_counts(), "init": self.log.init_call,
            "store": self.log.store_calls.snapshot() if self.log.store_calls is not None else None,
            "stacks": thread_stacks(self.main_ident, self.server_ident),
            "debugger": stopped_in_debugger(),
            # torch checks every collective (TORCH_DISTRIBUTED_DEBUG=DETAIL: --debug-collectives, or --env)
            "collectives_checked": collectives_checked(os.environ),
            "thread_errors": self.thread_errors.snapshot() if self.thread_errors is not None else [],
            **self.more(),
        }
        target = self.target()
        temporary = f"{target}.{os.getpid()}.tmp"
        with self.write_lock:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(temporary, target)

    def target(self) -> str:
        return snapshot_file(self.directory, self.rank)

    def sample_cpu(self) -> None:
        self.cpu_samples.append((time.monotonic(), time.process_time()))

    def recent_cpu_share(self) -> Optional[float]:
        """The share of a core the process used since the oldest of its recent samples (None
        before the snapshot thread took one)."""
        if not self.cpu_samples:
            return None
        since, cpu = self.cpu_samples[0]
        elapsed = time.monotonic() - since
        return round((time.process_time() - cpu) / elapsed, 3) if elapsed >= POLL_S else None

    def more(self) -> Dict[str, Any]:
        return {}

    def pending_request(self) -> Optional[str]:
        """The id of a request not yet answered, if there is one."""
        try:
            with open(os.path.join(self.directory, REQUEST_FILE), encoding="utf-8") as handle:
                request = str(json.load(handle)["id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return None if request == self.answered else request

    def serve(self) -> None:
        """The daemon thread's loop: answer each new request once."""
        self.server_ident = threading.get_ident()
        self.answered = self.pending_request()  # a request from before this worker started is not for it
        while True:
            self.sample_cpu()
            time.sleep(POLL_S)
            self.answer_pending()

    def answer_pending(self) -> None:
        """Answer the request not yet answered, if there is one (the snapshot thread's)."""
        request = self.pending_request()
        if request is None:
            return
        self.answered = request
        if self.failed_at is not None and self.log.completed == self.failed_at:
            return  # its record of the failed collective stands
        self.failed_at = None
        try:
            self.write(request, "requested", from_server=True)
        except OSError:
            pass  # the run directory went away (the run ended): nothing to answer

    def on_collective_failed(self, log: CollectiveLog) -> None:
        self.failed_at = self.log.completed
        self.write("failed", FAILED_REASON)

    def on_uncaught(self, error: BaseException) -> None:
        """The script ends of ``error``: where it is a store call's that raised (its own store
        timeout), the record says the call it died in. A store error the script caught writes
        nothing: it may poll with a short timeout and go on."""
        record = self.log.store_calls
        if record is not None and record.dying_of(error):
            self.write("failed", STORE_FAILED_REASON)


class LoaderSnapshotWriter(SnapshotWriter):
    """Answers for one of a rank's DataLoader worker processes: its stacks and CPU time, which
    worker of its loader it is; no collectives (a loader's worker makes none)."""

    def __init__(self, directory: str, rank: int) -> None:
        super().__init__(directory, rank, CollectiveLog())

    def target(self) -> str:
        return loader_snapshot_file(self.directory, self.rank, os.getpid())

    def more(self) -> Dict[str, Any]:
        from torch.utils.data import get_worker_info  # a loader's worker has torch: it runs the loop

        info = get_worker_info()  # set by the loop once the worker's signal handlers are in
        if info is None:
            return {"loader_worker": None, "loader_workers": None, "loader": None}
        # seed is its iterator's base seed + id: the base seed tells the rank's DataLoaders apart
        return {"loader_worker": info.id, "loader_workers": info.num_workers, "loader": info.seed - info.id}


def serve(writer: SnapshotWriter) -> None:
    threading.Thread(target=writer.serve, name="ddp-compose-snapshots", daemon=True).start()


def answer_in_data_loader_workers(directory: str, rank: int) -> None:
    """Start answering in each DataLoader worker process as torch sets its signal handlers, the
    first thing its loop does (a forked worker inherits the patched function; a spawned one
    patches its own, at :func:`orchestrate.node.loader_workers.start_loader_worker`)."""
    from torch.utils.data._utils import signal_handling

    original = signal_handling._set_worker_signal_handlers
    answering_in: List[int] = []  # the process that answers (torch's function may be called twice)

    @functools.wraps(original)
    def set_worker_signal_handlers(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if os.getpid() not in answering_in:
            answering_in[:] = [os.getpid()]
            try:
                serve(LoaderSnapshotWriter(directory, rank))
            except RuntimeError:
                pass  # no thread can start (the interpreter is shutting down): the worker does not answer
        return result

    signal_handling._set_worker_signal_handlers = set_worker_signal_handlers


def start(directory: str, log: CollectiveLog) -> Optional[SnapshotWriter]:
    """Start answering requests in ``directory`` (None when it is not there)."""
    from orchestrate.node import collective_log

    if not os.path.isdir(directory):
        return None
    writer = SnapshotWriter(directory, int(os.environ.get("RANK", "0")), log)
    writer.thread_errors = ThreadErrors(relative)
    keep_thread_errors(writer.thread_errors)
    collective_log._failure_hooks.append(writer.on_collective_failed)
    collective_log._uncaught_hooks.append(writer.on_uncaught)
    serve(writer)
    collective_log.when_imported("torch.utils.data._utils.signal_handling",
                                 lambda: answer_in_data_loader_workers(directory, writer.rank))
    return writer
