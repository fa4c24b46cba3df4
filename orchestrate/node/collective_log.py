"""A worker's last collectives: ``torch.distributed``'s Python collectives, wrapped to record
each call (its sequence number in its process group, op, group, tensor shapes and dtypes, the
caller's file:line, and whether it returned). A send or receive is numbered in its channel
(``p2p 0->1``: one direction between two ranks) instead of its group.

Installed by the workers' start-up hook before the script runs, without importing torch: the
wrappers go in when the script itself first imports ``torch.distributed`` (an import hook), so a
script that sets variables before ``import torch`` keeps that order. Only calls made from Python
are wrapped: DDP's gradient all-reduces, which its C++ reducer issues, are recorded by
:mod:`orchestrate.node.ddp_collectives`, one entry per backward pass. Standard library only until
torch is there.
"""
from __future__ import annotations

import collections
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional

from orchestrate.node import gpu_marks

# The collectives (and point-to-point calls) wrapped, where the installed torch has them.
COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
    "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "all_gather_object",
    "broadcast_object_list", "gather_object", "scatter_object_list", "_all_gather_base", "_reduce_scatter_base",
)
# Making a process group: every rank of the job calls it, for every group, in the same order
# (torch pairs the calls by their order), so it is recorded as a collective of the default group.
NEW_GROUP = "new_group"
# Collectives with one root, and the argument that names it (a global rank; ``group_src`` or
# ``group_dst`` a rank of the group): recorded as ``broadcast(float32[4] from rank 0)``, so that ranks
# that name different roots differ in the record, which torch's own check does not compare.
ROOTS = {"broadcast": "src", "scatter": "src", "broadcast_object_list": "src", "scatter_object_list": "src",
         "reduce": "dst", "gather": "dst", "gather_object": "dst"}
# Their lists that only the root gives (``gather_list``, ``scatter_list``,
# ``object_gather_list``, ``scatter_object_input_list``: the second argument): not described, or
# every root would differ from its group.
ROOT_ONLY_LISTS = ("gather", "scatter", "gather_object", "scatter_object_list")
# Collectives whose list of objects every rank gives at one length, and the argument it is: recorded
# as ``broadcast_object_list(3 objects from rank 0)``, so that lists of other lengths differ in the
# record (gloo aborts the rank with the shorter one on their sizes, 8 bytes an object).
OBJECT_LISTS = {"broadcast_object_list": "object_list"}
# Point-to-point calls: each direction between two ranks is a channel of its own ("p2p 0->1"),
# numbered apart from the process group's collectives, which every member calls in one order: a
# rank's sends to one peer match that peer's receives from it, whatever else either does.
SENDS = ("send", "isend")
RECEIVES = ("recv", "irecv")
P2P = "p2p "
P2P_BATCH = "p2p batch of rank"  # batch_isend_irecv: its own channel on each rank, never compared
# How many collectives each rank keeps.
KEEP = 64
# How many of its call lines (``file:line``) a rank counts, the most recent kept: past its last
# KEEP collectives they say whether a line made collectives before (a training step's forward
# pass, made every step) or never (an evaluation made once, on one rank).
LINES_KEPT = 256
_TORCH_FILES = os.sep + "torch" + os.sep
# Frames from these files are torch's or ours, never the caller's.
_NOT_CALLERS = (os.sep + "torch" + os.sep, os.sep + "orchestrate" + os.sep + "node" + os.sep,
                "runpy.py", "contextlib.py", "functools.py", "threading.py")


# A collective on a GPU returns once its work is queued on the GPU's stream (NCCL): its entry is
# ``queued`` until the GPU has finished what came before it, ``running`` while the GPU is in it
# (NCCL's kernel waits there for the peers), then ``done`` (see gpu_marks).
ON_GPU = ("queued", "running")
# The entry's points on its GPUs' streams, before and after it: kept here, never in a snapshot.
_POINTS = "_points"
# How many entries the GPU may be behind by before the oldest are dropped unasked (the record
# keeps an entry whose GPU work it has not seen finish: it may be where the GPU waits).
KEEP_ON_GPU = 1024


