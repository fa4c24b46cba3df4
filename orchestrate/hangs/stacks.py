"""Ranks grouped by where they are, as LLNL's STAT merges the stacks of many MPI ranks: ranks
with the same stack form one group, and the odd rank out is shown first (pure)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from orchestrate.hangs.snapshots import Frame, RankSnapshot, ThreadStack
from orchestrate.text import listed, ranks_text

# How many of a group's innermost frames are shown.
SHOWN_FRAMES = 4


def users_frame_index(stack: tuple[Frame, ...]) -> Optional[int]:
    """Where the innermost frame of the user's own code is in ``stack`` (None: nowhere)."""
    return next((i for i in range(len(stack) - 1, -1, -1) if stack[i].is_users), None)


def users_frame(stack: tuple[Frame, ...]) -> Optional[Frame]:
    """The innermost frame of the user's own code."""
    index = users_frame_index(stack)
    return None if index is None else stack[index]


# Frames that only pass a call on (torch's logging and profiling decorators, nn.Module's call):
# the call a user made is the first frame past them.
PASSING_ON = frozenset({"wrapper", "inner", "_fn", "decorate_context", "_wrapped_call_impl", "_call_impl"})


def call_made(stack: tuple[Frame, ...], mine: Optional[Frame]) -> str:
    """The call the user's innermost frame made (``init_process_group``, ``backward``,
    ``save``), past the frames that only pass it on; the innermost function when the user's
    frame is not in the stack."""
    if mine is None:
        return stack[-1].function
    index = max(i for i, frame in enumerate(stack) if frame is mine)
    called = [frame.function for frame in stack[index + 1:] if frame.function not in PASSING_ON]
    return called[0] if called else stack[-1].function


# What a rank stopped at its script's breakpoint() is doing, in the place of a call.
IN_DEBUGGER = "stopped in its debugger"


def summary(stack: tuple[Frame, ...], waiting_in: str = "") -> str:
    """Where a stack is: ``all_reduce at desync.py:11 in <module>`` (the call it is in, then the
    user's innermost frame); ``waiting_in`` names the call when the collective record knows it."""
    if not stack:
        return "no Python frame"
    mine = users_frame(stack)
    call = waiting_in or call_made(stack, mine)
    if mine is None:
        return f"{call} at {stack[-1].where}"
    if mine is stack[-1] and not waiting_in:
        return f"{mine.function} at {mine.where}"
    return f"{call} at {mine.where} in {mine.function}"


def rank_summary(snapshot: RankSnapshot) -> str:
    """Where a rank outside any collective is: :func:`summary` of its stack, or where it is stopped
    in its debugger."""
    return summary(snapshot.stack, IN_DEBUGGER if snapshot.debugger is not None else "")


def frame_line(frame: Frame) -> str:
    """``torch/distributed/distributed_c10d.py:2942 in all_reduce: work.wait()``."""
    return f"{frame.short_file}:{frame.line} in {frame.function}" + (f": {frame.code}" if frame.code else "")


def shown_frames(stack: tuple[Frame, ...]) -> list[str]:
    """The lines of a stack that are shown, innermost last: its innermost :data:`SHOWN_FRAMES`
    frames, led by the user's innermost frame, and how many frames lie between, where that
    frame is not among them (a deep call into torch would otherwise hide the user's own line)."""
    lines = [frame_line(frame) for frame in stack[-SHOWN_FRAMES:]]
    mine = users_frame_index(stack)
    if mine is None or mine >= len(stack) - SHOWN_FRAMES:
        return lines
    between = len(stack) - SHOWN_FRAMES - mine - 1
    return [frame_line(stack[mine]), *([f"... {between} frame(s)"] if between else []), *lines]


@dataclass(frozen=True)
class ThreadPlace:
    """Where a thread of the user's, by its name, is on some ranks: the summary of its stack and
    its innermost frame of the user's code."""

    name: str
    where: str
    frame: Optional[Frame]
    ranks: tuple[int, ...]


