"""Reading never answers 500, whatever was stored and whatever the query string holds.

Hostile rows are written straight into the tables (stored data may predate any ingest
limit); hostile parameters go through the real client, on each page and its JSON twin.
"""

from __future__ import annotations

import base64
import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.test.utils import CaptureQueriesContext

from history_app import models
from history_app.agent_history.formats.autourgos import render_autourgos_markdown
from history_app.reading import listing, transcripts, twins
from history_app.store import mapper

from .conftest import autourgos_logs, native

pytestmark = pytest.mark.django_db


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_object(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.fixture
def run(ingest):
    """A run with one iteration and one tool call, stored through the API."""
    payload = native(
        "r-1", iterations=[{"thought": "t", "tool_calls": [{"tool": "web", "params": {"q": 1}}]}]
    )
    assert ingest(payload).status_code == 200
    return models.Run.objects.get(run_id="r-1")


# -- whatever was stored -----------------------------------------------------------


@pytest.mark.parametrize(
    ("params_json", "result"),
    [
        ("{}", _nested(5000)),  # a tool result holding JSON nested 5,000 deep
        ("{}", _nested(460)),
        (_deep_object(460), "ok"),  # parameters nested as deep as ingest once accepted
        (_nested(600), _deep_object(600)),
    ],
)
def test_deeply_nested_json_is_shown_not_a_500(alice_client, run, params_json, result):
    models.ToolCall.objects.filter(run=run).update(params_json=params_json, result=result)
    page = alice_client.get("/p/default/runs/r-1/")
    assert page.status_code == 200
    assert "Tool <code>web</code>" in page.content.decode()
    for url in ("/p/default/runs/r-1/export.md", "/p/default/sessions/s-1/export.html"):
        assert alice_client.get(url).getvalue(), url
    for url in ("/p/default/runs/r-1/export.json", "/api/v1/runs/r-1", "/p/default/sessions/s-1/export.json"):
        data = json.loads(alice_client.get(url).getvalue())
        record = data["runs"][0] if "runs" in data else data.get("run", data)
        (call,) = record["iterations"][0]["tool_calls"]
        assert call["result"] == result and call["params"] == json.loads(params_json), url


def test_a_deep_parameter_is_shown_as_text_below_the_tree(alice_client, run):
    models.ToolCall.objects.filter(run=run).update(params_json=_deep_object(100))
    page = alice_client.get("/p/default/runs/r-1/").content.decode()
    assert '<pre class="json">' in page and "&quot;a&quot;: {" in page


def test_inspector_shows_a_run_mark_with_thousands_of_digits(alice_client, run):
    text = f"[run-{'9' * 5000}] and [run-1]"
    models.InjectedContext.objects.create(
        run=run, position=0, kind="workflow_history", text=text, source_run_ids=["r-1"]
    )
    page = alice_client.get("/p/default/runs/r-1/context/1/")
    assert page.status_code == 200
    assert "9" * 5000 in page.content.decode()


# -- whatever the query string holds ---------------------------------------------------


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


BAD_CURSORS = [
    _token("[1e400, 1]"),
    _token("[Infinity, 1]"),
    _token("[NaN, 1]"),
    _token('["9999-12-31T23:59:59-14:00", 1]'),
    _token('["0001-01-01T00:00:00+14:00", 1]'),
    _token('["2026-01-01T00:00:00", 1]'),  # no time zone
    _token('["2026-01-01T00:00:00+00:00", 1e400]'),
    _token(f'["2026-01-01T00:00:00+00:00", {2**70}]'),
    _token('["2026-01-01T00:00:00+00:00", 1.5]'),
    _token("[" * 5000 + "]" * 5000),
    "",
]


@pytest.mark.parametrize("cursor", [c for c in BAD_CURSORS if c])
@pytest.mark.parametrize("path", ["/p/default/", "/p/default/?sort=runs", "/p/default/receipts/"])
def test_bad_cursors_on_pages_are_a_400(alice_client, run, path, cursor):
    joiner = "&" if "?" in path else "?"
    response = alice_client.get(f"{path}{joiner}_next={cursor}")
    assert response.status_code == 400 and "<code>_next</code>" in response.content.decode()


@pytest.mark.parametrize("cursor", [c for c in BAD_CURSORS if c])
@pytest.mark.parametrize("path", ["/api/v1/sessions", "/api/v1/sessions?sort=runs", "/api/v1/receipts"])
def test_bad_cursors_in_the_json_twins_are_a_400(alice_client, run, path, cursor):
    joiner = "&" if "?" in path else "?"
    response = alice_client.get(f"{path}{joiner}_next={cursor}")
    assert response.status_code == 400 and response.json()["parameter"] == "_next"


def test_a_huge_run_count_cursor_is_a_400(alice_client, run):
    for value in (2**63, -(2**63), 10**30):
        response = alice_client.get(f"/p/default/?sort=runs&_next={_token(json.dumps([value, 1]))}")
        assert response.status_code == 400


BAD_LIST_PARAMETERS = [
    ("to", "9999-12-31"),
    ("from", "9999-12-31"),
    ("from", "0001-01-01"),
    ("to", "0001-01-01"),
    ("from", "２０２６-01-01"),
    ("to", "x" * 5000),
    ("agent", "a\x00b"),
    ("tool", "a\x00b"),
    ("user", "a\x00b"),
    ("framework", "a\x00b"),
    ("q", "a\x00b"),
    ("status", "²"),
    ("sort", "runs\x00"),
]


@pytest.mark.parametrize(("name", "value"), BAD_LIST_PARAMETERS)
def test_bad_list_parameters_are_a_400_naming_them(alice_client, run, name, value):
    page = alice_client.get("/p/default/", {name: value})
    assert page.status_code == 400 and f"<code>{name}</code>" in page.content.decode()
    twin = alice_client.get("/api/v1/sessions", {name: value})
    assert twin.status_code == 400 and twin.json()["parameter"] == name


def test_the_last_days_of_the_calendar_still_filter(alice_client, run):
    assert alice_client.get("/p/default/", {"from": "2000-01-01", "to": "9999-12-30"}).status_code == 200
    assert alice_client.get("/p/default/", {"from": "0001-01-02"}).status_code == 200


@pytest.mark.parametrize("days", ["²", "٣", "3.0", "1e2", "9" * 5000, "", " 7", "-0", "NaN", "Infinity"])
def test_bad_stats_days_are_a_400(alice_client, days):
    page = alice_client.get("/p/default/stats/", {"days": days})
    assert page.status_code == 400 and "<code>days</code>" in page.content.decode()


@pytest.mark.parametrize("name", ["runs", "items"])
@pytest.mark.parametrize("value", ["²", "٣", "9" * 5000, "1e9", "-1", "NaN", "Infinity", "1.5"])
def test_bad_inspector_settings_are_a_400(alice_client, run, name, value):
    models.InjectedContext.objects.create(run=run, position=0, kind="workflow_history", text="[run-1]")
    page = alice_client.get("/p/default/runs/r-1/context/1/", {name: value})
    assert page.status_code == 400 and f"<code>{name}</code>" in page.content.decode()


@pytest.mark.parametrize("value", ["1e9", "1e300", "inf", "nan", "-1"])
def test_admin_retention_refuses_absurd_days_with_a_message(admin_client, run, value):
    page = admin_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": value, "batch_size": 500}
    )
    assert page.status_code == 200 and b"errorlist" in page.content
    assert models.Session.objects.count() == 1


