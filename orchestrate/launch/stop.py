"""Stopping a run from another terminal (``stop RUN``, and ``down RUN`` of a live run), whichever
its scheduler: a Compose run's nodes get SIGTERM, then SIGKILL after the grace, all at once; a
Slurm run's job is stopped through Slurm. The run's directory says who asked, so the launcher that
follows the run says STOPPED by that command, not a failure."""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Optional

from orchestrate.config.fault_spec import FaultAction
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.labels import COMPOSE_PROJECT_LABEL, LAUNCHER_LABEL
from orchestrate.engine.runs import STOPPED_BY, NodeInfo, RunInfo, find_run, launcher_alive, stop_run
from orchestrate.faults.in_effect import faults_now
from orchestrate.faults.ranks import signal_rank
from orchestrate.slurm.stop import stop_slurm_run
from orchestrate.supervise.look_before_stop import look_before_stop, recorded_look

log = logging.getLogger(__name__)

# How long `down` leaves a stopped run to the launcher that follows it, which says how the run
# ended and then tears it down (a Slurm launcher reads the cluster's records first): 120 looks,
# 0.5 s apart, before `down` removes what is left itself.
TEARDOWN_POLL_S = 0.5
TEARDOWN_POLLS = 120


def stop_timeout(run: RunInfo, asked_s: Optional[float]) -> int:
    """Whole seconds between SIGTERM and SIGKILL, as the engine's stop takes them: what was
    asked, else the run's own stop grace (what its launcher would give), a fraction rounded up."""
    return math.ceil(asked_s if asked_s is not None else run.stop_grace_s)


def stop_nodes(client: Any, run: RunInfo, timeout_s: int, say: Callable[[str], None],
               by: str = STOPPED_BY) -> list[str]:
    """Stop the run's live nodes (its Slurm job, through Slurm); return the nodes that were live.
    A Compose job that has printed nothing for a while is looked at first, whichever command stops
    it (``stop``, or ``down`` of a live run: a hung detached run removed without a look lost where
    it hung), where every rank waits said and kept for the run's summary
    (:mod:`orchestrate.supervise.look_before_stop`); an interrupt cuts the look short, not the stop,
    and so does an error (said).

    Raises:
        EngineError: When the engine or Slurm refused.
    """
    hung = hung_ranks(run)
    if run.scheduler == "slurm":  # its job is stopped through Slurm, as on a cluster
        for node in run.nodes:
            continue_ranks(client, node, hung.get(node.name, []))
        return stop_slurm_run(client, run, timeout_s, say=say, by=by)
    look = None
    try:
        look = look_before_stop(client, run, say)
    except KeyboardInterrupt:  # Ctrl-C, or a reader gone (`stop RUN | head`): the stop was asked all the same
        say("interrupted: the look is cut short, and the nodes are stopped now")
    except Exception as exc:  # a run directory not writable here, the engine: the stop goes on without it
        say(f"could not look where the ranks wait ({exc}): the nodes are stopped without it")
    run = find_run(client, run.run_id)  # as it is now: nodes may have ended, or been paused, meanwhile
    return stop_run(run, timeout_s, by, say, look=recorded_look(look),
                    before_stop=lambda node: continue_ranks(client, node, hung.get(node.name, [])))


def hung_ranks(run: RunInfo) -> dict[str, list[int]]:
    """The ranks that a hang-rank fault in effect stopped, by node (read from the run's record)."""
    live = {node.name: node.container for node in run.nodes if node.status in ("running", "paused")}
    return {name: [spec.rank for spec in specs if spec.action is FaultAction.HANG_RANK and spec.rank is not None]
            for name, specs in faults_now(run.run_dir, live).items()}


def continue_ranks(client: Any, node: NodeInfo, ranks: list[int]) -> None:
    """Continue these stopped ranks' workers on a node before its stop, as the launcher does: a
    stopped worker cannot take the SIGTERM, and would hold its node to the end of its grace (and
    its job from saving). A rank not found there, or a node that ended, is passed over."""
    for rank in ranks:
        try:
            signal_rank(client, {node.name: node.container}, rank, "SIGCONT")
        except Exception as exc:  # it ended meanwhile, moved, or the engine refused: the stop goes on
            log.debug("SIGCONT to rank %s on %s before the stop: %s", rank, node.name, exc)


def wait_for_launchers_teardown(client: Any, run: RunInfo) -> str:
    """After a stop: wait for the run's foreground launcher to say how the run ended and tear it
    down (its containers, network and volume gone). Removing them under it instead would cut
    off what it still reads (a Slurm launcher reads the controller's job and node records).

    Returns:
        "" once it has; else why it did not: the launcher ended first (its teardown gave up, or
        it was killed), or ``TEARDOWN_POLLS`` looks went by.
    """
    label = {"label": f"{COMPOSE_PROJECT_LABEL}={run.project}"}
    for _ in range(TEARDOWN_POLLS):  # a count, not a clock: the caller's clock may be frozen
        try:
            if not (client.containers.list(all=True, ignore_removed=True, filters=label)
                    or client.networks.list(filters=label) or client.volumes.list(filters=label)):
                return ""
        except engine_errors() as exc:
            return f"the engine did not answer ({describe(exc)})"
        if not launcher_alive(run.labels.get(LAUNCHER_LABEL, "")):
            return "its launcher ended without tearing it down"
        time.sleep(TEARDOWN_POLL_S)
    return f"its launcher did not tear it down within {TEARDOWN_POLLS * TEARDOWN_POLL_S:.0f} s"
