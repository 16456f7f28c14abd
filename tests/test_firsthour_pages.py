"""The dashboard's pages as a newcomer reads them (Django's test client): the stats page's
scores, its captions and numbers, receipts linking to their runs, the admin's session
search by the beginning of an id, the settings' destructive buttons."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.template.loader import render_to_string

from history_app import models
from history_app.reading import present

from .conftest import native

pytestmark = pytest.mark.django_db


def scored_run(ingest, alice_client) -> None:
    response = ingest(
        [
            native(
                "r-1",
                "s-1",
                agent_name="Code reviewer",
                started_at="2026-11-30T10:00:00Z",
                model_calls=[{"model": "gpt-4o-mini", "input_tokens": 2796, "output_tokens": 720}],
            )
        ]
    )
    assert response.status_code == 200
    posted = alice_client.post(
        "/p/default/runs/r-1/annotations/", {"kind": "score", "name": "helpfulness", "value": "0.5"}
    )
    assert posted.status_code == 302


def test_the_stats_page_shows_its_scores_section_in_the_page_not_in_its_title(ingest, alice_client):
    scored_run(ingest, alice_client)
    page = alice_client.get("/p/default/stats/?days=365").content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert title == "Stats · Agent history"
    main = page[page.index('<main id="main">') :]
    assert '<section class="card" id="scores"' in main and "helpfulness" in main


def test_the_failure_chart_caption_links_to_the_table_it_means(ingest, alice_client):
    scored_run(ingest, alice_client)
    page = alice_client.get("/p/default/stats/?days=365").content.decode()
    assert "The table above" not in page
    link = re.search(r'Each day\'s failures and rate: <a href="#([^"]+)">', page)
    assert link and f'id="{link.group(1)}"' in page


def test_numbers_have_thousands_separators_everywhere(ingest, alice_client):
    scored_run(ingest, alice_client)
    session = alice_client.get("/p/default/sessions/s-1/").content.decode()
    assert "2,796 / 720 · 3,516 total" in session


@pytest.mark.parametrize(
    ("peak", "prefix", "unit", "ticks"),
    [
        (24461, "", "", ["0", "20,000", "40,000"]),
        (0.079, "$", "", ["$0.00", "$0.05", "$0.10"]),
        (3, "", "", ["0", "2", "4"]),
        (37.5, "", "%", ["0%", "20%", "40%"]),
        (1_234_567, "", "", ["0", "1,000,000", "2,000,000"]),
    ],
)
def test_chart_axes_have_round_ticks(peak, prefix, unit, ticks):
    chart = present.bar_chart(
        [("2026-11-29", peak / 3), ("2026-11-30", peak)], label="x", prefix=prefix, unit=unit
    )
    svg = render_to_string("history_app/includes/chart.html", {"chart": chart})
    assert re.findall(r'<text class="wf-axis"[^>]*text-anchor="end">([^<]*)</text>', svg) == ticks
    # The bars' own values keep their separators too.
    if peak >= 1000:
        assert f"{peak:,g}" in svg


def test_a_receipt_links_to_the_runs_it_stored(ingest, alice_client):
    assert ingest([native("r-a", "s-1"), native("r-b", "s-1")]).status_code == 200
    assert ingest([native("r-a", "s-1")]).status_code == 200  # a duplicate
    page = alice_client.get("/p/default/receipts/").content.decode()
    assert page.count('href="/p/default/runs/r-a/"') == 2
    assert page.count('href="/p/default/runs/r-b/"') == 1
    receipt = models.IngestReceipt.objects.order_by("pk").first()
    assert receipt.stored_runs == [
        {"run_id": "r-a", "status": "created"},
        {"run_id": "r-b", "status": "created"},
    ]


@pytest.fixture
def dated_sessions(ingest):
    ids = ["2026-11-08-alpha", "2026-11-08-beta", "2026-11-09-gamma", "other-2026-11-08"]
    assert ingest([native(f"run-{n}", session_id) for n, session_id in enumerate(ids)]).status_code == 200


def test_the_admin_finds_sessions_by_the_beginning_of_their_id(dated_sessions, admin_client):
    page = admin_client.get("/admin/history_app/session/", {"q": "2026-11-08"}).content.decode()
    assert "2026-11-08-alpha" in page and "2026-11-08-beta" in page
    assert "2026-11-09-gamma" not in page and "other-2026-11-08" not in page
    assert "its beginning" in page  # the search box says what it takes
    whole = admin_client.get("/admin/history_app/session/", {"q": "2026-11-09-gamma"}).content.decode()
    assert "2026-11-09-gamma" in whole and "2026-11-08-alpha" not in whole


def test_the_prefix_search_walks_an_index(dated_sessions):
    """What the admin's prefix search asks the database is answered from an index: the
    column's varchar_pattern_ops index on PostgreSQL (migration 0001), its b-tree on SQLite."""
    from history_app.admin import with_id_prefix

    found = with_id_prefix(models.Session.objects.all(), "2026-11-08")
    assert sorted(found.values_list("session_id", flat=True)) == ["2026-11-08-alpha", "2026-11-08-beta"]
    sql, params = found.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row) for row in cursor.fetchall())
    if connection.vendor == "postgresql":
        assert re.search(r"Index.*session_id\w*_like", plan), plan
    else:
        assert re.search(
            r"USING (COVERING )?INDEX \w*session_id\w* \(session_id>\? AND session_id<\?\)", plan
        ), plan


