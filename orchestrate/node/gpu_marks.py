"""Where a GPU is with the collectives queued on it.

NCCL returns from a collective once its work is queued on the GPU's stream, so a rank whose
collective never completes waits later, where it reads a result, with CUDA spinning a core. The
collective record (:mod:`orchestrate.node.collective_log`) places a point (a CUDA event) on each
GPU's current stream before such a call and after it, and asks, when the launcher asks for a
snapshot, whether the GPU got past them: ``queued`` (not the first), ``running`` (the first, not
the second: the GPU is in the collective), ``done``.

What must never happen: the script's own work disturbed. So a point is never placed on a stream
being captured into a CUDA graph, a point that cannot be placed leaves the collective untracked
instead of failing the call, and only the snapshot thread asks the GPU, each question on the
point's own device (asked on the thread's current device, GPU 0, it would make a CUDA context
there for every rank), and only once that thread is in CUDA's thread-local capture mode (in the
default, global mode, its question would make a capture the script runs meanwhile fail). Where
that mode cannot be set (no CUDA runtime library loaded apart from torch), nothing is asked:
the entries stay ``queued``. Standard library only; torch is reached through ``sys.modules``,
which holds it once the script has put tensors on a GPU.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

# cudaStreamCaptureModeThreadLocal: a thread's own calls are checked only against its own captures.
THREAD_LOCAL_CAPTURE = 1

Points = List[Tuple[int, Any]]  # (device index, event), one per GPU


class CudaMarks:
    """Points on CUDA streams, made and asked with torch.cuda's events."""

    def __init__(self) -> None:
        self.threads = threading.local()

    def place(self, devices: Sequence[Any]) -> Optional[Points]:
        """An event on each device's current stream; None while one of those streams is being
        captured, or where CUDA refuses (a GPU in error)."""
        try:
            cuda = sys.modules["torch"].cuda
            points = []
            for device in devices:
                with cuda.device(device):
                    if cuda.is_current_stream_capturing():
                        return None
                    event = cuda.Event()
                    event.record()
                points.append((device.index, event))
            return points
        except Exception:  # the record is a help: never let it fail the script's call
            return None

    def reached(self, points: Points) -> bool:
        """Whether the GPUs got past every point (raises where CUDA cannot say)."""
        cuda = sys.modules["torch"].cuda
        for index, event in points:
            with cuda.device(index):
                if not event.query():
                    return False
        return True

    def ready_here(self) -> bool:
        """Whether this thread may ask: once it is in thread-local capture mode (set on its
        first call; the snapshot thread only)."""
        ready = getattr(self.threads, "ready", None)
        if ready is None:
            ready = self.threads.ready = thread_local_capture_mode()
        return ready


def thread_local_capture_mode() -> bool:
    """Put the calling thread in CUDA's thread-local stream capture mode, through the CUDA
    runtime library torch loaded; False where there is none to reach."""
    path = loaded_library("/libcudart.so")
    if path is None:
        return False
    try:
        mode = ctypes.c_int(THREAD_LOCAL_CAPTURE)
        return ctypes.CDLL(path).cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
    except (OSError, AttributeError):
        return False


def loaded_library(name: str) -> Optional[str]:
    """The path of a shared library this process has loaded whose path holds ``name``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if name in path and path.startswith("/"):
                    return path
    except OSError:
        return None
    return None


def where(gpu: Any, before: Points, after: Points) -> str:
    """``done``, ``running`` or ``queued``: how far the GPU got with one collective (raises
    where CUDA cannot say)."""
    if gpu.reached(after):
        return "done"
    return "running" if gpu.reached(before) else "queued"
