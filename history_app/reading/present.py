"""Server-side presentation: highlighted, collapsible JSON, folded long text, and SVG
charts (the run waterfall, the stats bars). No JavaScript draws anything: each function
returns escaped HTML or SVG that works with scripts off and under a strict CSP (classes,
never inline styles).

Every value from a run passes through ``escape`` before it is placed in markup; the only
markup is ours.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from history_app.agent_history import jsonstream

FOLD_STRING_CHARS = 240  # a JSON string longer than this shows its head and "show all"
FOLD_TEXT_CHARS = 2000  # an observation longer than this, likewise
MAX_JSON_NODES = 4000  # past this, plain pretty-printed text (still folded)
# Deeper containers show as pretty-printed text inside the tree: the tree is drawn by
# recursion, and a value stored before the ingest depth limit may be hundreds deep.
MAX_JSON_DEPTH = 32
MAX_WATERFALL_BARS = 250  # the run page shows at most this many bars, whatever the run


def _show_all(head: str, rest: str, unit: str) -> str:
    total = len(head) + len(rest)
    return (
        f'{escape(head)}<details class="more"><summary>… show all ({total:,} {unit})</summary>'
        f"{escape(rest)}</details>"
    )


def fold_text(text: str | None, limit: int = FOLD_TEXT_CHARS) -> SafeString:
    """Escaped text; past ``limit`` characters the rest hides behind "show all"."""
    text = text or ""
    if len(text) <= limit:
        return mark_safe(escape(text))
    return mark_safe(_show_all(text[:limit], text[limit:], "characters"))


class _TooBig(Exception):
    pass


class _JsonHtml:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.nodes = 0

    def value(self, value: Any, prefix: str, comma: str, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > MAX_JSON_NODES:
            raise _TooBig
        out = self.parts.append
        if isinstance(value, dict | list) and value and depth >= MAX_JSON_DEPTH:
            out(f'<div class="jl">{prefix}<pre class="json">{_pretty_text(value)}</pre>{comma}</div>')
        elif isinstance(value, dict) and value:
            self.container(value.items(), "{", "}", prefix, comma, f"{len(value)} keys", True, depth)
        elif isinstance(value, list) and value:
            self.container(enumerate(value), "[", "]", prefix, comma, f"{len(value)} items", False, depth)
        else:
            out(f'<div class="jl">{prefix}{self.scalar(value)}{comma}</div>')

    def container(
        self, items: Any, open_: str, close: str, prefix: str, comma: str, size: str, keyed: bool, depth: int
    ) -> None:
        out = self.parts.append
        out(f'<details class="jc" open><summary>{prefix}{open_}<span class="jn"> {size} </span></summary>')
        out('<div class="jb">')
        items = list(items)
        for n, (key, child) in enumerate(items):
            child_prefix = (
                f'<span class="jk">{escape(json.dumps(key, ensure_ascii=False))}</span>: ' if keyed else ""
            )
            self.value(child, child_prefix, "," if n < len(items) - 1 else "", depth + 1)
        out(f"</div>{close}{comma}</details>")

    @staticmethod
    def scalar(value: Any) -> str:
        if value is None:
            return '<span class="jz">null</span>'
        if value is True or value is False:
            return f'<span class="jt">{"true" if value else "false"}</span>'
        if isinstance(value, int | float):
            return f'<span class="jd">{escape(json.dumps(value))}</span>'
        if isinstance(value, dict):
            return "{}"
        if isinstance(value, list):
            return "[]"
        text = json.dumps(str(value), ensure_ascii=False)
        if len(text) > FOLD_STRING_CHARS:
            return f'<span class="js">{_show_all(text[:FOLD_STRING_CHARS], text[FOLD_STRING_CHARS:], "characters")}</span>'
        return f'<span class="js">{escape(text)}</span>'


def highlight_json(value: Any) -> SafeString:
    """A JSON value as collapsible, syntax-coloured HTML, keys in their original order."""
    renderer = _JsonHtml()
    try:
        renderer.value(value, "", "")
    except _TooBig:
        return mark_safe(f'<pre class="json">{_pretty_text(value)}</pre>')
    return mark_safe('<div class="json tree">' + "".join(renderer.parts) + "</div>")


def _pretty_text(value: Any) -> SafeString:
    """A JSON value as indented text of any depth, folded."""
    return fold_text(jsonstream.dumps(value, indent=2, ensure_ascii=False, default=str), FOLD_TEXT_CHARS * 5)


def _parse(text: str) -> tuple[bool, Any]:
    """(True, value) for JSON text, (False, None) for anything else: text that is not JSON,
    and JSON nested too deep for the parser (RecursionError), which stays readable as text."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def highlight_observation(text: str | None) -> SafeString:
    """An observation: highlighted when it is a JSON object or array, else folded text."""
    stripped = (text or "").strip()
    if stripped[:1] in {"{", "["}:
        parsed, value = _parse(stripped)
        if parsed and isinstance(value, dict | list):
            return highlight_json(value)
    return mark_safe(f'<pre class="text">{fold_text(text)}</pre>')