@pytest.mark.parametrize("value", ["1e9", "1e300", "nan", "inf", "-inf", "-1"])
def test_prune_command_refuses_absurd_days_with_a_message(run, value):
    with pytest.raises(CommandError, match="--older-than must be a number of days from 0 to"):
        call_command("prune_history", f"--older-than={value}", stdout=io.StringIO(), stderr=io.StringIO())
    assert models.Session.objects.count() == 1


# -- a run of any size ------------------------------------------------------------------


def _grow(run: models.Run, *, calls: int = 0, iterations: int = 0) -> None:
    """Add tool calls to the run's first iteration, or iterations of two calls each."""
    first = run.iterations.get(position=0)
    have_calls, have_iterations = first.tool_calls.count(), run.iterations.count()
    models.ToolCall.objects.bulk_create(
        models.ToolCall(
            run=run, iteration=first, position=p, tool=f"tool-{p}", params_json=json.dumps({"n": p})
        )
        for p in range(have_calls, have_calls + calls)
    )
    for position in range(have_iterations, have_iterations + iterations):
        it = models.Iteration.objects.create(run=run, position=position, index=position)
        models.ToolCall.objects.bulk_create(
            models.ToolCall(run=run, iteration=it, position=p, tool=f"step-{position}-{p}") for p in range(2)
        )


