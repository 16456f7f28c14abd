"""JSON twins of the session timeline, the stats page and the context inspector (issue #17),
and the session timeline paged with ``_next`` like the lists."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from history_app import models
from history_app.access.auth import register_token
from history_app.reading import paging, timeline

from .conftest import native

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def at(minutes: int, seconds: int = 0) -> str:
    return (T0 + timedelta(minutes=minutes, seconds=seconds)).isoformat()


def teams_session(n: int, *, members: int = 2, session: str = "s") -> list[dict]:
    """``n`` rounds ten minutes apart, each a team run with its member runs and then a
    workflow run with two steps: the pause before the next round is an idle gap."""
    runs = []
    for i in range(n):
        runs.append(
            native(
                f"t{i}",
                session,
                kind="team",
                started_at=at(10 * i),
                ended_at=at(10 * i, 30),
                member_interactions=[
                    {
                        "member": f"m{i}-{j}",
                        "task": f"task {j}",
                        "response": "done",
                        "member_run_id": f"m{i}-{j}",
                    }
                    for j in range(members)
                ],
            )
        )
        for j in range(members):
            runs.append(
                native(
                    f"m{i}-{j}",
                    session,
                    kind="member",
                    parent_run_id=f"t{i}",
                    started_at=at(10 * i, 1 + j),
                    ended_at=at(10 * i, 2 + j),
                )
            )
        runs.append(
            native(
                f"w{i}",
                session,
                kind="workflow",
                started_at=at(10 * i, 40),
                iterations=[{"name": "research"}, {"name": "draft"}],
            )
        )
    return runs


def shape(row: dict) -> tuple:
    """What a row says about the tree: kind, number, depth, parent, run, idle time."""
    return (
        row["type"],
        row.get("number"),
        row.get("depth"),
        row.get("parent_run_id"),
        row["run"]["run_id"] if "run" in row else None,
        row.get("idle_ms"),
    )


def walk(client, url: str, **headers) -> list[dict]:
    """Every page of a paged JSON twin, following ``next``."""
    pages = [client.get(url, **headers).json()]
    while pages[-1]["next"]:
        pages.append(client.get(url, {"_next": pages[-1]["next"]}, **headers).json())
        assert len(pages) < 100
    return pages


def run_rows(page: str) -> list[tuple[str, str]]:
    """(number, run id) of each run row of a session page, in page order."""
    return re.findall(
        r'<tr data-nav[^>]*>\s*<td class="row-number"><span class="visually-hidden">Run </span>(.*?)</td>\s*'
        r'<td class="run-cell"><input [^>]*> <a href="/p/default/runs/([^/]+)/"',
        page,
    )


def later_link(page: str) -> str | None:
    found = re.search(r'<a href="\?([^"]+)" hx-get="[^"]+"[^>]*>Later runs</a>', page)
    return html.unescape(found.group(1)) if found else None


# -- the session timeline, paged ----------------------------------------------------------


def test_timeline_twin_nests_members_and_steps_with_idle_gaps(alice_client, ingest):
    assert ingest(teams_session(2)).status_code == 200
    body = alice_client.get("/api/v1/sessions/s/timeline").json()
    assert body["ok"] is True and body["next"] is None
    assert body["session"]["session_id"] == "s" and body["session"]["run_count"] == 8
    assert body["counts"] == {"all": 8, "completed": 8, "successful": 8, "failed": 0}
    assert [shape(r) for r in body["rows"]] == [
        ("run", "1", 0, None, "t0", None),
        ("run", "1.1", 1, "t0", "m0-0", None),
        ("run", "1.2", 1, "t0", "m0-1", None),
        ("run", "2", 0, None, "w0", None),
        ("idle", None, None, None, None, 560_000),
        ("run", "3", 0, None, "t1", None),
        ("run", "3.1", 1, "t1", "m1-0", None),
        ("run", "3.2", 1, "t1", "m1-1", None),
        ("run", "4", 0, None, "w1", None),
    ]
    team, member, workflow = body["rows"][0], body["rows"][1], body["rows"][3]
    assert team["member_interactions_total"] == 2
    assert team["member_interactions"][1] == {
        "position": 1,
        "member": "m0-1",
        "member_run_id": "m0-1",
        "task": "task 1",
        "response": "done",
    }
    assert member["parent_on_this_page"] is True and member["run"]["kind"] == "member"
    assert [s["name"] for s in workflow["steps"]] == ["research", "draft"] and workflow["steps_total"] == 2


@pytest.mark.parametrize("page_size", [1, 2, 4, 5])
def test_pages_go_on_numbering_and_nesting_where_the_last_one_stopped(
    alice_client, ingest, settings, page_size
):
    """Read a page at a time, the timeline is the same rows as read in one page: a team's
    members on the next page stay under it and are numbered on, idle gaps stay put."""
    assert ingest(teams_session(5, members=3)).status_code == 200
    settings.HISTORY_PAGE_SIZE = 1000
    whole = [shape(r) for r in alice_client.get("/api/v1/sessions/s/timeline").json()["rows"]]
    assert len([r for r in whole if r[0] == "run"]) == 25 and ("run", "9.3", 1, "t4", "m4-2", None) in whole
    settings.HISTORY_PAGE_SIZE = page_size
    pages = walk(alice_client, "/api/v1/sessions/s/timeline")
    assert len(pages) == -(-25 // page_size)
    assert [shape(r) for page in pages for r in page["rows"]] == whole
    assert all(len([r for r in page["rows"] if r["type"] == "run"]) <= page_size for page in pages)
    # The whole session's counts come with the first page only.
    assert pages[0]["counts"]["all"] == 25 and all(page["counts"] is None for page in pages[1:])
    if page_size == 2:
        # m0-1 opens page 2 under t0, which is on page 1.
        assert pages[1]["rows"][0]["parent_on_this_page"] is False and pages[1]["rows"][0]["number"] == "1.2"


def test_the_session_page_pages_like_its_twin(alice_client, ingest, settings):
    assert ingest(teams_session(5, members=3)).status_code == 200
    whole = run_rows(alice_client.get("/p/default/sessions/s/").content.decode())
    assert len(whole) == 25
    settings.HISTORY_PAGE_SIZE = 4
    page = alice_client.get("/p/default/sessions/s/").content.decode()
    shown, idle = run_rows(page), page.count('<tr class="idle">')
    assert len(shown) == 4
    # Without JavaScript, "Later runs" is a link to the next page in full, with the whole
    # session's counts.
    query = later_link(page)
    second = alice_client.get(f"/p/default/sessions/s/?{query}").content.decode()
    counts = dict(re.findall(r"<dt[^>]*>([A-Za-z ]+)</dt><dd[^>]*>(\d+)</dd>", second))
    assert counts == {"All runs": "25", "Completed": "25", "Successful": "25", "Failed": "0"}
    # With htmx, the same link brings only the next rows (and the next link) to append.
    while query:
        fragment = alice_client.get(
            f"/p/default/sessions/s/?{query}", HTTP_HX_REQUEST="true"
        ).content.decode()
        assert "<html" not in fragment and "All runs" not in fragment and "<table" not in fragment
        shown += run_rows(fragment)
        idle += fragment.count('<tr class="idle">')
        query = later_link(fragment)
    assert shown == whole and idle == 4
    assert ("9.3", "m4-2") in shown


def test_runs_without_a_start_time_are_each_shown_once(alice_client, ingest, settings):
    """They sort where the database puts nulls (first on SQLite, last on PostgreSQL);
    either way every run is on exactly one page, the timed ones in start order."""
    timed = [native(f"timed-{i}", "s", started_at=at(i)) for i in range(4)]
    untimed = [native(f"untimed-{i}", "s") for i in range(5)]
    assert ingest(untimed[:2] + timed + untimed[2:]).status_code == 200
    settings.HISTORY_PAGE_SIZE = 3
    pages = walk(alice_client, "/api/v1/sessions/s/timeline")
    ids = [r["run"]["run_id"] for page in pages for r in page["rows"]]
    assert sorted(ids) == sorted(r["run_id"] for r in timed + untimed) and len(pages) == 3
    assert [i for i in ids if i.startswith("timed")] == [f"timed-{i}" for i in range(4)]
    assert [r["number"] for page in pages for r in page["rows"]] == [str(n) for n in range(1, 10)]


def test_a_run_whose_parent_is_far_back_or_later_is_shown_one_level_in(alice_client, ingest, settings):
    """The cursor carries the last runs shown (``CARRIED_PARENTS``): a member of a run
    further back, or one that started before its parent, is shown one level in, without
    a number, linked to its parent."""
    n = timeline.CARRIED_PARENTS + 4
    runs = [native(f"a{i}", "s", started_at=at(i)) for i in range(n)]
    runs += [native("late-0", "s", kind="member", parent_run_id="a0", started_at=at(n, 10))]
    runs += [native(f"late-{n - 1}", "s", kind="member", parent_run_id=f"a{n - 1}", started_at=at(n, 20))]
    runs += [native("early", "s", kind="member", parent_run_id="last", started_at=at(n, 30))]
    runs += [native(f"x{i}", "s", started_at=at(n, 40 + 10 * i)) for i in range(2)]
    runs += [native("last", "s", started_at=at(n + 1))]
    assert ingest(runs).status_code == 200
    settings.HISTORY_PAGE_SIZE = 5
    rows = [r for page in walk(alice_client, "/api/v1/sessions/s/timeline") for r in page["rows"]]
    assert [r["number"] for r in rows[:n]] == [str(i) for i in range(1, n + 1)]
    # Page 5: the member of the last run of page 4 comes first, under it; the member of
    # a0 (page 1) and the run that started before its parent (page 6) are one level in.
    assert [shape(r) for r in rows[n:]] == [
        ("run", f"{n}.1", 1, f"a{n - 1}", f"late-{n - 1}", None),
        ("run", None, 1, "a0", "late-0", None),
        ("run", None, 1, "last", "early", None),
        ("run", str(n + 1), 0, None, "x0", None),
        ("run", str(n + 2), 0, None, "x1", None),
        ("run", str(n + 3), 0, None, "last", None),
    ]
    assert not any(r["parent_on_this_page"] for r in rows[n:])
    page = alice_client.get("/p/default/sessions/s/", {"_next": _cursor_before(alice_client, "late-0")})
    text = page.content.decode()
    assert '<span title="Its parent run is on another page">↳</span>' in text
    assert 'under <a href="/p/default/runs/a0/"><code>a0</code></a>' in text


def _cursor_before(client, run_id: str) -> str:
    """The ``_next`` of the twin's page just before the one that holds ``run_id``."""
    cursor = None
    for page in walk(client, "/api/v1/sessions/s/timeline"):
        if any(r.get("run", {}).get("run_id") == run_id for r in page["rows"]):
            return cursor
        cursor = page["next"]
    raise AssertionError(run_id)


