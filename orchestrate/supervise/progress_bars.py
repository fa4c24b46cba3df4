"""Progress bars in the workers' output (pure): how often the console shows a bar's redraws.

tqdm (and what is built on it: Lightning's, Hugging Face's and Accelerate's bars) redraws its
bar in place, with "\\r", up to ten times a second. torchrun's ``--tee`` copies a worker's output
file line by line in Python's universal-newline mode, which reads each "\\r" as a line end; so
every redraw reaches the console as a line of its own: a 1,000-step epoch on 8 ranks is 8,000
lines, and the job's own lines scroll away between them.

Without ``-v`` the console shows of each bar (one rank's, one description, which may change its
numbers as the bar goes on) its first redraw, one every :data:`BAR_EVERY_S` seconds of the bar's
own clock (the elapsed time tqdm prints), and its last (n == total, once); the newest of the
others is shown where the node's output ends, so a rank that stopped mid-bar shows where it
stopped. The node logs keep every redraw.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Generic, Hashable, Optional, TypeVar

Line = TypeVar("Line")  # what the caller shows: a worker's output line

BAR_EVERY_S = 10.0  # a rank's bar on the console at most this often, by the bar's own clock

LONGEST_BAR = 400  # characters: tqdm fits a bar to a terminal; a longer line is the job's own

_COUNT = r"\d+(?:\.\d+)?[kMGTPEZY]?"
_ELAPSED = r"\d+(?::\d\d)+"
# tqdm's rate: "  9.42it/s", "3.1kimg/s", "400.00 examples/s" (a unit with a space), "?it/s", "2.30s/it"
_RATE = rf"(?:(?:{_COUNT}|\?) ?[^\s,\]]*/s|\d+(?:\.\d+)?s/ ?[^\s,\]]+)"
# Its statistics end the line: " [00:07<00:08,  9.42it/s]", " [00:01,  9.50it/s, loss=0.3]".
_STATS = re.compile(rf" \[(?P<elapsed>{_ELAPSED})(?:<(?:{_ELAPSED}|\?))?, *{_RATE}(?:,.*)?\]$")
# Before them, with a total: "epoch 0:  45%|████▌     | 68/150"
_WITH_TOTAL = re.compile(rf"\d{{1,3}}%\|[^|]*\| *(?P<n>{_COUNT})/(?P<total>{_COUNT})$")
# or without one (an iterable of unknown length): "val: 12it", "Map: 200 examples"
_WITHOUT_TOTAL = re.compile(rf"(?:^|(?<=\s))(?P<n>{_COUNT}) ?[^\s\d.\[\]|]*$")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
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

    @property
    def bar(self) -> str:
        """Which bar this is of its rank's: its description with the numbers left out, as a
        description may change at every step (``set_description(f"loss {loss:.3f}")``)."""
        return _NUMBER.sub("#", self.desc)


def parse_redraw(text: str) -> Optional[Redraw]:
    """The redraw a worker line is (tqdm's default meter), or None for any other line."""
    text = text.rstrip()
    if len(text) > LONGEST_BAR or not text.endswith("]"):
        return None
    return _parse(text)


def continues(before: Redraw, after: Redraw) -> bool:
    """Whether ``after``, drawn right after ``before`` by the same rank, redraws its bar: the
    same description, or one whose numbers changed while its total stayed and its count and
    clock went on (two bars at once, a file each, differ in their totals)."""
    return before.desc == after.desc or (before.bar == after.bar and before.total == after.total
                                         and after.n >= before.n and after.elapsed_s >= before.elapsed_s)


@lru_cache(maxsize=1024)  # a line is read by the rank's last lines, and again by the console
def _parse(text: str) -> Optional[Redraw]:
    stats = _STATS.search(text)
    if stats is None:
        return None
    head = text[:stats.start()]
    counted = _WITH_TOTAL.search(head) or _WITHOUT_TOTAL.search(head)
    if counted is None:
        return None
    total = counted.groupdict().get("total")
    return Redraw(head[:counted.start()].strip().rstrip(":").strip(), _count(counted.group("n")),
                  _count(total) if total is not None else None, _seconds(stats.group("elapsed")))


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
        self.last_drawn: dict[tuple[str, Hashable], str] = {}  # the description each rank drew last

    def shown(self, node: str, rank: Hashable, line: Line, redraw: Redraw) -> list[Line]:
        """The lines to show for ``line``, the redraw of a bar of ``rank`` on ``node``: none for
        now, or it, after the last redraw held back of the bar it replaces."""
        key = (node, rank, redraw.desc)
        last_key = (node, rank, self.last_drawn.get((node, rank), ""))
        last_bar = self.bars.get(last_key)
        if key not in self.bars and last_bar is not None and not last_bar.finish_shown \
                and continues(last_bar.latest, redraw):  # a description whose numbers changed goes on with its bar
            self.bars[key] = self.bars.pop(last_key)
        self.last_drawn[(node, rank)] = redraw.desc
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
        self.last_drawn = {rank: desc for rank, desc in self.last_drawn.items() if rank[0] != node}
        return [line for key in [key for key in self.bars if key[0] == node] for line in self._forget(key)]

    def _forget(self, key: tuple[str, Hashable, str]) -> list[Line]:
        held = self.bars.pop(key).held
        return [held] if held is not None else []

    def _make_room(self, node: str, rank: Hashable) -> list[Line]:
        keys = [key for key in self.bars if key[:2] == (node, rank)]
        return self._forget(keys[0]) if len(keys) >= self.bars_per_rank else []
