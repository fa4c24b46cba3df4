"""Does the collective record's snapshot thread leave a CUDA graph capture alone? On one GPU.

    python3 -m benchmarks.gpu_capture      # prints one line per case; exit 1 if the record disturbed a capture

The record (``orchestrate/node/gpu_marks.py``) asks the GPU from its snapshot thread whether the
work queued before and after a collective is done. In CUDA's default (global) capture mode, a
question asked from any thread while another thread captures a graph is "potentially unsafe":
it is refused, and the capture is invalidated. So the record puts its thread in thread-local
mode first, and never places a point on a stream being captured. Each case below captures a
graph (``torch.cuda.graph``, global mode, as a user's script does) on the main thread, and while
the capture is open runs a question from a second thread, joined before the capture ends, so the
two always overlap:

- ``record``: the record's own question, ``gpu_marks.where`` after ``CudaMarks.ready_here()``,
  as the snapshot thread asks it. The capture must succeed, and the answer must be one of
  ``queued``, ``running`` or ``done``;
- ``place``: ``CudaMarks.place`` on the capturing thread: it must place nothing (None), and the
  capture must succeed;
- ``control`` (last): plain ``torch.cuda.Event.query()`` from a thread in the default mode. It
  shows whether the hazard is real on this GPU and torch (the capture should fail), so that the
  ``record`` case could have failed.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from orchestrate.node import gpu_marks  # noqa: E402


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def capture_around(during: Callable[[], str]) -> tuple[str, str]:
    """Capture a small graph on this thread, calling ``during`` while the capture is open; return
    (the capture's outcome, what ``during`` said or raised)."""
    said = "(not called)"
    static = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = static * 2
            said = told(during)
            out = out + 1
        graph.replay()
        torch.cuda.synchronize()
        outcome = "captured" if bool((out == 3).all()) else f"captured, wrong result {out[0].item()}"
    except Exception as error:  # the capture failed: what a user's script would have seen
        outcome = "capture failed: " + first_line(error)
        try:
            torch.cuda.synchronize()
        except Exception:  # the failure's own error, said above
            pass
    return outcome, said


def told(call: Callable[[], str]) -> str:
    """What ``call`` answered, or what it raised."""
    try:
        return call()
    except Exception as error:  # what the caller was told, to print
        return "raised " + first_line(error)


def on_another_thread(ask: Callable[[], str]) -> Callable[[], str]:
    """``ask``, run on a thread of its own and joined: the capture stays open while it runs."""
    def run() -> str:
        answer = ["(no answer in 30 s)"]
        thread = threading.Thread(target=lambda: answer.__setitem__(0, told(ask)))
        thread.start()
        thread.join(timeout=30)
        return answer[0]
    return run


def points_around_work(marks: gpu_marks.CudaMarks):
    """Points before and after a stretch of GPU work. The capture starts from a synchronised
    device, so the GPU has passed them when they are asked about: what counts is that the
    question is asked of the GPU (``Event.query``) while the capture is open."""
    big = torch.randn(4096, 4096, device="cuda")
    before = marks.place([big.device])
    for _ in range(30):
        big = (big @ big).clamp_(-1, 1)
    after = marks.place([big.device])
    return before, after


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_capture: no CUDA device here", file=sys.stderr)
        return 2
    marks = gpu_marks.CudaMarks()
    before, after = points_around_work(marks)

    def record_question() -> str:
        if not marks.ready_here():
            return "not ready: thread-local capture mode could not be set"
        return gpu_marks.where(marks, before, after)

    results = {
        "record": capture_around(on_another_thread(record_question)),
        "place": capture_around(lambda: f"place() -> {marks.place([torch.device('cuda', 0)])!r}"),
    }
    _, after = points_around_work(marks)  # last: a failed capture must not disturb the cases that count
    results["control"] = capture_around(on_another_thread(lambda: f"query() -> {after[0][1].query()}"))

    passed = {
        "record": results["record"][0] == "captured" and results["record"][1] in ("queued", "running", "done"),
        "place": results["place"] == ("captured", "place() -> None"),
        "control": True,  # shows whether the record's case could fail, either way
    }
    for case, (outcome, answer) in results.items():
        print(f"{'PASS' if passed[case] else 'FAIL'} {case:<8} {outcome}; the other call: {answer}", flush=True)
    shown = results["control"][0] != "captured"
    print("gpu_capture: the control " + ("shows the hazard: a default-mode question fails the capture" if shown
                                          else "did not fail: the hazard is not shown here"), flush=True)
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
