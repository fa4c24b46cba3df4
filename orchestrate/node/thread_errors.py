"""The threads of a worker that ended with an error. Python prints such a thread's traceback
(``threading.excepthook``) and the rest of the process goes on: a main thread that waits for it
(for a queue it was to fill, its join, a lock it held) waits for ever, and the traceback is long
scrolled past when the hang is looked at. The worker's snapshots say each such thread: its name,
its error's first line, and its traceback's frames, for the innermost of the user's code.

Standard library only.
"""
from __future__ import annotations

import collections
import threading
import traceback
from typing import Any, Callable, Deque, Dict, List

from orchestrate.node.hook_frames import is_hook_file

# The last threads kept (a thread started per batch that fails each time would be many).
KEPT = 8
# The innermost frames kept of each one's traceback.
FRAMES_KEPT = 20


def error_line(exc_type: Any, exc_value: Any) -> str:
    """``ValueError: corrupt record 5``: the error's class and the first line of its message."""
    message = str(exc_value).strip().splitlines() if exc_value is not None else []
    name = getattr(exc_type, "__name__", str(exc_type))
    return f"{name}: {message[0]}" if message else name


class ThreadErrors:
    """The threads of this process that ended with an error, oldest first."""

    def __init__(self, relative: Callable[[str], str]) -> None:
        self.relative = relative
        self.ended: Deque[Dict[str, Any]] = collections.deque(maxlen=KEPT)

    def record(self, args: Any) -> None:
        """Keep what ``threading.excepthook`` got (not a SystemExit, which ends a thread quietly)."""
        if args.exc_type is None or issubclass(args.exc_type, SystemExit):
            return
        entries = traceback.extract_tb(args.exc_traceback) if args.exc_traceback is not None else []
        frames = [[self.relative(entry.filename), entry.lineno, entry.name, (entry.line or "").strip()]
                  for entry in entries if not is_hook_file(entry.filename)][-FRAMES_KEPT:]
        name = args.thread.name if args.thread is not None else "?"
        self.ended.append({"thread": name, "error": error_line(args.exc_type, args.exc_value), "frames": frames})

    def snapshot(self) -> List[Dict[str, Any]]:
        return list(self.ended)


def install(errors: ThreadErrors) -> None:
    """Keep every thread's uncaught error in ``errors``, then let the hook that was there (Python's,
    which prints the traceback, or the script's own) do what it does."""
    original = threading.excepthook

    def excepthook(args: Any) -> None:
        try:
            errors.record(args)
        except Exception:  # never in the way of the traceback's printing
            pass
        original(args)

    threading.excepthook = excepthook
