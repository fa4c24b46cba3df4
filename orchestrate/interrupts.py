"""Steps that an interrupt must not leave half done (a teardown, a record, killing nodes)."""
from __future__ import annotations

from typing import Any, Callable


def uninterrupted(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``step`` to its end: an interrupt during it (a second Ctrl-C) is set aside and the
    step runs again, so that a teardown or a record is never left half done."""
    while True:
        try:
            return step(*args, **kwargs)
        except KeyboardInterrupt:
            continue
