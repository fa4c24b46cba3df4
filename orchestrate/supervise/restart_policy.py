"""Elastic recovery: which node deaths an elastic job recovers from, and the restart that lets
the dead node rejoin."""
from __future__ import annotations

from typing import Callable, Optional

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from orchestrate.config.fault_spec import FaultAction, FaultSpec
from orchestrate.engine.client import engine_time
from orchestrate.engine.errors import EngineFault, classify, engine_errors
from orchestrate.outcome.model import DEATH, Recovery, anew_fields
from orchestrate.outcome.states import NodePhase
from orchestrate.supervise.api import OUTLIVE_A_RESTART, NodeTracker, action_of

# What the death of the node whose torchrun agent served the c10d rendezvous store does to the job.
STORE_WENT = ("held the c10d rendezvous store (its torchrun agent served it): every other node's agent lost the"
              " rendezvous with it, as on a real cluster")
# How often, and how far apart, a restarted container's new start is asked for where the engine
# does not answer at once.
START_LOOKS, START_LOOK_RETRY_S = 3, 0.2
# Exit codes of a node that was killed or stopped from outside, not one whose job failed.
DEATH_EXIT_CODES = (None, 137, 143)


def death_cause(dead: NodeTracker) -> str:
    """What a node's death is put down to: the fault injected into it, or none."""
    return f"injected fault {dead.result.fault}" if dead.result.fault else DEATH


def how_it_ended(dead: NodeTracker) -> str:
    """``node0 died (injected fault kill:node0@step=4)`` where its container was killed, stopped or
    ended with no exit code; else its torchrun gave up (pure): ``node0's torchrun gave up (exit
    code 1): a rank's write failed and its worker raised under injected fault disk-full:node0`` (a
    full disk kills no container: torchrun's restarts in place run out)."""
    if dead.exit_code in DEATH_EXIT_CODES:
        return f"{dead.name} died ({death_cause(dead)})"
    full_disk = bool(dead.result.fault) and action_of(dead.result.fault) is FaultAction.DISK_FULL
    what = "a rank's write failed and its worker raised" if full_disk else "its workers failed"
    return f"{dead.name}'s torchrun gave up (exit code {dead.exit_code}): {what} under {death_cause(dead)}"


def outlives_a_restart(fault: str) -> bool:
    """Whether the fault ``fault`` (a spec the run fired) still holds on a node restarted (a slow, a
    disconnect, a full disk: see :data:`~orchestrate.supervise.api.OUTLIVE_A_RESTART`)."""
    return bool(fault) and action_of(fault) in OUTLIVE_A_RESTART


def full_disk_outlasts(fault: FaultSpec, elapsed_s: float, attempt_s: float, restarts_left: int = 1) -> str:
    """Why a full disk ``fault``, still armed ``elapsed_s`` seconds into the job, would still hold
    when every attempt torchrun has left (``restarts_left`` restarts in place, one at least) reaches
    the write it failed, about ``attempt_s`` seconds apart (the time from the failed write of one
    attempt to the next one's); "" where its end may come first, and a restart may get past it (pure).

    A fault with no end holds for good. One that ends at a step does not end while every attempt
    fails: its failed write came before that step, and a restarted attempt resumes from a
    checkpoint before the write and meets it first. One that ends at a time holds if that time
    is later than the last attempt's write: an earlier end lets that attempt write after it."""
    if fault.until_seconds is not None:
        left_s = fault.until_seconds - elapsed_s
        attempts = max(restarts_left, 1)
        last_write_s = attempt_s * attempts
        if left_s <= last_write_s:
            return ""
        which = "the next attempt" if attempts == 1 else f"the last of the {attempts} attempts torchrun has left"
        return (f"it ends {fault.until_seconds:g} s into the job, {left_s:.1f} s from now, after {which}"
                f" would reach that write (about {last_write_s:.1f} s from now)")
    if fault.until_step is not None:
        return (f"it ends at step {fault.until_step}, which no attempt reaches: each resumes before the write"
                " it failed")
    return "it has no end"


