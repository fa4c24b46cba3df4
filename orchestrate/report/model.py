"""A run's report as data (pure): lanes, phases, markers and series from its recorded files."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from orchestrate.outcome.events import NODES_UP, addresses_in, read_events, without_repeats
from orchestrate.outcome.model import ANEW_KEY, anew_step_words
from orchestrate.outcome.progress import read_all
from orchestrate.outcome.record import OUTCOME_FILE
from orchestrate.outcome.run_dirs import recorded_conditions
from orchestrate.outcome.summary import EXIT_BARRIER_NOTE
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.text import (grace_ran_out, loaded_from_before, peers_named, shuffled_alike, times,
                              written_by_several)


@dataclass
class Phase:
    """A stretch of one lane: ``name`` from ``start`` to ``end`` (seconds since the run began)."""

    name: str
    start: float
    end: float
    detail: str = ""


@dataclass
class Marker:
    """A moment on one lane (``lane`` None: every node's)."""

    kind: str
    time: float
    lane: Optional[str]
    label: str


@dataclass
class Lane:
    """A node, or one of its ranks (``rank`` set)."""

    name: str
    node: str
    rank: Optional[int] = None
    phases: list[Phase] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.node if self.rank is None else f"{self.node}-rank{self.rank}"


@dataclass
class ReportModel:
    """Everything the page shows."""

    run_id: str
    command: str = ""
    image: str = ""
    torch: str = ""
    conditions: str = ""  # the link and node sizes given ("" where none was)
    outcome: str = "running"
    succeeded: Optional[bool] = None
    exit_code: Optional[int] = None
    plan_rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    lanes: list[Lane] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    progress: dict[int, list[tuple[float, int, Optional[float]]]] = field(default_factory=dict)
    end: float = 0.0
    failure: Optional[dict] = None
    hint: str = ""  # what the summary's hint said to change, and why
    recoveries: list[dict] = field(default_factory=list)
    graces_run_out: list[str] = field(default_factory=list)  # a line per node a SIGKILL ended when its grace ran out
    written_by_several: list[str] = field(default_factory=list)  # a warning per shared file several ranks wrote
    shuffled_alike: list[str] = field(default_factory=list)  # a warning per line that reshuffled alike
    apart: str = ""  # a warning: ranks whose init_process_group asked for another world than torchrun's
    loaded_from_before: str = ""  # a note: the files (DCP directories) the work directory held that the job loaded
    ended_apart: str = ""  # a warning: ranks whose collectives ended apart in a run that succeeded
    logs: list[str] = field(default_factory=list)
    bench: Optional[dict] = None
    bench_png: Optional[bytes] = None
    chaos: Optional[dict] = None
    hang: Optional[dict] = None  # where every rank waited: the run's hang, else the last `stacks` taken
    events: list[tuple[float, str, str, str]] = field(default_factory=list)

    def step_times(self) -> dict[int, list[tuple[float, float]]]:
        """Per rank: (time, seconds since its previous step), for the steps that follow one; a
        straggler's steps take longer than its peers'."""
        durations = {}
        for rank, series in self.progress.items():
            durations[rank] = [(t, t - t_before) for (t_before, s_before, _), (t, s, _) in zip(series, series[1:])
                               if s == s_before + 1]
        return {rank: points for rank, points in durations.items() if points}

    def lane(self, key: str) -> Lane:
        return next(lane for lane in self.lanes if lane.key == key)


def _load_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def load_run(run_dir: Path) -> dict[str, Any]:
    """The run's records, as :func:`build_model` takes them."""
    png = run_dir / "bench.png"
    return {
        "run_id": run_dir.name,
        "run": _load_json(run_dir / "run.json") or {},
        "outcome": _load_json(run_dir / OUTCOME_FILE),
        "events": read_events(run_dir),
        "progress": read_all(run_dir / PROGRESS_SUBDIR),
        "bench": _load_json(run_dir / "bench.json"),
        "chaos": _load_json(run_dir / "chaos.json"),
        "stacks": _load_json(run_dir / "stacks.json"),
        "bench_png": png.read_bytes() if png.is_file() else None,
        "logs": sorted(p.name for p in run_dir.glob("*.log")),
    }


IN_DEBUGGER = "in its debugger"  # a rank lane's phase while it is stopped there

# What the engine said of a run with no outcome recorded (``report RUN``), as the page says it in
# place of "running": its files alone cannot tell a run that runs from one whose end nobody recorded.
ORPHANED, GONE, NOT_ASKED = "orphaned", "gone", "not asked"
ENDED_AS = "ended:"  # then the state the nodes' exit codes name (``ended:failed``)
UNRECORDED_ENDINGS = {
    ORPHANED: ("ORPHANED: its launcher died before it said how the run ended (its nodes stop themselves when they"
               " notice, prune removes what is left, and its node logs keep what they printed)"),
    GONE: ("ENDED, with no record of how: the engine no longer has the run, and no launcher or follower wrote"
           " its outcome (its node logs keep what was followed)"),
    NOT_ASKED: "running, as far as its files say (the engine could not be asked)",
}


def unrecorded_ending(engine_state: str) -> str:
    """What the page says in place of "running" for ``engine_state`` ("" where nothing)."""
    if engine_state.startswith(ENDED_AS):
        return (f"ENDED: {engine_state[len(ENDED_AS):]}, as its nodes' exit codes say; its launcher did not record"
                " its summary")
    return UNRECORDED_ENDINGS.get(engine_state, "")


def end_stops(spans: list[list[Any]], when: float) -> None:
    """End, at ``when``, a rank lane's open stops in its debugger (it left it, or its process ended
    in a restart)."""
    for span in spans:
        if span[1] is None:
            span[1] = when


def overlaid(phases: list[Phase], over: Phase) -> list[Phase]:
    """A lane's phases with ``over`` laid on them, within them: what it covers of each is cut out."""
    if not phases:
        return phases
    over = Phase(over.name, max(over.start, min(p.start for p in phases)), min(over.end, max(p.end for p in phases)),
                 over.detail)
    if over.end <= over.start:
        return phases
    kept = []
    for phase in phases:
        if phase.start < over.start:
            kept.append(Phase(phase.name, phase.start, min(phase.end, over.start), phase.detail))
        if phase.end > over.end:
            kept.append(Phase(phase.name, max(phase.start, over.end), phase.end, phase.detail))
    return sorted(kept + [over], key=lambda phase: phase.start)


def _fmt(seconds: float) -> str:
    return f"{seconds:.1f} s"


class _LaneBuilder:
    """Phases of every node lane from the events, in order."""

    def __init__(self, model: ReportModel, t0: float) -> None:
        self.model, self.t0 = model, t0
        self.open: dict[str, tuple[str, float]] = {}

    def at(self, event: dict) -> float:
        return event["time"] - self.t0

    def begin(self, node: str, phase: str, when: float) -> None:
        self.close(node, when)
        self.open[node] = (phase, when)

    def close(self, node: str, when: float, detail: str = "") -> None:
        if node in self.open:
            phase, start = self.open.pop(node)
            self.model.lane(node).phases.append(Phase(phase, start, max(start, when), detail))

    def mark(self, kind: str, when: float, lane: Optional[str], label: str) -> None:
        self.model.markers.append(Marker(kind, when, lane, label))


def build_model(records: dict[str, Any]) -> ReportModel:
    """Lanes, phases, markers and series from a run's records (pure)."""
    run, outcome = records.get("run") or {}, records.get("outcome")
    events = without_repeats(records.get("events") or [])  # (an older attach's replayed starts: no bar each)
    progress = records.get("progress") or []
    model = ReportModel(run_id=run.get("run_id") or records.get("run_id", ""), command=run.get("command", ""),
                        image=run.get("image", ""), conditions=recorded_conditions(run),
                        logs=list(records.get("logs") or []),
                        bench=records.get("bench"), bench_png=records.get("bench_png"), chaos=records.get("chaos"),
                        hang=(outcome or {}).get("hang") or records.get("stacks"))
    nodes = run.get("nodes") or []
    for node in nodes:
        ranks = node.get("global_ranks") or []
        model.plan_rows.append((node["name"], str(node.get("node_rank", "")),
                                ",".join(map(str, ranks)) or "elastic", ",".join(node.get("gpus") or []) or "-"))
    moments = [e["time"] for e in events] + [r.time for r in progress]
    t0 = min(moments) if moments else 0.0
    node_names = [n["name"] for n in nodes] or sorted(  # (a fault's "node" may be the run's store)
        {e["node"] for e in events if e.get("node") and e["event"].startswith("node-")})
    ranks_of: dict[str, list[int]] = {n["name"]: list(n.get("global_ranks") or []) for n in nodes}
    for event in events:  # elastic runs learn their ranks as they start
        if event["event"] == "rank-started" and event.get("rank") not in ranks_of.setdefault(event["node"], []):
            ranks_of[event["node"]].append(event["rank"])
    for name in node_names:
        model.lanes.append(Lane(name, name))
        for rank in sorted(ranks_of.get(name, [])):
            model.lanes.append(Lane(f"rank {rank}", name, rank))

    lanes = _LaneBuilder(model, t0)
    rank_first: dict[int, float] = {}
    exited: dict[str, float] = {}  # each node's latest end
    in_debugger: dict[str, list[list[Any]]] = {}  # each rank lane's stops in its debugger: [from, to or None, where]
    for event in events:
        kind, when, node = event["event"], lanes.at(event), event.get("node")
        model.events.append((when, node or "-", kind, _describe(event)))
        if kind == "bring-up":
            for name in node_names:
                lanes.begin(name, "bring-up", when)
        elif kind == NODES_UP:
            for name in node_names:
                lanes.begin(name, "rendezvous", when)
        elif kind == "node-running" and node in node_names:
            lanes.begin(node, "running", when)
        elif kind == "rank-started":
            rank_first.setdefault(event["rank"], when)
        elif kind == "fault":  # (the run's own store has no lane: its fault is the whole job's, a line across)
            lanes.mark("fault", when, node if node in node_names else None,
                       f"fault injected: {event.get('spec')} at {_fmt(when)}"
                       + (f", {_step_words(event)}" if event.get("step") is not None else ""))
            if event.get("action") == "pause" and node in lanes.open:
                lanes.begin(node, "hung", when)
        elif kind == "fault-ended":
            lanes.mark("fault", when, node if node in node_names else None, f"fault ended: {event.get('spec')} at {_fmt(when)}")
            if event.get("action") == "pause" and node in lanes.open:
                lanes.begin(node, "running", when)
        elif kind == "store-died":  # every node's agent loses the rendezvous with it: a line across
            code = event.get("exit_code")
            lanes.mark("failed", when, None, f"the run's rendezvous store ({event.get('service', 'its container')}) died"
                       + (f" (exit code {code})" if code is not None else "") + f" at {_fmt(when)}")
        elif kind == "node-unresponsive":
            lanes.mark("detected", when, node, f"{node} detected at {_fmt(when)}: {event.get('reason', '')}")
        elif kind == "oom":
            lanes.mark("oom", when, node, f"{node} OOM-killed at {_fmt(when)}")
        elif kind == "node-killed":
            lanes.mark("killed", when, node, f"{node} killed by the launcher at {_fmt(when)}")
        elif kind == "node-stopped" and event.get("grace_ran_out"):
            killed = exited.get(node, when)  # the event comes once its logs are read to their end
            lanes.mark("killed", killed, node, f"{node} killed at {_fmt(killed)}: its grace after {event.get('by')}'s"
                                               " SIGTERM ran out")
        elif kind == "node-exited" and node in node_names:
            exited[node] = when
            code = event.get("exit_code")
            lanes.close(node, when, f"exit code {code}")
            lanes.mark("exit", when, node, f"{node} exited at {_fmt(when)} with {_exit_words(code)}")
        elif kind == "node-failed":
            rank = event.get("rank")
            label = f"{node} failed at {_fmt(when)}" + (f" (rank {rank})" if rank is not None else "")
            lanes.mark("failed", when, f"{node}-rank{rank}" if rank is not None else node, label)
        elif kind == "node-lost":
            lanes.mark("lost", when, node, f"{node} lost for good at {_fmt(when)} ({event.get('fault')}): the job"
                                           " goes on without it")
        elif kind == "restart":
            lanes.mark("restart", when, None, f"elastic restart at {_fmt(when)}: {node} died ({event.get('cause')}),"
                                              f" at {_step_words(event)}; every node restarts")
            for name in node_names:
                lanes.begin(name, "restarting", when)
            for spans in in_debugger.values():  # every rank's process ends
                end_stops(spans, when)
        elif kind == "resumed":
            lost = event.get("steps_lost")  # None: the workers did not say where they resumed
            lanes.mark("resumed", when, None, f"resumed at {_step_words(event)} at {_fmt(when)}: recovery"
                                              f" {event.get('recovery_s', 0):.1f} s, "
                                              + ("steps lost not known" if lost is None else f"{lost} steps lost"))
        elif kind == "debugger" and event.get("state") in ("waits", "left"):  # (debugger.states' words)
            rank = event.get("rank")
            lane = f"{node}-rank{rank}" if node in node_names and rank is not None else None
            if event["state"] == "waits":
                what = f"{event.get('where', '')}: {event.get('what') or event.get('call', '')}"
                lanes.mark("debugger", when, lane, f"rank {rank} stopped in its debugger at {_fmt(when)}: {what}")
                if lane is not None:
                    in_debugger.setdefault(lane, []).append([when, None, what])
            else:
                lanes.mark("debugger-left", when, lane, f"rank {rank} left its debugger at {_fmt(when)}")
                end_stops(in_debugger.get(lane, []), when)
        elif kind == "run-ended":
            model.exit_code = event.get("exit_code")
    end_times = [when for when, *_ in model.events] + [r.time - t0 for r in progress]
    model.end = max(end_times, default=0.0)
    for name in list(lanes.open):
        lanes.close(name, model.end, "still open at the last record")

    for record in progress:
        if record.step is not None:
            model.progress.setdefault(record.rank, []).append((record.time - t0, record.step, record.metrics.get("loss")))
    for series in model.progress.values():
        series.sort()
    for lane in model.lanes:  # a rank lives its node's phases from its first line on
        if lane.rank is None:
            continue
        seen = [t for t, *_ in model.progress.get(lane.rank, [])]
        start = rank_first.get(lane.rank, min(seen, default=None))
        if start is None:
            continue
        for phase in model.lane(lane.node).phases:
            if phase.end > start and phase.name not in ("bring-up",):
                name = "running" if phase.name == "rendezvous" and phase.start <= start else phase.name
                lane.phases.append(Phase(name, max(phase.start, start), phase.end,
                                         f"{len(seen)} steps reported in all" if name == "running" else phase.detail))
        # (a stop nothing ended lasts as long as its lane: its node's exit ends that)
        for since, until, what in in_debugger.get(lane.key, []):
            lane.phases = overlaid(lane.phases, Phase(IN_DEBUGGER, since, until if until is not None else model.end,
                                                      what))

    if not outcome:
        model.outcome = unrecorded_ending(records.get("engine_state") or "") or model.outcome
    if outcome:
        model.succeeded = outcome.get("succeeded")
        model.exit_code = outcome.get("exit_code", model.exit_code)
        model.torch = outcome.get("image_torch", "")
        # (a run recorded before outcome.json kept its addresses: those its nodes came up with)
        addresses = outcome.get("node_addresses") or addresses_in(events)
        model.failure = failure_with_peers_named(outcome.get("failure"), addresses)
        mark_root_cause(model.markers, model.failure)
        model.hint = outcome.get("hint") or ""
        model.recoveries = outcome.get("recoveries") or []
        model.graces_run_out = [grace_ran_out(str(node.get("name")), [str(p) for p in node.get("still_running") or []],
                                              node.get("no_grace") is True)
                                + EXIT_BARRIER_NOTE * bool(node.get("at_exit_barrier"))
                                for node in outcome.get("nodes") or [] if node.get("grace_ran_out")]
        model.written_by_several = [written_by_several(str(path), [int(r) for r in ranks])
                                    for path, ranks in (outcome.get("written_by_several") or {}).items()]
        model.apart = str(outcome.get("apart") or "")
        held = outcome.get("loaded_from_before") or []
        model.loaded_from_before = loaded_from_before([str(path) for path in held]) if held else ""
        model.ended_apart = str(outcome.get("ended_apart") or "")
        model.shuffled_alike = [shuffled_alike(str(line), int(seen.get("epoch", 0)),
                                               [int(r) for r in seen.get("ranks", [])])
                                for line, seen in (outcome.get("shuffled_alike") or {}).items()]
        if outcome.get("interrupted") and outcome.get("stopped_by"):
            model.outcome = f"STOPPED by {outcome['stopped_by']} (exit code {model.exit_code})"
        elif outcome.get("interrupted"):
            model.outcome = f"INTERRUPTED (exit code {model.exit_code})"
        elif outcome.get("error"):
            model.outcome = f"FAILED (exit code {model.exit_code}): {outcome['error']}"
        elif model.succeeded:
            counts = {str(node.get("name")): node.get("restarts_in_place") for node in outcome.get("nodes") or []}
            counts = counts or (outcome.get("slurm") or {}).get("restarts_in_place") or {}  # a Slurm run's: by node
            restarted = [f"{name} {times(n)}" for name, count in counts.items() if (n := int(count or 0))]
            lost = [f"{node.get('name')} ({node.get('lost')})" for node in outcome.get("nodes") or []
                    if node.get("state") == "lost"]
            model.outcome = ("SUCCEEDED" + (f" without {' and '.join(lost)}, lost for good" if lost else "")
                             + (f", after torchrun restarted the workers in place ({', '.join(restarted)})"
                                if restarted else ""))
        elif model.failure:
            model.outcome = f"FAILED (exit code {model.exit_code}): {model.failure.get('describe', '')}"
        elif outcome.get("missed"):  # every node exited 0, but what was asked did not happen
            model.outcome = (f"FAILED (exit code {model.exit_code}): every node exited 0, but"
                             f" {'; and '.join(str(line) for line in outcome['missed'])}")
        else:
            model.outcome = f"FAILED (exit code {model.exit_code})"
        if outcome.get("teardown_error"):
            model.outcome += f"; TEARDOWN FAILED: {outcome['teardown_error']}"
    return model


def mark_root_cause(markers: list[Marker], failure: Optional[dict]) -> None:
    """Say which failure marker is the run's root cause: the markers go by time, and a node that
    only lost its peers may fail before the one whose rank failed first (its error seen later)."""
    if not failure or not failure.get("node"):
        return
    rank = failure.get("rank")
    lane = f"{failure['node']}-rank{rank}" if rank is not None else failure["node"]
    for marker in markers:
        if marker.kind == "failed" and marker.lane == lane:
            marker.label += ": the root cause"
            return


def failure_with_peers_named(failure: Optional[dict], node_addresses: dict[str, str]) -> Optional[dict]:
    """The recorded failure with each peer its errors name by address followed by its node, as the
    summary says them (:func:`~orchestrate.text.peers_named`): its own (the root cause) and the
    failures it caused."""
    if not failure or not node_addresses:
        return failure
    return {**failure, "describe": peers_named(str(failure.get("describe") or ""), node_addresses),
            "then": [{**then, "exception": peers_named(str(then.get("exception") or ""), node_addresses)}
                     for then in failure.get("then") or []]}


def _exit_words(code: Any) -> str:
    if code is None:
        return "no exit code"
    if isinstance(code, int) and code > 128:
        import signal

        try:
            return f"exit code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def _describe(event: dict) -> str:
    skip = {"time", "event", "node", ANEW_KEY}
    return ", ".join(_step_words(event) if k == "step" else f"{k} {v}"
                     for k, v in event.items() if k not in skip and v not in (None, "", []))


def _step_words(event: dict) -> str:
    """An event's step, and the count it is in where its attempt counted from 1 again (the
    summary's words): the step of a fault or a restart is the one the summary says."""
    return anew_step_words(event.get("step"), event.get(ANEW_KEY))
