"""Readable lists (issue 17): the sessions list names each session by its first input,
says how long it lasted, when it was last active (relative, the exact time on hover),
sorts from its column headers, counts what it holds, and labels each cell for the
stacked layout of a phone; the other tables label their cells too."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from history_app.reading import listing
from history_app.templatetags.history_tags import ago

from .conftest import native

pytestmark = pytest.mark.django_db


def page_of(client, **params) -> str:
    response = client.get("/p/default/", params)
    assert response.status_code == 200
    return response.content.decode()


def test_a_session_is_named_by_its_first_input_not_its_id(alice_client, ingest):
    ingest(native("r-2", "session-9f1c", input="Second question", started_at="2026-11-30T10:05:00Z"))
    ingest(
        native("r-1", "session-9f1c", input="  Plan   a trip\nto Kyoto  ", started_at="2026-11-30T10:00:00Z")
    )
    ingest(native("r-3", "bare", input=""))
    page = page_of(alice_client)
    assert re.search(
        r'<a href="/p/default/sessions/session-9f1c/">Plan a trip to Kyoto</a><br><code class="muted sid"',
        page,
    )
    assert '<a href="/p/default/sessions/bare/"><code>bare</code></a>' in page
    long = "word " * 100
    ingest(native("r-4", "long", input=long))
    title = re.search(r'<a href="/p/default/sessions/long/">([^<]+)</a>', page_of(alice_client)).group(1)
    assert len(title) == listing.TITLE_CHARS and title.endswith("…")


def test_a_team_session_is_named_by_the_team_run_not_a_member(alice_client, ingest):
    ingest(native("m-1", "t", input="member task", parent_run_id="team-1", started_at="2026-11-30T10:00:00Z"))
    ingest(native("team-1", "t", input="The team's question", started_at="2026-11-30T10:00:01Z"))
    assert '<a href="/p/default/sessions/t/">The team&#x27;s question</a>' in page_of(alice_client)


def test_duration_relative_times_and_exact_time_on_hover(alice_client, ingest):
    start = timezone.now() - timedelta(hours=3, minutes=2)
    ingest(
        native("r-1", "s", started_at=start.isoformat(), ended_at=(start + timedelta(seconds=90)).isoformat())
    )
    page = page_of(alice_client)
    assert '<td class="num" data-label="Duration">1 min 30 s</td>' in page
    last = re.search(
        r'<td data-label="Last activity"><time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page
    )
    assert last.group(3) == "3 h ago"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", last.group(2))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "just now"),
        (61, "1 min ago"),
        (3599, "59 min ago"),
        (7200, "2 h ago"),
        (86400, "1 day ago"),
        (86400 * 29, "29 days ago"),
        (86400 * 31, "2026-10-31"),
        (-60, "2026-12-01"),
    ],
)
def test_relative_times(seconds, text):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(seconds=seconds), now) == text


def test_headers_sort_and_keep_the_other_filters(alice_client, ingest):
    for n in range(3):
        for r in range(n + 1):
            ingest(
                native(
                    f"r-{n}-{r}", f"s-{n}", agent_name="bot", status="failed" if r == n == 1 else "completed"
                )
            )
    page = page_of(alice_client, agent="bot")
    runs_link = re.search(r'<a href="\?([^"]+)" title="Sort by most runs">Runs</a>', page).group(1)
    assert "agent=bot" in runs_link and "sort=runs" in runs_link
    sorted_page = alice_client.get("/p/default/?" + runs_link.replace("&amp;", "&")).content.decode()
    assert re.findall(r"/sessions/(s-\d)/", sorted_page)[:3] == ["s-2", "s-1", "s-0"]
    assert 'aria-sort="descending"><a href="?' in sorted_page
    # "Last activity" flips between latest and oldest first.
    assert re.search(r'title="Sort by oldest activity first">Last activity ↓</a>', page)
    oldest = page_of(alice_client, sort="oldest")
    assert 'aria-sort="ascending"' in oldest and "Last activity ↑" in oldest


def test_the_list_counts_what_it_holds(alice_client, ingest, settings, monkeypatch):
    for n in range(4):
        ingest(native(f"r-{n}", f"s-{n}", input=f"text {n}", agent_name="a" if n else "b"))
    assert '<p class="total" id="total">4 sessions</p>' in page_of(alice_client)
    assert '<p class="total" id="total">1 session matches</p>' in page_of(alice_client, agent="b")
    assert '<p class="total" id="total">3 sessions match</p>' in page_of(alice_client, agent="a")
    # A search that fits one page is counted from it; one that does not says "more than".
    assert '<p class="total" id="total">4 sessions match</p>' in page_of(alice_client, q="text")
    settings.HISTORY_PAGE_SIZE = 2
    assert '<p class="total" id="total">More than 2 matching sessions</p>' in page_of(alice_client, q="text")
    # The count stops at its cap.
    monkeypatch.setattr(listing, "TOTAL_CAP", 3)
    assert '<p class="total" id="total">More than 3 sessions</p>' in page_of(alice_client)
    # The next page (htmx "older sessions") does not count again.
    nxt = re.search(r'href="\?(_next=[^"]+)"', page_of(alice_client)).group(1)
    assert 'id="total"' not in alice_client.get("/p/default/?" + nxt.replace("&amp;", "&")).content.decode()


def test_the_list_queries_do_not_grow_with_sessions(alice_client, ingest):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page_of(alice_client)
        return len(captured)

    ingest(native("r-0", "s-0", input="first"))
    few = queries()
    for n in range(1, 30):
        ingest(native(f"r-{n}", f"s-{n}", input=f"input {n}", tools=[]))
    assert queries() == few


def test_every_stacked_table_cell_has_a_label(alice_client, ingest):
    ingest(
        native(
            "r-1",
            "s",
            input="q",
            status="failed",
            error="boom",
            tool_calls=[{"tool": "search", "input": {"q": "x"}, "output": "y"}],
        )
    )
    pages = ["/p/default/", "/p/default/sessions/s/", "/p/default/stats/", "/p/default/receipts/"]
    for url in pages:
        page = alice_client.get(url).content.decode()
        for table in re.findall(r'<table class="table[^"]* stack".*?</table>', page, re.S):
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody")[1], re.S):
                cells = re.findall(r"<td([^>]*)>", row)
                if len(cells) < 2:
                    continue  # an idle gap, a "more" row
                # The first cell names the row (on the timeline, its number and run id);
                # each other says what it is.
                named = [c for c in cells[1:] if "row-number" not in c and "run-cell" not in c]
                assert all("data-label=" in c for c in named), (url, row[:300])


@pytest.mark.parametrize(
    ("text", "title"),
    [
        (" " * 300 + "after the spaces", "after the spaces"),
        ("start" + " " * 200 + "end", "start end"),
        ("\u200b" * 200 + "visible", "visible"),
        ("\u200b\u200e \t\n", ""),
        ("x" * 3000, "x" * 119 + "…"),
        (" " * 1990 + "abcdefghijklmnop", "abcdefghij…"),
    ],
)
def test_titles_fold_whitespace_and_drop_invisible_characters(text, title):
    """Found from outside: titles were cut before whitespace was folded (a title of
    spaces, or "start" with no "…" though more followed) and kept zero-width spaces."""
    head = text[: listing.TITLE_READ]
    assert listing._title(head) == title


@pytest.mark.skipif(connection.vendor != "postgresql", reason="extended statistics are PostgreSQL's")
def test_the_planner_estimates_a_facet_value_by_the_pair_not_by_each_column():
    """A value every session holds was estimated at a quarter of them (the shares of
    ``facet = …`` and ``value = …`` multiplied), and the list's total then hashed every
    session (migration 0022). With the pair's statistics the estimate is the truth's."""
    from history_app import models

    project = models.Project.default()
    now = timezone.now()
    sessions = models.Session.objects.bulk_create(
        models.Session(project=project, session_id=f"s{n}", last_activity_at=now) for n in range(400)
    )
    facets = [models.SessionFacet(session=s, facet="annotation", value="name:correct") for s in sessions]
    for n, s in enumerate(sessions):
        facets.append(models.SessionFacet(session=s, facet="tool", value=f"tool-{n % 4}"))
        facets.append(models.SessionFacet(session=s, facet="agent", value=f"agent-{n % 2}"))
        facets.append(models.SessionFacet(session=s, facet="status", value="completed"))
    models.SessionFacet.objects.bulk_create(facets)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE history_app_sessionfacet")
        cursor.execute(
            "EXPLAIN (FORMAT JSON) SELECT session_id FROM history_app_sessionfacet "
            "WHERE facet = 'annotation' AND value = 'name:correct'"
        )
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # psycopg reads the JSON; a driver that does not gives text
        plan = json.loads(plan)
    estimate = plan[0]["Plan"]["Plan Rows"]
    assert 300 <= estimate <= 500, estimate


def test_a_single_condition_list_is_counted_from_its_own_rows_in_its_project(alice_client):
    """A list whose one condition is a facet or a score sort is counted from that
    condition's rows (listing._single_condition_rows): the count is the list's, and
    another project's sessions with the same agent, tool, status, errors, label or score
    are not in it."""
    from django.test import Client

    from history_app import models
    from history_app.access.auth import register_token

    other = models.Project.objects.create(slug="other", name="Other")
    _, ours = register_token(name="ours", scopes=["ingest", "annotate"])
    _, theirs = register_token(name="theirs", scopes=["ingest", "annotate"], project=other)

    def send(token: str, run_id: str, n: int) -> None:
        calls = [{"tool": "search", "params": {"q": "x"}, "result": "y"}]
        if n % 3 == 0:
            calls.append({"tool": "fetch", "params": {}, "error": "boom"})
        body = native(
            run_id, run_id, input=f"q {n}", agent_name="ab"[n % 2], iterations=[{"tool_calls": calls}]
        )
        if n % 4 == 0:
            body.update(status="failed", error="broke")
        auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        sent = Client().post("/api/v1/ingest", json.dumps(body), content_type="application/json", **auth)
        assert sent.status_code in (200, 201, 202), sent.content
        if n % 3 == 1:
            marks = [
                {"kind": "score", "name": "correct", "value": n / 10},
                {"kind": "label", "name": "golden"},
            ]
            url = f"/api/v1/runs/{run_id}/annotations"
            marked = Client().post(url, json.dumps(marks), content_type="application/json", **auth)
            assert marked.status_code == 201, marked.content

    for n in range(9):
        send(ours, f"s-{n}", n)
    for n in range(7):
        send(theirs, f"t-{n}", n)
    project = models.Project.default()
    expected = {
        "agent=a": 5,
        "agent=b": 4,
        "status=failed": 3,
        "tool=search": 9,
        "tool=fetch": 3,
        "errors=1": 5,  # a tool error (0, 3, 6) or a failure (0, 4, 8)
        "annotated=golden": 3,
        "annotated=correct": 3,
        "annotated=correct&sort=score_low": 3,
        "annotated=correct&sort=score_high": 3,
        "agent=nobody": 0,
    }
    for query, count in expected.items():
        params = dict(pair.split("=") for pair in query.split("&"))
        filters = listing.SessionFilters.from_query(params)
        assert listing._single_condition_rows(project, filters) is not None, query
        listed = listing.sessions_page(project=project, limit=100, filters=filters)
        assert len(listed.items) == count and all(s.session_id.startswith("s-") for s in listed.items), query
        assert listing.session_total(project=project, filters=filters, page=listed) == (count, False), query
        if count:
            word = "session matches" if count == 1 else "sessions match"
            assert f'<p class="total" id="total">{count} {word}</p>' in page_of(alice_client, **params), query
    # Two conditions, or one with a date, are counted through the sessions as before.
    for params in ({"agent": "a", "status": "failed"}, {"agent": "a", "from": "2020-01-01"}):
        assert listing._single_condition_rows(project, listing.SessionFilters.from_query(params)) is None
