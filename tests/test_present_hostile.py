"""Hostile strings in what the templates draw (JSON trees, folded text, the waterfall and
the stats charts, search passages, the admin's clipped cells) come out escaped: the
markup is the templates', never the run's."""

from __future__ import annotations

import json
import re

import pytest
from django.template.loader import render_to_string

from history_app.admin import clipped
from history_app.reading import present

from .conftest import native

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'
SVG_END = "</svg><script>alert(3)</script>"
HOSTILE = (SCRIPT, IMG, SVG_END)
ESCAPED = {
    SCRIPT: "&lt;script&gt;alert(1)&lt;/script&gt;",
    IMG: "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;",
    SVG_END: "&lt;/svg&gt;&lt;script&gt;alert(3)&lt;/script&gt;",
}


def json_string(text: str) -> str:
    """``text`` as a JSON tree shows a string: in quotes, JSON-escaped, then HTML-escaped."""
    return "&quot;" + ESCAPED[text].replace("&quot;", "\\&quot;") + "&quot;"


def assert_inert(html: str) -> None:
    """None of the hostile strings is in ``html`` as markup."""
    for text in ("<script>alert(", "<img src=x", "</svg><script>"):
        assert text not in html
    # Every SVG the page holds is closed once, by its own template.
    assert html.count("<svg") == html.count("</svg>")


def hostile_run() -> dict:
    long_tail = " ".join(HOSTILE) * 40  # past the folds, so the rest hides behind "show all"
    return native(
        "hostile",
        "s-hostile",
        agent_name=SVG_END,
        input="x" * present.FOLD_TEXT_CHARS + " " + long_tail,
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:00:04Z",
        iterations=[
            {
                "index": 1,
                "name": IMG,
                "thought": SCRIPT,
                "started_at": "2026-01-01T00:00:00Z",
                "ended_at": "2026-01-01T00:00:02Z",
                "tool_calls": [
                    {
                        "tool": SVG_END,
                        "params": {text: text for text in HOSTILE},
                        "result": json.dumps({SCRIPT: [IMG, {SVG_END: long_tail}]}),
                        "started_at": "2026-01-01T00:00:00.500Z",
                        "ended_at": "2026-01-01T00:00:01.500Z",
                    },
                    {"tool": "plain", "result": IMG + " " + long_tail},
                ],
            }
        ],
    )


def test_hostile_json_keys_and_values_folded_text_and_waterfall_labels_are_escaped(alice_client, ingest):
    assert ingest(hostile_run()).status_code == 200
    page = alice_client.get("/p/default/runs/hostile/").content.decode()
    assert_inert(page)
    # JSON keys and values, in the parameters' tree and the observation's.
    for text in HOSTILE:
        assert f'<span class="jk">{json_string(text)}</span>' in page
    assert f'<span class="js">{json_string(IMG)}</span>' in page
    # A long JSON string and long text fold, escaped on both sides of "show all".
    folds = re.findall(r'<details class="more"><summary>[^<]*</summary>(.*?)</details>', page, re.S)
    assert len(folds) >= 3 and all(ESCAPED[SVG_END] in fold for fold in folds)
    assert f'<pre class="text">{ESCAPED[IMG]} ' in page  # the plain observation
    assert f'<pre class="text thought">{ESCAPED[SCRIPT]}</pre>' in page
    # The waterfall's labels and tooltips.
    svg = re.search(r'<svg class="waterfall".*?</svg>', page, re.S).group(0)
    assert f">{ESCAPED[SVG_END]}</text>" in svg  # the run's bar: its agent name
    assert f"<title>{ESCAPED[SVG_END]}: starts at 500 ms, lasts 1.0 s</title>" in svg
    assert f"iteration 1 · {ESCAPED[IMG]}" in svg


def test_hostile_search_passages_are_escaped_around_their_marks(alice_client, ingest):
    run = native("found", "s-found", input="q", output=f"{SCRIPT} partitioning {IMG} {SVG_END}")
    assert ingest(run).status_code == 200
    page = alice_client.get("/p/default/", {"q": "partitioning"}).content.decode()
    assert_inert(page)
    assert f"{ESCAPED[SCRIPT]} <mark>partitioning</mark> {ESCAPED[IMG]} {ESCAPED[SVG_END]}" in page


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_chart_labels_units_and_values_are_escaped(text):
    bars = present.bar_chart([(text, 3), ("2026-11-30", 5)], label=text, unit=text, prefix=text)
    lines = present.line_chart([(text, {text: 5, "p95": None})], series=[text, "p95"], label=text)
    for chart in (bars, lines):
        svg = render_to_string("history_app/includes/chart.html", {"chart": chart})
        assert_inert(svg)
        assert f'aria-label="{ESCAPED[text]}"' in svg
        assert ESCAPED[text][-20:] in svg


def test_hostile_admin_cells_are_escaped():
    cell = clipped(IMG * 3)
    assert_inert(cell)
    assert cell.startswith(f'<span title="{ESCAPED[IMG] * 3}">')
