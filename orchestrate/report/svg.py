"""A small SVG chart writer for the report page (standard library only).

A :class:`Figure` is one ``<svg>`` drawing of a fixed width; it holds one or more
:class:`Plot` panels, each a plot area with its own x and y ranges, axes, ticks, labels and
grid, onto which the page draws bands, bars, lines, markers and a legend. The figure grows to
the height its panels and legends need.

What the page relies on: an element given an ``ident`` is a ``<g id="...">`` whose first
child is its ``<title>`` (the browser's hover text), with a ``data-time`` attribute where one
is given, and nothing else on the ``<g>``; the same drawing calls write the same text; text
stays ``<text>``. Importing this module is cheap: matplotlib, which drew the page before, cost
about 0.4 s of CPU to import.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Optional, Sequence

SVG_NS = "http://www.w3.org/2000/svg"
# matplotlib's tab10: the colours a series cycles through.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
FONT_SIZE = 12
LEGEND_FONT_SIZE = 11
FRAME_COLOUR = "#333333"
GRID_COLOUR = "#b0b0b0"
TICK_LENGTH = 4
# Room below a plot area for the x tick labels and the x axis label.
X_AXIS_HEIGHT = TICK_LENGTH + 4 + FONT_SIZE + 8 + FONT_SIZE + 4
TOP_PADDING = 8  # so that the top tick label is not cut in half
RIGHT_PADDING = 14
DASHES = {"solid": None, "dashed": "6 3", "dotted": "1.5 2.5"}


def series_colour(index: int) -> str:
    """The colour of the ``index``-th series (0-based), cycling through :data:`PALETTE`."""
    return PALETTE[index % len(PALETTE)]


def number(value: float) -> str:
    """A coordinate as short, stable text: two decimals at most, no trailing zeros, no ``-0``."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def text_width(text: str, size: float, bold: bool = False) -> float:
    """About how wide ``text`` is drawn at ``size`` (an average character of a sans-serif font):
    enough to make room for labels, without measuring fonts."""
    return len(text) * size * (0.66 if bold else 0.6)


