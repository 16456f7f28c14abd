"""The JSON twins of the pages: bearer token or logged-in session."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from .conftest import AUTOURGOS, native

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(ingest):
    data = json.loads((AUTOURGOS / "Task_20261129_224355_551407_bc481e3f.json").read_text())
    result = ingest(data).json()["results"][0]
    return result["run_id"], result["session_id"]


def test_sessions_with_a_token(client, auth_headers, stored):
    body = client.get("/api/v1/sessions", **auth_headers).json()
    assert body["ok"] is True
    assert [s["session_id"] for s in body["sessions"]] == [stored[1]]
    assert body["sessions"][0]["run_count"] == 1
    assert body["next"] is None


def test_session_detail_lists_its_runs(alice_client, stored):
    body = alice_client.get(f"/api/v1/sessions/{stored[1]}").json()
    assert body["session"]["agent_name"] == "ResearchBot"
    assert [r["run_id"] for r in body["runs"]] == [stored[0]]
    assert body["runs"][0]["tool_call_count"] == 12


def test_session_detail_pages_its_runs_like_the_page(
    alice_client, ingest, settings, django_assert_num_queries
):
    settings.HISTORY_PAGE_SIZE = 2
    ingest([native(f"r{i}", "five", started_at=f"2026-01-0{i + 1}T00:00:00Z") for i in range(5)])
    pages, token = [], None
    while True:
        # Her login's session and user, her project, the session, a page of its runs,
        # their annotations: the same on every page but the last on PostgreSQL, which
        # reads past the timed runs (where it sorts the untimed ones) once more.
        last = len(pages) == 2
        with django_assert_num_queries(6 + (last and connection.features.nulls_order_largest)):
            body = alice_client.get("/api/v1/sessions/five", {"_next": token} if token else {}).json()
        pages.append([r["run_id"] for r in body["runs"]])
        assert body["session"]["run_count"] == 5
        token = body["next"]
        if token is None:
            break
    assert pages == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    # The page's own cursor: the session page goes on from the same token.
    second = alice_client.get("/api/v1/sessions/five").json()["next"]
    page = alice_client.get("/p/default/sessions/five/", {"_next": second}).content.decode()
    assert "r2" in page and "r3" in page and "r1</code>" not in page


def test_run_detail_is_the_stored_canonical_record(alice_client, stored):
    run = json.loads(alice_client.get(f"/api/v1/runs/{stored[0]}").getvalue())["run"]
    assert run["schema"] == "agent-history/v1"
    assert run["run_id"] == stored[0]
    assert len(run["iterations"]) == 6
    assert run["iterations"][0]["tool_calls"][0] == {
        "tool": "web_search",
        "params": {"query": "Tokyo population", "max_results": 2},
        "result": run["iterations"][0]["tool_calls"][0]["result"],
        "error": None,
        "started_at": None,
        "ended_at": None,
        "call_id": None,
    }
    assert run["started_at"].startswith("2026-11-29T22:43:55")


def test_the_exported_record_can_be_ingested_again_as_a_duplicate(alice_client, ingest, stored):
    run = json.loads(alice_client.get(f"/api/v1/runs/{stored[0]}").getvalue())["run"]
    assert ingest(run).json()["results"][0]["status"] == "duplicate"


@pytest.mark.parametrize("url", ["/api/v1/sessions", "/api/v1/sessions/x", "/api/v1/runs/x"])
def test_anonymous_gets_401_in_the_error_shape(client, url):
    response = client.get(url)
    assert response.status_code == 401
    assert response.json() == {"ok": False, "error": response.json()["error"], "status": 401}


def test_missing_objects_give_404_json(alice_client):
    assert alice_client.get("/api/v1/sessions/nope").json()["status"] == 404
    assert alice_client.get("/api/v1/runs/nope").status_code == 404


def test_bad_cursor_gives_400(alice_client):
    assert alice_client.get("/api/v1/sessions?_next=%%%").status_code == 400