def highlight_json_text(text: str) -> SafeString:
    """Stored JSON text (a tool call's parameters) highlighted, or shown as text when it
    cannot be parsed."""
    parsed, value = _parse(text)
    if parsed:
        return highlight_json(value)
    return mark_safe(f'<pre class="text">{fold_text(text)}</pre>')


# -- the waterfall ---------------------------------------------------------------------


@dataclass
class Bar:
    label: str
    kind: str  # "run", "iteration", "model", "tool", "error"
    start: datetime
    end: datetime | None
    href: str = ""


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
    if run.started_at:
        bars.append(Bar(run.agent_name or "run", "run", run.started_at, run.ended_at))
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
                    )
                )
        for call in calls:
            if call.started_at:
                kind = "error" if call.error else "tool"
                bars.append(
                    Bar(call.tool, kind, call.started_at, call.ended_at, f"#iteration-{iteration.index}")
                )
    return bars[:MAX_WATERFALL_BARS]


def waterfall_svg(
    run: Any, parts: list[tuple[Any, list[Any]]], model_calls: dict[int, list[Any]] | None = None
) -> SafeString | None:
    """The timing of what the page shows as an SVG waterfall, or None when no iteration,
    model call or tool call is timed."""
    bars = waterfall_bars(run, parts, model_calls)
    if all(bar.kind == "run" for bar in bars):
        return None
    t0 = min(b.start for b in bars)
    t1 = max(max(b.end or b.start, b.start) for b in bars)
    span = max((t1 - t0).total_seconds(), 0.000_001)
    label_w, width, row_h, top = 230, 1000, 20, 24
    plot_w = width - label_w - 10
    height = top + row_h * len(bars) + 6
    out = [
        f'<svg class="waterfall" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Waterfall of iterations and tool calls over {_ms(span)}" '
        f'preserveAspectRatio="xMinYMin meet">'
    ]
    for i in range(5):
        x = label_w + plot_w * i / 4
        out.append(f'<line class="wf-grid" x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height}"/>')
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<text class="wf-axis" x="{x:.1f}" y="{top - 10}" text-anchor="{anchor}">{_ms(span * i / 4)}</text>'
        )
    for n, bar in enumerate(bars):
        y = top + n * row_h
        start = (bar.start - t0).total_seconds()
        length = max(((bar.end or bar.start) - bar.start).total_seconds(), 0)
        x = label_w + plot_w * start / span
        w = max(plot_w * length / span, 2)
        label = escape(bar.label if len(bar.label) <= 34 else bar.label[:33] + "…")
        tip = escape(f"{bar.label}: starts at {_ms(start)}, lasts {_ms(length) if bar.end else 'unknown'}")
        indent = {"run": 0, "iteration": 8, "model": 20, "tool": 20, "error": 20}[bar.kind]
        rect = (
            f'<rect class="wf-{bar.kind}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" rx="2">'
            f"<title>{tip}</title></rect>"
        )
        text = f'<text class="wf-label" x="{4 + indent}" y="{y + row_h - 6}">{label}</text>'
        if bar.href:
            out.append(f'<a href="{escape(bar.href)}">{text}{rect}</a>')
        else:
            out.append(text + rect)
    out.append("</svg>")
    return mark_safe("".join(out))


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


