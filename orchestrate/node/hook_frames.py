"""Which frames of a worker's stack are the start-up hook's own (this package, and runpy, which
runs the script), not the script's: left out where the user is shown their stack (the snapshots,
a traceback, the debugger's ``where``). Standard library only."""
from __future__ import annotations

import os
from typing import Tuple

# This package, where the hook runs it from (in the nodes: the project's mount).
HOOK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_hook_file(filename: str, hook_dirs: Tuple[str, ...] = (HOOK_DIR,)) -> bool:
    """Whether a frame's file is the hook's (this package: the start-up hook, the recorder's
    wrappers) or runpy's, which runs the script: not the script's own."""
    return filename.startswith(hook_dirs) or filename.endswith("/runpy.py") or filename == "<frozen runpy>"
