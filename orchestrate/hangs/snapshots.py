"""The workers' snapshots (stacks, last collectives, CPU time) as the launcher reads them from
the run's debug directory, and how it asks for new ones (see :mod:`orchestrate.node.snapshot`)."""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from orchestrate.node.collective_log import ON_GPU
from orchestrate.node.ddp_collectives import (BACKWARD_PASS, BUFFERS as DDP_BUFFERS, DESCRIBED as DDP_GRADIENTS,
                                              FORWARD_PASS)
from orchestrate.node.snapshot import FAILED_REASON, LOADER_PREFIX, REQUEST_FILE, STORE_FAILED_REASON
from orchestrate.plan.layout import DEBUG_SUBDIR, WORKSPACE_DIR
# Where torch.compile's inductor writes the code it generates for a model (torchinductor_<user> in
# the temporary directory): the model's kernels, never the user's own lines.
TORCH_COMPILED_CODE = "/torchinductor_"
# How long a request waits for the workers' answers (they look every 0.25 s).
ANSWER_TIMEOUT_S = 3.0
# A rank whose main thread waits here waits for its DataLoader's worker processes (the
# multi-process iterator's own methods: the single-process one has a _next_data too).
LOADER_WAIT_FILE = "torch/utils/data/dataloader.py"
LOADER_WAIT_FUNCTIONS = ("_try_get_data", "_get_data")


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: file (relative to the work directory when under it), line, function."""

    file: str
    line: int
    function: str
    code: str = ""

    @property
    def where(self) -> str:
        return f"{users_file_name(self.file)}:{self.line}"

    @property
    def short_file(self) -> str:
        """The file, from its package on for a library's (``torch/distributed/...``)."""
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in self.file:
                return self.file.split(marker, 1)[1]
        return self.file

    @property
    def is_users(self) -> bool:
        """Whether the frame is the user's code, not torch's, a library's or Python's own."""
        return is_users_file(self.file)


def users_file_name(file: str) -> str:
    """A file as the user knows it, as the collective records name it: relative to the work
    directory where it is under it (``train.py``, ``mypkg/data.py``; the workers' snapshots wrote
    it so, a traceback in the nodes has it under /workspace), else its base name."""
    if file.startswith(WORKSPACE_DIR + "/"):
        return file[len(WORKSPACE_DIR) + 1:]
    return os.path.basename(file) if os.path.isabs(file) else file


def is_users_file(file: str) -> bool:
    """Whether a frame's file is the user's code: not torch's, a library's, Python's own, nor code
    Python or torch generated (``<frozen runpy>``, a dataclass's ``<string>``, an fx graph's
    ``<eval_with_key>``, inductor's kernels)."""
    return not file.startswith("<") and not any(part in file for part in (
        "/site-packages/", "/dist-packages/", "/lib/python3", "/torch/", TORCH_COMPILED_CODE))


@dataclass(frozen=True)
class Collective:
    """One collective a rank entered (see :class:`orchestrate.node.collective_log.CollectiveLog`)."""

    seq: int
    op: str
    group: str
    shapes: str
    at: str
    state: str
    error: str = ""

    @property
    def call(self) -> str:
        return f"{self.op}({self.shapes})"

    @property
    def waiting(self) -> bool:
        """The rank is in it (``entered``), or was until it failed (a timeout)."""
        return self.state in ("entered", "failed")

    @property
    def where(self) -> str:
        """``all_reduce(float32[4]) #5 of group ranks 0,1 at train.py:12`` (no group for the default one)."""
        group = "" if self.group == "default" else f" of group {self.group}"
        return f"{self.call} #{self.seq}{group} at {self.at}"

    @property
    def on_gpu(self) -> bool:
        """The call returned, but the GPU has not finished its work: ``queued`` behind earlier
        work, or ``running`` (the GPU is in it: NCCL's kernel waits there for the peers)."""
        return self.state in ON_GPU

    @property
    def is_backward_pass(self) -> bool:
        """DDP's gradient all-reduce, recorded as its whole backward pass: the rank may be
        computing its gradients in it, not only waiting for its peers."""
        return self.shapes.startswith(DDP_GRADIENTS)


