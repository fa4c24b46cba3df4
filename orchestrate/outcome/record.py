"""How a run ended, on disk: ``runs/<id>/outcome.json``, one schema for every scheduler."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

from orchestrate.hangs.init_calls import apart_warning
from orchestrate.outcome.judge import absent_from_barrier_lines, repeated_error_line
from orchestrate.outcome.model import Recovery, RunResult
from orchestrate.outcome.states import NodePhase
from orchestrate.outcome.summary import at_exit_barrier, ending_hint, says_failure

log = logging.getLogger(__name__)

OUTCOME_FILE = "outcome.json"  # how the run ended, in its directory


def recovery_named(recovery: Optional[Recovery], recoveries: list[Recovery]) -> Optional[dict]:
    """A recovery another record points at, said whole: its index in ``recoveries`` (None where
    it is not among them), its node and its cause ("its death" alone names no node)."""
    if recovery is None:
        return None
    index = next((i for i, r in enumerate(recoveries) if r is recovery), None)
    return {"recovery": index, "node": recovery.node, "cause": recovery.cause}


def outcome_record(outcome: RunResult) -> dict:
    """The outcome as JSON-ready data (``runs/<id>/outcome.json``): for reports and benchmarks."""
    t = outcome.timings
    failure = outcome.failure
    said = says_failure(outcome)  # what the summary says under the failure, kept only where it says it
    slurm = outcome.slurm
    return {
        "run_id": outcome.run_id,
        "scheduler": "compose" if slurm is None else "slurm",
        "succeeded": outcome.succeeded,
        "exit_code": outcome.exit_code,
        "interrupted": outcome.interrupted,
        "stopped_by": outcome.stopped_by,
        # why its time limit was shorter than its own timeout (a test's own), where that limit ended it
        "limited_by": outcome.limited_by or None,
        # where the ranks were at the look `stop RUN` took before it stopped a quiet job (see summary)
        "stop_look": {"hung": outcome.stop_look_hung, "lines": list(outcome.stop_look)} if outcome.stop_look else None,
        "error": outcome.error,
        "teardown_error": outcome.teardown_error,
        "image_torch": outcome.image_torch,
        "timings": {"bring_up_s": t.bring_up_s, "rendezvous_s": t.rendezvous_s, "job_s": t.job_s,
                    "teardown_s": t.teardown_s},
        "recoveries": [{"node": r.node, "cause": r.cause, "recovery_s": r.recovery_s, "steps_lost": r.steps_lost,
                        "step_before": r.step_before, "resumed_from": r.resumed_from, "lost": r.lost,
                        # step_before counted from 1 again, in the attempt after this recovery (no resume said)
                        "step_counted_anew_after": recovery_named(r.counted_anew, t.recoveries),
                        # it rejoined, but the job failed before its next step: no recovery
                        "failed_before_step": r.failed_before_step(outcome.job_succeeded)}
                       for r in t.recoveries],
        "faults": [{"spec": f.spec, "node": f.node, "fired": f.fired, "fired_at_s": f.fired_at_s,
                    "fired_at_step": f.fired_at_step, "ended_at_s": f.ended_s, "not_fired_because": f.reason or None,
                    "detail": f.detail or None, "before_first_step": f.before_first_step,
                    # fired_at_step counted from 1 again, in the attempt after this recovery (no resume said)
                    "step_counted_anew_after": recovery_named(f.counted_anew, t.recoveries),
                    "held_at_stop": f.held_at_stop}  # its end had not come when the run was stopped
                   for f in outcome.faults],
        "hang": None if outcome.hang is None else outcome.hang.to_json(),
        # what the summary's hint says to change, and why (one text, perhaps of several lines)
        "hint": hint_text(ending_hint(outcome)),
        # where each rank's script was when torchrun's SIGTERM ended it (its stacks then), by rank
        "stopped_where": {str(rank): where for rank, where in sorted(outcome.stopped_where.items())},
        # the nodes by their addresses (address -> node), which the summary names a peer an error gives by address by
        "node_addresses": dict(outcome.node_addresses),
        # the files the work directory held before the run that a rank then loaded with torch.load
        "loaded_from_before": list(outcome.loaded_from_before),
        # the shared files more than one rank wrote whole, each with its writers
        "written_by_several": {path: list(ranks) for path, ranks in outcome.written_by_several.items()},
        # ranks whose init_process_group asked for another world size than torchrun's, or the same rank
        "apart": apart_warning(outcome.apart) or None,
        # where the ranks of a run that succeeded made different numbers of collectives in a group of them all
        "ended_apart": outcome.ended_apart or None,
        # what was asked and did not happen though every node exited 0 (the summary's FAILED line)
        "missed": outcome.missed if outcome.job_succeeded else [],
        "shuffled_alike": {line: {"epoch": epoch, "ranks": list(ranks)}
                           for line, (epoch, ranks) in outcome.shuffled_alike.items()},
        "slurm": None if slurm is None else {"job_id": slurm.job_id, "job": slurm.job, "nodes": slurm.nodes,
                                           "ended_on": slurm.ended_on, "restarts_in_place": slurm.restarts_in_place},
        "nodes": [{"name": r.node.name, "ranks": list(r.node.global_ranks), "state": r.state.value,
                   "exit_code": r.exit_code, "wall_s": r.wall_s, "fault": r.fault, "unresponsive": r.unresponsive,
                   "lost": r.lost or None,  # the lose fault that took it for good, if one did
                   "oom_kills": r.oom_kills, "grace_ran_out": r.grace_ran_out, "no_grace": r.no_grace,
                   "still_running": r.still_running,
                   "at_exit_barrier": at_exit_barrier(r),  # its ranks had finished: its torchrun waited for the others
                   "restarts_in_place": r.restarts_in_place,
                   # a preempted node's ranks after its SIGTERM: whether each exited 0, how soon, what it wrote
                   "after_sigterm": None if r.preemption is None else [m.to_json() for m in r.preemption.ranks]}
                  for r in outcome.results],
        "failure": None if failure is None else {
            "node": failure.node, "rank": failure.rank, "exit_code": failure.exit_code,
            "exception": failure.exception, "reason": failure.reason, "describe": failure.describe(),
            "traceback": failure.traceback, "last_lines": list(failure.last_lines),
            "last_lines_of": failure.lines_of or None,  # whose they are, where not the failure's (a preempted rank)
            "crashed": failure.crashed or None,  # a native crash: where the worker was
            "users_frame": failure.users_frame or None,  # where the user's own code was in its traceback
            "chain": list(failure.chain),  # the exceptions its own was raised from, nearest first
            "then": [{"node": r.node.name, "rank": r.root_cause.rank, "exception": r.root_cause.exception}
                     for r in outcome.results if r.state is NodePhase.FAILED and r.node.name != failure.node
                     and r.root_cause],
            "divergence": outcome.divergence or None,  # where the ranks' collectives part, for a mismatch torch or gloo caught
            # a call one rank skipped before the ranks parted, for a mismatch torch's check caught
            "skipped": outcome.skipped or None,
            "store_lost": outcome.store_lost or None,
            # an earlier attempt of the failing node whose worker failed by an error of its own
            "earlier": None if failure.earlier is None else {
                "attempt": failure.earlier.attempt, "local_rank": failure.earlier.local_rank,
                "exception": failure.earlier.exception, "describe": failure.earlier.describe(failure.node),
                "last_lines": list(failure.earlier.last_lines), "users_frame": failure.earlier.users_frame or None},
            # the same error of its own ended several attempts of the failing node's workers
            "repeated": (repeated_error_line(failure, outcome.results, [(f.spec, f.detail) for f in outcome.faults])
                         .strip() if said else "") or None,
            # the ranks a monitored barrier named as not there, with where each was when ended
            "not_at_barrier": [line.strip() for line in absent_from_barrier_lines(failure, outcome.stopped_where)
                               if said],
        },
    }


def write_outcome(outcome: RunResult) -> None:
    """Record how the run ended in its directory (``outcome.json``)."""
    try:
        (outcome.run_dir / OUTCOME_FILE).write_text(json.dumps(outcome_record(outcome), indent=2) + "\n")
    except OSError as exc:  # the run directory went away: the summary on screen still says it all
        log.debug("outcome.json: %s", exc)


def recorded_loaded_from_before(run_dir: Path) -> tuple[str, ...]:
    """The files (and DCP checkpoint directories) the run's ``outcome.json`` says its job loaded
    from before the run (:attr:`RunResult.loaded_from_before`): for a follower that judges the run
    again from the engine, which cannot tell what its directory held when the run began. () where
    it says none, or there is no record yet."""
    try:
        said = json.loads((run_dir / OUTCOME_FILE).read_text(encoding="utf-8")).get("loaded_from_before")
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(str(path) for path in said) if isinstance(said, list) else ()


def hint_text(said: str) -> Optional[str]:
    """The summary's hint as outcome.json keeps it: its lines joined by newlines, without the
    summary's ``hint:`` label (the key names it; a record written before 2026-12-07 begins "hint: "); None
    where there is none."""
    lines = [line.strip() for line in said.splitlines()]
    if lines:
        lines[0] = lines[0].removeprefix("hint:").lstrip()
    return "\n".join(lines) or None
