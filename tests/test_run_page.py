"""The run page, second pass (issue 17): the previous and next run of the session, a
team's delegation calls linked to the member runs they started, each injected context
opened in place exactly as sent, and copy buttons."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from .conftest import native

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"


def page_of(client, url: str, **extra) -> str:
    response = client.get(url, **extra)
    assert response.status_code == 200, url
    return response.content.decode()


def nav_of(page: str) -> tuple[str | None, str | None]:
    prev = re.search(r'<a href="/p/default/runs/([^/]+)/" rel="prev"', page)
    nxt = re.search(r'<a href="/p/default/runs/([^/]+)/" rel="next"', page)
    return (prev and prev.group(1), nxt and nxt.group(1))


def test_previous_and_next_run_of_the_session_in_start_order(alice_client, ingest):
    # Sent out of order, two at the same second (the key breaks the tie).
    ingest(native("c", "s", started_at="2026-11-30T10:02:00Z", agent_name="Bot"))
    ingest(native("a", "s", started_at="2026-11-30T10:00:00Z"))
    ingest(native("b1", "s", started_at="2026-11-30T10:01:00Z"))
    ingest(native("b2", "s", started_at="2026-11-30T10:01:00Z"))
    ingest(native("other", "elsewhere", started_at="2026-11-30T10:01:30Z"))
    assert nav_of(page_of(alice_client, "/p/default/runs/a/")) == (None, "b1")
    assert nav_of(page_of(alice_client, "/p/default/runs/b1/")) == ("a", "b2")
    assert nav_of(page_of(alice_client, "/p/default/runs/b2/")) == ("b1", "c")
    last = page_of(alice_client, "/p/default/runs/c/")
    assert nav_of(last) == ("b2", None) and "Last run of the session" in last
    assert "First run of the session" in page_of(alice_client, "/p/default/runs/a/")
    # Runs with no start time go by the order they were stored in.
    ingest(native("u1", "untimed"))
    ingest(native("u2", "untimed"))
    assert nav_of(page_of(alice_client, "/p/default/runs/u1/")) == (None, "u2")
    # A run alone in its session has no navigation.
    assert 'class="run-nav"' not in page_of(alice_client, "/p/default/runs/other/")


def test_delegation_calls_link_the_member_runs_they_started(alice_client, ingest):
    assert ingest(json.loads((DEMO / "team_research.json").read_text())).status_code == 200
    page = page_of(alice_client, "/p/default/runs/demo-team-run-1/")
    links = re.findall(
        r'Started the member run of <strong>([^<]+)</strong>: <a href="/p/default/runs/([^/]+)/">', page
    )
    assert links == [("Researcher", "demo-team-member-1"), ("Writer", "demo-team-member-2")]


def test_delegations_match_by_task_then_by_order_and_only_stored_runs(alice_client, ingest):
    def call(task: str, member: str) -> dict:
        return {"tool": "delegate_task_to_member", "params": {"member_id": member, "task": task}}

    team = native(
        "team",
        "t",
        iterations=[
            {"index": 1, "tool_calls": [call("second task", "b"), call("unmatched", "a"), call("x", "c")]}
        ],
        member_interactions=[
            {"member": "A", "task": "first task", "response": "", "member_run_id": "run-a"},
            {"member": "B", "task": "second task", "response": "", "member_run_id": "run-b"},
            {"member": "C", "task": "third", "response": "", "member_run_id": "never-stored"},
        ],
    )
    ingest([team, native("run-a", "t", parent_run_id="team"), native("run-b", "t", parent_run_id="team")])
    page = page_of(alice_client, "/p/default/runs/team/")
    links = re.findall(r'member run of <strong>([^<]+)</strong>: <a href="/p/default/runs/([^/]+)/">', page)
    # "second task" matches B by its task; the next call takes A in order; C's run is not
    # stored, so the third call links nothing.
    assert links == [("B", "run-b"), ("A", "run-a")]


def test_a_context_opens_in_place_exactly_as_sent(alice_client, ingest, django_assert_num_queries):
    text = '<history>\n[run-1] Q: 1 < 2 & "quotes"\n  indented\ttab\n</history>'
    ingest({**native("r", "s"), "injected_contexts": [{"kind": "custom", "text": text, "step": "plan"}],
            "iterations": [{"index": 1, "name": "plan"}]})  # fmt: skip
    page = page_of(alice_client, "/p/default/runs/r/")
    # In the list and at its step: a <details> that htmx fills when opened, and a plain
    # link to the same text for a browser without JavaScript.
    assert (
        page.count('hx-get="/p/default/runs/r/context/1/text/" hx-trigger="toggle once from:closest details"')
        == 2
    )
    assert page.count('<a href="/p/default/runs/r/context/1/text/">Open the text as sent</a>') == 2
    fragment = page_of(alice_client, "/p/default/runs/r/context/1/text/", HTTP_HX_REQUEST="true")
    assert "<html" not in fragment
    sent = re.search(r'<pre class="text context-text" id="context-sent-text-1">(.*?)</pre>', fragment, re.S)
    assert html.unescape(sent.group(1)) == text
    assert "&lt;history&gt;" in sent.group(1)  # escaped, never markup
    full = page_of(alice_client, "/p/default/runs/r/context/1/text/")
    assert "<html" in full and 'href="/p/default/runs/r/context/1/">Open it in the inspector</a>' in full
    assert alice_client.get("/p/default/runs/r/context/0/text/").status_code == 404
    assert alice_client.get("/p/default/runs/r/context/2/text/").status_code == 404
    # session + user, project + role, the project menu, the context with its run.
    with django_assert_num_queries(5):
        alice_client.get("/p/default/runs/r/context/1/text/")
    with django_assert_num_queries(4):  # as htmx's fragment: no project menu
        alice_client.get("/p/default/runs/r/context/1/text/", HTTP_HX_REQUEST="true")


def test_copy_buttons_carry_what_they_copy_and_wait_for_the_script(alice_client, ingest):
    ingest(native("r-<1>", "s", input='ask "this"', output="the <b>answer</b>"))
    page = page_of(alice_client, "/p/default/runs/r-%3C1%3E/")
    buttons = re.findall(
        r'<button type="button" class="copy" (data-copy(?:-from)?)="([^"]*)" hidden>Copy</button>', page
    )
    assert [(kind, html.unescape(value)) for kind, value in buttons] == [
        ("data-copy", "r-<1>"),
        ("data-copy", 'ask "this"'),
        ("data-copy", "the <b>answer</b>"),
    ]