def training_pass(shapes: str, others_made_it: bool) -> str:
    """Which pass of a DDP model's training step a collective moving ``shapes`` is: "backward
    pass" (all-reducing the gradients), "forward pass" (broadcasting the buffers) where the other
    ranks made collectives from its line too (``others_made_it``: a training step's forward pass
    is made on every rank, an evaluation on rank 0 alone is not); "" for any other collective."""
    if shapes.startswith(DDP_GRADIENTS):
        return BACKWARD_PASS
    if shapes.startswith(DDP_BUFFERS) and others_made_it:
        return FORWARD_PASS
    return ""


@dataclass(frozen=True)
class InitCall:
    """How a rank's script called ``init_process_group``, beside what torchrun gave the rank
    (see :mod:`orchestrate.node.init_record`); None where either does not say."""

    rank: Optional[int]
    world_size: Optional[int]
    store: str  # host:port, or a file's path (via "file"); "" for a store object of the script's own
    via: str  # "env", "tcp", "file" or "store"
    torchrun_rank: Optional[int] = None
    torchrun_local_rank: Optional[int] = None
    torchrun_world_size: Optional[int] = None
    torchrun_store: str = ""

    @classmethod
    def from_json(cls, data: Any) -> Optional["InitCall"]:
        """The call a snapshot holds (None where it holds none, or not as a mapping)."""
        if not isinstance(data, dict):
            return None
        gave = data.get("torchrun") if isinstance(data.get("torchrun"), dict) else {}
        return cls(rank=optional_int(data.get("rank")), world_size=optional_int(data.get("world_size")),
                   store=str(data.get("store") or ""), via=str(data.get("via") or ""),
                   torchrun_rank=optional_int(gave.get("rank")),
                   torchrun_local_rank=optional_int(gave.get("local_rank")),
                   torchrun_world_size=optional_int(gave.get("world_size")),
                   torchrun_store=str(gave.get("store") or ""))


@dataclass(frozen=True)
class StoreWait:
    """A store call of the script's that blocks until its keys exist (``get``, ``wait``,
    ``multi_get``; ``TCPStore`` for its constructor, which waits for its master or its workers)."""

    call: str
    keys: tuple[str, ...]
    at: str  # file:line of the call


@dataclass(frozen=True)
class TcpStoreMade:
    """A ``TCPStore`` the script made itself."""

    host: str
    port: int
    is_master: bool
    at: str
    world_size: Optional[int] = None


