"""Progress bars in the workers' output (pure): how often the console shows a bar's redraws.

tqdm (and what is built on it: Lightning's, Hugging Face's and Accelerate's bars) redraws its
bar in place, with "\\r", up to ten times a second. torchrun's ``--tee`` copies a worker's output
file line by line in Python's universal-newline mode, which reads each "\\r" as a line end; so
every redraw reaches the console as a line of its own: a 1,000-step epoch on 8 ranks is 8,000
lines, and the job's own lines scroll away between them.

Without ``-v`` the console shows of each bar (one rank's, one description) its first redraw,
one every :data:`BAR_EVERY_S` seconds of the bar's own clock (the elapsed time tqdm prints), and
its last (n == total, once); the newest of the others is shown where the node's output ends, so
a rank that stopped mid-bar shows where it stopped. The node logs keep every redraw.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Generic, Hashable, Optional, TypeVar

Line = TypeVar("Line")  # what the caller shows: a worker's output line

BAR_EVERY_S = 10.0  # a rank's bar on the console at most this often, by the bar's own clock

_COUNT = r"[\d.]+[kMGTPEZY]?"
_ELAPSED = r"\d+(?::\d\d)+"
_RATE = r" *(?:[\d.]+[kMGTPEZY]?|\?)\S*/\S+"  # "  9.42it/s", "1.20s/it", "?it/s", "3.1kimg/s"
# tqdm's default meter, with a total: "epoch 0:  45%|████▌     | 68/150 [00:07<00:08,  9.42it/s]"
_WITH_TOTAL = re.compile(rf"^(?P<desc>.*?)\s*\d+%\|[^|]*\| *(?P<n>{_COUNT})/(?P<total>{_COUNT}) "
                         rf"\[(?P<elapsed>{_ELAPSED})<[\d:?]+,{_RATE}.*\]\s*$")
# and without one (an iterable of unknown length): "val: 12it [00:01,  9.50it/s]"
_WITHOUT_TOTAL = re.compile(rf"^(?P<desc>.*?)\s*(?P<n>{_COUNT})[^\s\[\]]* \[(?P<elapsed>{_ELAPSED}),{_RATE}.*\]\s*$")
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}


@dataclass(frozen=True)
class Redraw:
    """One redraw of a tqdm bar, as far as the console needs it."""

    desc: str
    n: float
    total: Optional[float]
    elapsed_s: float

    @property
    def finished(self) -> bool:
        return self.total is not None and self.n >= self.total


def parse_redraw(text: str) -> Optional[Redraw]:
    """The redraw a worker line is, or None for any other line."""
    match = _WITH_TOTAL.match(text) or _WITHOUT_TOTAL.match(text)
    if not match:
        return None
    total = match.groupdict().get("total")
    return Redraw(match.group("desc").rstrip(":").strip(), _count(match.group("n")),
                  _count(total) if total is not None else None, _seconds(match.group("elapsed")))


def _count(text: str) -> float:
    return float(text[:-1]) * _SCALE[text[-1]] if text[-1] in _SCALE else float(text)


def _seconds(elapsed: str) -> float:
    seconds = 0.0
    for part in elapsed.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


@dataclass
class _Bar(Generic[Line]):
    shown: Redraw  # the last redraw shown
    latest: Redraw  # the last redraw seen
    held: Optional[Line] = None  # the newest redraw not shown, if newer than ``shown``
    finish_shown: bool = False


class BarThrottle(Generic[Line]):
    """Decides which redraws of the workers' bars the console shows (see the module's text)."""

    def __init__(self, every_s: float = BAR_EVERY_S, bars_per_rank: int = 8) -> None:
        self.every_s = every_s
        self.bars_per_rank = bars_per_rank  # nested bars are few; older ones are forgotten
        self.bars: dict[tuple[str, Hashable, str], _Bar[Line]] = {}

    def shown(self, node: str, rank: Hashable, line: Line, redraw: Redraw) -> list[Line]:
        """The lines to show for ``line``, the redraw of a bar of ``rank`` on ``node``: none for
        now, or it, after the last redraw held back of the bar it replaces."""
        key = (node, rank, redraw.desc)
        bar = self.bars.get(key)
        if bar is None or redraw.n < bar.latest.n or redraw.elapsed_s < bar.latest.elapsed_s:
            before = self._forget(key) if bar is not None else self._make_room(node, rank)
            self.bars[key] = _Bar(redraw, redraw, finish_shown=redraw.finished)  # a new bar, or the same again
            return [*before, line]
        bar.latest = redraw
        if redraw.finished:
            show = not bar.finish_shown
            bar.finish_shown = True
        else:
            show = redraw.elapsed_s - bar.shown.elapsed_s >= self.every_s
        if show:
            bar.shown, bar.held = redraw, None
            return [line]
        if not bar.finish_shown:
            bar.held = line
        return []

    def flush(self, node: str) -> list[Line]:
        """The node's output ended: the newest redraw of each of its bars, where not shown."""
        return [line for key in [key for key in self.bars if key[0] == node] for line in self._forget(key)]

    def _forget(self, key: tuple[str, Hashable, str]) -> list[Line]:
        held = self.bars.pop(key).held
        return [held] if held is not None else []

    def _make_room(self, node: str, rank: Hashable) -> list[Line]:
        keys = [key for key in self.bars if key[:2] == (node, rank)]
        return self._forget(keys[0]) if len(keys) >= self.bars_per_rank else []