class CollectiveLog:
    """The record of one process's collectives: the last :data:`KEEP`, the one it is in, and
    the oldest its GPU has not finished.

    ``gpu``: places points on GPU streams and asks whether the GPU got past them
    (:class:`orchestrate.node.gpu_marks.CudaMarks`); each synchronous collective on GPU tensors
    gets one before and one after the call, so the snapshots say whether the GPU has reached it
    and finished it, not only that the call returned."""

    def __init__(self, keep: int = KEEP, clock: Callable[[], float] = time.time, gpu: Any = None) -> None:
        self.entries: Deque[Dict[str, Any]] = collections.deque()
        self.keep = keep
        self.next_seq: Dict[str, int] = {}
        self.completed = 0
        self.clock = clock
        self.gpu = gpu if gpu is not None else gpu_marks.CudaMarks()
        self.lock = threading.Lock()
        self.local = threading.local()
        self.exclusive = 0  # outer calls under way that own every thread's collectives (see call)
        self.lines: Dict[str, int] = {}  # call line -> collectives made from it, the most recent last
        # a DDP training step's pass ("backward pass") -> call line -> how many of it were made from
        # there: a line's count takes in every collective made from it (a ZeroRedundancyOptimizer's
        # step() on the line of the backward pass broadcasts too), this one the passes alone
        self.passes: Dict[str, Dict[str, int]] = {}
        # Who may name what a collective moves, from its op and its caller's frame, in place of its
        # tensors (FSDP's all-gathers: "parameters of FSDP(Linear)"); the first that names it wins.
        self.describers: List[Callable[[str, Any], Optional[str]]] = []
        # How the script called init_process_group, beside what torchrun gave the process
        # (orchestrate.node.init_record); None until it does.
        self.init_call: Optional[Dict[str, Any]] = None
        # The script's own store calls (orchestrate.node.store_calls.StoreRecord); None until recorded.
        self.store_calls: Any = None

    def enter(self, op: str, group: str, shapes: str, caller: str, counted_as: str = "") -> Dict[str, Any]:
        """Record a collective as entered; return its entry (to be :meth:`leave` d); ``counted_as``:
        the pass of a training step it is, counted apart by its line (see :attr:`passes`)."""
        with self.lock:
            seq = self.next_seq.get(group, 0) + 1
            self.next_seq[group] = seq
            entry = {"seq": seq, "op": op, "group": group, "shapes": shapes, "at": caller,
                     "state": "entered", "started": self.clock()}
            self.entries.append(entry)
            self.trim()
            self.lines[caller] = self.lines.pop(caller, 0) + 1
            if len(self.lines) > LINES_KEPT:
                del self.lines[next(iter(self.lines))]
            if counted_as:
                made = self.passes.setdefault(counted_as, {})
                made[caller] = made.pop(caller, 0) + 1
                if len(made) > LINES_KEPT:
                    del made[next(iter(made))]
        return entry

    def call_lines(self) -> Dict[str, int]:
        """The lines collectives were made from, each with how many (see :data:`LINES_KEPT`)."""
        with self.lock:
            return dict(self.lines)

    def pass_counts(self) -> Dict[str, Dict[str, int]]:
        """The training steps' passes made, by pass and line (see :attr:`passes`)."""
        with self.lock:
            return {kind: dict(lines) for kind, lines in self.passes.items()}

    def trim(self) -> None:
        """Drop the oldest entries beyond :data:`KEEP`, but not one whose GPU work is unfinished
        (up to :data:`KEEP_ON_GPU` in all); under the lock."""
        while len(self.entries) > self.keep and (_POINTS not in self.entries[0] or len(self.entries) > KEEP_ON_GPU):
            self.entries.popleft()

    def leave(self, entry: Dict[str, Any], state: str, error: str = "", points: Optional[tuple] = None) -> None:
        """The collective returned (``done``, or ``issued`` for an async one), or returned with its
        work still on the GPU (``queued``, with its ``points`` before and after it), or raised
        (``failed``)."""
        with self.lock:
            entry["state"] = state
            entry["ended"] = self.clock()
            if error:
                entry["error"] = error
            if points is not None:
                entry[_POINTS] = points
            if state in ("done", "issued"):
                self.completed += 1

    def settle(self) -> None:
        """Ask the GPU how far it got with the collectives queued on it (the snapshot thread
        only: see gpu_marks), and drop what it finished beyond the last :data:`KEEP`."""
        if not self.gpu.ready_here():
            return
        with self.lock:
            asked = [(entry, entry[_POINTS]) for entry in self.entries if _POINTS in entry]
        found = []
        for entry, (before, after) in asked:  # CUDA's answers, outside the lock the script's calls take
            try:
                found.append((entry, gpu_marks.where(self.gpu, before, after)))
            except Exception:  # a GPU in error (an aborted communicator): the entry stays as it was
                continue
        with self.lock:
            for entry, state in found:
                if _POINTS not in entry:
                    continue
                entry["state"] = state
                if state == "done":
                    del entry[_POINTS]
                    self.completed += 1
            self.trim()

    def snapshot(self, settle: bool = False) -> List[Dict[str, Any]]:
        """The last :data:`KEEP` entries, after the oldest one its GPU has not finished where
        that is older (``settle``: ask the GPU first, from the snapshot thread)."""
        if settle:
            self.settle()
        with self.lock:
            entries = list(self.entries)
        older, recent = entries[:-self.keep], entries[-self.keep:]
        unfinished = [entry for entry in older if entry["state"] in ON_GPU][:1]
        return [{k: v for k, v in entry.items() if k != _POINTS} for entry in unfinished + recent]

    def nested(self) -> bool:
        """Whether this thread is already inside a recorded collective (an object collective
        calls the tensor ones: only the outer call is recorded), or any thread is inside an
        exclusive one (a backward pass: see :meth:`call`)."""
        return getattr(self.local, "depth", 0) > 0 or self.exclusive > 0

    def wrap(self, name: str, original: Callable[..., Any], describe_group: Callable[[Any], str]) -> Callable[..., Any]:
        """``original`` (a collective of ``torch.distributed``), recording each outer call."""
        group_index = _positional_index(original, "group")
        async_index = _positional_index(original, "async_op")
        peer = "dst" if name in SENDS else "src" if name in RECEIVES else None
        peer_index = _positional_index(original, peer) if peer else None
        tag_index = _positional_index(original, "tag") if peer else None
        group_peer_index = _positional_index(original, f"group_{peer}") if peer else None
        root = ROOTS.get(name)
        root_index = _positional_index(original, root) if root else None
        group_root_index = _positional_index(original, f"group_{root}") if root else None
        listed = OBJECT_LISTS.get(name)
        # an object list is described by its length alone: the root's holds the objects, the others' slots
        described = slice(0) if listed else slice(1) if name in ROOT_ONLY_LISTS else slice(None)
        listed_index = _positional_index(original, listed) if listed else None

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if self.nested():
                return original(*args, **kwargs)
            group = _argument(args, kwargs, "group", group_index)
            is_async = bool(_argument(args, kwargs, "async_op", async_index)) or name in ("isend", "irecv")
            tag = _argument(args, kwargs, "tag", tag_index)
            if peer:
                where = p2p_channel(name, _argument(args, kwargs, peer, peer_index),
                                    _argument(args, kwargs, f"group_{peer}", group_peer_index), group,
                                    describe_group(group), tag)
            elif name == "batch_isend_irecv":  # sends and receives with several peers: never compared
                where = f"{P2P_BATCH} {own_rank()}"
            else:
                where = describe_group(group)
            if where.startswith(f"{P2P}any->") and not is_async:
                # a receive from any rank: numbered in its sender's channel once it returns its source
                return self.call(original, args, kwargs, name, where, describe_tensors(args),
                                 caller(sys._getframe(1)), "done",
                                 channel=lambda source: p2p_channel(name, source, None, group, describe_group(group),
                                                                    tag))
            root_text = ""
            if root:
                rank = global_rank(_argument(args, kwargs, root, root_index),
                                   _argument(args, kwargs, f"group_{root}", group_root_index), group)
                root_text = f"{'from' if root == 'src' else 'to'} rank {'?' if rank is None else rank}"
            if listed:
                root_text = " ".join(filter(None, (objects_in(_argument(args, kwargs, listed, listed_index)), root_text)))
            return self.call(original, args, kwargs, name, where,
                             self.describe(name, args[described], sys._getframe(1), root_text),
                             caller(sys._getframe(1)), "issued" if is_async else "done",
                             gpus=() if is_async else gpus_of(args))

        collective.__ddp_compose_recorded__ = True  # type: ignore[attr-defined]
        return collective

    def wrap_new_group(self, original: Callable[..., Any], describe_group: Callable[[Any], str]) -> Callable[..., Any]:
        """``original`` (``new_group``), recording each outer call as ``new_group(ranks 0,1)`` in
        the default group, where every rank must make it. One made with
        ``use_local_synchronization=True``, which only its members call, is not recorded."""
        ranks_index = _positional_index(original, "ranks")
        local_index = _positional_index(original, "use_local_synchronization")

        @functools.wraps(original)
        def new_group(*args: Any, **kwargs: Any) -> Any:
            if self.nested() or _argument(args, kwargs, "use_local_synchronization", local_index):
                return original(*args, **kwargs)
            return self.call(original, args, kwargs, NEW_GROUP, describe_group(None),
                             describe_ranks(_argument(args, kwargs, "ranks", ranks_index)), caller(sys._getframe(1)))

        new_group.__ddp_compose_recorded__ = True  # type: ignore[attr-defined]
        return new_group

    def add_describer(self, describer: Callable[[str, Any], Optional[str]]) -> None:
        """Let ``describer`` name what collectives move (see :attr:`describers`), once."""
        if describer not in self.describers:
            self.describers.append(describer)

    def describe(self, op: str, args: tuple, frame: Any, root: str = "") -> str:
        """What a collective moves: its tensors, after the name a describer gives it, if one does
        (``parameters of FSDP(Linear): float32[144], float32[72]``), else followed by ``root``
        (``float32[4] from rank 0``): a library's root is its own, the user's is theirs to check."""
        tensors = describe_tensors(args)
        for describer in self.describers:
            try:
                named = describer(op, frame)
            except Exception:  # the record is a help: a describer that fails names nothing
                named = None
            if named:
                return f"{named}: {tensors}" if tensors else named
        return " ".join(part for part in (tensors, root) if part)

    def call(self, original: Callable[..., Any], args: tuple, kwargs: Dict[str, Any], op: str, group: str,
             shapes: str, at: str, returned: str = "done", exclusive: bool = False,
             channel: Optional[Callable[[Any], str]] = None, gpus: tuple = (), counted_as: str = "",
             kept: Optional[Callable[[Any], bool]] = None) -> Any:
        """``original(*args, **kwargs)``, recorded as the collective ``op`` (an outer call: the
        collectives it makes on this thread are not recorded, nor, if ``exclusive``, those any
        thread makes meanwhile: a backward pass's, which autograd's device threads may run);
        ``returned``: its state once it returns (``issued`` for an async one); ``channel``: for a
        receive from any rank, the channel of the source it returns; ``gpus``: the GPU devices
        whose streams its work joins (the entry is ``queued`` until the GPUs have finished it);
        ``counted_as``: the pass of a DDP training step it is (see :meth:`enter`); ``kept``: whether
        the call was a collective after all, by what it returned or raised (one that may or may not
        be, as DDP's rebuild of its buckets: recorded while it lasts, taken back out if not, see
        :meth:`retract`)."""
        before = self.gpu.place(gpus) if gpus else None
        entry = self.enter(op, group, shapes, at, counted_as)
        self.local.depth = getattr(self.local, "depth", 0) + 1
        if exclusive:
            with self.lock:
                self.exclusive += 1
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            if kept is not None and not kept(exc) and self.retract(entry):
                raise
            self.leave(entry, "failed", first_line(exc))
            on_failure(self)
            raise
        finally:
            self.local.depth -= 1
            if exclusive:
                with self.lock:
                    self.exclusive -= 1
        if kept is not None and not kept(result) and self.retract(entry):
            return result
        if channel is not None and isinstance(result, int):
            self.move(entry, channel(result))
        after = self.gpu.place(gpus) if before is not None else None
        if after is not None:
            self.leave(entry, "queued", points=(before, after))
        else:
            self.leave(entry, returned)
        return result

    def retract(self, entry: Dict[str, Any]) -> bool:
        """Take out an entry, a call that was no collective after all, and its number and line with
        it, as if never entered; False (it stays) where another of its group has been entered since,
        whose number it would leave a gap before, or it is no longer kept. Another group's entry
        made meanwhile (a thread's) leaves no gap in this group's numbers: it is taken out all the
        same, so that no rank's record keeps a broadcast its peers never saw."""
        with self.lock:
            group, caller = entry["group"], entry["at"]
            at = next((i for i in range(len(self.entries) - 1, -1, -1) if self.entries[i] is entry), None)
            if at is None or self.next_seq.get(group) != entry["seq"]:
                return False
            del self.entries[at]
            self.next_seq[group] -= 1
            made = self.lines.get(caller, 0) - 1
            if made > 0:
                self.lines[caller] = made
            else:
                self.lines.pop(caller, None)
            return True

    def move(self, entry: Dict[str, Any], group: str) -> None:
        """Number an entry in another group (a receive from any rank, in its sender's channel)."""
        with self.lock:
            seq = self.next_seq.get(group, 0) + 1
            self.next_seq[group] = seq
            entry["group"], entry["seq"] = group, seq


