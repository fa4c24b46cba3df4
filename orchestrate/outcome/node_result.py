"""One node's end, as the supervisor records it and the judge reads it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from orchestrate.outcome.preemption import Preemption
from orchestrate.outcome.root_cause import AttemptError, EarlierFailure, RootCause
from orchestrate.outcome.states import NodePhase
from orchestrate.plan.model import NodePlan


@dataclass
class NodeResult:
    """The end of one node's torchrun.

    Attributes:
        node: The node's plan.
        state: Where it is; a final phase once it ended (CREATED: never started).
        exit_code: torchrun's exit status, the container's (None while it runs).
        wall_s: Seconds from its launch to its end.
        ended_at: Monotonic time it ended (orders failures).
        root_cause: What torchrun reported as its first failure (with its error file).
        last_lines: The last output lines of the failing worker (or of the node).
        fault: The fault injected into this node, if any (while it lasts).
        lost: The ``lose`` fault that took this node for good, if one did: nothing brings it
            back, and an elastic job goes on without it.
        went_on_without: For a lost node: the nodes left resumed training without it (a step
            came after their resume), so a later failure of theirs is no consequence of the loss.
        culprit_rank: The global rank that explains this node's end when one worker does: the
            one a fault aimed at, or one found stopped (hung).
        unresponsive: Why the node could not answer its peers when the job failed, if so.
        oom_kills: Processes the kernel OOM-killed in the node (its memory limit was reached).
        oom_reported: Whether the OOM kill was announced already.
        killed_by_launcher: The launcher ended it (after another node failed, or on Ctrl-C).
        stopped_by_request: A stop asked of the run ended it (Ctrl-C or SIGTERM to the launcher,
            ``stop RUN``, ``down RUN``), not an ending the launcher had begun (a failure's, a hang's).
        grace_ran_out: Its stop's grace ran out before it ended, so a SIGKILL ended it.
        no_grace: Its stop gave it no grace (0 s: ``stop RUN --timeout 0``, whose SIGKILL came with
            the SIGTERM, or the launcher's own stop under ``--stop-grace 0``, which sends no SIGTERM).
        still_running: What still ran in it a moment before that SIGKILL, where it was listed.
        oom_events: The engine's ``oom`` events of it.
        oom_in_state: Its container's state says it was OOM-killed.
        consequence: What its death did to the whole job, where that ends it (it held the
            rendezvous store, and only it was restarted).
        finished_ranks: Its ranks whose script returned (or exited 0), each with the highest
            step it had reported (None: none), as the workers said on the progress channel, before
            any node ended (a rank that returned after a peer's end or a stop is not among them).
        steps_reached: Its ranks' highest step, each by its latest worker process that reported
            one, as the workers said on the progress channel (ranks that reported none left out; in
            an elastic job, the ranks whose processes said they ran on it): where an OOM kill came.
        returned_ranks: Its ranks whose script returned (or exited 0) at any time of the run, as
            the workers said: a node whose ranks all had, and whose torchrun outlived its grace,
            waited at its exit barrier.
        earlier: Where its failure is a consequence (a lost peer, a lost rendezvous store) or
            has no worker's cause: the newest earlier worker of it whose error was its own, from
            torchrun's log of each attempt (restarts hide what made them restart).
        attempts: For a failed node, or one whose workers torchrun restarted, the error each
            attempt of its workers ended in, the oldest first (torchrun restarts them in place
            under --max-restarts).
        restarts_in_place: How many times its torchruns restarted its workers in place (a worker
            failed, and restarts were left): a job that succeeded after one is said to.
        preemption: For a node a ``preempt`` fault hit: how each of its ranks met the SIGTERM
            (exited 0, how soon, what it wrote after it), as the workers said on the progress
            channel.
    """

    node: NodePlan
    state: NodePhase = NodePhase.CREATED
    exit_code: Optional[int] = None
    wall_s: float = 0.0
    ended_at: float = 0.0
    root_cause: Optional[RootCause] = None
    last_lines: list[str] = field(default_factory=list)
    fault: str = ""
    lost: str = ""
    went_on_without: bool = False
    culprit_rank: Optional[int] = None
    unresponsive: str = ""
    oom_kills: int = 0
    oom_reported: bool = False
    killed_by_launcher: bool = False
    stopped_by_request: bool = False
    grace_ran_out: bool = False
    no_grace: bool = False
    still_running: list[str] = field(default_factory=list)
    oom_events: int = 0
    oom_in_state: bool = False
    consequence: str = ""
    finished_ranks: dict[int, Optional[int]] = field(default_factory=dict)
    steps_reached: dict[int, int] = field(default_factory=dict)
    returned_ranks: tuple[int, ...] = ()
    earlier: Optional[EarlierFailure] = None
    attempts: list[AttemptError] = field(default_factory=list)
    restarts_in_place: int = 0
    preemption: Optional[Preemption] = None

    def after_step_of_oom(self) -> str:
        """Where in the training its OOM kill came, as " after step N" ("" where no rank of it
        reported a step): its failed rank's latest step, else the latest of its ranks'. The one
        wording of the live line (``node1 was OOM-killed: ...``) and the verdict's."""
        cause = self.root_cause
        step = self.steps_reached.get(cause.rank) if cause is not None and cause.rank is not None else None
        step = step if step is not None else max(self.steps_reached.values(), default=None)
        return f" after step {step}" if step is not None else ""

    def note_oom(self, *, event: bool = False, in_state: bool = False, counted: int = 0) -> None:
        """Learn of OOM kills, in whatever order the news comes: an engine ``oom`` event (one
        kill), the container's ``OOMKilled`` flag (at least one), the cgroup's counter."""
        self.oom_events += int(event)
        self.oom_in_state = self.oom_in_state or in_state
        self.oom_kills = max(self.oom_kills, self.oom_events, int(self.oom_in_state), counted)