# How many of a group's thread places are shown (the diagnosis's JSON has them all).
SHOWN_THREADS = 4


def thread_places(snapshots: Iterable[tuple[int, RankSnapshot]]) -> tuple[ThreadPlace, ...]:
    """The user's threads of some ranks, those at the same place on several ranks as one."""
    found: dict[tuple[str, str], tuple[Optional[Frame], list[int]]] = {}
    for rank, snapshot in snapshots:
        for thread in snapshot.threads:
            found.setdefault((thread.name, thread_place(thread)), (users_frame(thread.stack), []))[1].append(rank)
    return tuple(ThreadPlace(name, where, frame, tuple(sorted(ranks)))
                 for (name, where), (frame, ranks) in found.items())


def thread_place(thread: ThreadStack) -> str:
    """Where a thread is (:func:`summary`), or that it ended with its error, and where it raised."""
    if not thread.error:
        return summary(thread.stack)
    mine = users_frame(thread.stack)
    return f"ended with {thread.error}" + (f" at {mine.where} in {mine.function}" if mine is not None else "")


def awaited_threads(snapshot: RankSnapshot) -> str:
    """For a rank whose main thread waits for another of its threads: where its threads of the
    user's are (``thread producer: sleep at train.py:9 in produce``); "" otherwise."""
    if not snapshot.waits_for_threads or not snapshot.threads:
        return ""
    places = [f"{thread.name}: {thread_place(thread)}" for thread in snapshot.threads]
    return f"thread{'s' if len(snapshot.threads) > 1 else ''} " + listed(places, 2)


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose main threads have the same stack, and where their other threads of the user's are."""

    ranks: tuple[int, ...]
    stack: tuple[Frame, ...]
    where: str
    threads: tuple[ThreadPlace, ...] = ()

    def lines(self) -> list[str]:
        """The group's line, then its innermost frames (innermost last), then each of its user's
        threads with its innermost frame of the user's code."""
        out = [f"{ranks_text(self.ranks)}: {self.where}"] + [f"    {line}" for line in shown_frames(self.stack)]
        for thread in self.threads[:SHOWN_THREADS]:
            on = "" if thread.ranks == self.ranks else f" ({ranks_text(thread.ranks)})"
            out.append(f"  thread {thread.name}{on}: {thread.where}")
            out += [f"    {frame_line(thread.frame)}"] if thread.frame is not None else []
        if len(self.threads) > SHOWN_THREADS:
            out.append(f"  and {len(self.threads) - SHOWN_THREADS} more thread place(s)")
        return out


def group_stacks(snapshots: dict[int, RankSnapshot]) -> list[StackGroup]:
    """Group ranks by their main thread's stack; smallest groups (the odd ones out) first, then
    by lowest rank."""
    by_stack: dict[tuple, list[int]] = {}
    for rank, snapshot in snapshots.items():
        waiting = snapshot.in_collective
        on_gpu = (waiting.group, waiting.seq, waiting.call) if waiting is not None and waiting.on_gpu else None
        key = (tuple((f.file, f.line, f.function) for f in snapshot.stack), on_gpu)  # and where its GPU waits
        by_stack.setdefault(key, []).append(rank)
    groups = []
    for ranks in by_stack.values():
        first = snapshots[min(ranks)]
        waiting = first.in_collective
        if waiting is not None and waiting.on_gpu:  # the main thread is elsewhere, waiting for the GPU
            where = f"{summary(first.stack)}; its GPU waits in {waiting.call} #{waiting.seq} from {waiting.at}"
        elif first.debugger is not None:
            where = rank_summary(first)
        else:
            where = summary(first.stack, waiting.op if waiting else "init_process_group" if first.failed_in_init else "")
        members = tuple(sorted(ranks))
        groups.append(StackGroup(members, first.stack, where, thread_places((rank, snapshots[rank]) for rank in members)))
    return sorted(groups, key=lambda g: (len(g.ranks), g.ranks[0]))
