"""The HTML pages, through the real client: content, access, fragments and query counts."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history_app import models

from .conftest import autourgos_logs, load_jsonl, native

pytestmark = pytest.mark.django_db


@pytest.fixture
def samples(ingest):
    response = ingest([json.loads(p.read_text()) for p in autourgos_logs()])
    assert response.status_code == 200


def html(response) -> str:
    return response.content.decode()


@pytest.mark.parametrize("url", ["/", "/p/default/sessions/s-1/", "/p/default/runs/r-1/"])
def test_anonymous_users_are_sent_to_log_in(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_login_page_renders_and_logs_in(client, alice):
    page = client.get("/accounts/login/")
    assert "Log in" in html(page)
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password-1"})
    assert response.status_code == 302
    assert client.get("/p/default/").status_code == 200


def test_session_list_shows_newest_activity_first(alice_client, ingest):
    ingest(
        [
            native("old", "older-session", agent_name="OldBot", started_at="2026-01-01T00:00:00Z"),
            native(
                "new",
                "newer-session",
                agent_name="NewBot",
                status="failed",
                started_at="2026-02-01T00:00:00Z",
            ),
        ]
    )
    page = html(alice_client.get("/p/default/"))
    assert page.index("newer-session") < page.index("older-session")
    assert "NewBot" in page and "OldBot" in page
    assert 'href="/p/default/sessions/newer-session/"' in page


def test_session_list_pages_with_a_keyset_cursor(alice_client, ingest, settings):
    settings.HISTORY_PAGE_SIZE = 2
    ingest([native(f"r{i}", f"sess-{i}", started_at=f"2026-01-0{i + 1}T00:00:00Z") for i in range(5)])
    first = html(alice_client.get("/p/default/"))
    assert "sess-4" in first and "sess-3" in first and "sess-2" not in first
    cursor = re.search(r'href="\?_next=([^"]+)"', first).group(1)
    second = alice_client.get(f"/p/default/?_next={cursor}", HTTP_HX_REQUEST="true")
    assert "<html" not in html(second)
    assert "sess-2" in html(second) and "sess-1" in html(second) and "sess-4" not in html(second)
    assert alice_client.get("/p/default/?_next=garbage!").status_code == 400


def test_empty_dashboard_explains_how_to_send_runs(alice_client):
    assert "POST /api/v1/ingest" in html(alice_client.get("/p/default/"))


def test_session_timeline_lists_runs_in_order_with_counts(alice_client, samples):
    session = models.Session.objects.get(session_id="autourgos:ResearchBot:2026-11-29")
    page = html(alice_client.get(session.get_absolute_url()))
    assert "Compare Tokyo and Osaka" in page
    assert ">6</td>" in page  # iterations
    assert ">12</td>" in page  # tool calls
    assert "40 ms" in page


def test_missing_objects_give_404(alice_client):
    assert alice_client.get("/p/default/sessions/nope/").status_code == 404
    assert alice_client.get("/p/default/runs/nope/").status_code == 404


def test_run_transcript_shows_thoughts_tools_observations_and_answer(alice_client, samples):
    for path in autourgos_logs():
        data = json.loads(path.read_text())
        run = models.Run.objects.get(
            input=data["query"],
            started_at__isnull=False,
            agent_name=data["agent_name"],
            iteration_count=len(data["iterations"]),
            output=data["final_response"],
        )
        page = html(alice_client.get(run.get_absolute_url()))
        for it in data["iterations"]:
            assert f"Iteration {it['iteration']}" in page
            if (
                isinstance(it["thought"], str)
                and "[REDACTED" not in it["thought"]
                and "password" not in it["thought"]
            ):
                assert _escaped(it["thought"][:40]) in page
            for tool in it["tools"] if isinstance(it["tools"], list) else []:
                assert f"<code>{tool['tool']}</code>" in page
        if data["error"]:
            assert _escaped(data["error"]) in page
        elif data["final_response"] and "[REDACTED" not in data["final_response"]:
            assert _escaped(data["final_response"][:30]) in page or "Final answer" in page


def _escaped(text: str) -> str:
    from django.utils.html import escape

    return escape(text)


def test_parameters_are_pretty_printed(alice_client, ingest):
    ingest(
        native(
            "r-1",
            iterations=[
                {"tool_calls": [{"tool": "search", "params": {"query": "tokyo", "n": 2}, "result": "ok"}]}
            ],
        )
    )
    page = html(alice_client.get("/p/default/runs/r-1/"))
    # Highlighted and collapsible, keys in the order the agent sent them.
    assert (
        '<div class="jl"><span class="jk">&quot;query&quot;</span>: <span class="js">&quot;tokyo&quot;</span>,</div>'
        '<div class="jl"><span class="jk">&quot;n&quot;</span>: <span class="jd">2</span></div>'
    ) in page
    assert '<details class="jc" open><summary>{<span class="jn"> 2 keys </span></summary>' in page


def test_final_answer_is_rendered_as_markdown(alice_client, ingest):
    ingest(
        native(
            "r-1",
            output="# Title\n\n**bold** and a [link](https://example.com)\n\n| a | b |\n|---|---|\n| 1 | 2 |",
        )
    )
    page = html(alice_client.get("/p/default/runs/r-1/"))
    assert "<h1>Title</h1>" in page
    assert "<strong>bold</strong>" in page
    assert 'href="https://example.com"' in page and 'rel="noopener noreferrer nofollow"' in page
    assert "<table>" in page


XSS = [entry["payload"] for entry in load_jsonl("xss.jsonl")]
OUR_HTMX_ATTRIBUTES = {
    "hx-boost",
    "hx-get",
    "hx-target",
    "hx-swap",
    "hx-push-url",
    "hx-headers",
    "hx-trigger",
}
# Our own triggers, exactly: the filter form's live search and the live list's poll.
OUR_TRIGGERS = {
    "input changed delay:300ms from:#q, change from:.filter-grid, submit",
    "every 3s",
    "toggle once from:closest details",
}
# Our own forms (search, log out, the context inspector's re-render) and our own charts.
OUR_FORM_ACTIONS = {"/p/default/", "/accounts/logout/", "/p/default/compare/"}
OUR_SVG_CLASSES = {"waterfall", "chart"}


class _Elements(HTMLParser):
    """Collects every element and attribute the browser would build from a page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))


