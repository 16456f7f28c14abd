"""Server-side presentation, as data for the templates that draw it: collapsible JSON
(a flat list of lines), folded long text, and the SVG charts' layout (the run waterfall,
the stats bars and lines: coordinates and texts). No JavaScript draws anything, and no
markup is written here: ``templates/history_app/includes/`` (``fold.html``,
``waterfall.html``, ``chart.html``) and, for the JSON trees, whose thousands of lines
Django's engine drew too slowly, the Jinja2 template ``templates/jinja2/history_app/json.html``
turn this data into HTML and SVG, escaping every value from a run as any template does,
under a strict CSP (classes, never inline styles).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse

from history_app.agent_history import jsonstream

FOLD_STRING_CHARS = 240  # a JSON string longer than this shows its head and "show all"
FOLD_TEXT_CHARS = 2000  # an observation longer than this, likewise
MAX_JSON_NODES = 4000  # past this, plain pretty-printed text (still folded)
# Deeper containers show as pretty-printed text inside the tree: the tree is drawn by
# recursion, and a value stored before the ingest depth limit may be hundreds deep.
MAX_JSON_DEPTH = 32
MAX_WATERFALL_BARS = 250  # the run page shows at most this many bars, whatever the run


@dataclass(frozen=True, slots=True)
class Fold:
    """Text shown folded: its ``head``, and the ``rest`` that hides behind "show all"
    (empty when the text is short enough to show whole). ``includes/fold.html`` draws it."""

    head: str
    rest: str = ""

    @property
    def total(self) -> int:
        return len(self.head) + len(self.rest)

    def __getitem__(self, name: str) -> Any:
        # A Django template looks a name up by subscript first: answering it here spares
        # the exception it raises on an object without one.
        return getattr(self, name)


def fold_text(text: str | None, limit: int = FOLD_TEXT_CHARS) -> Fold:
    """``text``; past ``limit`` characters the rest hides behind "show all"."""
    text = text or ""
    if len(text) <= limit:
        return Fold(text)
    return Fold(text[:limit], text[limit:])


@dataclass(slots=True)
class JsonLine:
    """One line of a JSON tree, in document order (the Jinja2 template
    ``templates/jinja2/history_app/json.html`` draws the tree from this flat list, without
    recursion). ``kind``: "open" (a container's summary: ``key``,
    ``text`` its bracket, ``size``), "close" (``text`` its bracket), "leaf" (a scalar:
    ``css`` its colour class, empty for ``{}`` and ``[]``; ``fold`` the text), "deep" (a
    container past ``MAX_JSON_DEPTH``: ``fold`` its pretty-printed text). ``key`` is the
    JSON text of the key (with its quotes) in an object, else empty."""

    kind: str
    key: str = ""
    text: str = ""
    css: str = ""
    fold: Fold | None = None
    comma: str = ""
    size: str = ""


@dataclass(frozen=True)
class JsonView:
    """How a JSON value (or text that may be one) is shown: a tree of ``lines``, or, when
    too big for a tree, ``pretty`` text, or, when it is not JSON, plain ``text``
    (``templates/jinja2/history_app/json.html`` draws each: ``{% json_tree view %}``)."""

    lines: list[JsonLine] | None = None
    pretty: Fold | None = None
    text: Fold | None = None


class _TooBig(Exception):
    pass


class _JsonLines:
    def __init__(self) -> None:
        self.lines: list[JsonLine] = []
        self.nodes = 0

    def value(self, value: Any, key: str, comma: str, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > MAX_JSON_NODES:
            raise _TooBig
        if isinstance(value, dict | list) and value and depth >= MAX_JSON_DEPTH:
            self.lines.append(JsonLine("deep", key, fold=_pretty_text(value), comma=comma))
        elif isinstance(value, dict) and value:
            self.container(value.items(), "{", "}", key, comma, f"{len(value)} keys", True, depth)
        elif isinstance(value, list) and value:
            self.container(enumerate(value), "[", "]", key, comma, f"{len(value)} items", False, depth)
        else:
            css, fold = self.scalar(value)
            self.lines.append(JsonLine("leaf", key, css=css, fold=fold, comma=comma))

    def container(
        self,
        items: Any,
        open_: str,
        close: str,
        key: str,
        comma: str,
        size: str,
        keyed: bool,
        depth: int,
    ) -> None:
        self.lines.append(JsonLine("open", key, text=open_, size=size))
        items = list(items)
        last = len(items) - 1
        for n, (child_key, child) in enumerate(items):
            shown_key = json.dumps(child_key, ensure_ascii=False) if keyed else ""
            self.value(child, shown_key, "," if n < last else "", depth + 1)
        self.lines.append(JsonLine("close", text=close, comma=comma))

    @staticmethod
    def scalar(value: Any) -> tuple[str, Fold]:
        if value is None:
            return "jz", Fold("null")
        if value is True or value is False:
            return "jt", Fold("true" if value else "false")
        if isinstance(value, int | float):
            return "jd", Fold(json.dumps(value))
        if isinstance(value, dict):
            return "", Fold("{}")
        if isinstance(value, list):
            return "", Fold("[]")
        return "js", fold_text(json.dumps(str(value), ensure_ascii=False), FOLD_STRING_CHARS)


def json_view(value: Any) -> JsonView:
    """A JSON value as a collapsible, syntax-coloured tree, keys in their original order;
    past ``MAX_JSON_NODES`` values, pretty-printed text."""
    lines = _JsonLines()
    try:
        lines.value(value, "", "")
    except _TooBig:
        return JsonView(pretty=_pretty_text(value))
    return JsonView(lines=lines.lines)


def _pretty_text(value: Any) -> Fold:
    """A JSON value as indented text of any depth, folded."""
    return fold_text(jsonstream.dumps(value, indent=2, ensure_ascii=False, default=str), FOLD_TEXT_CHARS * 5)


def _parse(text: str) -> tuple[bool, Any]:
    """(True, value) for JSON text, (False, None) for anything else: text that is not JSON,
    and JSON nested too deep for the parser (RecursionError), which stays readable as text."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def observation_view(text: str | None) -> JsonView:
    """An observation: a tree when it is a JSON object or array, else folded text."""
    stripped = (text or "").strip()
    if stripped[:1] in {"{", "["}:
        parsed, value = _parse(stripped)
        if parsed and isinstance(value, dict | list):
            return json_view(value)
    return JsonView(text=fold_text(text))


