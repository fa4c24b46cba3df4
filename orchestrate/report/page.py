"""A run's report page, ``runs/<id>/report.html``: its story in time, from its recorded files.

Built from what the run directory holds, never by re-parsing printed text:

- ``run.json`` (the plan: command line, nodes, ranks, GPUs, image), ``outcome.json`` (how it
  ended: root cause, traceback, failures it caused, recoveries), ``events.jsonl`` (see
  :mod:`orchestrate.outcome.events`), the progress channel (``progress/rank<R>.jsonl``: steps and
  loss per rank), and for a ``bench`` run ``bench.json`` and ``bench.png``.

Two steps, as everywhere here: :func:`build_model` (pure) turns those records into lanes,
phases, markers and series; :func:`render_html` draws them. The charts are inline SVG,
written by our own small chart writer (:mod:`orchestrate.report.svg`, standard library only,
so that a page costs no plotting library's import): no JavaScript, nothing loaded from the
network, so the page opens offline and can be attached to a bug report. Each lane, phase and
marker is a ``<g>`` with an id (``lane-node0``, ``marker-fault-0``) whose first child is an
SVG ``<title>``, the browser's hover text, with its exact times; phases and markers carry
their time in ``data-time`` too.
"""
from __future__ import annotations

import base64
import html
import logging
import math
from pathlib import Path
from typing import Any, Optional

from orchestrate.text import ENDED_APART_HINT
from orchestrate.outcome.events import record_event
from orchestrate.report import svg
from orchestrate.report.model import IN_DEBUGGER, ReportModel, _fmt, build_model, load_run
from orchestrate.text import check_word, format_bandwidth, format_bytes, format_short_time

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
PHASE_COLOURS = {"bring-up": "#9ecae1", "rendezvous": "#fdd0a2", "running": "#74c476", "restarting": "#fdae6b",
                 "hung": "#d9d9d9", IN_DEBUGGER: "#9edae5"}
MARKER_STYLES = {  # kind: (marker symbol, see svg.marker; colour; what it is)
    "fault": ("v", "#d62728", "fault injected"),
    "detected": ("X", "#9467bd", "detected"),
    "killed": ("x", "#000000", "killed by the launcher"),
    "exit": ("o", "#636363", "exited"),
    "failed": ("s", "#d62728", "failed"),
    "lost": ("X", "#7f7f7f", "lost for good"),
    "restart": ("D", "#ff7f0e", "elastic restart"),
    "resumed": ("^", "#2ca02c", "resumed"),
    "oom": ("P", "#8c564b", "OOM kill"),
    "debugger": ("+", "#17becf", "stopped in its debugger"),
    "debugger-left": (".", "#17becf", "left its debugger"),
}
CHART_WIDTH = 1000.0
LANE_HEIGHT = 32.0  # one lane of the timeline
TIME_LABEL = "seconds since the run began"
# Markers that the progress and step-times charts repeat as vertical lines.
RUN_WIDE_MARKERS = ("fault", "restart", "resumed")


# Rendering -----------------------------------------------------------------------------------

def _time_range(model: ReportModel) -> tuple[float, float]:
    """Every chart's time axis, the same, so that they read together."""
    return 0.0, max(model.end, 1.0) * 1.02


def _rank_legend(series: list[tuple[int, Any]]) -> list[svg.LegendEntry]:
    """A line's legend entry per rank, in the colours its series are drawn in."""
    return [svg.LegendEntry(f"rank {rank}", svg.series_colour(i), swatch="line") for i, (rank, _) in enumerate(series)]


def _run_wide_lines(model: ReportModel, plot: svg.Plot) -> None:
    for marker in model.markers:
        if marker.kind in RUN_WIDE_MARKERS:
            plot.vertical_line(marker.time, MARKER_STYLES[marker.kind][1], style="dotted")