def nice_ticks(low: float, high: float, most: int = 8) -> list[float]:
    """At most about ``most`` round values in ``[low, high]``, a step of 1, 2 or 5 times a power
    of ten apart (0..37 with ``most=5``: 0, 10, 20, 30)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []  # an infinite end (a time of Infinity in a record) gets no ticks, not an error
    if not high > low or most < 1:
        return [low]
    rough = (high - low) / most
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough * (1 - 1e-9))
    decimals = max(0, -math.floor(math.log10(step)))  # round(): 0.6, not 0.6000000000000001
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    return [round(i * step, decimals) for i in range(first, last + 1)]


def tick_labels(values: Sequence[float]) -> list[str]:
    """Tick values as text, with as many decimals as their step needs and no more."""
    if len(values) < 2:
        return [f"{v:g}" for v in values]
    step = abs(values[1] - values[0])
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    return [f"{v:.{decimals}f}" for v in values]


def padded_range(values: Sequence[float], fraction: float = 0.05) -> tuple[float, float]:
    """The span of ``values`` with ``fraction`` of it added at each end (matplotlib's margins);
    a single value gets a span of its own."""
    low, high = min(values, default=0.0), max(values, default=1.0)
    if high == low:
        spread = abs(low) * 0.05 or 1.0
        return low - spread, high + spread
    pad = (high - low) * fraction
    return low - pad, high + pad


@dataclass(frozen=True)
class Tick:
    """A labelled place on an axis."""

    value: float
    label: str
    bold: bool = False


@dataclass(frozen=True)
class LegendEntry:
    """One line of a legend: ``swatch`` is ``"box"``, ``"line"``, or a marker symbol."""

    label: str
    colour: str
    swatch: str = "box"


@dataclass(frozen=True)
class Box:
    """A rectangle of the drawing, in its units (y grows downwards)."""

    left: float
    top: float
    width: float
    height: float

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


def _element(parent: ElementTree.Element, tag: str, attributes: dict[str, object],
             text: Optional[str] = None) -> ElementTree.Element:
    child = ElementTree.SubElement(parent, tag, {k: number(v) if isinstance(v, (int, float)) else str(v)
                                                 for k, v in attributes.items() if v is not None})
    child.text = text
    return child


def _item(parent: ElementTree.Element, ident: Optional[str], title: Optional[str],
          data_time: Optional[float]) -> ElementTree.Element:
    """Where an element is drawn: ``parent`` itself, or a ``<g id=...>`` in it whose first child
    is the hover text (a title needs an ident)."""
    if ident is None:
        return parent
    attributes = {"id": ident}
    if data_time is not None:
        attributes["data-time"] = f"{data_time:.3f}"
    group = _element(parent, "g", attributes)
    if title is not None:
        _element(group, "title", {}, title)
    return group


# Marker outlines, as corners of a polygon around (0, 0) with a half-size of 1 (y downwards).
_PLUS = [(-0.35, -1), (0.35, -1), (0.35, -0.35), (1, -0.35), (1, 0.35), (0.35, 0.35), (0.35, 1), (-0.35, 1),
         (-0.35, 0.35), (-1, 0.35), (-1, -0.35), (-0.35, -0.35)]
POLYGONS = {
    "s": [(-0.85, -0.85), (0.85, -0.85), (0.85, 0.85), (-0.85, 0.85)],
    "D": [(0, -1.1), (1.1, 0), (0, 1.1), (-1.1, 0)],
    "^": [(0, -1), (1, 0.75), (-1, 0.75)],
    "v": [(0, 1), (1, -0.75), (-1, -0.75)],
    "P": _PLUS,
    "X": [((x - y) * 0.8, (x + y) * 0.8) for x, y in _PLUS],  # the plus turned by 45 degrees
}
STROKES = {"x": [((-0.8, -0.8), (0.8, 0.8)), ((-0.8, 0.8), (0.8, -0.8))], "+": [((-1, 0), (1, 0)), ((0, -1), (0, 1))]}
MARKER_SYMBOLS = frozenset(POLYGONS) | frozenset(STROKES) | {"o", "."}


def marker(parent: ElementTree.Element, symbol: str, x: float, y: float, size: float, colour: str,
           edge: Optional[str] = None) -> ElementTree.Element:
    """A marker symbol centred on (x, y), ``size`` across: ``o`` circle, ``.`` dot, ``s`` square,
    ``D`` diamond, ``^``/``v`` triangles, ``P`` plus and ``X`` cross (filled), ``+`` and ``x``
    (lines)."""
    half = size / 2
    if symbol in ("o", "."):
        return _element(parent, "circle", {"cx": x, "cy": y, "r": half * (0.5 if symbol == "." else 1.0),
                                           "fill": colour, "stroke": edge, "stroke-width": 1 if edge else None})
    if symbol in STROKES:
        segments = "".join(f"M{number(x + ax * half)} {number(y + ay * half)}L{number(x + bx * half)} "
                           f"{number(y + by * half)}" for (ax, ay), (bx, by) in STROKES[symbol])
        return _element(parent, "path", {"d": segments, "fill": "none", "stroke": colour, "stroke-width": 2})
    if symbol not in POLYGONS:
        raise ValueError(f"no marker symbol {symbol!r}: one of {', '.join(sorted(MARKER_SYMBOLS))}")
    corners = " ".join(f"{number(x + dx * half)},{number(y + dy * half)}" for dx, dy in POLYGONS[symbol])
    return _element(parent, "polygon", {"points": corners, "fill": colour, "stroke": edge,
                                        "stroke-width": 1 if edge else None, "stroke-linejoin": "miter"})


class Figure:
    """One SVG drawing, ``width`` units across, of one or more plots.

    Args:
        name: prefixes the ids the drawing makes for itself (its clip paths), which must be
            unique in the page that holds several figures.
        width: the drawing's width; its height is what its plots and legends need.
    """

    def __init__(self, name: str, width: float = 1000.0) -> None:
        self.name = name
        self.width = width
        self.height = 0.0
        self.root = ElementTree.Element("svg", {"xmlns": SVG_NS})
        self.defs = _element(self.root, "defs", {})
        self.plots: list[Plot] = []

    def add_plot(self, box: Box, x_range: tuple[float, float], y_range: tuple[float, float], *,
                 x_label: str = "", y_label: str = "", y_ticks: Optional[list[Tick]] = None) -> "Plot":
        """A plot filling ``box`` (its tick labels and axis labels included); ``y_ticks`` default
        to round values of ``y_range``."""
        plot = Plot(self, box, x_range, y_range, x_label=x_label, y_label=y_label, y_ticks=y_ticks)
        self.plots.append(plot)
        return plot

    def reach(self, bottom: float) -> None:
        """Grow the drawing down to ``bottom``."""
        self.height = max(self.height, bottom)

    def to_svg(self) -> str:
        """The drawing as an ``<svg>`` element's text, for inlining in HTML; its viewBox lets it
        scale with the page."""
        height = math.ceil(self.height + 4)
        self.root.set("viewBox", f"0 0 {number(self.width)} {height}")
        self.root.set("width", number(self.width))
        self.root.set("height", str(height))
        self.root.set("font-family", "DejaVu Sans, Arial, Helvetica, sans-serif")
        self.root.set("font-size", str(FONT_SIZE))
        return ElementTree.tostring(self.root, encoding="unicode")


class Plot:
    """A plot area in a :class:`Figure`: values map to the drawing's units through ``x_range``
    and ``y_range`` (y grows upwards, as on paper). Drawn in layers, whatever the order of the
    calls: bands, then grid lines, then the data, then the frame, ticks and legend."""

    def __init__(self, figure: Figure, box: Box, x_range: tuple[float, float], y_range: tuple[float, float], *,
                 x_label: str, y_label: str, y_ticks: Optional[list[Tick]]) -> None:
        self.figure, self.box = figure, box
        self.x_range, self.y_range = x_range, y_range
        self.x_label, self.y_label = x_label, y_label
        room = box.height - X_AXIS_HEIGHT - TOP_PADDING
        provisional = nice_ticks(*y_range, most=max(2, int(room / 32)))
        self.y_ticks = y_ticks if y_ticks is not None else [
            Tick(v, label) for v, label in zip(provisional, tick_labels(provisional))]
        left_room = max((text_width(t.label, FONT_SIZE, t.bold) for t in self.y_ticks), default=0.0) + TICK_LENGTH + 6
        if y_label:
            left_room += FONT_SIZE + 10
        self.area = Box(box.left + left_room, box.top + TOP_PADDING, box.width - left_room - RIGHT_PADDING, room)
        xs = nice_ticks(*x_range, most=max(2, int(self.area.width / 60)))
        self.x_ticks = [Tick(v, label) for v, label in zip(xs, tick_labels(xs))]
        self.data_points: list[tuple[float, float]] = []  # where the data lies, for the legend's place
        index = len(figure.plots)
        clip = _element(figure.defs, "clipPath", {"id": f"{figure.name}-clip-{index}"})
        _element(clip, "rect", {"x": self.area.left, "y": self.area.top, "width": self.area.width,
                                "height": self.area.height})
        group = _element(figure.root, "g", {"class": f"plot plot-{index}"})
        self.bands = _element(group, "g", {"class": "bands", "clip-path": f"url(#{figure.name}-clip-{index})"})
        self.grid_layer = _element(group, "g", {"class": "grid", "stroke": GRID_COLOUR, "stroke-opacity": "0.3"})
        self.data = _element(group, "g", {"class": "data", "clip-path": f"url(#{figure.name}-clip-{index})"})
        self.axes = _element(group, "g", {"class": "axes"})
        self.legend_layer = _element(group, "g", {"class": "legend", "font-size": str(LEGEND_FONT_SIZE)})
        self._draw_axes()
        figure.reach(box.bottom)

    def x(self, value: float) -> float:
        """Where ``value`` lies across the drawing."""
        low, high = self.x_range
        return self.area.left + (value - low) / (high - low) * self.area.width

    def y(self, value: float) -> float:
        """Where ``value`` lies down the drawing (the range's top at the area's top)."""
        low, high = self.y_range
        return self.area.bottom - (value - low) / (high - low) * self.area.height

    # What the data is drawn with ----------------------------------------------------------------

    def band(self, low: float, high: float, colour: str, *, ident: Optional[str] = None,
             title: Optional[str] = None) -> None:
        """A horizontal band across the whole plot, from ``low`` to ``high`` in y."""
        top, bottom = self.y(high), self.y(low)
        _element(_item(self.bands, ident, title, None), "rect", {
            "x": self.area.left, "y": top, "width": self.area.width, "height": bottom - top, "fill": colour})

    def bar(self, start: float, end: float, low: float, high: float, colour: str, *, edge: Optional[str] = None,
            ident: Optional[str] = None, title: Optional[str] = None, data_time: Optional[float] = None) -> None:
        """A bar from ``start`` to ``end`` in x and ``low`` to ``high`` in y."""
        left, top = self.x(start), self.y(high)
        _element(_item(self.data, ident, title, data_time), "rect", {
            "x": left, "y": top, "width": self.x(end) - left, "height": self.y(low) - top, "fill": colour,
            "stroke": edge, "stroke-width": 1 if edge else None})

    def line(self, points: Sequence[tuple[float, float]], colour: str, *, width: float = 1.5,
             dots: Optional[float] = None, ident: Optional[str] = None, title: Optional[str] = None) -> None:
        """A polyline through ``points``, with a dot ``dots`` across on each point where given."""
        where = [(self.x(px), self.y(py)) for px, py in points]
        self.data_points += where
        group = _item(self.data, ident, title, None)
        text = " ".join(f"{number(a)},{number(b)}" for a, b in where)
        _element(group, "polyline", {"points": text, "fill": "none", "stroke": colour, "stroke-width": width,
                                     "stroke-linejoin": "round"})
        if dots and where:
            # One path for every dot: a zero-length stroke with round caps draws a disc, which
            # keeps a long series to one element.
            _element(group, "path", {"d": "".join(f"M{number(a)} {number(b)}h0" for a, b in where), "stroke": colour,
                                     "stroke-width": dots, "stroke-linecap": "round", "fill": "none"})

    def vertical_line(self, at: float, colour: str, *, style: str = "dashed", width: float = 1.0,
                      ident: Optional[str] = None, title: Optional[str] = None,
                      data_time: Optional[float] = None) -> None:
        """A line across the whole plot at ``at`` in x; ``style`` is solid, dashed or dotted."""
        x = self.x(at)
        _element(_item(self.data, ident, title, data_time), "line", {
            "x1": x, "y1": self.area.top, "x2": x, "y2": self.area.bottom, "stroke": colour,
            "stroke-width": width, "stroke-dasharray": DASHES[style]})

    def marker(self, at: float, value: float, symbol: str, colour: str, *, size: float = 10.0,
               edge: Optional[str] = None, ident: Optional[str] = None, title: Optional[str] = None,
               data_time: Optional[float] = None) -> None:
        """One marker symbol (see :func:`marker`) at (``at``, ``value``)."""
        marker(_item(self.data, ident, title, data_time), symbol, self.x(at), self.y(value), size, colour, edge)

    def grid(self, vertical: bool = True, horizontal: bool = True) -> None:
        """Grid lines at the ticks, under the data."""
        if vertical:
            for tick in self.x_ticks:
                x = self.x(tick.value)
                _element(self.grid_layer, "line", {"x1": x, "y1": self.area.top, "x2": x, "y2": self.area.bottom})
        if horizontal:
            for tick in self.y_ticks:
                y = self.y(tick.value)
                _element(self.grid_layer, "line", {"x1": self.area.left, "y1": y, "x2": self.area.right, "y2": y})

    # Axes and legend ----------------------------------------------------------------------------

    def _draw_axes(self) -> None:
        area = self.area
        _element(self.axes, "rect", {"x": area.left, "y": area.top, "width": area.width, "height": area.height,
                                     "fill": "none", "stroke": FRAME_COLOUR, "stroke-width": 1})
        for tick in self.x_ticks:
            x = self.x(tick.value)
            _element(self.axes, "line", {"x1": x, "y1": area.bottom, "x2": x, "y2": area.bottom + TICK_LENGTH,
                                         "stroke": FRAME_COLOUR})
            _element(self.axes, "text", {"x": x, "y": area.bottom + TICK_LENGTH + 4 + FONT_SIZE,
                                         "text-anchor": "middle"}, tick.label)
        for tick in self.y_ticks:
            y = self.y(tick.value)
            _element(self.axes, "line", {"x1": area.left - TICK_LENGTH, "y1": y, "x2": area.left, "y2": y,
                                         "stroke": FRAME_COLOUR})
            _element(self.axes, "text", {"x": area.left - TICK_LENGTH - 4, "y": y, "dy": "0.35em",
                                         "text-anchor": "end", "font-weight": "bold" if tick.bold else None},
                     tick.label)
        if self.x_label:
            _element(self.axes, "text", {"x": area.left + area.width / 2, "y": area.bottom + X_AXIS_HEIGHT - 4,
                                         "text-anchor": "middle"}, self.x_label)
        if self.y_label:
            x, y = self.box.left + FONT_SIZE + 2, area.top + area.height / 2  # the baseline: letters lie left of it
            _element(self.axes, "text", {"x": x, "y": y, "text-anchor": "middle",
                                         "transform": f"rotate(-90 {number(x)} {number(y)})"}, self.y_label)

    def legend(self, entries: Sequence[LegendEntry], where: str = "best") -> None:
        """A legend: ``below`` the plot in rows of equal columns (the drawing grows to hold it),
        or ``best``: a framed column in the corner of the plot that covers the fewest data
        points, or below where that column would not fit."""
        if not entries:
            return
        line_height = LEGEND_FONT_SIZE + 6
        widths = [28 + text_width(e.label, LEGEND_FONT_SIZE) for e in entries]
        framed = Box(0, 0, max(widths) + 12, line_height * len(entries) + 8)
        if where == "best" and framed.height <= self.area.height - 8 and framed.width <= self.area.width / 2:
            box = self._emptiest_corner(framed)
            _element(self.legend_layer, "rect", {"x": box.left, "y": box.top, "width": box.width,
                                                 "height": box.height, "fill": "white", "fill-opacity": "0.85",
                                                 "stroke": "#cccccc", "rx": 3})
            for i, entry in enumerate(entries):
                self._legend_entry(entry, box.left + 6, box.top + 4 + line_height * (i + 0.5))
            return
        cell = max(widths) + 16  # columns of one width, so that the entries line up
        per_row = max(1, min(len(entries), int((self.area.width + 16) // cell)))
        top = self.area.bottom + X_AXIS_HEIGHT + 6
        rows = -(-len(entries) // per_row)
        first_left = self.area.left + (self.area.width - (per_row * cell - 16)) / 2
        for i, entry in enumerate(entries):
            row, column = divmod(i, per_row)
            self._legend_entry(entry, first_left + column * cell, top + line_height * (row + 0.5))
        self.figure.reach(top + line_height * rows + 4)

    def _emptiest_corner(self, legend: Box) -> Box:
        area, gap = self.area, 6
        corners = [Box(area.left + gap, area.top + gap, legend.width, legend.height),
                   Box(area.right - gap - legend.width, area.top + gap, legend.width, legend.height),
                   Box(area.left + gap, area.bottom - gap - legend.height, legend.width, legend.height),
                   Box(area.right - gap - legend.width, area.bottom - gap - legend.height, legend.width,
                       legend.height)]

        def covered(box: Box) -> int:
            return sum(box.left <= x <= box.right and box.top <= y <= box.bottom for x, y in self.data_points)

        return min(corners, key=covered)  # the first of equals: upper left, as matplotlib prefers

    def _legend_entry(self, entry: LegendEntry, x: float, middle: float) -> None:
        if entry.swatch == "box":
            _element(self.legend_layer, "rect", {"x": x + 2, "y": middle - 5, "width": 18, "height": 10,
                                                 "fill": entry.colour})
        elif entry.swatch == "line":
            _element(self.legend_layer, "line", {"x1": x, "y1": middle, "x2": x + 22, "y2": middle,
                                                 "stroke": entry.colour, "stroke-width": 1.5})
        else:
            marker(self.legend_layer, entry.swatch, x + 11, middle, 9, entry.colour)
        _element(self.legend_layer, "text", {"x": x + 28, "y": middle, "dy": "0.35em"}, entry.label)