@dataclass(frozen=True)
class StoreCalls:
    """A rank's script's own store calls (see :mod:`orchestrate.node.store_calls`): the keys it
    set (``more_keys``: past those kept), where it is blocked in one, the TCPStores it made."""

    keys_set: tuple[str, ...] = ()
    more_keys: bool = False
    waiting: tuple[StoreWait, ...] = ()  # its main thread's first
    tcp_stores: tuple[TcpStoreMade, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> Optional["StoreCalls"]:
        if not isinstance(data, dict):
            return None
        waits = [w for w in data.get("waiting") or () if isinstance(w, dict)]
        stores = [t for t in data.get("tcp_stores") or () if isinstance(t, dict)]
        return cls(keys_set=tuple(str(k) for k in data.get("keys_set") or ()), more_keys=data.get("more_keys") is True,
                   waiting=tuple(StoreWait(str(w.get("call") or ""), tuple(str(k) for k in w.get("keys") or ()),
                                           str(w.get("at") or "?")) for w in waits),
                   tcp_stores=tuple(TcpStoreMade(str(t.get("host") or ""), optional_int(t.get("port")) or 0,
                                                 t.get("is_master") is True, str(t.get("at") or "?"),
                                                 optional_int(t.get("world_size"))) for t in stores))


def optional_float(value: Any) -> Optional[float]:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def optional_int(value: Any) -> Optional[int]:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class DebuggerStop:
    """Where a rank is stopped in its debugger (its script's ``breakpoint()``...), as it said in
    its snapshot: the call, the file as the user knows it, the line, function and source text, and
    whether a terminal debugs it now."""

    call: str
    file: str
    line: int
    function: str = ""
    text: str = ""
    attached: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @classmethod
    def from_json(cls, data: Any) -> Optional["DebuggerStop"]:
        if not isinstance(data, dict):
            return None
        return cls(str(data.get("call") or ""), str(data.get("file") or ""), optional_int(data.get("line")) or 0,
                   str(data.get("function") or ""), str(data.get("text") or ""), data.get("attached") is True)


@dataclass(frozen=True)
class ThreadStack:
    """Another thread of a rank's process that runs the user's code (a frame of the user's is in
    its stack): its name, and its stack, outermost frame first; or one that ended with an error
    (``error``: its first line), and its traceback's frames."""

    name: str
    stack: tuple[Frame, ...]
    error: str = ""


# Where a main thread waits for another thread of its process: the standard library's calls that
# wait on a thread (a queue's get, an Event's wait, a join, a future's result), by their files.
THREAD_WAIT_FILES = ("/threading.py", "/queue.py", "/concurrent/futures/_base.py", "/concurrent/futures/thread.py")
# The standard library's waits for child processes: a pool's map, a process's end, a subprocess, a
# process pool's future.
CHILD_WAIT_FILES = ("/multiprocessing/pool.py", "/multiprocessing/popen_fork.py", "/multiprocessing/process.py",
                    "/subprocess.py", "/concurrent/futures/process.py", "/concurrent/futures/_base.py")
# A lock's wait has no frame of its own (C): the user's innermost line is the wait, an acquire or
# a ``with`` of a lock.
LOCK_WAIT_LINE = re.compile(r"\.acquire\(|^with\b.*lock", re.I)


@dataclass(frozen=True)
class RankSnapshot:
    """What one worker wrote of itself."""

    rank: int
    node: str
    pid: int
    time: float
    cpu_s: float
    stack: tuple[Frame, ...]  # its main thread's, outermost first
    collectives: tuple[Collective, ...]
    completed: int
    reason: str = "requested"
    lines: tuple[tuple[str, int], ...] = ()  # (call line, collectives made from it): the node's LINES_KEPT
    init: Optional[InitCall] = None  # how its script called init_process_group, once it did
    cpu_recent: Optional[float] = None  # the share of a core it used over the last 2 s or so
    debugger: Optional[DebuggerStop] = None  # where it is stopped in its debugger, if it is
    threads: tuple[ThreadStack, ...] = ()  # its other threads of the user's: those that ended with an error first
    children_cpu_s: float = 0.0  # the CPU seconds its live child processes used so far (a pool's, a subprocess's)
    socket_bytes: Optional[int] = None  # the bytes its open TCP sockets sent and received so far
    store: Optional[StoreCalls] = None  # its script's own store calls, once it made one
    # (pass, call line, how many of that pass of a DDP training step were made from it); None: a
    # record that keeps no such counts
    passes: Optional[tuple[tuple[str, str, int], ...]] = None
    collectives_checked: bool = False  # it runs under torch's check of every collective (--debug-collectives)

    def passes_made(self, kind: str) -> dict[str, int]:
        """How many of a training step's ``kind`` of pass ("backward pass") it made, by the line
        it made them from; where its record keeps no such counts, every collective made from the
        line (more where other collectives are made from it too)."""
        if self.passes is None:
            return dict(self.lines)
        return {line: count for made, line, count in self.passes if made == kind}

    @property
    def waits_for_threads(self) -> bool:
        """Its main thread waits for another of its threads: in the standard library's wait for one
        (a queue's get, an Event's wait, a join), or at a line of its own that acquires a lock."""
        return waits_for_threads(self.stack)

    @property
    def waits_for_data_loader(self) -> bool:
        """Its main thread waits for the next batch from its DataLoader's worker processes."""
        return waits_for_data_loader(self.stack)

    @property
    def waits_for_children(self) -> bool:
        """Its main thread waits in the standard library for its child processes (a pool's map, a
        subprocess's end): their CPU is its work."""
        return any(frame.file.endswith(CHILD_WAIT_FILES) for frame in self.stack if not frame.is_users)

    @property
    def failed_in_store_call(self) -> Optional[StoreWait]:
        """The store call of its script's it wrote its record in as the call failed (timed out), if any."""
        waits = self.store.waiting if self.store is not None and self.reason == STORE_FAILED_REASON else ()
        return waits[0] if waits else None

    @property
    def failed_in_init(self) -> bool:
        """It wrote its record as its init_process_group failed (timed out), before any collective."""
        return self.reason == FAILED_REASON and self.init is not None and not self.collectives

    @property
    def in_collective(self) -> Optional[Collective]:
        """The collective it waits in, if any: its main thread's, else the one its GPU is in."""
        last = self.collectives[-1] if self.collectives else None
        return last if last is not None and last.waiting else self.gpu_in

    @property
    def gpu_in(self) -> Optional[Collective]:
        """The oldest collective its GPU has reached and not finished (the call returned long
        ago; the main thread waits for the GPU later, where it reads a result)."""
        return next((c for c in self.collectives if c.state == "running"), None)

    @property
    def gpu_behind(self) -> Optional[Collective]:
        """The oldest collective its GPU has not reached yet: the GPU still computes what came
        before it."""
        return next((c for c in self.collectives if c.state == "queued"), None)

    @property
    def gpu_states(self) -> tuple[tuple[str, int, str], ...]:
        """Where its GPU is with the collectives queued on it: changes as the GPU moves on."""
        return tuple((c.group, c.seq, c.state) for c in self.collectives if c.on_gpu)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankSnapshot":
        debugger = DebuggerStop.from_json(data.get("debugger"))
        return cls(
            rank=int(data["rank"]), node=str(data.get("node", "")), pid=int(data.get("pid", 0)),
            time=float(data.get("time", 0.0)), cpu_s=float(data.get("cpu_s", 0.0)),
            stack=up_to_the_stop(main_stack(data), debugger),
            collectives=tuple(Collective(int(c["seq"]), str(c["op"]), str(c["group"]), str(c.get("shapes", "")),
                                         str(c.get("at", "?")), str(c.get("state", "")), str(c.get("error", "")))
                              for c in data.get("collectives", [])),
            completed=int(data.get("completed", 0)), reason=str(data.get("reason", "requested")),
            lines=call_lines(data.get("lines")), init=InitCall.from_json(data.get("init")),
            cpu_recent=optional_float(data.get("cpu_recent")), debugger=debugger, threads=users_threads(data),
            children_cpu_s=optional_float(data.get("children_cpu_s")) or 0.0,
            socket_bytes=optional_int(data.get("socket_bytes")), store=StoreCalls.from_json(data.get("store")),
            passes=pass_counts(data.get("passes")),
            collectives_checked=data.get("collectives_checked") is True)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "pid": self.pid, "cpu_s": self.cpu_s,
                "reason": self.reason, "completed": self.completed,
                "stack": [[f.file, f.line, f.function, f.code] for f in self.stack],
                "collectives": [c.__dict__ for c in self.collectives]}