def json_text_view(text: str) -> JsonView:
    """Stored JSON text (a tool call's parameters) as a tree, or as text when it cannot be
    parsed."""
    parsed, value = _parse(text)
    if parsed:
        return json_view(value)
    return JsonView(text=fold_text(text))


# -- the waterfall ---------------------------------------------------------------------


@dataclass
class Bar:
    label: str
    kind: str  # "run", "iteration", "model", "tool", "error"
    start: datetime
    end: datetime | None
    href: str = ""
    # The source did not time it this finely: its place was worked out (agno's import).
    estimated: bool = False


def _ms(delta: float) -> str:
    """Seconds as a reader wants them on an axis: "250 µs", "2.25 ms", "120 ms", "1.5 s",
    "2.0 min" (a sub-millisecond run's ticks stay distinct)."""
    ms = delta * 1000
    if ms == 0:
        return "0 ms"
    if ms < 1:
        return f"{ms * 1000:.0f} µs"
    if ms < 10:
        return f"{ms:.3g} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def waterfall_bars(
    run: Any, parts: list[tuple[Any, list[Any]]], model_calls: dict[int, list[Any]] | None = None
) -> list[Bar]:
    """The run, the iterations shown, their model calls (``model_calls``: by iteration
    key) and their tool calls shown, where they carry start times: at most
    ``MAX_WATERFALL_BARS`` bars."""
    bars = []
    placed_tools = run.metadata.get("estimated_tool_times") if isinstance(run.metadata, dict) else None
    placed_tools = (
        {t for t in placed_tools if isinstance(t, str)} if isinstance(placed_tools, list) else set()
    )
    if run.started_at:
        estimated = isinstance(run.metadata, dict) and run.metadata.get("time_estimated") is True
        bars.append(Bar(run.agent_name or "run", "run", run.started_at, run.ended_at, estimated=estimated))
    for iteration, calls in parts:
        if iteration.started_at:
            label = f"iteration {iteration.index}" + (f" · {iteration.name}" if iteration.name else "")
            bars.append(
                Bar(
                    label,
                    "iteration",
                    iteration.started_at,
                    iteration.ended_at,
                    f"#iteration-{iteration.index}",
                    estimated=iteration.metadata.get("time_estimated") is True,
                )
            )
        for model_call in (model_calls or {}).get(iteration.pk, ()):
            if model_call.started_at:
                bars.append(
                    Bar(
                        f"{model_call.model or 'model'} call {model_call.number}",
                        "model",
                        model_call.started_at,
                        model_call.ended_at,
                        reverse(
                            "history_app:model_call_detail",
                            args=[run.project.slug, run.run_id, model_call.number],
                        ),
                        # Read as text from the JSON (true, 1 or "true" by database).
                        estimated=getattr(model_call, "time_estimated", None) in (True, 1, "true", "1"),
                    )
                )
        for call in calls:
            if call.started_at:
                kind = "error" if call.error else "tool"
                bars.append(
                    Bar(
                        call.tool,
                        kind,
                        call.started_at,
                        call.ended_at,
                        f"#iteration-{iteration.index}",
                        estimated=(call.call_id or call.tool) in placed_tools,
                    )
                )
    return bars[:MAX_WATERFALL_BARS]