@pytest.mark.parametrize("bad", ["abc", "", "e30", "x" * 5000, "\u00e9t\u00e9"])
def test_a_cursor_this_server_did_not_hand_out_is_a_400(alice_client, ingest, settings, bad):
    ingest(teams_session(3))
    settings.HISTORY_PAGE_SIZE = 2
    real = alice_client.get("/api/v1/sessions/s/timeline").json()["next"]
    for token in [bad, real[:-2] + ("AA" if real[-2:] != "AA" else "BB"), paging.encode_cursor(T0, 1)]:
        if not token:
            continue
        response = alice_client.get("/api/v1/sessions/s/timeline", {"_next": token})
        assert response.status_code == 400, token
        assert response.json() == {
            "ok": False,
            "error": "_next: not a token this server handed out; start again from the first page",
            "status": 400,
            "parameter": "_next",
        }
        page = alice_client.get("/p/default/sessions/s/", {"_next": token})
        assert page.status_code == 400 and "<code>_next</code>" in page.content.decode()


def test_an_empty_cursor_is_the_first_page(alice_client, ingest):
    ingest(teams_session(1))
    assert alice_client.get("/api/v1/sessions/s/timeline", {"_next": ""}).json()["counts"]["all"] == 4


def test_unknown_sessions_are_a_404_and_another_projects_are_unknown(alice_client, ingest):
    ingest(teams_session(1))
    response = alice_client.get("/api/v1/sessions/nope/timeline")
    assert response.status_code == 404 and response.json()["error"] == "no session 'nope'"
    other = models.Project.objects.create(slug="other", name="Other")
    _, token = register_token(name="other", scopes=["read"], project=other)
    response = Client().get("/api/v1/sessions/s/timeline", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 404 and "t0" not in response.content.decode()


def test_timeline_twin_queries_do_not_grow_with_the_session(alice_client, ingest, django_assert_num_queries):
    ingest(teams_session(1))  # 4 runs
    # session + user, the project she opened last with her role, the session with its
    # counts, its runs (with their parents), member interactions, workflow steps, the runs'
    # annotations.
    with django_assert_num_queries(8):
        small = alice_client.get("/api/v1/sessions/s/timeline").json()
    ingest(teams_session(10, members=2))  # 40 runs, more interactions and steps
    with django_assert_num_queries(8):
        big = alice_client.get("/api/v1/sessions/s/timeline").json()
    assert len(small["rows"]) == 4 and len([r for r in big["rows"] if r["type"] == "run"]) == 40


def test_later_timeline_pages_read_only_their_runs(alice_client, ingest, settings, django_assert_num_queries):
    settings.HISTORY_PAGE_SIZE = 4
    ingest(teams_session(3))  # 12 runs: page 2 is full
    second = alice_client.get("/api/v1/sessions/s/timeline").json()["next"]
    # No counts on a later page: session + user, project, the session, its runs, member
    # interactions, steps, annotations (the same for a session seven times the size).
    with django_assert_num_queries(8):
        third = alice_client.get("/api/v1/sessions/s/timeline", {"_next": second}).json()["next"]
    # The htmx "Later runs" request: session + user, project + role, the session, its
    # runs, member interactions, steps, the runs' annotations.
    with django_assert_num_queries(8):
        fragment = alice_client.get("/p/default/sessions/s/", {"_next": second}, HTTP_HX_REQUEST="true")
    assert "<html" not in fragment.content.decode()
    # The last page reads past the timed runs: on PostgreSQL, where the untimed ones
    # sort after them, that is one more read of the index (none are there).
    with django_assert_num_queries(8 + connection.features.nulls_order_largest):
        last = alice_client.get("/api/v1/sessions/s/timeline", {"_next": third}).json()
    assert last["next"] is None and len([r for r in last["rows"] if r["type"] == "run"]) == 4
    ingest(teams_session(20))
    with django_assert_num_queries(8):
        alice_client.get("/api/v1/sessions/s/timeline", {"_next": second})
    with django_assert_num_queries(8):
        alice_client.get("/api/v1/sessions/s/timeline", {"_next": third})


# -- the stats twin -----------------------------------------------------------------------


def stats_run(run_id, days_ago, *, status="completed", duration_s=1, error=None, tools=()):
    start = timezone.now().replace(hour=0, minute=0, second=5, microsecond=0) - timedelta(days=days_ago)
    return native(
        run_id,
        f"s-{days_ago}",
        status=status,
        error=error,
        started_at=start.isoformat(),
        ended_at=(start + timedelta(seconds=duration_s)).isoformat(),
        iterations=[
            {"tool_calls": [{"tool": t, "params": {}, "error": "x" if t == "flaky" else None} for t in tools]}
        ],
    )


@pytest.fixture
def history(ingest):
    runs = [
        stats_run(f"today-{i}", 0, duration_s=i + 1, tools=("search", "search", "flaky")) for i in range(10)
    ]
    runs += [stats_run("old-fail-1", 3, status="failed", error="HTTP 502 from upstream", duration_s=100)]
    runs += [stats_run("old-fail-2", 3, status="failed", error="HTTP 502 from upstream", duration_s=200)]
    runs += [stats_run("older-fail", 5, status="failed", error="timeout", tools=("fetch",))]
    runs += [stats_run("ancient", 400)]
    assert ingest(runs).status_code == 200


def test_stats_twin_gives_the_pages_numbers(client, auth_headers, history, alice_client):
    body = client.get("/api/v1/stats", **auth_headers).json()
    assert body["ok"] is True and body["days"] == 30
    assert body["since"] == (timezone.now().date() - timedelta(days=29)).isoformat()
    assert body["totals"]["runs"] == 13 and body["totals"]["failed"] == 3
    assert body["totals"]["failure_rate"] == pytest.approx(3 / 13)
    assert body["latency"]["timed_runs"] == 13 and body["latency"]["run_percentiles_exact"] is True
    assert body["latency"]["run_p50_ms"] == 6000 and body["latency"]["run_p95_ms"] == 100_000
    assert len(body["per_day"]) == 30 and body["per_day"][-1]["day"] == timezone.now().date().isoformat()
    assert (body["per_day"][-1]["runs"], body["per_day"][-1]["failed"]) == (10, 0)
    assert (body["per_day"][-4]["runs"], body["per_day"][-4]["failed"]) == (2, 2)
    assert {"calls", "input_tokens", "output_tokens", "cost", "run_p50_ms", "model_p95_ms"} <= set(
        body["per_day"][0]
    )
    assert body["top_tools"][:2] == [
        {"tool": "search", "calls": 20, "errors": 0},
        {"tool": "flaky", "calls": 10, "errors": 10},
    ]
    assert body["top_errors"][0] == {"error": "HTTP 502 from upstream", "count": 2, "run_id": "old-fail-2"}
    assert isinstance(body["per_model"], list) and isinstance(body["per_agent"], list)
    # The page shows the same figures.
    page = alice_client.get("/p/default/stats/").content.decode()
    assert "HTTP 502 from upstream" in page and ">13<" in page
    week = client.get("/api/v1/stats", {"days": "4"}, **auth_headers).json()
    assert week["totals"]["runs"] == 12 and len(week["per_day"]) == 4


def test_stats_twin_reports_model_usage_per_model_and_agent(alice_client, ingest):
    call = {"model": "gpt-4o-mini", "input_tokens": 100, "output_tokens": 20}
    today = timezone.now().replace(microsecond=0).isoformat()
    ingest(native("r", "s", agent_name="writer", started_at=today, model_calls=[call, call]))
    body = alice_client.get("/api/v1/stats?days=1").json()
    assert body["totals"]["model_calls"] == 2 and body["totals"]["input_tokens"] == 200
    assert body["per_model"][0]["model"] == "gpt-4o-mini" and body["per_model"][0]["calls"] == 2
    assert body["per_agent"][0]["agent"] == "writer" and body["per_agent"][0]["output_tokens"] == 40
    assert body["per_day"] == [{**body["per_day"][0], "calls": 2, "input_tokens": 200, "output_tokens": 40}]


@pytest.mark.parametrize("days", ["0", "366", "x", "1e3", "-1", "٣", "7\x00"])
def test_a_bad_period_is_a_400_naming_it(alice_client, days):
    response = alice_client.get("/api/v1/stats", {"days": days})
    assert response.status_code == 400
    body = response.json()
    assert body["ok"] is False and body["status"] == 400 and body["parameter"] == "days"
    assert body["error"].startswith("days: ")


def test_stats_twin_queries_do_not_grow(alice_client, ingest, django_assert_num_queries):
    ingest([stats_run(f"a{i}", i % 5, tools=("t",)) for i in range(5)])
    # session + user, project, and the stats page's eight reads: runs per day, the
    # durations, tools, errors (runs), model usage per day, per model, per agent, latency
    # buckets (rollups); the scores' names (none here).
    with django_assert_num_queries(12):
        alice_client.get("/api/v1/stats")
    ingest(
        [stats_run(f"b{i}", i % 20, tools=("t", "u"), status="failed", error=f"e{i % 3}") for i in range(80)]
    )
    with django_assert_num_queries(12):
        body = alice_client.get("/api/v1/stats").json()
    assert body["totals"]["runs"] == 85


# -- the context inspector twin -----------------------------------------------------------


@pytest.fixture
def workflow(ingest):
    assert ingest(json.loads((DEMO / "workflow_blog.json").read_text())).status_code == 200


def test_context_twin_gives_the_text_sent_its_sources_and_the_rebuild_check(alice_client, workflow):
    body = alice_client.get("/api/v1/runs/demo-wf-run-3/contexts/1").json()
    sent = models.InjectedContext.objects.get(run__run_id="demo-wf-run-3", position=0)
    assert body["ok"] is True and body["run_id"] == "demo-wf-run-3"
    assert body["context"]["number"] == 1 and body["context"]["text"] == sent.text
    assert body["context"]["kind"] == "workflow_history" and body["context"]["reported"] is True
    assert [(s["run_id"], s["stored"]) for s in body["sources"]] == [
        ("demo-wf-run-1", True),
        ("demo-wf-run-2", True),
    ]
    assert body["sources"][0]["run"]["kind"] == "workflow"
    # Each entry's header, where it is in the text, and the run it came from.
    assert [(sent.text[e["start"] : e["end"]], e["header"], e["run_id"]) for e in body["entries"]] == [
        ("[run-1]", "[run-1]", "demo-wf-run-1"),
        ("[run-2]", "[run-2]", "demo-wf-run-2"),
    ]
    assert body["rebuild"] == {
        "matches": True,
        "verdict": "identical",
        "text": sent.text,
        "diff": None,
        "diff_fallback": None,
    }
    assert (
        body["rerender"]["settings"]
        == body["rerender"]["defaults"]
        == {"runs": 3, "items": 5, "timestamps": False}
    )
    assert body["previous"]["run_id"] == "demo-wf-run-2" and body["previous"]["number"] == 1
    assert "+[run-2]" in body["previous"]["diff"]


def test_context_twin_rerenders_under_other_settings(alice_client, workflow):
    body = alice_client.get("/api/v1/runs/demo-wf-run-3/contexts/1", {"runs": "1"}).json()
    assert body["rerender"]["settings"]["runs"] == 1 and "-[run-2]" in body["rerender"]["diff"]
    assert body["rebuild"]["matches"] is True  # the rebuild check keeps the context's own settings


def test_context_twin_says_when_the_rebuild_differs(alice_client, ingest):
    history = "[run-1]\ninput: q0\noutput: an answer edited before it was sent\n\n"
    ingest(
        [
            native("w0", "s", kind="workflow", input="q0", output="a0", started_at=at(0)),
            native(
                "w1",
                "s",
                kind="workflow",
                started_at=at(1),
                injected_contexts=[
                    {
                        "kind": "workflow_history",
                        "text": f"<workflow_history_context>\n{history}</workflow_history_context>",
                        "source_run_ids": ["w0"],
                    }
                ],
            ),
        ]
    )
    body = alice_client.get("/api/v1/runs/w1/contexts/1").json()
    assert body["rebuild"]["matches"] is False
    assert "-output: an answer edited before it was sent" in body["rebuild"]["diff"]
    assert "+output: a0" in body["rebuild"]["diff"]


def test_free_text_contexts_are_not_rerendered(alice_client, ingest):
    ingest(native("r", "s", injected_contexts=[{"text": "Be brief. [run-1]", "kind": "instructions"}]))
    body = alice_client.get("/api/v1/runs/r/contexts/1").json()
    assert body["context"]["text"] == "Be brief. [run-1]" and body["entries"] == []
    assert body["rebuild"]["matches"] is None and body["rerender"] is None
    assert "only history blocks" in body["notes"][0]


@pytest.mark.parametrize("url", ["demo-wf-run-3/contexts/0", "demo-wf-run-3/contexts/2", "nope/contexts/1",
                                 "demo-wf-run-3/contexts/2147483649", "demo-wf-run-3/contexts/99999999999999999999999"])  # fmt: skip
def test_unknown_contexts_are_a_404(alice_client, workflow, url, django_assert_max_num_queries):
    with django_assert_max_num_queries(4):
        response = alice_client.get(f"/api/v1/runs/{url}")
    assert response.status_code == 404 and response.json()["ok"] is False
    assert response.json()["error"].startswith("run '")


@pytest.mark.parametrize(
    ("params", "field"), [({"runs": "many"}, "runs"), ({"runs": "-1"}, "runs"), ({"items": "1000"}, "items")]
)
def test_bad_rerender_settings_are_a_400_naming_them(alice_client, workflow, params, field):
    response = alice_client.get("/api/v1/runs/demo-wf-run-3/contexts/1", params)
    assert response.status_code == 400 and response.json()["parameter"] == field


def test_context_twin_queries_do_not_grow(alice_client, ingest, django_assert_num_queries):
    def workflow_runs(n):
        runs = []
        for i in range(n):
            history = "".join(f"[run-{j + 1}]\ninput: q{j}\noutput: a{j}\n\n" for j in range(i))
            contexts = [
                {
                    "kind": "workflow_history",
                    "text": f"<workflow_history_context>\n{history}</workflow_history_context>",
                    "settings": {"num_history_runs": 100},
                }
            ]
            runs.append(
                native(
                    f"w{i}",
                    "big",
                    kind="workflow",
                    input=f"q{i}",
                    output=f"a{i}",
                    started_at=f"2026-01-01T00:{i:02d}:00Z",
                    injected_contexts=contexts if i else [],
                )
            )
        return runs

    ingest(workflow_runs(4))
    # session + user, project, the context with its run, its source runs, the pool, the
    # previous context.
    with django_assert_num_queries(7):
        alice_client.get("/api/v1/runs/w3/contexts/1")
    ingest(workflow_runs(40))
    with django_assert_num_queries(7):
        body = alice_client.get("/api/v1/runs/w39/contexts/1").json()
    assert len(body["entries"]) == 39 and body["rebuild"]["matches"] is True


# -- who may read them --------------------------------------------------------------------

TWINS = ["/api/v1/sessions/s/timeline", "/api/v1/stats", "/api/v1/runs/r/contexts/1"]


def test_twins_need_a_read_token_or_a_login(client, ingest):
    ingest(native("r", "s", injected_contexts=[{"text": "Be brief.", "kind": "instructions"}]))
    _, ingest_only = register_token(name="agent", scopes=["ingest"])
    _, reader = register_token(name="reader", scopes=["read"])
    for url in TWINS:
        anonymous = client.get(url)
        assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer"), url
        refused = client.get(url, HTTP_AUTHORIZATION=f"Bearer {ingest_only}")
        assert refused.status_code == 403 and "'read' scope" in refused.json()["error"], url
        assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {reader}").status_code == 200, url