def timeline_svg(model: ReportModel) -> str:
    """One lane per node and a sub-lane per rank: phases as bars, moments as markers."""
    rows = len(model.lanes)
    y_of = {lane.key: rows - 1 - i for i, lane in enumerate(model.lanes)}
    figure = svg.Figure("timeline", CHART_WIDTH)
    ticks = [svg.Tick(y_of[lane.key], lane.name if lane.rank is not None else lane.node, bold=lane.rank is None)
             for lane in model.lanes]
    plot = figure.add_plot(svg.Box(0, 0, CHART_WIDTH, svg.TOP_PADDING + (rows + 0.2) * LANE_HEIGHT + svg.X_AXIS_HEIGHT),
                           _time_range(model), (-0.6, rows - 0.4), x_label=TIME_LABEL, y_ticks=ticks)
    for lane in model.lanes:
        y = y_of[lane.key]
        node_lane = lane.rank is None
        plot.band(y - 0.5, y + 0.5, "#f4f4f4" if node_lane else "#fbfbfb", ident=f"lane-{lane.key}", title=lane.key)
        height = 0.7 if node_lane else 0.4
        for i, phase in enumerate(lane.phases):
            plot.bar(phase.start, phase.start + max(phase.end - phase.start, model.end * 0.002), y - height / 2,
                     y + height / 2, PHASE_COLOURS.get(phase.name, "#bdbdbd"), edge="white",
                     ident=f"phase-{lane.key}-{i}", data_time=phase.start,
                     title=(f"{lane.key}: {phase.name} from {_fmt(phase.start)} to {_fmt(phase.end)}"
                            + (f" ({phase.detail})" if phase.detail else "")))
    counts: dict[str, int] = {}
    for marker in model.markers:
        symbol, colour, _ = MARKER_STYLES[marker.kind]
        index = counts[marker.kind] = counts.get(marker.kind, -1) + 1
        ident, at = f"marker-{marker.kind}-{index}", marker.time
        if marker.lane is None:
            plot.vertical_line(at, colour, style="dashed", width=1.2, ident=ident, title=marker.label, data_time=at)
        else:
            y = y_of.get(marker.lane, y_of.get(marker.lane.split("-rank")[0], 0))
            plot.marker(at, y, symbol, colour, size=11, edge="white", ident=ident, title=marker.label, data_time=at)
    plot.grid(horizontal=False)
    legend = [svg.LegendEntry(name, colour) for name, colour in PHASE_COLOURS.items()]
    for kind in dict.fromkeys(m.kind for m in model.markers):
        symbol, colour, words = MARKER_STYLES[kind]
        legend.append(svg.LegendEntry(words, colour, swatch=symbol))
    plot.legend(legend, where="below")
    return figure.to_svg()


def progress_svg(model: ReportModel) -> str:
    """Steps against time per rank, and loss where the workers report it."""
    series = sorted(model.progress.items())
    losses = {rank: [(t, loss) for t, _, loss in points if loss is not None and math.isfinite(loss)]
              for rank, points in series}  # a diverged run's nan or inf has no place on the axis
    with_loss = any(losses.values())
    figure = svg.Figure("progress", CHART_WIDTH)
    panel_width = (CHART_WIDTH - 20) / 2 if with_loss else CHART_WIDTH
    steps = figure.add_plot(svg.Box(0, 0, panel_width, 300), _time_range(model),
                            svg.padded_range([s for _, points in series for _, s, _ in points]),
                            x_label=TIME_LABEL, y_label="training step")
    panels = [steps]
    if with_loss:
        panels.append(figure.add_plot(svg.Box(panel_width + 20, 0, panel_width, 300), _time_range(model),
                                      svg.padded_range([v for points in losses.values() for _, v in points]),
                                      x_label=TIME_LABEL, y_label="loss"))
    for i, (rank, points) in enumerate(series):
        steps.line([(t, s) for t, s, _ in points], svg.series_colour(i), dots=3, ident=f"progress-rank{rank}",
                   title=f"rank {rank}: {len(points)} steps, last step {points[-1][1]} at {_fmt(points[-1][0])}")
        if with_loss and losses[rank]:
            panels[1].line(losses[rank], svg.series_colour(i), dots=3)
    for plot in panels:
        _run_wide_lines(model, plot)
        plot.grid()
    steps.legend(_rank_legend(series))
    return figure.to_svg()


