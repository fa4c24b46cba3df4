"""The life of one node, as an explicit state machine (like torchrun's ``WorkerState``).

::

    CREATED --start--> STARTING --first worker line--> RUNNING --exit 0--> SUCCEEDED
                          |                                |  \\--exit != 0--> FAILED
                          |                                \\--killed by the launcher--> STOPPED
                          \\--(any of the endings above, before a worker spoke)
    STARTING/RUNNING --a node died, elastic restarts left--> RESTARTING --start--> STARTING

SUCCEEDED, FAILED, STOPPED, ORPHANED (its launcher vanished and the node stopped itself) and
LOST (a ``lose`` fault took it for good, and an elastic job goes on without it) are final.
Every change goes through :func:`advance`, which refuses the others.
"""
from __future__ import annotations

from enum import Enum

from orchestrate.errors import OrchestrateError


class NodePhase(str, Enum):
    """Where one node is."""

    CREATED = "created"  # its container exists, torchrun has not started
    STARTING = "starting"  # torchrun is up, in rendezvous; no worker has spoken yet
    RUNNING = "running"  # workers are running
    RESTARTING = "restarting"  # the launcher is restarting it (elastic recovery)
    SUCCEEDED = "succeeded"  # torchrun exited 0
    FAILED = "failed"  # torchrun exited non-zero by itself
    STOPPED = "stopped"  # the launcher or the user stopped it
    ORPHANED = "orphaned"  # its launcher vanished, so it stopped itself
    LOST = "lost"  # a fault took it for good (``lose``): the job goes on without it

    @property
    def final(self) -> bool:
        return self in FINAL_PHASES


FINAL_PHASES = frozenset({NodePhase.SUCCEEDED, NodePhase.FAILED, NodePhase.STOPPED, NodePhase.ORPHANED,
                          NodePhase.LOST})
_ENDINGS = frozenset(FINAL_PHASES)
TRANSITIONS: dict[NodePhase, frozenset[NodePhase]] = {
    NodePhase.CREATED: frozenset({NodePhase.STARTING}) | _ENDINGS,
    NodePhase.STARTING: frozenset({NodePhase.RUNNING, NodePhase.RESTARTING}) | _ENDINGS,
    NodePhase.RUNNING: frozenset({NodePhase.RESTARTING}) | _ENDINGS,
    NodePhase.RESTARTING: frozenset({NodePhase.STARTING}) | _ENDINGS,
    **{phase: frozenset() for phase in FINAL_PHASES},
}


class IllegalTransition(OrchestrateError):
    """Raised when a node is asked to move between phases the machine does not connect."""


def advance(current: NodePhase, new: NodePhase) -> NodePhase:
    """Return ``new`` if a node may go there from ``current`` (staying put is allowed).

    Raises:
        IllegalTransition: Naming both phases.
    """
    if new is current or new in TRANSITIONS[current]:
        return new
    raise IllegalTransition(f"a node cannot go from {current.value} to {new.value}")