class RestartPolicy:
    """Restarts an elastic job's nodes when one dies, up to ``max_restarts`` times.

    Only an active supervisor of an elastic run restarts; a node's death counts when its
    container was killed (137), stopped (143) or ended with no exit code, or when a fault was
    injected into it. A job that is already ending is never restarted, nor a container that is
    gone (the supervisor looks first: ``docker rm -f`` leaves nothing to restart).
    """

    def __init__(self, *, enabled: bool, max_restarts: int, say: Callable[[str], None],
                 record: Callable[..., None], clock: Callable[[], float], scope: str, store_host: str,
                 firing: Optional[Callable[[NodeTracker], str]] = None) -> None:
        self.enabled = enabled
        self.max_restarts = max_restarts
        self.scope = scope
        self.store_host = store_host
        self.say = say
        self.record = record
        self.clock = clock
        self.restarts = 0
        self.recoveries: list[Recovery] = []
        self.unrecovered = ""  # the first death it had no restart left for (see :meth:`out_of_restarts`)
        # the firing of a node's fault still in effect now: its spec and when it fired, or where it is armed ("":
        # none, or it ended); a fault that outlives a restart is refused a second restart for the same firing only
        self.firing = firing or (lambda tracker: "")
        self.restarted_for: set[str] = set()  # the firings that outlive a restart whose deaths a restart was made for
        self.ended_in_place: set[str] = set()  # the firings torchrun's restarts in place met again: the job ended

    @property
    def open_recovery(self) -> Optional[Recovery]:
        """The recovery whose training has not resumed yet, if any."""
        return next((r for r in self.recoveries if r.resumed_at is None), None)

    def should_restart(self, tracker: NodeTracker, ending: bool) -> bool:
        """Whether ``tracker``'s exit is a death the job recovers from."""
        return self.recoverable(tracker, ending) and self.restarts < self.max_restarts

    def recoverable(self, tracker: NodeTracker, ending: bool) -> bool:
        """Whether ``tracker``'s exit is a death of the kind the job recovers from, restarts left or not."""
        if not self.enabled or ending or tracker.exit_code == 0:
            return False
        if tracker.result.lost:  # a host lost for good: the job goes on without it, or fails
            return False
        if self.met_the_same_firing(tracker):  # met again after a restart: another meets it again
            return False
        return tracker.exit_code in DEATH_EXIT_CODES or bool(tracker.result.fault)

    def met_again(self, tracker: NodeTracker, ending: bool) -> str:
        """Where ``tracker`` ended under a fault that outlives a restart, and a restart was made for
        it already (a full disk whose window the resumed steps never get past): say that no restart
        is made, keep it for the summary, and return it; "" otherwise."""
        if not self.enabled or ending or tracker.exit_code == 0 or not self.met_the_same_firing(tracker):
            return ""
        if self.firing(tracker) in self.ended_in_place:  # said when the job was ended
            return self.unrecovered
        text = (f"{how_it_ended(tracker)} again, after a restart: the fault outlives a restart and still holds,"
                " so another restart would meet it again; the job ends")
        self.say(text)
        self.record("met-again", node=tracker.name, cause=death_cause(tracker))
        self.unrecovered = self.unrecovered or text
        return text

    def met_again_in_place(self, tracker: NodeTracker, text: str) -> None:
        """torchrun restarted ``tracker``'s workers in place, and the next attempt met the very full
        disk that failed the one before, which still holds: say ``text`` (why the job ends), and
        make no restart of the node for that firing."""
        firing = self.firing(tracker)
        self.say(text)
        self.record("met-again", node=tracker.name, cause=death_cause(tracker), in_place=True)
        self.unrecovered = self.unrecovered or text
        if firing:
            self.restarted_for.add(firing)
            self.ended_in_place.add(firing)

    def met_the_same_firing(self, tracker: NodeTracker) -> bool:
        """Whether ``tracker``'s fault is still in effect and the very firing a restart was made for
        (the same spec injected again after the first one ended is another firing)."""
        firing = self.firing(tracker) if tracker.result.fault else ""
        return bool(firing) and firing in self.restarted_for

    def out_of_restarts(self, tracker: NodeTracker, ending: bool) -> str:
        """Where ``tracker``'s exit is a death the job would recover from but every restart of
        ``--max-restarts`` was used: say so, keep it (the first) for the summary, and return it;
        "" otherwise."""
        if not self.recoverable(tracker, ending) or self.restarts < self.max_restarts or not self.max_restarts:
            return ""
        cause = death_cause(tracker)
        text = (f"{tracker.name} died ({cause}) with no restart left: the {self.max_restarts} of --max-restarts"
                f" {self.max_restarts} went to the deaths before it, so the job ends")
        self.say(text)
        self.record("restarts-used-up", node=tracker.name, cause=cause, max_restarts=self.max_restarts)
        self.unrecovered = self.unrecovered or text
        return text

    def go_on_without(self, lost: NodeTracker, step: Optional[int], at: Optional[float] = None) -> str:
        """A node lost for good (``at``: when it ended; None: now): nothing restarts it, and the
        nodes left go on without it (torchrun restarts their workers in a smaller world), a
        recovery timed as a restart's; return why they cannot, where it held the rendezvous store
        ("" otherwise)."""
        if lost.name == self.store_host:
            return (f"was lost for good (injected fault {lost.result.lost}); it {STORE_WENT} (--rdzv-store container"
                    " keeps the store apart from the nodes)")
        self.recoveries.append(Recovery(lost.name, f"injected fault {lost.result.lost}",
                                        self.clock() if at is None else at, step_before=step, lost=True))
        return ""

    def lost_store(self, dead: NodeTracker) -> Optional[str]:
        """Why ``dead``'s death ends the job when only it restarts (it held the rendezvous
        store), or None."""
        if self.scope != "node" or dead.name != self.store_host:
            return None
        return (f"{dead.name} {STORE_WENT} (--restart all restarts every node;"
                " --rdzv-store container keeps the store apart from the nodes)")

    def restart(self, dead: NodeTracker, trackers: list[NodeTracker], step: Optional[int],
                counted_anew: Optional[Recovery] = None) -> None:
        """Restart every node (``--restart all``), or the dead one only (``--restart node``),
        so that it rejoins (``step``: the last step before it; ``counted_anew``: the recovery after
        which the attempt it struck counted its steps from 1 again, None where none).

        By default every node restarts, not only the dead one, as a Slurm requeue or a JobSet's
        recreate-all does: torch's c10d rendezvous lets a freshly started agent join only if
        rank 0's agent is fresh too (an agent that stays rank 0 keeps its cached bootstrap
        address and never publishes it for the new round, so the newcomer may wait for it).
        Fresh agents everywhere form a fresh rendezvous, and the workers resume from the
        latest checkpoint. ``--restart node`` restarts the dead node alone, as Kubernetes
        restarts one pod: what torch then does is what a real cluster's job would meet.
        """
        self.restarts += 1
        result = dead.result
        cause = death_cause(dead)
        lost = self.lost_store(dead)
        if not lost:  # a death that ends the job is no recovery
            self.recoveries.append(Recovery(dead.name, cause, self.clock(), step_before=step,
                                            counted_anew=counted_anew))
        which = "it alone" if self.scope == "node" else "every node"
        still = ""
        firing = self.firing(dead) if outlives_a_restart(result.fault) else ""
        if firing:
            self.restarted_for.add(firing)
            still = (f"; {result.fault} outlives a restart: where its end does not come first, the restarted"
                     " workers meet it again, and the job ends")
        self.say(f"{how_it_ended(dead)}; restarting {which} so that it rejoins"
                 f" ({self.restarts}/{self.max_restarts}){still}")
        self.record("restart", node=dead.name, cause=cause, step=step, scope=self.scope, **anew_fields(counted_anew))
        if lost:
            self.say(lost)
            result.consequence = f"died ({cause}); {lost}"
        result.fault = ""
        if self.scope == "node":
            trackers = [dead]
        trackers = [t for t in trackers if not t.result.lost]  # nothing brings a lost node back, ended yet or not
        for tracker in trackers:
            tracker.move(NodePhase.RESTARTING)
            # the fault a node suffered is not its new attempt's (a hung rank's worker is gone): a
            # stop later would say it still held
            tracker.result.fault, tracker.result.culprit_rank = "", None
            tracker.restarted()  # (a slow, a disconnect, a full disk hold on: said held at a stop)
            tracker.exited_at = tracker.exit_code = tracker.exited_time = None
        for tracker in trackers:
            try:
                tracker.container.restart(timeout=0)
            except engine_errors() as exc:
                if classify(exc) not in (EngineFault.NOT_FOUND, EngineFault.CONFLICT):
                    raise
                continue  # removed (or being removed) from elsewhere: an inspection finds it gone, a failure
            # Its new start, by the engine's clock: what the events still bring from before it
            # (this restart's die, a restart fault's start and die) is over. Looked at again where
            # the engine does not answer at once: without it, a late event of the start before
            # would pass for this restart's, and this restart's own die for a death.
            try:
                for attempt in Retrying(stop=stop_after_attempt(START_LOOKS), wait=wait_fixed(START_LOOK_RETRY_S),
                                        retry=retry_if_exception_type(engine_errors()), reraise=True):
                    with attempt:
                        tracker.container.reload()
            except engine_errors():  # the engine cannot say for a while: an inspection will
                continue
            tracker.latest_start = engine_time(tracker.container.attrs.get("State", {}).get("StartedAt", ""))
