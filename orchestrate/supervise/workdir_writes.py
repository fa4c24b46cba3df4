"""The files a job writes in its work directory, followed from the host: every file created or
changed since the run began, with the time it was first seen so (its modification time), and
whether it was still there at the last walk (a temporary file a save renames is not).

The directory is walked every few seconds, and once more when a fault fires, so a fault knows
whether the job had saved anything before it. The walk leaves out hidden directories, caches
and the runs directory, and gives up on a directory of more than :data:`MAX_ENTRIES` entries
(then nothing is said of its writes). It slows down on a large directory: it spends at most
about 5% of the time walking.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from orchestrate.outcome.model import DCP_METADATA, WrittenFile

MAX_ENTRIES = 20000
POLL_S = 2.0
SKIPPED_DIRS = ("__pycache__", "node_modules")


class WorkdirWrites:
    """Follows the writes under ``root`` since ``since`` (epoch time); ``skip``: directories
    left out (the runs directory); ``began``: when the job began, where that was before ``since``
    (an attach's; default ``since``): the files older than it were there before the run."""

    def __init__(self, root: Path, since: float, skip: Iterable[Path] = (),
                 clock: Callable[[], float] = time.monotonic, began: Optional[float] = None) -> None:
        self.root = root
        self.since = since
        self.began = since if began is None else min(began, since)
        self.skip = {os.path.realpath(p) for p in skip}
        self.clock = clock
        self.seen: dict[str, float] = {}  # every file's modification time at the last walk
        self.written: dict[str, WrittenFile] = {}
        self.present: set[str] = set()  # the files there at the last whole walk
        self.held_at_start: Optional[set[str]] = None  # those the first whole walk found from before the run
        self.followed = root.is_dir()
        self.next_at = 0.0

    def poll(self, now: float) -> None:
        """Walk the directory when the time has come."""
        if self.followed and now >= self.next_at:
            self.walk()

    def walk(self) -> None:
        """Take in what changed since the last walk."""
        if not self.followed:
            return
        began = self.clock()
        entries = 0
        present = set()
        for directory, names, files in os.walk(self.root):
            names[:] = [n for n in names if not n.startswith(".") and n not in SKIPPED_DIRS
                        and os.path.realpath(os.path.join(directory, n)) not in self.skip]
            entries += len(names) + len(files)
            if entries > MAX_ENTRIES:
                self.followed = False
                self.written.clear()
                return
            for name in files:
                path = os.path.join(directory, name)
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:  # gone meanwhile
                    continue
                relative = os.path.relpath(path, self.root)
                present.add(relative)
                if mtime >= self.since and relative not in self.written:
                    self.written[relative] = WrittenFile(relative, mtime)
                self.seen[relative] = mtime
        self.present = present
        if self.held_at_start is None:
            self.held_at_start = {path for path in present if self.seen[path] < self.began}
        spent = self.clock() - began
        self.next_at = self.clock() + max(POLL_S, 20 * spent)

    def latest(self) -> Optional[str]:
        """The file written last: the newest modification among those written (None: none, or
        not followed)."""
        if not self.followed or not self.written:
            return None
        return max(self.written, key=lambda path: self.seen.get(path, 0.0))

    def held_when_loaded(self, loads: Mapping[str, float]) -> tuple[str, ...]:
        """The files among ``loads`` (each path loaded, relative to the directory, with the epoch
        time it was first loaded) that the directory held when the run began and the run had not
        written again before that load: an earlier run's saves, or files of the user's own. A
        checkpoint directory DCP loaded is one whose ``.metadata`` it held so (DCP writes it last),
        named with a slash at its end (``ckpt/step_9/``). () where the directory was not followed."""
        if not self.followed or not self.held_at_start:
            return ()
        held = {os.path.normpath(path) for path in self.held_at_start}
        written = {os.path.normpath(w.path): w.time for w in self.written.values()}
        found = []
        for path, at in ((os.path.normpath(p), t) for p, t in loads.items()):
            metadata = os.path.join(path, DCP_METADATA)
            if path in held and written.get(path, float("inf")) > at:
                found.append(path)
            elif metadata in held and written.get(metadata, float("inf")) > at:
                found.append(path + "/")
        return tuple(sorted(found))

    def files(self) -> Optional[list[WrittenFile]]:
        """Every file written, the first first, each saying whether it was there at the last walk
        (None: the directory was not followed)."""
        if not self.followed:
            return None
        return [WrittenFile(w.path, w.time, w.path in self.present)
                for w in sorted(self.written.values(), key=lambda w: w.time)]