def waits_for_data_loader(stack: tuple[Frame, ...]) -> bool:
    """Whether a main thread's stack waits for its DataLoader's worker processes."""
    return any(f.file.endswith(LOADER_WAIT_FILE) and f.function in LOADER_WAIT_FUNCTIONS for f in stack)


def waits_at_own_lock(stack: tuple[Frame, ...]) -> bool:
    """Whether a stack's innermost frame is a line of the user's own that takes a lock."""
    return bool(stack) and stack[-1].is_users and LOCK_WAIT_LINE.search(stack[-1].code) is not None


def waits_for_threads(stack: tuple[Frame, ...]) -> bool:
    """Whether a main thread's stack waits for another thread (see :attr:`RankSnapshot.waits_for_threads`)."""
    if not stack:
        return False
    innermost = stack[-1]
    if innermost.is_users:
        return LOCK_WAIT_LINE.search(innermost.code) is not None
    return any(frame.file.endswith(THREAD_WAIT_FILES) for frame in stack if not frame.is_users)


def up_to_the_stop(stack: tuple[Frame, ...], stop: Optional[DebuggerStop]) -> tuple[Frame, ...]:
    """A stack without the frames of the debugger that waits for a terminal (the script's call of
    ``breakpoint()`` is its innermost frame then); as it is where a terminal debugs the rank, or
    none waits."""
    if stop is None or stop.attached:
        return stack
    at = [i for i, frame in enumerate(stack) if frame.file == stop.file and frame.line == stop.line]
    return stack[:at[-1] + 1] if at else stack


def main_stack(data: dict[str, Any]) -> tuple[Frame, ...]:
    """A snapshot's main thread's stack, outermost frame first."""
    main = main_thread(data.get("stacks") or [])
    return frames_of(main) if main is not None else ()


