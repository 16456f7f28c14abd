"""Hostile answers (issue #10, item 1): rendering is bounded, never fails, never runs inside
a write transaction, and a text it cannot render safely is shown escaped under a note."""

from __future__ import annotations

import html
import inspect
import sys

import pytest
from django.db import connection

from history_app import models
from history_app.reading import rendering, transcripts

from .conftest import native

# The list nested 354 levels (251 KB, under the field cap): RecursionError, a 500.
DEEP_LIST = "".join("    " * depth + "- a\n" for depth in range(354))
DEEP_QUOTE = "".join(">" * depth + " a\n" for depth in range(1, 600))
NOTE = 'class="markdown-fallback">Shown as plain text'


def page(client, run_id: str) -> str:
    response = client.get(f"/p/default/runs/{run_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_an_answer_over_the_budget_is_shown_escaped_under_a_note(alice_client, ingest, settings):
    settings.HISTORY_MARKDOWN_BUDGET_MS = 0
    answer = "**bold** and <b>tag</b> & [link](https://example.com)"
    assert ingest(native("r-budget", output=answer)).status_code == 200
    body = page(alice_client, "r-budget")
    assert NOTE in body
    assert "longer than 0 ms" in body
    assert f"<pre>{html.escape(answer)}</pre>" in body
    assert "<strong>bold</strong>" not in body


@pytest.mark.parametrize(
    "answer",
    [DEEP_LIST, DEEP_QUOTE, "".join("> " * depth + "1. a\n" for depth in range(40))],
    ids=["list-354-deep", "quote-600-deep", "quoted-list-40-deep"],
)
def test_deep_nesting_is_stored_and_shown_escaped(alice_client, ingest, answer):
    response = ingest(native("r-deep", output=answer))
    assert response.status_code == 200
    assert response.json()["results"][0]["status"] == "created"
    body = page(alice_client, "r-deep")
    assert NOTE in body
    assert "more than 32 levels deep" in body
    assert html.escape(answer) in body


def test_a_recursion_error_while_rendering_becomes_the_escaped_text():
    answer = "".join("    " * depth + "- a\n" for depth in range(20))
    # This thread's converter is built first, with the stack as it is: building one is not
    # what this test is about.
    assert rendering.render(answer).fallback == ""
    limit = sys.getrecursionlimit()
    # Little room left on the stack: too little for any conversion. Python-Markdown up to
    # 3.11.3 recursed once per list level, so room for 40 more frames was enough to fail
    # there; 3.11.4 parses nested lists without recursing (a flat text and a 30-level list
    # both need about 10 frames below render()), so a fixed margin of 40 no longer failed.
    # Six frames cannot hold render(), its nesting check and any conversion, whichever
    # version parses the text.
    sys.setrecursionlimit(recursion_depth() + 6)
    try:
        result = rendering.render(answer)
    finally:
        sys.setrecursionlimit(limit)
    assert result.fallback == "it nests too deeply to render as Markdown"
    assert result.html.endswith(f"<pre>{html.escape(answer)}</pre>")


def recursion_depth() -> int:
    """The interpreter's recursion depth here (the caller's frame included): more than
    ``inspect.stack()`` counts under pytest, and the lowest limit Python accepts is one
    above it."""
    limit = sys.getrecursionlimit()
    depth = len(inspect.stack())
    try:
        while True:
            try:
                sys.setrecursionlimit(depth + 1)
                return depth
            except RecursionError:
                depth += 1
    finally:
        sys.setrecursionlimit(limit)


@pytest.fixture
def ticking_clock(monkeypatch):
    """The renderer's clock advances 1 ms each time it is read: the budget then counts
    deadline checks, so a test can tell "checked inside the loop" from "never checked"
    without timing anything."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(rendering, "monotonic", lambda: next(ticks) / 1000)


POISON = {
    "brackets": "[" * 20_000,
    "link-openers": "[a](" * 5_000,
    "escapes": "\\[" * 10_000,
    "inline-tags": "<a>" * 7_000,
    "emphasis": "**a_" * 5_000,
    "fences": "```\n" * 5_000,
    # One table row of pipes and backtick runs: splitting it paired every pipe with every
    # backtick run inside one processor call (86 s for 250 KB), never checking the budget.
    "table-row": "|a|b|\n|-|-|\n" + "|`x" * 5_000,
    "table-rows": "|a|\n|-|\n" + "|b|\n" * 5_000,
}


@pytest.mark.parametrize("answer", POISON.values(), ids=POISON.keys())
def test_poison_answers_are_stored_and_shown_escaped_when_over_the_budget(
    alice_client, ingest, settings, ticking_clock, answer
):
    settings.HISTORY_MARKDOWN_BUDGET_MS = 200
    response = ingest(native("r-poison", output=answer))
    assert response.status_code == 200
    assert response.json()["results"][0]["status"] == "created"
    body = page(alice_client, "r-poison")
    assert NOTE in body
    assert "longer than 200 ms" in body
    assert f"<pre>{html.escape(answer)}</pre>" in body


def test_an_ordinary_answer_renders_within_the_same_budget(ticking_clock):
    result = rendering.render(
        "# Title\n\nSome *emphasis*, a [link](https://example.com).\n\n- one\n- two\n", budget_ms=200
    )
    assert result.fallback == ""
    assert "<em>emphasis</em>" in result.html


def test_a_run_of_brackets_renders_in_linear_time_instead_of_falling_back(ticking_clock):
    """The link patterns' scans no longer restart at every "[": the issue's 8 KB run
    (6 s before) renders, its link intact, within a budget of a few checks per bracket."""
    result = rendering.render("[" * 8_000 + " [a link](https://example.com)", budget_ms=8_000 * 4)
    assert result.fallback == ""
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">a link</a>' in result.html


@pytest.mark.django_db(transaction=True)
def test_answers_are_rendered_when_first_shown_never_at_ingestion(ingest, alice_client, monkeypatch):
    """Issue #13: ingestion pays nothing for Markdown; the first view renders the answer
    (outside any transaction) and keeps it, later views read it."""
    seen = []

    def render(text, **kwargs):
        seen.append(connection.in_atomic_block)
        return rendering.render_markdown(text, **kwargs)

    monkeypatch.setattr(transcripts, "render_markdown", render)
    assert ingest(native("r-outside", output="*hello*")).status_code == 200
    assert seen == [] and models.Run.objects.get().output_html is None
    for _ in range(2):
        assert "<em>hello</em>" in alice_client.get("/p/default/runs/r-outside/").content.decode()
    assert seen == [False]
    assert models.Run.objects.get().output_html == rendering.render_markdown("*hello*")


def test_splitting_long_runs_of_references_for_nh3_changes_nothing():
    dirty = "<p>" + "&amp;#&lt;x&gt; " * 200 + '<a href="https://e.com/?a=1&amp;b=2">x</a></p>'
    assert rendering.sanitize_html(dirty) == rendering.nh3.clean(
        dirty,
        tags=rendering.ALLOWED_TAGS,
        attributes=rendering.ALLOWED_ATTRIBUTES,
        url_schemes=rendering.URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def test_a_table_row_longer_than_any_real_table_is_left_to_the_paragraph_processor():
    row = "|`x" * (rendering.MAX_TABLE_ROW // 3 + 1)
    assert "<table>" not in rendering.render("|a|b|\n|-|-|\n" + row, budget_ms=60_000).html
    assert "<table>" in rendering.render("|a|b|\n|-|-|\n|1|`2`|", budget_ms=60_000).html


def test_a_reused_converter_keeps_nothing_of_the_texts_before():
    """Each thread's converter is reset after a text, and dropped when a text fails: a
    reference defined in one answer never resolves a link in the next, and a conversion
    cut short leaves the next one whole."""
    defined = rendering.render("[x][ref] and <b>kept</b>\n\n[ref]: https://example.com/a").html
    assert 'href="https://example.com/a"' in defined
    assert "example.com" not in rendering.render("[x][ref]").html
    fresh = rendering.render("# Title\n\n[x][ref] *one*").html
    assert fresh == rendering.render("# Title\n\n[x][ref] *one*").html
    assert rendering.render("a " * 50_000, budget_ms=0).fallback
    assert rendering.render("# Title\n\n[x][ref] *one*").html == fresh