# Points drawn per rank in the step-times chart (each the slowest step of its stretch).
STEP_TIME_POINTS = 60


def step_times_svg(model: ReportModel) -> str:
    """Seconds per training step against time, one line per rank."""
    series = sorted(model.step_times().items())
    shown = {rank: slowest_per_bin(points, STEP_TIME_POINTS) for rank, points in series}
    figure = svg.Figure("step-times", CHART_WIDTH)
    plot = figure.add_plot(svg.Box(0, 0, CHART_WIDTH, 280), _time_range(model),
                           svg.padded_range([d for points in shown.values() for _, d in points]),
                           x_label=TIME_LABEL, y_label="seconds per step")
    for i, (rank, points) in enumerate(series):
        plot.line(shown[rank], svg.series_colour(i), width=1, dots=3 if len(series) <= 8 else None,
                  ident=f"step-time-rank{rank}",
                  title=(f"rank {rank}: median {sorted(d for _, d in points)[len(points) // 2]:.3f} s a step,"
                         f" slowest {max(d for _, d in points):.3f} s"))
    _run_wide_lines(model, plot)
    plot.grid()
    if len(series) <= 16:
        plot.legend(_rank_legend(series))
    return figure.to_svg()


def slowest_per_bin(points: list[tuple[float, float]], most: int) -> list[tuple[float, float]]:
    """At most ``most`` points: the slowest step of each run of consecutive points, so that a
    long run's chart stays small and a slow step still shows."""
    if len(points) <= most:
        return points
    size = -(-len(points) // most)
    return [max(points[i:i + size], key=lambda p: p[1]) for i in range(0, len(points), size)]


def chaos_section(chaos: dict) -> list[str]:
    """The chaos check's schedule, what each fault struck, and the verdict, with a link to the
    undisturbed run's page (a sibling run directory)."""
    esc = html.escape
    status = chaos.get("status") or ("HOLDS" if chaos.get("holds") else "DOES NOT HOLD")
    words = {"HOLDS": "holds", "DOES NOT HOLD": "does not hold", "INCONCLUSIVE": "is inconclusive"}
    reference = str(chaos.get("reference_run"))
    parts = ["<h2>Chaos check</h2>",
             f'<p id="chaos-verdict" class="outcome {"succeeded" if chaos.get("holds") else "failed"}">'
             f"The verdict {words.get(status, esc(status.lower()))} (seed {esc(str(chaos.get('seed')))};"
             f' undisturbed run <a id="chaos-reference" href="../{esc(reference)}/report.html">{esc(reference)}</a>)'
             "</p>",
             _table(("fault", "fired at", "the attempt it struck had done", "saved before it", "the next attempt"),
                    [(r.get("fault"), r.get("fired_at"), r.get("struck"), r.get("saved_before"), r.get("next_attempt"))
                     for r in chaos.get("schedule", [])], "chaos-schedule")]
    if chaos.get("steps_redone") is not None:
        parts.append(f"<p>Steps redone in all: {esc(str(chaos['steps_redone']))}</p>")
    if chaos.get("comparisons"):
        parts.append(_table(("file", "kind", "equal", "largest difference", "where", "problem"),
                            [(c["path"], c["kind"], c["equal"], c.get("max_difference"), c.get("where", ""),
                              c.get("problem", "")) for c in chaos["comparisons"]], "chaos-comparisons"))
    if chaos.get("steps_compared"):
        parts.append(f"<p>{esc(chaos['steps_compared'])}</p>")
    if chaos.get("unchecked"):  # a verdict that holds, on less than it could have
        parts.append(f'<p id="chaos-unchecked">Not tested: {esc(chaos["unchecked"])}</p>')
    if chaos.get("held_before"):  # an earlier run's saves, which a job that resumes began every run from
        parts.append(f'<p id="chaos-held-before">Begun from saves the work directory held before the check:'
                     f' {esc(", ".join(chaos["held_before"]))} (written again by the undisturbed run; a job that'
                     ' resumes from its saves began every run there, not from its start)</p>')
    reasons = chaos.get("failures") or chaos.get("inconclusive") or []
    if reasons:
        parts.append("<ul>" + "".join(f"<li>{esc(f)}</li>" for f in reasons) + "</ul>")
    return parts


def hang_section(hang: dict) -> list[str]:
    """Where every rank waited: the groups of ranks by stack and their threads of the user's code,
    the first divergence of their collectives, the DataLoader workers of the ranks that wait for
    theirs, the ranks that did not answer (an elastic run's by node), each rank's last collectives."""
    esc = html.escape
    # a look that found the job working (the run was ended from outside while quiet): where each was
    parts = ["<h2>Where every rank waited</h2>" if hang.get("hung", True) else "<h2>Where every rank was</h2>"]
    if hang.get("headline"):
        parts.append(f'<p id="hang-headline">{esc(hang["headline"])}</p>')
    rows = [(", ".join(map(str, g.get("ranks", []))), g.get("where", ""),
             "\n".join(f"{f[0]}:{f[1]} in {f[2]}" for f in (g.get("stack") or [])[-4:])) for g in hang.get("groups", [])]
    parts.append(_table(("ranks", "where", "innermost frames"), rows, "hang-groups"))
    threads = [(", ".join(map(str, t.get("ranks", []))), t.get("name", ""), t.get("where", ""))
               for g in hang.get("groups", []) for t in g.get("threads") or []]
    if threads:
        parts.append("<p>The threads of your code beside each rank's main thread:</p>"
                     + _table(("ranks", "thread", "where"), threads, "hang-threads"))
    # the divergence once: where the headline says it already, not again
    if hang.get("divergence") and hang["divergence"] not in hang.get("headline", ""):
        parts.append(f'<p id="hang-divergence"><b>First divergence:</b> {esc(hang["divergence"])}</p>')
    # what the terminal said past where each rank is: the line a rank skipped a call at, the hints
    advice = hang.get("advice") or []
    if advice:
        parts.append('<ul id="hang-advice">' + "".join(f"<li>{esc(line)}</li>" for line in advice) + "</ul>")
    loaders = [(rank, "?" if w.get("worker") is None else w["worker"], w.get("pid"), w.get("where", ""),
                "\n".join(f"{f[0]}:{f[1]} in {f[2]}" for f in (w.get("stack") or [])[-4:]))
               for rank, workers in sorted((hang.get("loaders") or {}).items(), key=lambda item: int(item[0]))
               for w in workers]
    if loaders:
        parts.append("<p>The DataLoader worker processes of the ranks that wait for theirs:</p>" + _table(
            ("rank", "worker", "pid", "where", "innermost frames"), loaders, "hang-loaders"))
    absent = [(a.get("rank"), a.get("state"), a.get("detail")) for a in hang.get("activities", [])
              if a.get("state") in ("stopped", "exited", "absent", "busy")]
    if absent:
        parts.append(_table(("rank", "state", "why"), absent, "hang-ranks"))
    if hang.get("unheard_nodes"):  # an elastic run's nodes whose missing ranks have no known number
        parts.append('<ul id="hang-unheard-nodes">' + "".join(f"<li>{esc(line)}</li>" for line in hang["unheard_nodes"])
                     + "</ul>")
    last = [(rank, c.get("seq"), c.get("op"), c.get("group"), c.get("shapes"), c.get("at"), c.get("state"))
            for rank, entries in sorted((hang.get("collectives") or {}).items(), key=lambda item: int(item[0]))
            for c in entries[-4:]]
    if last:
        parts.append("<p>Each rank's last collectives:</p>" + _table(
            ("rank", "#", "op", "group", "tensors", "called at", "state"), last, "hang-collectives"))
    return parts


def _or_dash(value: Any) -> Any:
    """A value of a table's cell, or "-" where it is not known (None)."""
    return "-" if value is None else value


def recovery_cell(recovery: dict) -> str:
    """A recovery's time, as its row says it: none where its node rejoined but the job failed
    before its next step (``outcome.json``'s ``failed_before_step``), "-" where it is not known."""
    if recovery.get("failed_before_step"):
        return "none: the job failed before its next step"
    return "-" if recovery.get("recovery_s") is None else f"{recovery['recovery_s']:.1f} s"


def _table(headers: tuple[str, ...], rows: list[tuple[Any, ...]], table_id: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1200px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.outcome { font-weight: bold; padding: 0.4em 0.8em; display: inline-block; border-radius: 4px; }
.succeeded { background: #e5f5e0; } .failed { background: #fee0d2; } .running { background: #eee; }
.unrecorded { background: #fff3cd; }
code { background: #f6f6f6; padding: 0 0.2em; }
svg { max-width: 100%; height: auto; }
"""


def render_html(model: ReportModel) -> str:
    """The whole page (pure)."""
    esc = html.escape
    verdict = "succeeded" if model.succeeded else ("running" if model.succeeded is None else "failed")
    if model.succeeded is None and model.outcome != "running":  # ended (or not known to run), nobody said how
        verdict = "unrecorded"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        # No network, ever: the page says so to the browser too.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline';"
        " img-src data:\">",
        f"<title>ddp-compose run {esc(model.run_id)}</title><style>{STYLE}</style></head><body>",
        f"<h1>Run {esc(model.run_id)}</h1>",
        f'<p id="outcome" class="outcome {verdict}">{esc(model.outcome)}</p>',
        f'<p>Command: <code id="command">{esc(model.command or "-")}</code></p>',
        f'<p>Image: <code>{esc(model.image or "-")}</code>, torch {esc(model.torch or "unknown")}</p>',
        *([f'<p id="conditions">Nodes: {esc(model.conditions)}</p>'] if model.conditions else []),
        "<h2>Plan</h2>", _table(("node", "node rank", "global ranks", "GPUs"), model.plan_rows, "plan"),
        "<h2>Timeline</h2>",
        "<p>One lane per node and one per rank. Hover a bar or a marker for its exact times.</p>",
        f'<div id="timeline">{timeline_svg(model)}</div>' if model.lanes else "<p>No events recorded yet.</p>",
    ]
    if model.recoveries:
        parts += ["<h2>Recoveries</h2>", _table(
            ("node", "cause", "step before", "resumed from", "steps lost", "recovery"),
            [(r["node"], r["cause"], r.get("step_before"), _or_dash(r.get("resumed_from")),
              _or_dash(r.get("steps_lost")), recovery_cell(r))
             for r in model.recoveries],
            "recoveries")]
    if model.progress:
        parts += ["<h2>Progress</h2>", f'<div id="progress">{progress_svg(model)}</div>']
    if model.step_times():
        parts += ["<h2>Step times</h2>", "<p>Seconds each rank took per training step: a straggler stands out.</p>",
                  f'<div id="step-times">{step_times_svg(model)}</div>']
    if model.chaos:
        parts += chaos_section(model.chaos)
    if model.hang:
        parts += hang_section(model.hang)
    parts.append("<h2>The ending</h2>")
    failure = model.failure
    if failure:
        parts.append(f'<p id="root-cause"><b>Root cause:</b> {esc(failure.get("describe", ""))}</p>')
        if failure.get("users_frame"):
            parts.append(f'<p id="users-frame"><b>In your code:</b> <code>{esc(failure["users_frame"])}</code></p>')
        if failure.get("chain"):
            parts.append('<ul id="chain">' + "".join(f"<li>{esc(link)}</li>" for link in failure["chain"]) + "</ul>")
        if failure.get("reason") and failure["reason"] not in failure.get("describe", ""):
            parts.append(f"<p>{esc(failure['reason'])}</p>")
        if model.hint:
            parts.append(hint_paragraph(model.hint))
        if failure.get("divergence"):
            parts.append(f'<p id="divergence"><b>Where, by the ranks\' collective records:</b>'
                         f' {esc(failure["divergence"])}</p>')
        if failure.get("crashed"):
            parts.append(f'<p id="crashed"><b>Where it crashed:</b> {esc(failure["crashed"])}</p>')
        if failure.get("traceback"):
            parts.append(f'<pre id="traceback">{esc(failure["traceback"])}</pre>')
        if failure.get("not_at_barrier"):
            parts.append('<ul id="not-at-barrier">' + "".join(f"<li>{esc(line)}</li>"
                                                             for line in failure["not_at_barrier"]) + "</ul>")
        earlier = failure.get("earlier")
        if earlier:
            parts.append(f'<p id="earlier"><b>Before that:</b> {esc(earlier.get("describe", ""))}</p>')
            if earlier.get("users_frame"):
                parts.append(f'<p id="earlier-users-frame"><b>In your code:</b> <code>{esc(earlier["users_frame"])}</code></p>')
        if failure.get("repeated"):
            parts.append(f'<p id="repeated">{esc(failure["repeated"])}</p>')
        if failure.get("then"):
            parts.append("<p>Failures it caused:</p><ul>" + "".join(
                f"<li>{esc(t['node'])} rank {t['rank']}: {esc(t.get('exception') or '')}</li>" for t in failure["then"])
                + "</ul>")
        if earlier and earlier.get("last_lines"):
            parts.append(f"<p>Last lines of {esc(failure.get('node', ''))}'s attempt {earlier.get('attempt')},"
                         f" local rank {earlier.get('local_rank')}:</p>"
                         f'<pre id="earlier-lines">{esc(chr(10).join(earlier["last_lines"]))}</pre>')
        if failure.get("last_lines"):
            whose = esc(failure.get("node", "")) + ("" if failure.get("rank") is None else f" rank {failure['rank']}")
            if failure.get("last_lines_of"):  # whose they are, where not the failure's (a preempted node's rank)
                whose = esc(str(failure["last_lines_of"]).replace("/rank", " rank "))
            parts.append(f"<p>Last lines of {whose}:</p>"
                         f'<pre id="last-lines">{esc(chr(10).join(failure["last_lines"]))}</pre>')
    else:
        parts.append(f"<p>{esc(model.outcome)}</p>")
    if model.hint and not failure:
        parts.append(hint_paragraph(model.hint))
    if model.graces_run_out:
        parts.append('<ul id="grace-ran-out">' + "".join(f"<li>{esc(line)}</li>" for line in model.graces_run_out)
                     + "</ul>")
    if model.ended_apart:
        parts.append(f'<p id="ended-apart">Warning: the ranks\' collectives ended apart: {esc(model.ended_apart)}'
                     f' ({esc(ENDED_APART_HINT)})</p>')
    if model.apart:
        parts.append(f'<p id="apart">Warning: {esc(model.apart)}</p>')
    if model.written_by_several:
        parts.append('<ul id="written-by-several">' + "".join(f"<li>Warning: {esc(line)}</li>"
                                                             for line in model.written_by_several) + "</ul>")
    if model.shuffled_alike:
        parts.append('<ul id="shuffled-alike">' + "".join(f"<li>Warning: {esc(line)}</li>"
                                                          for line in model.shuffled_alike) + "</ul>")
    if model.loaded_from_before:
        parts.append(f'<p id="loaded-from-before">Note: {esc(model.loaded_from_before)}</p>')
    if model.logs:
        parts.append("<p>Full logs: " + ", ".join(f'<a href="{esc(name)}">{esc(name)}</a>' for name in model.logs)
                     + "</p>")
    if model.bench or model.bench_png:
        parts.append("<h2>Benchmark</h2>")
        if model.bench_png:
            data = base64.b64encode(model.bench_png).decode("ascii")
            parts.append(f'<img id="bench-plot" alt="benchmark plot" src="data:image/png;base64,{data}">')
        rows = (model.bench or {}).get("results") or []
        if rows and isinstance(rows[0], dict):
            keys = tuple(rows[0])
            parts.append(_table(tuple(bench_header(k) for k in keys),
                                [tuple(bench_cell(k, r.get(k)) for k in keys) for r in rows], "bench-table"))
    parts += ["<h2>Events</h2>", _table(("time", "node", "event", "details"),
                                       [(f"{t:.3f} s", n, k, d) for t, n, k, d in model.events], "events")]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def bench_header(key: str) -> str:
    """The bench table's column for a figure's key in bench.json, its unit left to the cells
    (``busbw_Bps`` -> ``busbw``, ``time_s`` -> ``time``, ``of_wire`` -> ``of wire``; ``ok`` ->
    ``check``, as the command line's table names it)."""
    if key == "ok":
        return "check"
    return key.removesuffix("_Bps").removesuffix("_s").replace("_", " ")


def bench_cell(key: str, value: Any) -> str:
    """A figure of the bench table with its unit, read from its key (``busbw_Bps`` 1.2e9 ->
    ``1.200 GB/s``, ``time_s`` 7e-05 -> ``70.0 us``, ``size`` 67108864 -> ``64M`` as the command
    line's table says it, ``of_wire`` 0.64 -> ``64%``, ``vs_local`` 1.1824 -> ``1.182x``, ``ok``
    False -> ``WRONG`` as the command line says that, with :func:`~orchestrate.text.check_word`);
    ``-`` for none, text or another bool as it is."""
    if value is None:
        return "-"
    if key == "ok" and isinstance(value, bool):
        return check_word(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if key == "size":
        return format_bytes(value, upper=True)
    if key.endswith("_Bps"):
        return format_bandwidth(value)
    if key.endswith("_s"):
        return format_short_time(value)
    if key.startswith("of_"):
        return f"{value:.0%}"
    if key.startswith("vs_"):
        return f"{value:.3f}x"
    return str(value) if isinstance(value, int) else f"{value:g}"  # (a count in full: 1000000, not 1e+06)


def hint_paragraph(hint: str) -> str:
    """The summary's hint (what to change, and why) as a paragraph of the page."""
    lines = hint.removeprefix("hint: ").splitlines()
    return f'<p id="hint"><b>Hint:</b> {"<br>".join(html.escape(line) for line in lines)}</p>'


def write_report(run_dir: Path, engine_state: str = "") -> Path:
    """Build ``run_dir/report.html`` from the run's records and return its path; ``engine_state``:
    what the engine said of a run whose outcome is not recorded (see ``UNRECORDED_ENDINGS``)."""
    path = run_dir / REPORT_FILE
    text = render_html(build_model({**load_run(run_dir), "engine_state": engine_state}))
    temporary = path.with_suffix(".html.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
    return path


def write_report_quietly(run_dir: Path) -> Optional[Path]:
    """:func:`write_report`, for the end of a command: a report is a view of the run, so
    failing to write it is logged, never the command's failure."""
    try:
        return write_report(run_dir)
    except Exception as exc:  # whatever the records hold, the run's own outcome stands
        log.warning("report of run %s not written: %s", run_dir.name, exc)
        return None


def end_record(run_dir: Path, **fields: Any) -> None:
    """A run's last event (``run-ended`` with ``fields``), then its report page."""
    record_event(run_dir, "run-ended", **fields)
    write_report_quietly(run_dir)