def _our_form(attrs: dict[str, str]) -> bool:
    action = attrs.get("action", "")
    ours = action in OUR_FORM_ACTIONS or re.fullmatch(
        r"/p/default/(runs/[^/\"<>]+/(context/\d+|annotations)|sessions/[^/\"<>]+/pin)/", action
    )
    return bool(ours) and attrs.get("method", "get") in {"get", "post"} and "hx-vals" not in attrs


def assert_inert(page: str, where: str) -> None:
    parser = _Elements()
    parser.feed(page)
    for tag, attrs in parser.elements:
        assert (
            tag not in {"iframe", "img", "svg", "math", "object", "embed", "meta", "form", "style"}
            or (tag == "form" and _our_form(attrs))
            or (tag == "svg" and attrs.get("class") in OUR_SVG_CLASSES)
            or (tag == "meta" and "javascript" not in attrs.get("content", ""))
        ), (where, tag, attrs)
        if tag == "script":
            assert attrs.get("src", "").startswith("/static/"), (where, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (where, tag, name)
            assert name != "style", (where, tag)
            assert not name.startswith("hx-") or name in OUR_HTMX_ATTRIBUTES, (where, tag, name)
            assert name != "hx-trigger" or value in OUR_TRIGGERS, (where, tag, value)
            if name in {"href", "src", "action", "formaction"}:
                scheme = value.strip().split(":", 1)[0].lower() if ":" in value else ""
                assert scheme in {"", "http", "https", "mailto"}, (where, tag, name, value)


def test_xss_payloads_render_inert_in_every_field(alice_client, ingest):
    runs = [
        native(
            f"x{i}",
            f"s-{i % 2}",
            kind="team",
            status="failed",
            input=payload,
            output=payload,
            error=payload,
            agent_name=payload[:200],
            user_id=payload[:200],
            framework=payload[:32],
            metrics={"input_tokens": 1, "output_tokens": 2},
            iterations=[
                {
                    "thought": payload,
                    "name": payload[:200],
                    "started_at": "2026-01-01T00:00:00Z",
                    "tool_calls": [
                        {
                            "tool": payload[:200],
                            "params": {payload: payload, "long": payload * 40},
                            "result": payload,
                            "started_at": "2026-01-01T00:00:01Z",
                        },
                        {"tool": "json", "params": [payload], "result": json.dumps({payload: [payload]})},
                    ],
                }
            ],
            member_interactions=[{"member": payload[:200], "task": payload, "response": payload}],
            injected_contexts=[
                {
                    "kind": "workflow_history",
                    "text": f"<workflow_history_context>\n[run-1]\ninput: {payload}\n",
                },
                {"kind": "instructions", "text": payload, "step": payload[:200]},
            ],
        )
        for i, payload in enumerate(XSS)
    ]
    assert ingest(runs).status_code == 200
    # The pages that show every payload at once are the same whichever payload is being
    # looked at: each is read once (24 times before, the same page each time).
    for url in ("/p/default/sessions/s-0/", "/p/default/sessions/s-1/", "/p/default/", "/p/default/stats/"):
        response = alice_client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert_inert(html(response), f"{url} with every payload")
    for i, payload in enumerate(XSS):
        query = urlencode({"q": payload, "framework": payload[:32], "agent": payload[:200]})
        for url in (
            f"/p/default/runs/x{i}/",
            f"/p/default/runs/x{i}/context/1/?runs=2&timestamps=1",
            f"/p/default/runs/x{i}/context/1/",
            f"/p/default/?{query}",
            f"/p/default/?{urlencode({'q': payload[:20]})}",
        ):
            response = alice_client.get(url)
            assert response.status_code in {200, 400}, (url, response.status_code)
            assert_inert(html(response), f"{url} with payload {payload!r}")


def test_the_inertness_check_catches_a_live_payload():
    with pytest.raises(AssertionError):
        assert_inert('<a href="javascript:alert(1)">x</a>', "self-test")
    with pytest.raises(AssertionError):
        assert_inert("<div hx-trigger=load></div>", "self-test")
    with pytest.raises(AssertionError):
        assert_inert('<form action="https://evil.example/"></form>', "self-test")
    with pytest.raises(AssertionError):
        assert_inert('<form action="/p/default/runs/x/context/1/" hx-vals="{}"></form>', "self-test")
    with pytest.raises(AssertionError):
        assert_inert('<svg onload="alert(1)"></svg>', "self-test")
    assert_inert('<a title="t&quot; onmouseover=alert(1)" href="/x">x</a>', "self-test")


def test_htmx_requests_get_only_the_named_partial(alice_client, ingest):
    ingest(native("r-1", input="hello"))
    for url, marker in (
        ("/p/default/", "/p/default/sessions/s-1/"),
        ("/p/default/sessions/s-1/", 'id="timeline"'),
        ("/p/default/runs/r-1/", 'id="transcript"'),
    ):
        fragment = html(alice_client.get(url, HTTP_HX_REQUEST="true"))
        assert "<html" not in fragment and marker in fragment
        boosted = html(alice_client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_BOOSTED="true"))
        assert "<html" in boosted
        restore = html(alice_client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true"))
        assert "<html" in restore
    assert alice_client.get("/p/default/").headers["Vary"].count("HX-Request") == 1


def test_pages_carry_a_strict_content_security_policy(alice_client, ingest):
    ingest(native("r-1"))
    for url in ("/p/default/", "/p/default/sessions/s-1/", "/p/default/runs/r-1/", "/accounts/login/"):
        response = alice_client.get(url)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "<script>" not in html(response)
        # Nothing is loaded from another origin (no CDN): every src and stylesheet is local.
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", html(response))


def _count_queries(client, url) -> int:
    # A page of the project first: the first page of a project a user opens also
    # remembers the project in their session (a write the next pages do not make).
    client.get("/p/default/receipts/")
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        response.getvalue()  # a streamed export reads as it is written
        assert response.status_code == 200
    return len(ctx.captured_queries)


def _many_runs(ingest, n_runs, n_iterations, n_tools):
    iterations = [
        {
            "thought": "t",
            "tool_calls": [{"tool": f"t{j}", "params": {}, "result": "r"} for j in range(n_tools)],
        }
        for _ in range(n_iterations)
    ]
    ingest([native(f"run-{n_runs}-{i}", f"sess-{i % 3}", iterations=iterations) for i in range(n_runs)])


@pytest.mark.parametrize(
    "url",
    [
        "/p/default/",
        "/p/default/?q=t0&sort=runs&errors=1",
        "/p/default/?live=1",
        "/p/default/sessions/sess-0/",
        "/p/default/runs/run-{n}-0/",
        "/p/default/receipts/",
        "/p/default/stats/",
        "/p/default/runs/run-{n}-0/export.md",
        "/p/default/runs/run-{n}-0/export.json",
        "/p/default/sessions/sess-0/export.json",
        "/p/default/sessions/sess-0/export.html",
    ],
)
def test_query_count_does_not_grow_with_the_data(alice_client, ingest, url, django_assert_num_queries):
    _many_runs(ingest, 2, 1, 1)
    small = _count_queries(alice_client, url.format(n=2))
    _many_runs(ingest, 30, 6, 4)
    with django_assert_num_queries(small):
        alice_client.get(url.format(n=30)).getvalue()


def test_pinned_query_counts(alice_client, ingest, django_assert_num_queries):
    _many_runs(ingest, 10, 3, 3)
    alice_client.get("/p/default/receipts/")  # the project remembered in her session (once)
    # session + user lookups (2), the project with her role in it and the header's
    # project menu (1: her memberships with their projects), and the page's own queries:
    # sessions, their titles, the capped total, the framework menu.
    with django_assert_num_queries(7):
        alice_client.get("/p/default/")
    with django_assert_num_queries(6):  # the timeline: the session, its runs, their annotations
        alice_client.get("/p/default/sessions/sess-0/")
    # The run page: session + user, project + role + project menu, the run, its first
    # iterations, their first tool calls, how many contexts it has (none here, so no query
    # for the first of them). The first view also keeps the answer's HTML, rendered then
    # (one UPDATE); later views read it. The runs before and after it in the session,
    # with the nearest run of the other group, timed or not (1); its annotations (1); the
    # runs it started (1, none here: a second, a capped count, only past the first 50).
    with django_assert_num_queries(11):
        alice_client.get("/p/default/runs/run-10-0/")
    with django_assert_num_queries(10):
        alice_client.get("/p/default/runs/run-10-0/")
    # The list with a search: sessions, their titles, their matching runs, the framework
    # menu (a search that fits one page is counted from it); on PostgreSQL the sample
    # that picks the plan; on SQLite the candidate sessions in list order, their runs and
    # the index's range of them; then the passages of the hits whose input, answer, error
    # and agent do not show the word: their thoughts, then their tool calls (2, whatever
    # the number of hits).
    with django_assert_num_queries(10 + 2 * (connection.vendor == "sqlite")):
        alice_client.get("/p/default/?q=t0")
    with django_assert_num_queries(4):
        alice_client.get("/p/default/receipts/")


def test_an_htmx_search_names_itself_in_the_title(alice_client, ingest):
    """Issue #17: the results htmx swaps in start with the page's <title> (htmx takes a
    root-level one for the document), so a typed search updates the tab's title."""
    ingest(native("r-1", input="needle"))
    fragment = html(
        alice_client.get("/p/default/?q=needle", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="results")
    )
    assert fragment.startswith("<title>“needle” · Sessions · Agent history</title>")
    full = html(alice_client.get("/p/default/?q=needle"))
    assert full.count("<title>") == 1 and "<title>“needle” · Sessions · Agent history</title>" in full


def test_what_a_logged_in_user_or_a_token_reads_is_kept_by_no_cache(alice_client, ingest, auth_headers):
    from .conftest import native

    assert ingest(native("r-cache", "s-cache", output="**answer**")).status_code == 200
    for url in (
        "/p/default/",
        "/p/default/sessions/s-cache/",
        "/p/default/runs/r-cache/",
        "/api/v1/sessions",
        "/p/default/sessions/s-cache/export.html",
        "/p/default/runs/r-cache/export.json",
    ):
        response = alice_client.get(url)
        assert response.status_code == 200, url
        assert response["Cache-Control"] == "private, no-store", url
    from django.test import Client

    token_client = Client()
    api = token_client.get("/api/v1/runs/r-cache", **auth_headers)
    assert api.status_code == 200 and api["Cache-Control"] == "private, no-store"
    static = token_client.get("/static/history_app/app.css")
    assert static.status_code == 200 and "no-store" not in static.get("Cache-Control", "")