def _positional_index(function: Callable[..., Any], parameter: str) -> Optional[int]:
    import inspect

    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return names.index(parameter) if parameter in names else None


def _argument(args: tuple, kwargs: Dict[str, Any], key: str, index: Optional[int]) -> Any:
    """A call's argument ``key``, passed by name or at ``index``; None where not passed."""
    return kwargs.get(key, args[index] if index is not None and len(args) > index else None)


def describe_ranks(ranks: Any) -> str:
    """A new group's members as ``ranks 0,1`` (``all ranks`` where none are given); only a
    list, tuple, set or range is read (a generator would be used up before torch sees it, a
    tensor's truth is an error): any other is ``ranks ?``."""
    if ranks is None:
        return "all ranks"
    if not isinstance(ranks, (list, tuple, set, frozenset, range)):
        return "ranks ?"
    try:
        return "ranks " + ",".join(str(int(r)) for r in sorted(ranks)) if len(ranks) else "all ranks"
    except Exception:  # members that are not numbers: left to torch to refuse
        return "ranks ?"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def objects_in(value: Any) -> str:
    """``3 objects``: how many a list of objects holds ("" for what is no list)."""
    if not isinstance(value, list):
        return ""
    return f"{len(value)} object{'' if len(value) == 1 else 's'}"


