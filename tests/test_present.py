"""Server-side presentation: highlighted JSON with folding, observations, the waterfall."""

from __future__ import annotations

import re

import pytest
from django.template import engines

from history_app.reading import present

pytestmark = pytest.mark.django_db


def _render(source: str, **context) -> str:
    return engines["django"].from_string("{% load history_tags %}" + source).render(context)


def tree(value) -> str:
    """``value`` drawn as the run page draws a JSON tree."""
    return _render('{% include "history_app/includes/json.html" %}', view=present.json_view(value))


def observation(text: str | None) -> str:
    return _render("{% observation text %}", text=text)


def folded(text: str | None) -> str:
    return _render("{% folded text %}", text=text)


def test_json_tree_escapes_every_key_and_value():
    html = tree({"<script>": "<img src=x onerror=alert(1)>", "n": [1, True, None]})
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert '<span class="jt">true</span>' in html and '<span class="jz">null</span>' in html
    assert "3 items" in html


def test_long_strings_fold_behind_show_all():
    html = tree({"text": "x" * 1000})
    assert '<details class="more"><summary>… show all (1,002 characters)</summary>' in html
    long = folded("y" * 5000)
    assert long.startswith("y" * present.FOLD_TEXT_CHARS + '<details class="more">')
    # Nothing is lost, only hidden.
    assert re.sub(r"<[^>]+>|… show all \([\d,]+ characters\)", "", long) == "y" * 5000
    assert folded("short <b>") == "short &lt;b&gt;"


def test_huge_json_falls_back_to_folded_text():
    html = tree(list(range(present.MAX_JSON_NODES + 10)))
    assert html.startswith('<pre class="json">') and "show all" in html


def test_observations_are_highlighted_only_when_they_are_json():
    assert 'class="json tree"' in observation('{"a": 1}')
    assert observation("plain <b>text</b>") == '<pre class="text">plain &lt;b&gt;text&lt;/b&gt;</pre>'
    assert observation("{not json") == '<pre class="text">{not json</pre>'


def test_run_page_draws_a_waterfall_of_timed_iterations_and_tools(alice_client, ingest):
    ingest(
        {
            "schema": "agent-history/v1",
            "run_id": "timed",
            "session_id": "s",
            "agent_name": "Timer",
            "started_at": "2026-01-01T00:00:00Z",
            "ended_at": "2026-01-01T00:00:04Z",
            "iterations": [
                {
                    "index": 1,
                    "started_at": "2026-01-01T00:00:00Z",
                    "ended_at": "2026-01-01T00:00:02Z",
                    "tool_calls": [
                        {
                            "tool": "<b>search</b>",
                            "started_at": "2026-01-01T00:00:00.500Z",
                            "ended_at": "2026-01-01T00:00:01.500Z",
                            "result": "ok",
                        }
                    ],
                },
                {
                    "index": 2,
                    "started_at": "2026-01-01T00:00:02Z",
                    "ended_at": "2026-01-01T00:00:04Z",
                    "tool_calls": [
                        {"tool": "fetch", "started_at": "2026-01-01T00:00:02Z", "error": "timeout"}
                    ],
                },
            ],
        }
    )
    page = alice_client.get("/p/default/runs/timed/").content.decode()
    svg = re.search(r'<svg class="waterfall".*?</svg>', page, re.S).group(0)
    assert 'aria-label="Waterfall of iterations and tool calls over 4.0 s"' in svg
    assert svg.count('<rect class="wf-iteration"') == 2
    assert svg.count('<rect class="wf-tool"') == 1 and svg.count('<rect class="wf-error"') == 1
    assert '<a href="#iteration-2">' in svg
    assert "&lt;b&gt;search&lt;/b&gt;: starts at 500 ms, lasts 1.0 s" in svg
    # The first tool bar starts an eighth of the way along the plot (0.5 s of 4 s).
    x = float(re.search(r'<rect class="wf-tool" x="([\d.]+)"', svg).group(1))
    assert x == pytest.approx(230 + 760 * 0.125, abs=0.1)


def test_untimed_runs_have_no_waterfall(alice_client, ingest):
    ingest({"schema": "agent-history/v1", "run_id": "untimed", "session_id": "s", "iterations": [{}]})
    assert "<svg" not in alice_client.get("/p/default/runs/untimed/").content.decode()


@pytest.mark.parametrize(
    ("seconds", "ticks"),
    [
        (0.0008, ["0 ms", "200 µs", "400 µs", "600 µs", "800 µs"]),
        (0.003, ["0 ms", "750 µs", "1.5 ms", "2.25 ms", "3 ms"]),
        (0.4, ["0 ms", "100 ms", "200 ms", "300 ms", "400 ms"]),
        (90, ["0 ms", "22.5 s", "45.0 s", "1.1 min", "1.5 min"]),
    ],
)
def test_the_waterfall_axis_reads_distinct_ticks_at_any_scale(alice_client, ingest, seconds, ticks):
    """Issue #17: a sub-millisecond run's axis read "0 ms, 0 ms, 0 ms, 1 ms, 1 ms"."""
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = (start + timedelta(seconds=seconds)).isoformat()
    ingest(
        {
            "schema": "agent-history/v1",
            "run_id": "fast",
            "session_id": "s",
            "started_at": start.isoformat(),
            "ended_at": end,
            "iterations": [{"index": 1, "started_at": start.isoformat(), "ended_at": end}],
        }
    )
    svg = re.search(
        r'<svg class="waterfall".*?</svg>', alice_client.get("/p/default/runs/fast/").content.decode(), re.S
    )
    assert re.findall(r'<text class="wf-axis"[^>]*>([^<]+)</text>', svg.group(0)) == ticks
