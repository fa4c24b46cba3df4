"""The report's own SVG writer: round ticks, values to places, escaped text, valid namespaced XML,
the same page from the same run, and no plotting library imported to write one."""
from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from orchestrate.report import svg
from orchestrate.report.model import build_model
from orchestrate.report.page import MARKER_STYLES, render_html, timeline_svg
from tests.unit.test_report import ev, plan, started, steps

ROOT = Path(__file__).resolve().parents[2]
NS = {"svg": svg.SVG_NS}


def a_model():
    events = started() + [ev(4.9, "fault", node="node1", spec="pause:node1@t=4.9", action="pause", step=None),
                          ev(6.0, "restart", node="node1", cause="x", step=3),
                          ev(9.0, "node-exited", node="node0", exit_code=0)]
    return build_model({"run": plan(), "events": events, "progress": steps(0, 4.0, 5) + steps(1, 4.2, 5)})


def test_ticks_are_round_values_within_the_range():
    assert svg.nice_ticks(0, 37, most=5) == [0, 10, 20, 30]
    assert svg.nice_ticks(0, 37, most=8) == [0, 5, 10, 15, 20, 25, 30, 35]
    assert svg.nice_ticks(0, 1.02, most=6) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]  # no 0.6000000000000001
    assert svg.nice_ticks(-0.35, 0.35, most=4) == [-0.2, 0.0, 0.2]
    assert svg.nice_ticks(3, 3) == [3]
    assert svg.tick_labels([0, 0.2, 0.4]) == ["0.0", "0.2", "0.4"]
    assert svg.tick_labels([0, 50, 100]) == ["0", "50", "100"]


def test_values_land_at_the_plot_areas_edges():
    figure = svg.Figure("f", width=600)
    plot = figure.add_plot(svg.Box(0, 0, 600, 300), (0.0, 42.0), (-1.0, 3.0), x_label="t", y_label="v")
    area = plot.area
    assert (svg.number(12.3456), svg.number(-0.001), svg.number(3.0)) == ("12.35", "0", "3")  # short, no -0
    assert (plot.x(0.0), plot.x(42.0), plot.x(21.0)) == (area.left, area.right, area.left + area.width / 2)
    assert (plot.y(-1.0), plot.y(3.0)) == (area.bottom, area.top)  # y grows upwards
    assert area.left > 0 and area.right < 600 and area.bottom < 300  # room for the ticks' labels
    plot.bar(10.0, 42.0, 0.0, 1.0, "#000000", ident="bar")
    rect = ElementTree.fromstring(figure.to_svg()).find(".//svg:g[@id='bar']/svg:rect", NS)
    assert float(rect.get("x")) + float(rect.get("width")) == pytest.approx(area.right, abs=0.01)


def test_text_is_escaped_and_the_drawing_is_valid_namespaced_xml():
    figure = svg.Figure("f", width=600)
    plot = figure.add_plot(svg.Box(0, 0, 600, 200), (0.0, 1.0), (0.0, 1.0), x_label='a < b & "c"')
    plot.marker(0.5, 0.5, "D", "#ff0000", ident="m-0", title='kill:node1 <&> "now"', data_time=0.5)
    plot.legend([svg.LegendEntry("x<y & z", "#00ff00")], where="below")
    text = figure.to_svg()
    assert 'kill:node1 &lt;&amp;&gt; "now"' in text and "x&lt;y &amp; z" in text
    root = ElementTree.fromstring(text)
    assert root.tag == f"{{{svg.SVG_NS}}}svg" and re.fullmatch(r"0 0 600 \d+", root.get("viewBox"))
    group = root.find(".//svg:g[@id='m-0']", NS)
    assert dict(group.attrib) == {"id": "m-0", "data-time": "0.500"}
    assert group[0].tag == f"{{{svg.SVG_NS}}}title" and group[0].text == 'kill:node1 <&> "now"'
    assert 'a < b & "c"' in [t.text for t in root.iter(f"{{{svg.SVG_NS}}}text")]


def test_every_marker_style_is_a_symbol_and_an_unknown_one_is_refused():
    parent = ElementTree.Element("g")
    for symbol, _, _ in MARKER_STYLES.values():
        svg.marker(parent, symbol, 10, 10, 8, "#000000")
    with pytest.raises(ValueError, match="no marker symbol '%'"):
        svg.marker(parent, "%", 10, 10, 8, "#000000")


def test_a_legend_in_the_plot_keeps_off_the_data():
    figure = svg.Figure("f", width=600)
    plot = figure.add_plot(svg.Box(0, 0, 600, 300), (0.0, 10.0), (0.0, 10.0))
    plot.line([(t / 10, 10 - t / 10) for t in range(20)], "#000000")  # the upper left is taken
    plot.legend([svg.LegendEntry("rank 0", "#000000", swatch="line")])
    frame = ElementTree.fromstring(figure.to_svg()).find(".//svg:g[@class='legend']/svg:rect", NS)
    assert float(frame.get("x")) > plot.x(5.0)


def test_the_pages_charts_keep_their_ids_titles_and_times():
    model = a_model()
    page = render_html(model)
    charts = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(charts) == 3  # timeline, progress, step times
    for chart in charts:
        ElementTree.fromstring(chart)
    root = ElementTree.fromstring(timeline_svg(model))
    fault = root.find(".//svg:g[@id='marker-fault-0']", NS)
    assert fault.get("data-time") == "4.900" and "pause:node1@t=4.9" in fault[0].text
    assert root.find(".//svg:g[@id='marker-restart-0']/svg:line", NS).get("stroke-dasharray")  # run-wide: a line
    assert root.find(".//svg:g[@id='lane-node1-rank2']/svg:title", NS).text == "node1-rank2"
    assert re.search(r'<g id="phase-node0-rank1-0" data-time="3\.000"><title>node0-rank1: running from', page)
    assert re.search(r'<g id="progress-rank1"><title>rank 1: 5 steps, last step 5 at', page)
    ticks = [t for t in root.iter(f"{{{svg.SVG_NS}}}text") if t.text in ("node0", "rank 0")]
    assert [(t.text, t.get("font-weight")) for t in ticks] == [("node0", "bold"), ("rank 0", None)]


WRITE_A_PAGE = """
import hashlib, sys
from orchestrate.report.page import render_html
from tests.unit.test_report_svg import a_model
page = render_html(a_model())
assert "<svg" in page
print(hashlib.sha256(page.encode()).hexdigest(), sorted(m for m in sys.modules if m.startswith("matplotlib")))
"""


def test_a_page_needs_no_plotting_library_and_is_the_same_every_time():
    outputs = []
    for seed in ("1", "2"):  # another hash seed: no set or hash order leaks into the page
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", WRITE_A_PAGE], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.split(maxsplit=1))
    assert outputs[0][1].strip() == "[]", outputs[0][1]  # no matplotlib module imported
    assert outputs[0][0] == outputs[1][0] == hashlib.sha256(render_html(a_model()).encode()).hexdigest()


def test_an_infinite_or_missing_range_gets_no_ticks_rather_than_an_error():
    assert svg.nice_ticks(0.0, math.inf) == [] and svg.nice_ticks(math.nan, 1.0) == []
    assert svg.nice_ticks(3.0, 3.0) == [3.0]