def describe_tensors(args: tuple) -> str:
    """The tensors a collective was given, as ``float32[4]`` (a list: ``2x float32[4]``);
    what is not a tensor is left out."""
    parts = []
    for arg in args[:3]:
        described = describe_tensor(arg)
        if described is None and isinstance(arg, (list, tuple)) and arg:
            inner = describe_tensor(arg[0])
            described = f"{len(arg)}x {inner}" if inner else None
        if described:
            parts.append(described)
    return ", ".join(parts)


def gpus_of(args: tuple) -> tuple:
    """The CUDA device of the first tensor a collective was given (none for CPU tensors)."""
    try:
        for arg in args[:3]:
            value = arg[0] if isinstance(arg, (list, tuple)) and arg else arg
            if getattr(value, "is_cuda", False) is True:
                return (value.device,)
    except Exception:  # an argument that is not what it says: left to torch to refuse
        pass
    return ()


def describe_tensor(value: Any) -> Optional[str]:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    return f"{str(dtype).replace('torch.', '')}[{','.join(str(d) for d in shape)}]"


def caller(frame: Any) -> str:
    """``file.py:LINE`` of the first frame that is neither torch's nor ours."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in _NOT_CALLERS) and not filename.startswith("<frozen"):
            return f"{relative(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def torch_frames(frame: Any, depth: int) -> Iterator[Any]:
    """The frames from ``frame`` outward that are torch's own, up to the first that is not (the
    caller's, where a library's collective came from), at most ``depth`` of them."""
    for _ in range(depth):
        if frame is None or _TORCH_FILES not in frame.f_code.co_filename:
            return
        yield frame
        frame = frame.f_back


def relative(filename: str) -> str:
    """A path as the user knows it: relative to the work directory when under it."""
    cwd = os.getcwd() + os.sep
    return filename[len(cwd):] if filename.startswith(cwd) else filename


def own_rank() -> str:
    """This process's global rank ("?" before its process group exists)."""
    import torch.distributed as dist

    try:
        return str(dist.get_rank())
    except Exception:  # no process group yet: torch's own call will say so
        return "?"


