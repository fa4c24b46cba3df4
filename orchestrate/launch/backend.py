"""What a scheduler gives the :class:`~orchestrate.launch.run.Run`: the backend interface.

The ``Run`` owns a run's life (its directory, the heartbeat, ``docker compose up`` and ``down``,
the record) and drives a backend through these methods only, in this order: ``bring_up_line``
and ``render`` before the project is up; ``wait_ready`` and ``ready_lines`` once it is; then
``follow`` to the end, or ``wind_down`` after an interrupt, or ``partial_result`` when the run
failed before it could be followed. :class:`~orchestrate.launch.compose_backend.ComposeBackend`
(torchrun in every node) and :class:`~orchestrate.slurm.backend.SlurmBackend` (a Slurm job)
implement it; a unit test holds both to it, signatures included.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol, runtime_checkable

from orchestrate.outcome.model import RunResult


@runtime_checkable
class Backend(Protocol):
    """A scheduler, as the ``Run`` drives it (see the module's text)."""

    def bring_up_line(self) -> str:
        """What the launcher says as it brings the nodes up."""
        ...

    def render(self, run_dir: Path) -> Path:
        """Write the Compose project into ``run_dir``; return its file."""
        ...

    def wait_ready(self) -> None:
        """Wait until the nodes can run the job (raises NodesNotReadyError when they cannot)."""
        ...

    def ready_lines(self, bring_up_s: float) -> list[str]:
        """What the launcher says once the nodes are up."""
        ...

    def follow(self, timeout_s: Optional[float] = None) -> RunResult:
        """Follow the job to its end (or ``timeout_s``) and judge it; KeyboardInterrupt
        propagates."""
        ...

    def wind_down(self, grace_s: float, stopped_by: str = "") -> RunResult:
        """After an interrupt: stop the job (SIGTERM, SIGKILL after ``grace_s``) and judge it;
        ``stopped_by``: who stopped it, as a follower in another terminal says it."""
        ...

    def partial_result(self) -> RunResult:
        """The result of a run that failed before it could be followed."""
        ...