def test_destructive_buttons_look_and_say_so(client, django_user_model, ingest):
    user = django_user_model.objects.create_user("ada", password="ada-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=user, role=models.Membership.ADMIN
    )
    client.force_login(user)
    page = client.post(
        "/p/default/settings/retention/", {"retention_days": "1", "preview": "1"}
    ).content.decode()
    prune = re.search(r'<button type="submit" name="prune"[^>]*>Prune now</button>', page).group(0)
    assert 'class="danger"' in prune and "cannot be undone" in prune
    assert "<fieldset><legend>Retention of this project</legend>" in page


def test_a_model_call_that_asked_for_tools_shows_them(ingest, alice_client):
    call = {"model": "gpt-4o-mini", "output": None, "finish_reason": "tool_calls", "input_tokens": 5}
    answer = {"model": "gpt-4o-mini", "output": "It is 10:00.", "finish_reason": "stop"}
    iteration = {
        "index": 1,
        "model_calls": [call],
        "tool_calls": [
            {"tool": "clock", "call_id": "call-1", "params": {"tz": "Europe/Paris"}},
            {"tool": "<b>lookup</b>", "params": {"q": "<script>x</script>"}},
        ],
    }
    last = {"index": 2, "model_calls": [answer]}
    assert ingest([native("t-1", "s-1", iterations=[iteration, last])]).status_code == 200
    page = alice_client.get("/p/default/runs/t-1/model-calls/1/").content.decode()
    assert "asked for 2 tool calls" in page and "No text: it asked for tool calls." not in page
    listed = page[page.index('id="asked-tools"') :]
    assert "<code>clock</code>" in listed and "Europe/Paris" in listed and "call-1" in listed
    assert "&lt;b&gt;lookup&lt;/b&gt;" in listed and "<script>x" not in listed
    assert 'href="/p/default/runs/t-1/#call-0-0"' in listed
    # The call that answered with text asked for nothing.
    assert 'id="asked-tools"' not in alice_client.get("/p/default/runs/t-1/model-calls/2/").content.decode()


def test_a_search_hit_shows_the_passage_that_matched_marked_and_escaped(ingest, alice_client):
    runs = [
        native("q-1", "s-1", input="Summarise the report", output="The <b>partitioning</b> plan is ready."),
        native(
            "q-2",
            "s-2",
            input="Look it up",
            iterations=[
                {
                    "index": 1,
                    "tool_calls": [{"tool": "sql", "params": {}, "result": "rows by partitioning key"}],
                }
            ],
        ),
    ]
    assert ingest(runs).status_code == 200
    page = alice_client.get("/p/default/", {"q": "partition"}).content.decode()
    assert (
        '<span class="muted">answer:</span> The &lt;b&gt;<mark>partitioning</mark>&lt;/b&gt; plan is ready.'
        in page
    )
    assert '<span class="muted">tool sql result:</span> rows by <mark>partitioning</mark> key' in page


def test_search_passages_cost_the_same_queries_for_few_and_many_hits(ingest, alice_client):
    from django.db import connection as db
    from django.test.utils import CaptureQueriesContext

    def queries(query: str) -> int:
        with CaptureQueriesContext(db) as captured:
            assert alice_client.get("/p/default/", {"q": query}).status_code == 200
        return len(captured.captured_queries)

    deep = {"index": 1, "thought": "think", "tool_calls": [{"tool": "t", "params": {}, "result": "r"}]}
    runs = [native(f"a-{n}", f"sa-{n}", input="x", output=f"alpha {n}", iterations=[deep]) for n in range(2)]
    runs += [
        native(f"b-{n}", f"sb-{n}", input="x", iterations=[{**deep, "thought": f"beta {n}"}])
        for n in range(12)
    ]
    assert ingest(runs).status_code == 200
    few, many = queries("alpha"), queries("beta")
    assert many == few + 1  # the thoughts' one query, whatever the number of hits