def main_thread(stacks: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The main thread's entry of a snapshot's stacks (the first where none says it is)."""
    return next((s for s in stacks if s.get("main")), stacks[0] if stacks else None)


def frames_of(thread: dict[str, Any]) -> tuple[Frame, ...]:
    return tuple(Frame(str(f[0]), int(f[1]), str(f[2]), str(f[3]) if len(f) > 3 else "")
                 for f in thread.get("frames", []))


def users_threads(data: dict[str, Any]) -> tuple[ThreadStack, ...]:
    """A snapshot's threads of the user's code other than its main one: those that ended with an
    error, latest first, then those that run, by name (torch's and the libraries' own, a
    DataLoader's pin-memory thread, have no frame of the user's)."""
    stacks = data.get("stacks") or []
    main = main_thread(stacks)
    running = sorted((ThreadStack(str(s.get("thread", "")), frames_of(s)) for s in stacks if s is not main),
                     key=lambda t: t.name)
    ended = [ThreadStack(str(e.get("thread", "")), frames_of(e), str(e.get("error") or "?"))
             for e in reversed(data.get("thread_errors") or []) if isinstance(e, dict)]
    return tuple(t for t in ended + running if any(f.is_users for f in t.stack))


@dataclass(frozen=True)
class LoaderSnapshot:
    """What one of a rank's DataLoader worker processes wrote of itself."""

    rank: int
    pid: int
    worker: Optional[int]  # its id in its DataLoader (None: not known yet)
    workers: Optional[int]  # its DataLoader's num_workers
    cpu_s: float
    stack: tuple[Frame, ...]  # its loop's, outermost first (the frames it inherited from its rank cut off)
    loader: Optional[int] = None  # which of the rank's DataLoaders (its iterator's base seed)

    @property
    def idle(self) -> bool:
        """It waits for the indices of its next batch: it has nothing to load."""
        stack = own_frames(self.stack)
        called = stack[1] if len(stack) > 1 and is_worker_loop(stack[0]) else None
        return called is not None and called.file.endswith("multiprocessing/queues.py") and called.function == "get"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LoaderSnapshot":
        worker, workers, loader = data.get("loader_worker"), data.get("loader_workers"), data.get("loader")
        return cls(rank=int(data["rank"]), pid=int(data.get("pid", 0)),
                   worker=None if worker is None else int(worker), workers=None if workers is None else int(workers),
                   cpu_s=float(data.get("cpu_s", 0.0)), stack=own_frames(main_stack(data)),
                   loader=None if loader is None else int(loader))

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "worker": self.worker, "workers": self.workers,
                "loader": self.loader, "cpu_s": self.cpu_s, "idle": self.idle,
                "stack": [[f.file, f.line, f.function, f.code] for f in self.stack]}


def is_worker_loop(frame: Frame) -> bool:
    return frame.function == "_worker_loop" and frame.file.endswith("torch/utils/data/_utils/worker.py")


def own_frames(stack: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A DataLoader worker's stack from its loop on: a forked worker's stack starts with its
    rank's frames (the script's ``for`` over the loader, the fork), which are not where it is."""
    loops = [i for i, frame in enumerate(stack) if is_worker_loop(frame)]
    return stack[loops[-1]:] if loops else stack


@dataclass
class Probe:
    """One request's answers: the ranks that answered, when, and their DataLoaders' workers."""

    request: str
    at: float
    snapshots: dict[int, RankSnapshot] = field(default_factory=dict)
    loaders: dict[int, list[LoaderSnapshot]] = field(default_factory=dict)  # by rank, by worker id

    def loader_workers_missing(self) -> bool:
        """A rank waits for its DataLoader, and not every worker of its loaders answered yet (each
        says how many its loader has)."""
        for rank, snapshot in self.snapshots.items():
            if not snapshot.waits_for_data_loader:
                continue
            workers = self.loaders.get(rank, [])
            if not workers:
                return True
            by_loader: dict[Optional[int], list[LoaderSnapshot]] = {}
            for worker in workers:
                by_loader.setdefault(worker.loader, []).append(worker)
            if any(len(found) < max(w.workers or 0 for w in found) for found in by_loader.values()):
                return True
        return False


def debug_dir(run_dir: Path) -> Path:
    return Path(run_dir) / DEBUG_SUBDIR


def read_snapshot(path: Path) -> Optional[tuple[str, RankSnapshot]]:
    """A snapshot file's request id and content (None if it cannot be read)."""
    try:
        data = json.loads(path.read_text())
        return str(data.get("request", "")), RankSnapshot.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def call_lines(value: Any) -> tuple[tuple[str, int], ...]:
    """A snapshot's call lines and their counts (none where it has none, or not as a mapping)."""
    if not isinstance(value, dict):
        return ()
    try:
        return tuple((str(line), int(count)) for line, count in value.items())
    except (TypeError, ValueError):
        return ()


