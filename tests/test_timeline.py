"""The session timeline: nesting, steps, member interactions, counts, idle gaps, tokens."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from history_app import models

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"


def rows_of(page: str) -> list[tuple[str, str]]:
    """(number, run id) of each run row, in page order."""
    return re.findall(
        r'<tr data-nav[^>]*>\s*<td class="row-number"><span class="visually-hidden">Run </span>([\d.]+)</td>\s*<td class="run-cell"><input [^>]*> <a href="/p/default/runs/([^/]+)/"',
        page,
    )


def test_team_runs_nest_their_member_runs_and_interactions(alice_client, ingest):
    assert ingest(json.loads((DEMO / "team_research.json").read_text())).status_code == 200
    page = alice_client.get("/p/default/sessions/demo-team-research/").content.decode()
    assert rows_of(page) == [
        ("1", "demo-team-run-1"),
        ("1.1", "demo-team-member-1"),
        ("1.2", "demo-team-member-2"),
    ]
    assert 'class="depth-1' in page
    assert "2 member interactions" in page and "<strong>Researcher</strong>" in page


def test_workflow_runs_show_steps_counts_idle_gaps_and_tokens(alice_client, ingest):
    assert ingest(json.loads((DEMO / "workflow_blog.json").read_text())).status_code == 200
    page = alice_client.get("/p/default/sessions/demo-workflow-blog/").content.decode()
    assert [number for number, _ in rows_of(page)] == ["1", "2", "3", "4"]
    assert '<a href="/p/default/runs/demo-wf-run-1/#iteration-1">research</a>' in page
    # 4 runs: 4 finished, 3 successful, 1 failed (the seeds' WorkflowSession counts).
    counts = dict(re.findall(r"<dt[^>]*>([A-Za-z ]+)</dt><dd[^>]*>(\d+)</dd>", page))
    assert counts == {"All runs": "4", "Completed": "4", "Successful": "3", "Failed": "1"}
    # Runs ten minutes apart: each pause over the 5-minute threshold is shown.
    assert page.count('<tr class="idle">') == 3 and "idle 9 min 46 s" in page
    assert ">812 / 240<" in page  # per-run tokens, input / output
    assert "3,516 total" in page  # the session's sum


def test_idle_threshold_is_a_setting(alice_client, ingest, settings):
    settings.HISTORY_IDLE_GAP_SECONDS = 3600
    ingest(json.loads((DEMO / "workflow_blog.json").read_text()))
    assert (
        '<tr class="idle">'
        not in alice_client.get("/p/default/sessions/demo-workflow-blog/").content.decode()
    )


def test_a_member_whose_team_run_is_elsewhere_is_shown_at_the_top(alice_client, ingest):
    ingest(
        [
            {
                "schema": "agent-history/v1",
                "run_id": "m",
                "session_id": "s",
                "kind": "member",
                "parent_run_id": "gone",
            },
            {"schema": "agent-history/v1", "run_id": "loop", "session_id": "s", "parent_run_id": "loop"},
            {"schema": "agent-history/v1", "run_id": "a", "session_id": "s", "parent_run_id": "b"},
            {"schema": "agent-history/v1", "run_id": "b", "session_id": "s", "parent_run_id": "a"},
        ]
    )
    page = alice_client.get("/p/default/sessions/s/").content.decode()
    # Every run is shown exactly once, even when parent ids form a cycle.
    assert sorted(run for _, run in rows_of(page)) == ["a", "b", "loop", "m"]


def test_timeline_query_count_does_not_grow(alice_client, ingest, django_assert_num_queries):
    def session_of(n):
        team = {"schema": "agent-history/v1", "session_id": "big", "kind": "team"}
        runs = []
        for i in range(n):
            runs.append({**team, "run_id": f"t{i}", "member_interactions": [{"member": "a", "task": "x"}]})
            runs.append({**team, "run_id": f"m{i}", "kind": "member", "parent_run_id": f"t{i}"})
            runs.append(
                {
                    **team,
                    "run_id": f"w{i}",
                    "kind": "workflow",
                    "iterations": [{"name": "s1"}, {"name": "s2"}],
                }
            )
        return runs

    ingest(session_of(2))
    # session + user, project + role + the project menu, the session, its runs, member
    # interactions, workflow steps, the runs' annotations.
    with django_assert_num_queries(8):
        alice_client.get("/p/default/sessions/big/")
    ingest(session_of(25))
    with django_assert_num_queries(8):
        page = alice_client.get("/p/default/sessions/big/").content.decode()
    # The timeline is paged (HISTORY_PAGE_SIZE runs a page): the 75 runs are the first
    # page's 50 and the 25 behind its "Later runs" link, each run once.
    first = rows_of(page)
    assert len(first) == 50
    later = re.search(r'<a href="\?(_next=[^"]+)" hx-get="[^"]+"[^>]*>Later runs</a>', page).group(1)
    rest = rows_of(alice_client.get(f"/p/default/sessions/big/?{html.unescape(later)}").content.decode())
    assert len(rest) == 25
    assert sorted(run for _, run in first + rest) == sorted(r["run_id"] for r in session_of(25))


@pytest.mark.parametrize("order", ["team first", "members first"])
def test_a_team_session_is_named_after_the_team_not_a_member(alice_client, ingest, order):
    """Issue #17: a team session's agent is the team, whichever run arrives first and
    although its member runs start later than the team run."""
    base = {"schema": "agent-history/v1", "session_id": "s-team"}
    team = {
        **base,
        "run_id": "team-1",
        "kind": "team",
        "agent_name": "Editorial team",
        "started_at": "2026-11-30T10:00:00Z",
        "member_interactions": [{"member": "Writer", "task": "write"}],
    }
    member = {
        **base,
        "run_id": "member-1",
        "kind": "member",
        "parent_run_id": "team-1",
        "agent_name": "Writer",
        "started_at": "2026-11-30T10:00:05Z",
    }
    for payload in [team, member] if order == "team first" else [member, team]:
        assert ingest(payload).status_code == 200
    assert models.Session.objects.get(session_id="s-team").agent_name == "Editorial team"
    assert ">Editorial team<" in alice_client.get("/p/default/").content.decode()
