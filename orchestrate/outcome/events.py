"""The run's event file, ``runs/<id>/events.jsonl``: what happened, when (JSON lines).

One object per line with ``time`` (Unix seconds) and ``event``, and the event's own fields:

=================  ==============================================================
bring-up           the launcher starts the nodes (``nodes``)
nodes-up           every node container runs
node-addresses     the nodes' addresses on the run's network as they came up (``addresses``: address -> node)
node-running       a node's first worker spoke: its rendezvous is done (``node``)
rank-started       a rank's first line (``node``, ``rank``)
fault              a fault was injected (``node``, ``spec``, ``action``, ``step``: the step the summary
                   says; ``step_counted_anew_after``: where that step is its attempt's, counted from 1
                   again, the recovery that attempt followed (``node``, ``cause``); ``rank`` for a
                   rank's; ``by``: ``fault``, where ``fault RUN`` did it from another terminal)
fault-failed       a fault could not be injected (``node``, ``spec``, ``error``; ``by``, as for ``fault``)
fault-ended        a fault with an end was undone (``node``, ``spec``, ``action``; ``by``, as for ``fault``)
fault-end-failed   a fault with an end could not be undone (``node``, ``spec``, ``error``)
node-unresponsive  a hung or cut-off node was detected (``node``, ``reason``)
oom                the kernel OOM-killed a node's process (``node``)
node-exited        a node's container ended (``node``, ``exit_code``; ``via``: inspection, when no event said it)
node-failed        a node ended in failure (``node``, ``exit_code``, ``rank``)
node-lost          a ``lose`` fault took a node for good; the job goes on without it (``node``, ``exit_code``,
                   ``fault``)
node-stopping      the launcher sent a node SIGTERM; SIGKILL follows after ``grace_s`` (``node``)
node-killed        the launcher killed a node (``node``; ``still_running``: what its stop grace left running)
node-stopped       ``stop RUN`` stopped a node, from another terminal (``node``, ``exit_code``, ``by``;
                   ``grace_ran_out``: its grace ran out, so it got SIGKILL; ``no_grace``: the stop
                   gave none, 0 s; ``still_running``: what still ran in it a moment before)
job-stopped        ``stop RUN`` stopped a Slurm run's job, from another terminal (``job``, ``state``, ``by``)
events-ended       the engine's event stream ended; inspection follows the nodes (``reason``)
restart            an elastic recovery restarts every node (``node``: the dead one, ``cause``, ``step``;
                   ``step_counted_anew_after``, as for ``fault``)
resumed            training resumed after a recovery (``node``, ``step``: the new attempt's first, ``recovery_s``,
                   ``steps_lost``; ``step_counted_anew_after``, as for ``fault``, where it counts from 1 again)
run-ended          the launcher is done (``exit_code``, ``succeeded``, ``interrupted``, ``error``)
teardown-failed    the nodes could not be removed (``error``, ``exit_code``: the run's, now 2)
=================  ==============================================================

Reports (:mod:`orchestrate.report`) are built from it; it is useful on its own (``jq``).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional

EVENTS_FILE = "events.jsonl"
NODES_UP = "nodes-up"  # every node is up: the job's seconds count from here
NODE_ADDRESSES = "node-addresses"  # the event with the nodes' addresses as they came up

log = logging.getLogger(__name__)


def record_event(run_dir: Path, kind: str, *, when: Optional[float] = None, **fields: Any) -> None:
    """Append one event, stamped ``when`` (a time in seconds since the epoch: the engine's own
    time of what it records) or now. The file is a record of the run, never its outcome: a run
    directory that went away is logged, and the run goes on."""
    entry = {"time": time.time() if when is None else when, "event": kind, **fields}
    try:
        with open(run_dir / EVENTS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    except OSError as exc:
        log.debug("events of run %s: %s", run_dir.name, exc)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """Every event of a run in time order (a torn last line, from a run still going, is skipped)."""
    events = []
    try:
        lines = (run_dir / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("time"), (int, float)) and "event" in entry:
            events.append(entry)  # one without a time in seconds is not ours: it could not be ordered
    return sorted(events, key=lambda e: e["time"])


def event_identity(entry: dict[str, Any]) -> str:
    """What one recorded event is: its kind, every field and its time. An event stamped with the
    engine's time of it (a node's first line, its exit) comes back the same when a follower reads
    the run again from its start: the same identity is the same event, recorded before."""
    return json.dumps(entry, sort_keys=True, default=str)


def without_repeats(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` less each exact repeat of an earlier one (see :func:`event_identity`): the
    start events that every attach to a detached run recorded again before 2026-12-06."""
    seen: set[str] = set()
    kept = []
    for event in events:
        identity = event_identity(event)
        if identity not in seen:
            seen.add(identity)
            kept.append(event)
    return kept


def launcher_exit_code(events: list[dict[str, Any]]) -> Optional[int]:
    """The exit code a run's launcher ended with, as the last ``run-ended`` of its ``events``
    says: how the job ended, as the summary's last line said it (a teardown that failed after it
    is not the job's; None: no launcher has said, as for a detached run that nobody attached to
    until it ended)."""
    ended = [event for event in events if event["event"] == "run-ended"]
    code = ended[-1].get("exit_code") if ended else None
    return code if isinstance(code, int) else None


def addresses_in(events: list[dict[str, Any]]) -> dict[str, str]:
    """The nodes by their addresses (address -> node) as the last ``node-addresses`` of a run's
    ``events`` recorded them ({} where none did: a run started before 2026-12-06)."""
    recorded = [event.get("addresses") for event in events if event["event"] == NODE_ADDRESSES]
    return {str(a): str(n) for a, n in recorded[-1].items()} if recorded and isinstance(recorded[-1], dict) else {}