def pass_counts(value: Any) -> Optional[tuple[tuple[str, str, int], ...]]:
    """A snapshot's counts of a training step's passes, by pass and line (None where it has
    none, or not as a mapping of mappings)."""
    if not isinstance(value, dict) or not all(isinstance(lines, dict) for lines in value.values()):
        return None
    try:
        return tuple((str(kind), str(line), int(count)) for kind, lines in value.items() for line, count in lines.items())
    except (TypeError, ValueError):
        return None


def failed_collective(directory: Path, rank: int, since: float = 0.0) -> tuple[str, str]:
    """The collective a rank's record says failed as the rank went (``gather_object(in
    dcp.save)``), and which pass of a DDP model's training step it was (see
    :func:`training_pass`: its backward pass alone, as the other ranks' lines are not
    known here), where the rank wrote one from ``since`` on (Unix seconds: an earlier attempt's
    record says nothing of this one); ("", "") otherwise."""
    read = read_snapshot(directory / f"rank{rank}.json")
    if read is None or read[1].reason != FAILED_REASON or read[1].time < since:
        return "", ""
    last = read[1].collectives[-1] if read[1].collectives else None
    if last is None or last.state != "failed":
        return "", ""
    return last.call, training_pass(last.shapes, others_made_it=False)


def ask_snapshots(directory: Path) -> str:
    """Ask every worker for its snapshot (they look every 0.25 s); return the request's id. The
    DataLoader workers' earlier answers go (those workers come and go with each epoch)."""
    directory.mkdir(parents=True, exist_ok=True)
    for earlier in directory.glob(f"{LOADER_PREFIX}*"):  # a worker killed mid-write leaves its .tmp
        try:
            earlier.unlink()
        except OSError:
            pass  # gone meanwhile, or not ours to remove: its request id tells it apart anyway
    request = uuid.uuid4().hex[:12]
    temporary = directory / f".{REQUEST_FILE}.{request}"
    temporary.write_text(json.dumps({"id": request, "time": time.time()}))
    os.replace(temporary, directory / REQUEST_FILE)
    return request


def answers(directory: Path, request: str, at: float) -> Probe:
    """The answers to ``request`` written so far (``at``: when it was asked)."""
    probe = Probe(request, at)
    for path in directory.glob("rank*.json"):
        found = read_snapshot(path)
        if found is not None and found[0] == request:
            probe.snapshots[found[1].rank] = found[1]
    for path in directory.glob(f"{LOADER_PREFIX}*.json"):
        try:
            data = json.loads(path.read_text())
            if str(data.get("request", "")) == request:
                loader = LoaderSnapshot.from_json(data)
                probe.loaders.setdefault(loader.rank, []).append(loader)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue  # gone meanwhile, or half of another request's
    for workers in probe.loaders.values():
        oldest = {}  # each loader's first worker, by pid: the oldest loader first
        for worker in workers:
            oldest[worker.loader] = min(worker.pid, oldest.get(worker.loader, worker.pid))
        workers.sort(key=lambda w: (oldest[w.loader], w.loader or 0, w.worker is None, w.worker or 0, w.pid))
    return probe


def request_snapshots(directory: Path, expected: Iterable[int], timeout_s: float = ANSWER_TIMEOUT_S,
                      clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep, at_least: int = 0) -> Probe:
    """Ask every worker for its snapshot and wait until the ``expected`` ranks answered, and
    ``at_least`` ranks in all (an elastic run's ranks are known only by their number), and the
    DataLoader workers of those that wait for one (at most ``timeout_s``); the answers of other
    ranks are taken too (an elastic run's ranks change)."""
    request = ask_snapshots(directory)
    asked_at = clock()
    wanted = set(expected)
    deadline = asked_at + timeout_s
    while True:
        probe = answers(directory, request, asked_at)
        answered = (wanted <= set(probe.snapshots) and len(probe.snapshots) >= at_least
                    and not probe.loader_workers_missing())
        if answered or clock() >= deadline:
            return probe
        sleep(0.1)


def last_snapshots(directory: Path) -> dict[int, RankSnapshot]:
    """Every rank's latest snapshot, whatever asked for it (after a failure: what each rank
    wrote when its collective failed)."""
    found = {}
    for path in sorted(directory.glob("rank*.json")):
        read = read_snapshot(path)
        if read is not None:
            found[read[1].rank] = read[1]
    return found