def p2p_channel(op: str, peer: Any, group_peer: Any, group: Any, group_name: str, tag: Any) -> str:
    """The channel a point-to-point call is on, by global ranks: ``p2p 0->1`` (``in ranks 0,1``
    for another process group than the default, ``tag 3`` where the call has one); ``any`` for a
    receive from whoever sends."""
    peer = global_rank(peer, group_peer, group)
    other = "any" if peer is None else str(peer)
    source, target = (own_rank(), other) if op in SENDS else (other, own_rank())
    return (f"{P2P}{source}->{target}" + ("" if group_name == "default" else f" in {group_name}")
            + (f" tag {int(tag)}" if tag else ""))


def global_rank(rank: Any, group_rank: Any, group: Any) -> Optional[int]:
    """The global rank a call names: ``rank`` (``src``, ``dst``), or ``group_rank`` (``group_src``,
    ``group_dst``) mapped from ``group``'s ranks; None where neither is given or torch cannot map it."""
    import torch.distributed as dist

    try:
        if rank is None and group_rank is not None:
            rank = dist.get_global_rank(group, group_rank) if group is not None else group_rank
        return None if rank is None else int(rank)
    except Exception:  # a group torch cannot map, a rank that is no number: torch's call will say so
        return None


def group_namer() -> Callable[[Any], str]:
    """Names process groups: ``default``, or ``ranks 0,2`` (cached per group object); a later
    group of the same ranks ``ranks 0,2 (2nd group of them)``, by the order torch made them in
    (every rank makes its groups in one order), so that two groups of one set of ranks are not
    taken for one, whenever each is first used."""
    names: Dict[int, str] = {}

    def name(group: Any) -> str:
        if group is None:
            return "default"
        key = id(group)
        if key not in names:
            try:
                import torch.distributed as dist

                if group is dist.GroupMember.WORLD:
                    names[key] = "default"
                else:
                    ranks = dist.get_process_group_ranks(group)
                    names[key] = "ranks " + ",".join(str(r) for r in ranks) + nth_of_its_ranks(group, ranks)
            except Exception:  # a group torch cannot describe: still a group of its own
                names[key] = f"group {len(names) + 1}"
        return names[key]

    return name