def _chart_frame(label: str, peak: float, unit: str, prefix: str = "", shown: Any = None) -> list[str]:
    """A chart's opening tag, its three grid lines and their values (``shown`` writes a
    value, unit included; else ``peak`` is expected round, see ``_nice_peak``)."""
    width, height, left, top, _, plot_h = _CHART
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">']
    for i in range(3):
        value = peak * i / 2
        y = top + plot_h - plot_h * i / 2
        out.append(f'<line class="wf-grid" x1="{left}" y1="{y:.1f}" x2="{width - 8}" y2="{y:.1f}"/>')
        text = shown(value) if shown else f"{_tick(value, peak / 2)}{unit}"
        out.append(
            f'<text class="wf-axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(prefix)}{escape(text)}</text>"
        )
    return out


def bar_chart_svg(
    points: list[tuple[str, float]], *, label: str, unit: str = "", prefix: str = ""
) -> SafeString:
    """A vertical bar chart of (label, value) points; the accessible table sits beside it."""
    if not points:
        return mark_safe("")
    peak = _nice_peak(max(value for _, value in points))
    width, height, left, top, plot_w, plot_h = _CHART
    step = plot_w / len(points)
    out = _chart_frame(label, peak, unit, prefix)
    every = max(1, len(points) // 10)
    for n, (name, value) in enumerate(points):
        h = plot_h * value / peak
        x = left + n * step + step * 0.15
        y = top + plot_h - h
        out.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{step * 0.7:.1f}" height="{max(h, 0):.1f}">'
            f"<title>{escape(name)}: {escape(prefix)}{value:,g}{escape(unit)}</title></rect>"
        )
        if n % every == 0:
            out.append(
                f'<text class="wf-axis" x="{x + step * 0.35:.1f}" y="{height - 8}" text-anchor="middle">'
                f"{escape(name[-5:])}</text>"
            )
    out.append("</svg>")
    return mark_safe("".join(out))


def line_chart_svg(
    points: list[tuple[str, dict[str, float | None]]],
    *,
    series: list[str],
    label: str,
    milliseconds: bool = False,
) -> SafeString:
    """Lines, one per name in ``series``, over (label, {name: value or None}) points; a
    day without a value breaks its line (values in milliseconds written as durations). The
    accessible table sits beside it."""
    values = [v for _, point in points for v in point.values() if v is not None]
    if not points or not values:
        return mark_safe("")
    peak = (max(values) or 1) if milliseconds else _nice_peak(max(values))
    width, height, left, top, plot_w, plot_h = _CHART
    step = plot_w / len(points)
    shown = (lambda ms: _ms(ms / 1000)) if milliseconds else None  # noqa: E731
    out = _chart_frame(label, peak, "", shown=shown)
    for k, name in enumerate(series):
        runs: list[list[str]] = [[]]
        for n, (day, point) in enumerate(points):
            value = point.get(name)
            if value is None:
                runs.append([])
                continue
            x = left + n * step + step / 2
            y = top + plot_h - plot_h * value / peak
            runs[-1].append(f"{x:.1f},{y:.1f}")
            out.append(
                f'<circle class="line-{k}" cx="{x:.1f}" cy="{y:.1f}" r="3">'
                f"<title>{escape(day)} {escape(name)}: {escape(shown(value) if shown else f'{value:,g}')}"
                "</title></circle>"
            )
        for run in runs:
            if len(run) > 1:
                out.append(f'<polyline class="line-{k}" fill="none" points="{" ".join(run)}"/>')
    every = max(1, len(points) // 10)
    for n, (day, _) in enumerate(points):
        if n % every == 0:
            x = left + n * step + step / 2
            out.append(
                f'<text class="wf-axis" x="{x:.1f}" y="{height - 8}" text-anchor="middle">{escape(day[-5:])}</text>'
            )
    out.append("</svg>")
    return mark_safe("".join(out))