@dataclass(frozen=True, slots=True)
class AxisTick:
    """A grid line at ``x`` (or ``y``) and the value written beside it."""

    x: float
    y: float
    anchor: str
    text: str


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One bar of the waterfall: its rectangle, its label (cut to fit) and its tooltip."""

    kind: str
    label: str
    tip: str
    href: str
    x: float
    y: float  # the rectangle's top
    width: float
    label_x: int
    label_y: int


@dataclass(frozen=True)
class Waterfall:
    """The waterfall's frame and rows, in SVG user units (``includes/waterfall.html``)."""

    width: int
    height: int
    top: int
    row_height: int
    span: str
    ticks: list[AxisTick]
    rows: list[WaterfallRow]

    @property
    def bar_height(self) -> int:
        return self.row_height - 6

    @property
    def grid_top(self) -> int:
        return self.top - 6


def waterfall_chart(
    run: Any, parts: list[tuple[Any, list[Any]]], model_calls: dict[int, list[Any]] | None = None
) -> Waterfall | None:
    """The timing of what the page shows, laid out for an SVG waterfall, or None when no
    iteration, model call or tool call is timed."""
    bars = waterfall_bars(run, parts, model_calls)
    if all(bar.kind == "run" for bar in bars):
        return None
    t0 = min(b.start for b in bars)
    t1 = max(max(b.end or b.start, b.start) for b in bars)
    span = max((t1 - t0).total_seconds(), 0.000_001)
    label_w, width, row_h, top = 230, 1000, 20, 24
    plot_w = width - label_w - 10
    height = top + row_h * len(bars) + 6
    ticks = [
        AxisTick(
            round(label_w + plot_w * i / 4, 1),
            top - 10,
            "start" if i == 0 else "end" if i == 4 else "middle",
            _ms(span * i / 4),
        )
        for i in range(5)
    ]
    rows = []
    for n, bar in enumerate(bars):
        y = top + n * row_h
        start = (bar.start - t0).total_seconds()
        length = max(((bar.end or bar.start) - bar.start).total_seconds(), 0)
        indent = {"run": 0, "iteration": 8, "model": 20, "tool": 20, "error": 20}[bar.kind]
        rows.append(
            WaterfallRow(
                kind=bar.kind,
                label=bar.label if len(bar.label) <= 34 else bar.label[:33] + "…",
                tip=f"{bar.label}: starts at {_ms(start)}, lasts {_ms(length) if bar.end else 'unknown'}"
                + (" (time estimated)" if bar.estimated else ""),
                href=bar.href,
                x=round(label_w + plot_w * start / span, 1),
                y=y + 3,
                width=round(max(plot_w * length / span, 2.0), 1),
                label_x=4 + indent,
                label_y=y + row_h - 6,
            )
        )
    return Waterfall(width, height, top, row_h, _ms(span), ticks, rows)


# -- bar charts for the stats page ---------------------------------------------------------


# The stats charts' frame: width, height, left margin, top margin, plot width and height.
_CHART = (1000, 220, 56, 14, 1000 - 56 - 8, 220 - 14 - 28)


def _nice_peak(peak: float) -> float:
    """The top of an axis: the peak rounded up to 1, 2, 4 or 5 times a power of ten, so
    that it and its half read as round numbers (24,461 → 40,000 and 20,000; 0.079 → 0.1)."""
    if peak <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(peak))
    return next(m * base for m in (1, 2, 4, 5, 10) if m * base >= peak * (1 - 1e-9))


def _tick(value: float, step: float) -> str:
    """An axis value with thousands separators and as many decimals as the step needs."""
    decimals = next((d for d in range(7) if abs(round(step, d) - step) <= step * 1e-9), 6)
    return f"{value:,.{decimals}f}"


@dataclass(frozen=True, slots=True)
class GridLine:
    """A horizontal grid line at ``y``, its value written at ``text_y``."""

    y: float
    text_y: float
    text: str


