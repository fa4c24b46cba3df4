"""The foreground launcher's lease on its nodes: a heartbeat file they watch."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 2.0


class Heartbeat:
    """The foreground launcher's lease on its nodes: a file rewritten every few seconds.

    The nodes (``orchestrate/node/main.py --lease``) stop themselves when it stops changing.
    """

    def __init__(self, path: Path, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self.beats = 0
        self.stopped = threading.Event()

    def beat(self) -> None:
        self.beats += 1
        self.path.write_text(f"{self.beats} {time.time():.3f}\n")

    def start(self) -> "Heartbeat":
        self.beat()
        threading.Thread(target=self._run, name="heartbeat", daemon=True).start()
        return self

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.beat()
            except OSError as exc:  # the run directory went away
                log.debug("heartbeat: %s", exc)

    def stop(self) -> None:
        self.stopped.set()
