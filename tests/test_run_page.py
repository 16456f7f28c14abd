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


def test_previous_and_next_run_cross_between_timed_and_untimed_runs(alice_client, ingest):
    """Runs with no start time come where the database sorts a missing value, as in the
    session timeline: before the timed runs on SQLite, after them on PostgreSQL; each
    run's links step through that one order, across the two groups."""
    from django.db import connection

    ingest(native("u1", "mixed"))
    ingest(native("t2", "mixed", started_at="2026-11-30T10:02:00Z"))
    ingest(native("u2", "mixed"))
    ingest(native("t1", "mixed", started_at="2026-11-30T10:01:00Z"))
    timed, untimed = ["t1", "t2"], ["u1", "u2"]
    order = timed + untimed if connection.features.nulls_order_largest else untimed + timed
    for i, run_id in enumerate(order):
        expected = (order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else None)
        assert nav_of(page_of(alice_client, f"/p/default/runs/{run_id}/")) == expected, run_id


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
    sent = re.search(r'<pre class="text context-text">(.*?)</pre>', fragment, re.S)
    assert html.unescape(sent.group(1)) == text
    assert "&lt;history&gt;" in sent.group(1)  # escaped, never markup
    full = page_of(alice_client, "/p/default/runs/r/context/1/text/")
    assert "<html" in full and 'href="/p/default/runs/r/context/1/">Open it in the inspector</a>' in full
    assert alice_client.get("/p/default/runs/r/context/0/text/").status_code == 404
    assert alice_client.get("/p/default/runs/r/context/2/text/").status_code == 404
    # session + user, project + role + the project menu, the context with its run; the
    # same for htmx's fragment, which shows no project menu (read in the same query).
    with django_assert_num_queries(4):
        alice_client.get("/p/default/runs/r/context/1/text/")
    with django_assert_num_queries(4):
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


def test_delegations_keep_their_order_past_an_unstored_member_run(alice_client, ingest):
    """Found from outside: an interaction whose run is not stored still holds its place in
    the order (it used to shift every later call onto the next member's run), and a task
    match is never taken by an earlier call's order fallback."""

    def call(member: str, task: str | None = None) -> dict:
        params = {"member_id": member, **({"task": task} if task else {})}
        return {"tool": "delegate_task_to_member", "params": params}

    def interaction(member: str, task: str, run_id: str) -> dict:
        return {"member": member, "task": task, "response": "", "member_run_id": run_id}

    team_2 = native(
        "team-2",
        "t2",
        iterations=[{"index": 1, "tool_calls": [call("x"), call("y"), call("z")]}],
        member_interactions=[
            interaction("X", "", "missing"),
            interaction("Y", "", "m-y"),
            interaction("Z", "", "m-z"),
        ],
    )
    team_1 = native(
        "team-1",
        "t1",
        iterations=[{"index": 1, "tool_calls": [call("a", "Task X (rewritten)"), call("b", "Task B")]}],
        member_interactions=[interaction("B", "Task B", "m-b"), interaction("A", "Task A", "m-a")],
    )
    members = [native(r, "t", parent_run_id="p") for r in ("m-y", "m-z", "m-a", "m-b")]
    ingest([team_2, team_1, *members])
    link = r'member run of <strong>([^<]+)</strong>: <a href="/p/default/runs/([^/]+)/">'
    assert re.findall(link, page_of(alice_client, "/p/default/runs/team-2/")) == [("Y", "m-y"), ("Z", "m-z")]
    page = page_of(alice_client, "/p/default/runs/team-1/")
    assert re.findall(link, page) == [("A", "m-a"), ("B", "m-b")]


def test_previous_and_next_cross_between_untimed_and_timed_runs(alice_client, ingest):
    """The run page follows the timeline's order: runs with no start time come first on
    SQLite and last on PostgreSQL, as each sorts a missing value."""
    from django.db import connection

    ingest(native("t1", "s", started_at="2026-11-30T10:00:00Z"))
    ingest(native("t2", "s", started_at="2026-11-30T10:01:00Z"))
    ingest(native("u1", "s"))
    ingest(native("u2", "s"))
    order = ["t1", "t2", "u1", "u2"] if connection.features.nulls_order_largest else ["u1", "u2", "t1", "t2"]
    timeline = page_of(alice_client, "/p/default/sessions/s/")
    assert (
        re.findall(r'<td class="run-cell"><input [^>]*> <a href="/p/default/runs/([^/]+)/"', timeline)
        == order
    )
    for n, run_id in enumerate(order):
        expected = (order[n - 1] if n else None, order[n + 1] if n + 1 < len(order) else None)
        assert nav_of(page_of(alice_client, f"/p/default/runs/{run_id}/")) == expected, run_id


def test_a_dot_or_dot_dot_id_is_refused(ingest):
    """Found from outside: a run called ".." was stored, and every link to it resolved to
    its parent page."""
    for field in ("run_id", "session_id"):
        for value in (".", ".."):
            body = native(**{"run_id": "ok", "session_id": "ok", field: value})
            response = ingest(body)
            assert response.status_code == 400, (field, value)
            assert response.json()["results"][0]["errors"][0]["path"] == f"$.{field}"


def test_copies_keep_carriage_returns(alice_client, ingest):
    """An HTML parser turns CR and CRLF into LF, in text and in attributes: the copy
    buttons' text and the context's <pre> write them as character references."""
    ingest(
        {**native("cr", "s", input="a\r\nb\rc"), "injected_contexts": [{"kind": "custom", "text": "x\r\ny"}]}
    )
    page = page_of(alice_client, "/p/default/runs/cr/")
    assert 'data-copy="a&#13;\nb&#13;c"' in page
    fragment = page_of(alice_client, "/p/default/runs/cr/context/1/text/", HTTP_HX_REQUEST="true")
    assert '<pre class="text context-text">x&#13;\ny</pre>' in fragment
