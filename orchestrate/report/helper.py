"""A helper process that writes a run's report page, so that the launcher does not pay for it.

The page was drawn with matplotlib, whose import cost about 0.4 s of CPU and the drawing about
0.1 s more; in the launcher, that CPU came out of the run: at its end, or, imported while the
run went on, out of the workers' own share of a small machine. The page is now drawn by our
own SVG writer (:mod:`orchestrate.report.svg`): this whole process, Python's start included,
costs about 0.05 s of CPU (0.44-0.56 s with matplotlib; medians of 5 on three recorded runs),
of which drawing a 2-node run's page is about 2 ms (a synthetic 8 nodes x 8 ranks x 200
steps: about 0.05 s). The launcher imports the page's module anyway (to write the page itself
should the helper fail), so the helper now saves it only the drawing, at the cost of a process
of its own; it is kept as it was for now. A foreground launcher starts it first thing:

1. The helper imports the report's modules at once, on a core that the launcher's own start
   (the engine's questions, then ``docker compose up``) leaves idle.
2. It waits for one line on its stdin: the run directory, once the run has ended.
3. It writes that run's report while the launcher removes the nodes, prints ``written`` or
   ``failed``, and exits.

It runs in a session of its own, so that Ctrl-C or a hang-up at the terminal reaches only the
launcher, whose part it is to stop the run. A launcher that has no page for it (the run failed
to start) kills it; a launcher that is gone, even SIGKILLed, closes its end of the pipe, and
the helper exits on that EOF.
"""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import IO, Optional

log = logging.getLogger(__name__)

WRITTEN, FAILED = "written", "failed"


class ReportHelper:
    """The launcher's side: start the helper, hand it the run, wait for the page."""

    def __init__(self, proc: Optional[subprocess.Popen]) -> None:
        self.proc = proc
        self.requested = False

    @classmethod
    def start(cls) -> "ReportHelper":
        """Start the helper; one that cannot start leaves the launcher to write the page itself."""
        try:
            proc = subprocess.Popen([sys.executable, "-m", "orchestrate.report.helper"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)  # what goes wrong, the launcher redoes
        except OSError as exc:
            log.debug("report helper: %s", exc)
            proc = None
        return cls(proc)

    def request(self, run_dir: Path) -> bool:
        """Ask for ``run_dir``'s report; False when the helper cannot take it."""
        if self.proc is None or self.requested or self.proc.poll() is not None:
            return False
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(f"{run_dir.resolve()}\n")
            self.proc.stdin.close()
        except (OSError, ValueError) as exc:  # it died meanwhile
            log.debug("report helper: %s", exc)
            return False
        self.requested = True
        return True

    def wait(self, timeout_s: float = 120.0) -> bool:
        """Wait for the requested page, through Ctrl-C; True when it was written."""
        if self.proc is None or not self.requested:
            return False
        assert self.proc.stdout is not None
        while True:
            try:
                self.proc.wait(timeout=timeout_s)
                break
            except KeyboardInterrupt:  # the page is a fraction of a second away
                continue
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return False
        try:
            return self.proc.stdout.read().strip() == WRITTEN  # a word: it fits in the pipe
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """End the helper: at once when it was never asked for a page (a run that failed to
        start should not wait for an import), else once the page is written."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            if not self.requested:
                self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> "ReportHelper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(stdin: IO[str], stdout: IO[str]) -> int:
    """The helper's side (see the module's text)."""
    from orchestrate.report.page import write_report_quietly  # step 1: the import, before the run ends

    line = stdin.readline().strip()
    if not line:
        return 0
    stdout.write((WRITTEN if write_report_quietly(Path(line)) is not None else FAILED) + "\n")
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin, sys.stdout))