def nth_of_its_ranks(group: Any, ranks: List[int]) -> str:
    """`` (2nd group of them)`` for the second group torch made of exactly ``ranks``, and so on;
    "" for the first (torch keeps its groups in the order they were made)."""
    try:
        from torch.distributed.distributed_c10d import _world

        made = [g for g, members in _world.pg_group_ranks.items()
                if g is not _world.default_pg and sorted(members) == sorted(ranks)]
        place = next(i for i, g in enumerate(made) if g is group)
    except Exception:  # a torch that keeps them otherwise: named by its ranks alone
        return ""
    if place == 0:
        return ""
    nth = place + 1
    suffix = "th" if 10 <= nth % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(nth % 10, "th")
    return f" ({nth}{suffix} group of them)"


# What a failed collective calls (the snapshot writer, once it runs): the record is then on disk
# before the process dies of the error.
_failure_hooks: List[Callable[[CollectiveLog], None]] = []
# What an error that ends the worker's script calls, before Python's own report of it (the snapshot
# writer: a store call's timeout the script did not catch is written then).
_uncaught_hooks: List[Callable[[BaseException], None]] = []


def on_failure(log: CollectiveLog) -> None:
    for hook in list(_failure_hooks):
        try:
            hook(log)
        except Exception:  # the record is a help: never let it mask the job's own error
            pass


