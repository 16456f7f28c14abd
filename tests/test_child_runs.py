"""A run page lists the runs the run started (its members, handoff targets, step runs):
who, status, start, duration, tokens, cost, input, a link to each, in the order they
started, at most ``transcripts.CHILD_RUNS_SHOWN`` (50) of them; its JSON twin lists the same."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from .conftest import native

pytestmark = pytest.mark.django_db


def _call(cost: float | None = None) -> dict:
    call = {
        "model": "gpt-4o",
        "provider": "openai",
        "messages": [{"role": "user", "content": "hi", "part": "input"}],
        "output": "ok",
        "input_tokens": 1200,
        "output_tokens": 300,
    }
    if cost is not None:
        call["cost"] = cost
    return call


def _child(run_id: str, parent: str, second: int, session: str = "s-team", **fields) -> dict:
    fields.setdefault("kind", "member")
    return native(
        run_id,
        session,
        parent_run_id=parent,
        started_at=f"2026-11-30T10:{second // 60:02d}:{second % 60:02d}Z",
        ended_at=f"2026-11-30T10:{(second + 2) // 60:02d}:{(second + 2) % 60:02d}Z",
        **fields,
    )


def _team(ingest, *, iterations: list | None = None, kind: str = "team") -> None:
    """A team run and three members, sent out of order: the writer started last."""
    parent = native(
        "team-1",
        "s-team",
        kind=kind,
        agent_name="Editorial team",
        input="Write a post about partitioning",
        started_at="2026-11-30T10:00:00Z",
        iterations=iterations or [],
    )
    members = [
        _child("m-writer", "team-1", 30, agent_name="Writer", input="Draft the post", status="failed"),
        _child(
            "m-researcher",
            "team-1",
            10,
            agent_name="Researcher",
            input="Find sources " + "x" * 300,
            iterations=[{"index": 1, "model_calls": [_call(cost=0.0123)]}],
        ),
        _child("m-editor", "team-1", 20, agent_name="Editor", input="Tighten it"),
    ]
    assert ingest([members[0], parent, *members[1:]]).status_code == 200


def _twin(client, run_id: str) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 200
    return json.loads(b"".join(response.streaming_content))


def _page(client, run_id: str) -> str:
    response = client.get(f"/p/default/runs/{run_id}/")
    assert response.status_code == 200
    return response.content.decode()


def _section(page: str) -> str:
    found = re.search(r'<section class="card child-runs" id="member-runs">(.*?)</section>', page, re.S)
    assert found, "no member runs section"
    return found.group(1)


def _rows(section: str) -> list[str]:
    return re.findall(r"<tr>\s*<td class=\"run-cell\">(.*?)</tr>", section, re.S)


def _links(section: str) -> list[str]:
    return re.findall(r'<td class="run-cell">\s*<a href="([^"]+)">', section)


def test_a_team_run_lists_its_three_members_in_the_order_they_started(alice_client, ingest):
    _team(ingest, iterations=[{"index": 1, "thought": "split the work"}])
    page = _page(alice_client, "team-1")
    section = _section(page)
    assert 'Member runs <span class="muted">· 3</span>' in section
    assert "The runs this run started, in the order they started." in section
    assert "This run's work was done" not in page  # it has an iteration of its own
    assert _links(section) == [
        "/p/default/runs/m-researcher/",
        "/p/default/runs/m-editor/",
        "/p/default/runs/m-writer/",
    ]
    researcher, editor, writer = _rows(section)
    assert ">Researcher</a>" in researcher and '<code class="muted">m-researcher</code>' in researcher
    assert "2026-11-30 10:00:10" in researcher and "2.0 s" in researcher
    assert "1,200 / 300" in researcher and "$0.0123" in researcher
    # Only the head of a long input, cut where the row says so.
    assert "Find sources xxx" in researcher and "…" in researcher and "x" * 200 not in researcher
    assert "Tighten it" in editor and "—" in editor  # no model calls: no tokens, no cost
    assert "status-failed" in writer and "Draft the post" in writer
    # The facts above link to the section.
    assert '<dt>Member runs</dt><dd><a href="#member-runs">3</a></dd>' in page
    # Each member's page links back to its parent.
    assert 'href="/p/default/runs/team-1/"' in _page(alice_client, "m-editor")


def test_a_run_whose_members_did_the_work_says_so_instead_of_an_empty_transcript(alice_client, ingest):
    """An OpenAI Agents SDK run that handed off has no iterations of its own."""
    _team(ingest)
    section = _section(_page(alice_client, "team-1"))
    assert "This run's work was done by its members:" in section
    assert len(_rows(section)) == 3


def test_a_workflow_lists_its_step_runs(alice_client, ingest):
    workflow = native(
        "wf-1",
        "s-wf",
        kind="workflow",
        agent_name="Blog pipeline",
        started_at="2026-11-30T09:00:00Z",
    )
    steps = [
        _child(
            f"wf-step-{n}", "wf-1", n * 5, session="s-wf", kind="agent", agent_name=name, input=f"step {n}"
        )
        for n, name in enumerate(["research", "outline", "write", "review"], start=1)
    ]
    assert ingest([*reversed(steps), workflow]).status_code == 200
    page = _page(alice_client, "wf-1")
    section = _section(page)
    assert section.lstrip().startswith('<h2>Step runs <span class="muted">· 4</span></h2>')
    assert "This run's work was done by its steps:" in section
    assert '<th scope="col">Step</th>' in section
    assert [unescape(n) for n in re.findall(r'runs/wf-step-\d/">([^<]+)</a>', section)] == [
        "research",
        "outline",
        "write",
        "review",
    ]
    assert '<dt>Step runs</dt><dd><a href="#member-runs">4</a></dd>' in page


def test_a_run_with_no_children_shows_no_section(alice_client, ingest):
    _team(ingest)
    page = _page(alice_client, "m-editor")
    assert 'id="member-runs"' not in page and "Member runs" not in page and "Step runs" not in page
    assert "This run's work was done" not in page


def test_only_runs_of_its_own_session_count_and_a_run_is_not_its_own_child(alice_client, ingest):
    _team(ingest)
    elsewhere = _child("m-other-session", "team-1", 40, session="s-other", agent_name="Stray")
    loop = native("loop", "s-team", parent_run_id="loop", agent_name="Loop")
    assert ingest([elsewhere, loop]).status_code == 200
    section = _section(_page(alice_client, "team-1"))
    assert "m-other-session" not in section and len(_rows(section)) == 3
    assert 'id="member-runs"' not in _page(alice_client, "loop")


def test_names_and_inputs_are_shown_as_text_never_as_markup(alice_client, ingest):
    parent = native("p-x", "s-x", kind="team", agent_name="Team")
    hostile = _child(
        "c-x",
        "p-x",
        1,
        session="s-x",
        agent_name='<script>alert("name")</script>',
        input='<img src=x onerror="alert(1)"> and more',
    )
    assert ingest([parent, hostile]).status_code == 200
    section = _section(_page(alice_client, "p-x"))
    assert "<script>" not in section and "<img" not in section
    assert "&lt;script&gt;alert(&quot;name&quot;)&lt;/script&gt;" in section
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; and more" in section


def _sixty(ingest) -> None:
    parent = native(
        "big-team", "s-big", kind="team", agent_name="Big team", started_at="2026-11-30T10:00:00Z"
    )
    children = [
        _child(f"c-{n:02d}", "big-team", n, session="s-big", agent_name=f"member {n}") for n in range(60)
    ]
    assert ingest([parent, *children]).status_code == 200


def test_sixty_children_show_the_first_fifty_and_link_the_rest(alice_client, ingest):
    _sixty(ingest)
    page = _page(alice_client, "big-team")
    section = _section(page)
    assert _links(section) == [f"/p/default/runs/c-{n:02d}/" for n in range(50)]
    assert 'Member runs <span class="muted">· 60</span>' in section
    assert "And 10 more, all listed under this run in" in section
    assert 'href="/p/default/sessions/s-big/#run-big-team">the session timeline</a>' in section
    # The timeline it links to nests every child under the run, anchored there.
    timeline = alice_client.get("/p/default/sessions/s-big/").content.decode()
    assert 'id="run-big-team"' in timeline


def test_a_run_page_with_children_costs_one_query_more_and_two_past_the_cap(
    alice_client, ingest, django_assert_num_queries
):
    """The children are one query whatever their number up to the cap; past it, a
    capped count is the second. The first view of each run keeps its answer's HTML (one
    UPDATE), so each is viewed once before counting."""
    _team(ingest)
    _sixty(ingest)
    lone = native("lone", "s-lone", agent_name="Alone")
    assert ingest(lone).status_code == 200
    for run_id in ("lone", "team-1", "big-team"):
        _page(alice_client, run_id)
    # session + user, project + role + the project menu, the run, its child runs, its
    # iterations (none: no tool-call query), the count of contexts, the runs before and
    # after it in its session (with the nearest of the other group), its annotations.
    base = 9
    with django_assert_num_queries(base):
        _page(alice_client, "lone")
    with django_assert_num_queries(base):
        _page(alice_client, "team-1")
    with django_assert_num_queries(base + 1):  # the count past the first 50
        _page(alice_client, "big-team")


# session + user, the user's project, the run, its child runs, then what the export
# streams after the run's row already read: its iterations, tool calls, member
# interactions and contexts (these runs count no model calls: that table is not read).
TWIN_QUERIES = 9


def test_the_json_twin_lists_the_children_as_the_page_does(alice_client, ingest, django_assert_num_queries):
    _team(ingest)
    _sixty(ingest)
    body = _twin(alice_client, "team-1")
    assert body["ok"] and body["run"]["run_id"] == "team-1"
    children = body["child_runs"]
    assert [c["run_id"] for c in children["runs"]] == ["m-researcher", "m-editor", "m-writer"]
    assert (children["total"], children["counted_all"], children["more"]) == (3, True, 0)
    researcher = children["runs"][0]
    assert researcher["agent_name"] == "Researcher" and researcher["kind"] == "member"
    assert researcher["started_at"].startswith("2026-11-30T10:00:10")
    assert researcher["duration_ms"] == 2000
    assert (researcher["input_tokens"], researcher["output_tokens"], researcher["cost"]) == (
        1200,
        300,
        0.0123,
    )
    assert researcher["input"].startswith("Find sources ") and len(researcher["input"]) == 200
    assert researcher["input_truncated"] is True
    assert children["runs"][1]["input"] == "Tighten it" and children["runs"][1]["input_truncated"] is False
    big = _twin(alice_client, "big-team")["child_runs"]
    assert len(big["runs"]) == 50 and (big["total"], big["more"]) == (60, 10)
    assert _twin(alice_client, "m-editor")["child_runs"] == {
        "runs": [],
        "total": 0,
        "counted_all": True,
        "more": 0,
    }
    # The twin streams the run's rows after its child runs: as many queries with three
    # children as with none, one more past the cap (the count).
    for run_id, extra in (("m-editor", 0), ("team-1", 0), ("big-team", 1)):
        with django_assert_num_queries(TWIN_QUERIES + extra):
            b"".join(alice_client.get(f"/api/v1/runs/{run_id}").streaming_content)