@dataclass(frozen=True, slots=True)
class ChartBar:
    """A bar (``x``, ``y``, ``width``, ``height``) with its tooltip, and the day written
    under it when it is one of the labelled ones (``label_x``)."""

    x: float
    y: float
    width: float
    height: float
    tip: str
    label: str | None
    label_x: float


@dataclass(frozen=True, slots=True)
class ChartPoint:
    x: float
    y: float
    tip: str


@dataclass(frozen=True)
class ChartSeries:
    """One line: its dots and its stretches (``points`` attributes; a day without a value
    breaks the line). ``number`` picks its colour class."""

    number: int
    dots: list[ChartPoint]
    stretches: list[str]


@dataclass(frozen=True)
class Chart:
    """A stats chart in SVG user units (``includes/chart.html``): the frame, its three
    grid lines (``grid``: y and value), and bars or lines, with the days under them
    (``days``)."""

    label: str
    grid: list[GridLine]
    bars: list[ChartBar]
    series: list[ChartSeries]
    days: list[AxisTick]
    width: int = _CHART[0]
    height: int = _CHART[1]
    left: int = _CHART[2]

    @property
    def right(self) -> int:
        return self.width - 8

    @property
    def grid_x(self) -> int:
        return self.left - 6

    @property
    def day_y(self) -> int:
        return self.height - 8


def _grid(peak: float, unit: str, prefix: str = "", shown: Any = None) -> list[GridLine]:
    """A chart's three grid lines and their values (``shown`` writes a value, unit
    included; else ``peak`` is expected round, see ``_nice_peak``)."""
    _, _, _, top, _, plot_h = _CHART
    grid = []
    for i in range(3):
        value = peak * i / 2
        y = top + plot_h - plot_h * i / 2
        text = shown(value) if shown else f"{_tick(value, peak / 2)}{unit}"
        grid.append(GridLine(round(y, 1), round(y + 4, 1), f"{prefix}{text}"))
    return grid


def bar_chart(
    points: list[tuple[str, float]], *, label: str, unit: str = "", prefix: str = ""
) -> Chart | None:
    """A vertical bar chart of (label, value) points, or None without points; the
    accessible table sits beside it."""
    if not points:
        return None
    peak = _nice_peak(max(value for _, value in points))
    width, height, left, top, plot_w, plot_h = _CHART
    step = plot_w / len(points)
    every = max(1, len(points) // 10)
    bars = []
    for n, (name, value) in enumerate(points):
        h = plot_h * value / peak
        x = left + n * step + step * 0.15
        bars.append(
            ChartBar(
                x=round(x, 1),
                y=round(top + plot_h - h, 1),
                width=round(step * 0.7, 1),
                height=round(max(h, 0.0), 1),
                tip=f"{name}: {prefix}{value:,g}{unit}",
                label=name[-5:] if n % every == 0 else None,
                label_x=round(x + step * 0.35, 1),
            )
        )
    return Chart(label, _grid(peak, unit, prefix), bars, [], [])


def line_chart(
    points: list[tuple[str, dict[str, float | None]]],
    *,
    series: list[str],
    label: str,
    milliseconds: bool = False,
) -> Chart | None:
    """Lines, one per name in ``series``, over (label, {name: value or None}) points; a
    day without a value breaks its line (values in milliseconds written as durations).
    None when there is no value. The accessible table sits beside it."""
    values = [v for _, point in points for v in point.values() if v is not None]
    if not points or not values:
        return None
    peak = (max(values) or 1) if milliseconds else _nice_peak(max(values))
    width, height, left, top, plot_w, plot_h = _CHART
    step = plot_w / len(points)
    shown = (lambda ms: _ms(ms / 1000)) if milliseconds else None  # noqa: E731
    lines = []
    for k, name in enumerate(series):
        dots, stretches = [], [[]]
        for n, (day, point) in enumerate(points):
            value = point.get(name)
            if value is None:
                stretches.append([])
                continue
            x = left + n * step + step / 2
            y = top + plot_h - plot_h * value / peak
            stretches[-1].append(f"{x:.1f},{y:.1f}")
            dots.append(
                ChartPoint(
                    round(x, 1), round(y, 1), f"{day} {name}: {shown(value) if shown else f'{value:,g}'}"
                )
            )
        lines.append(ChartSeries(k, dots, [" ".join(s) for s in stretches if len(s) > 1]))
    every = max(1, len(points) // 10)
    days = [
        AxisTick(round(left + n * step + step / 2, 1), height - 8, "middle", day[-5:])
        for n, (day, _) in enumerate(points)
        if n % every == 0
    ]
    return Chart(label, _grid(peak, "", shown=shown), [], lines, days)