def at_end(log: CollectiveLog) -> Dict[str, Any]:
    """What a rank's script made in each process group by its end, for the launcher to compare
    across ranks (``collectives`` of the finished record): how many collectives each group had
    (``counts``), and the last of them the record keeps, as ``[group, seq, op, shapes, at]``.
    Point-to-point channels are left out: their two ends differ by design. Empty where it made none."""
    with log.lock:
        counts = {group: seq for group, seq in log.next_seq.items() if not group.startswith(P2P)}
    if not counts:
        return {}
    calls = [[e["group"], e["seq"], e["op"], e["shapes"], e["at"]] for e in log.snapshot()
             if not str(e.get("group", "")).startswith(P2P)]
    return {"counts": counts, "calls": calls, "world": os.environ.get("WORLD_SIZE", "")}


def on_uncaught(error: BaseException) -> None:
    for hook in list(_uncaught_hooks):
        try:
            hook(error)
        except Exception:  # (as above)
            pass


def wrap_torch_distributed(log: CollectiveLog, name_group: Optional[Callable[[Any], str]] = None) -> None:
    """Wrap the collectives of the loaded ``torch.distributed`` (the package and
    ``distributed_c10d``, where scripts and torch itself find them)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    if c10d is None or dist is None:
        return
    name_group = name_group or group_namer()
    for name in (*COLLECTIVES, NEW_GROUP):
        original = getattr(c10d, name, None)
        if original is None or getattr(original, "__ddp_compose_recorded__", False):
            continue
        wrapped = (log.wrap_new_group(original, name_group) if name == NEW_GROUP
                   else log.wrap(name, original, name_group))
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)


def with_default_timeout(seconds: float) -> None:
    """Give ``init_process_group`` and ``new_group`` a ``timeout`` of ``seconds`` where the
    script gives none (torch's own default is 10 or 30 minutes)."""
    import datetime

    c10d = sys.modules["torch.distributed.distributed_c10d"]
    dist = sys.modules["torch.distributed"]
    for name in ("init_process_group", "new_group"):
        original = getattr(c10d, name)
        wrapped = with_default(original, "timeout", datetime.timedelta(seconds=seconds))
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)


def with_default(original: Callable[..., Any], parameter: str, value: Any) -> Callable[..., Any]:
    """``original`` with ``parameter`` set to ``value`` where a call leaves it out or gives None,
    however the call passes it (by position or by name)."""
    import inspect

    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        if bound.arguments.get(parameter) is None:
            bound.arguments[parameter] = value
        return original(*bound.args, **bound.kwargs)

    return call


def guarded(then: Callable[[], None]) -> None:
    """Run a hook's callback: one that fails says so, once, and never fails the script's import
    (what it would have recorded is then missing, the job runs as it would without it)."""
    try:
        then()
    except Exception as exc:  # a torch this hook does not know: the job goes on without it
        sys.stderr.write(f"[ddp-compose] start-up hook: {getattr(then, '__qualname__', then)} skipped:"
                         f" {first_line(exc)}\n")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs each of ``then`` once ``module`` has been imported (by whoever imports it first)."""

    def __init__(self, module: str, then: Callable[[], None]) -> None:
        self.module = module
        self.then = [then]

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            for each in then:
                guarded(each)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def when_imported(module: str, then: Callable[[], None]) -> None:
    """Run ``then`` after ``module`` is imported: now if it already is; several for one module
    run in the order they were given."""
    if module in sys.modules:
        guarded(then)
        return
    waiting = next((f for f in sys.meta_path if isinstance(f, _AfterImport) and f.module == module), None)
    if waiting is not None:
        waiting.then.append(then)
    else:
        sys.meta_path.insert(0, _AfterImport(module, then))