def _tools(html: str) -> list[str]:
    return re.findall(r"Tool <code>([^<]+)</code>", html)


def test_a_run_of_thousands_of_calls_shows_the_first_and_links_the_rest(alice_client, run, settings):
    _grow(run, calls=2999)
    m = settings.HISTORY_RUN_PAGE_TOOL_CALLS
    page = alice_client.get("/p/default/runs/r-1/").content.decode()
    assert _tools(page) == ["web"] + [f"tool-{p}" for p in range(1, m)]
    assert len(page) < 200_000
    more = re.search(r'<a href="(/p/default/runs/r-1/iterations/0/calls/\?start=(\d+))" hx-get="\1"', page)
    assert more and int(more.group(2)) == m
    # Without JavaScript the link is a page of its own with the next slice and a further link.
    plain = alice_client.get(more.group(1)).content.decode()
    assert "<html" in plain and _tools(plain) == [f"tool-{p}" for p in range(m, 2 * m)]
    assert f"/p/default/runs/r-1/iterations/0/calls/?start={2 * m}" in plain
    # htmx gets only the slice, to put in place of the link.
    fragment = alice_client.get(more.group(1), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and _tools(fragment) == _tools(plain)
    last = alice_client.get("/p/default/runs/r-1/iterations/0/calls/", {"start": 2990}).content.decode()
    assert _tools(last) == [f"tool-{p}" for p in range(2990, 3000)] and "Show more" not in last


def test_a_run_of_many_iterations_shows_the_first_and_links_the_rest(alice_client, run, settings):
    _grow(run, iterations=200)
    n = settings.HISTORY_RUN_PAGE_ITERATIONS
    page = alice_client.get("/p/default/runs/r-1/").content.decode()
    assert re.findall(r'id="iteration-(\d+)"', page) == [str(i) for i in range(n)]
    url = f"/p/default/runs/r-1/iterations/?start={n}"
    assert f'href="{url}" hx-get="{url}"' in page
    plain = alice_client.get(url).content.decode()
    assert re.findall(r'id="iteration-(\d+)"', plain) == [str(i) for i in range(n, 2 * n)]
    fragment = alice_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and f"step-{n}-0" in fragment


def test_the_waterfall_is_bounded(alice_client, run):
    from datetime import timedelta

    from django.utils import timezone

    _grow(run, calls=3000)
    now = timezone.now()
    models.ToolCall.objects.filter(run=run).update(started_at=now, ended_at=now + timedelta(seconds=1))
    page = alice_client.get("/p/default/runs/r-1/").content.decode()
    assert 0 < page.count('<rect class="wf-') <= 250


@pytest.mark.parametrize("start", ["-1", "²", "1e9", "9" * 5000, "x", ""])
def test_bad_slice_starts_are_a_400(alice_client, run, start):
    for url in ("/p/default/runs/r-1/iterations/", "/p/default/runs/r-1/iterations/0/calls/"):
        page = alice_client.get(url, {"start": start})
        assert page.status_code == 400 and "<code>start</code>" in page.content.decode()


def test_slices_of_missing_things_are_404(alice_client, run):
    assert alice_client.get("/p/default/runs/nope/iterations/").status_code == 404
    assert alice_client.get("/p/default/runs/r-1/iterations/7/calls/").status_code == 404


def test_run_page_and_slices_make_the_same_queries_whatever_the_size(
    alice_client, run, django_assert_num_queries
):
    urls = (
        "/p/default/runs/r-1/",
        "/p/default/runs/r-1/iterations/?start=1",
        "/p/default/runs/r-1/iterations/0/calls/?start=1",
    )
    _grow(run, calls=1, iterations=1)
    alice_client.get(urls[0])  # the first view keeps the answer's HTML (one UPDATE, once)
    counts = {}
    for url in urls:
        with CaptureQueriesContext(__import__("django.db").db.connection) as ctx:
            alice_client.get(url)
        counts[url] = len(ctx.captured_queries)
    _grow(run, calls=500, iterations=60)
    for url in urls:
        with django_assert_num_queries(counts[url]):
            alice_client.get(url)
    # session + user, project + role + the project menu, and the page's own three; the
    # runs before and after it in its session (with the nearest of the other group, timed
    # or not); its annotations; the runs it started.
    assert counts["/p/default/runs/r-1/"] == 10


# -- exports and the JSON twin stream, with the same text as before -------------------------


def _old_run_record(run_id: str):
    return mapper.run_record(mapper.transcript_queryset().get(run_id=run_id))


def test_streamed_exports_are_the_same_text_as_whole_ones(alice_client, ingest):
    response = ingest([json.loads(p.read_text()) for p in autourgos_logs()])
    assert response.status_code == 200
    for run in models.Run.objects.select_related("session"):
        record = _old_run_record(run.run_id)
        as_json = alice_client.get(f"/p/default/runs/{run.run_id}/export.json")
        assert as_json.streaming and as_json.getvalue().decode() == record.to_json(indent=2)
        as_md = alice_client.get(f"/p/default/runs/{run.run_id}/export.md").getvalue().decode()
        assert as_md == render_autourgos_markdown(record)
        twin = alice_client.get(f"/api/v1/runs/{run.run_id}")
        # The run's record, then the runs it started as its page lists them
        # (tests/test_child_runs.py checks those).
        children = twins.child_runs(transcripts.child_runs(run))
        expected = {"ok": True, "run": record.to_dict(), "child_runs": children}
        assert twin.streaming and twin.getvalue() == json.dumps(expected).encode()
        session = run.session
        bundle = {
            "schema": "agent-history/session-bundle/v1",
            "session": listing.session_summary(session),
            "runs": [
                _old_run_record(r).to_dict()
                for r in session.runs.order_by("started_at", "received_at", "id").values_list(
                    "run_id", flat=True
                )
            ],
            "annotations": [],  # the runs' annotations (issue #18): none here
        }
        exported = (
            alice_client.get(f"/p/default/sessions/{session.session_id}/export.json").getvalue().decode()
        )
        assert exported == json.dumps(bundle, ensure_ascii=False, indent=2)


def test_a_big_run_exports_whole_in_the_same_queries(alice_client, run, django_assert_num_queries):
    with CaptureQueriesContext(__import__("django.db").db.connection) as ctx:
        alice_client.get("/p/default/runs/r-1/export.json").getvalue()
    _grow(run, calls=2999, iterations=3)
    with django_assert_num_queries(len(ctx.captured_queries)):
        record = json.loads(alice_client.get("/p/default/runs/r-1/export.json").getvalue())
    assert [len(it["tool_calls"]) for it in record["iterations"]] == [3000, 2, 2, 2]
    assert record["iterations"][0]["tool_calls"][2999]["params"] == {"n": 2999}


NUL_URLS = [
    "/api/v1/runs/a%00b",
    "/api/v1/sessions/a%00b",
    "/p/default/runs/a%00b/",
    "/p/default/runs/a%00b/export.json",
    "/p/default/runs/a%00b/export.md",
    "/p/default/runs/a%00b/context/1/",
    "/p/default/runs/a%00b/iterations/",
    "/p/default/runs/a%00b/iterations/0/calls/",
    "/p/default/sessions/a%00b/",
    "/p/default/sessions/a%00b/export.json",
    "/p/default/sessions/a%00b/export.html",
]


@pytest.mark.parametrize("url", NUL_URLS)
def test_a_nul_in_an_id_in_the_url_is_not_found_on_both_databases(alice_client, url):
    """PostgreSQL refuses a NUL in a query (a 500 before); no stored id holds one."""
    response = alice_client.get(url)
    assert response.status_code == 404
    if url.startswith("/api/"):
        assert response.json()["status"] == 404
