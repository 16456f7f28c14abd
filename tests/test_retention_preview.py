"""Retention previews (issue #17): a dry run names the sessions that would go (the first
ones, linked, and a link to all of them), counts the pinned sessions it keeps and the search
documents, in words ("1 session"), with a number of queries that does not grow with the
data — in the command, the admin's retention page and a project's settings page."""

from __future__ import annotations

import html
import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from history_app import models
from history_app.upkeep import retention

pytestmark = pytest.mark.django_db

ADMIN_PAGE = "/admin/history_app/session/retention/"
SETTINGS_PAGE = "/p/default/settings/retention/"


def add_sessions(ingest, names, *, days_ago, runs=2, status="completed", agent="Bot"):
    """Sessions called ``names``, each with ``runs`` runs, the first the oldest (by a minute
    each), all in one request."""
    payload = []
    for n, name in enumerate(names):
        when = (timezone.now() - timedelta(days=days_ago, minutes=len(names) - n)).isoformat()
        payload += [
            {
                "schema": "agent-history/v1",
                "run_id": f"{name}-{i}",
                "session_id": name,
                "agent_name": agent,
                "status": status,
                "input": f"question {i} of {name}",
                "started_at": when,
                "ended_at": when,
                "iterations": [{"thought": "t", "tool_calls": [{"tool": "a", "params": {}}]}],
            }
            for i in range(runs)
        ]
    assert ingest(payload).status_code == 200


@pytest.fixture
def sessions(ingest):
    """old-1 (40 days idle), old-2 (35, failed, agent Other), old-pinned (50, pinned), new (1)."""
    add_sessions(ingest, ["old-1"], days_ago=40)
    add_sessions(ingest, ["old-2"], days_ago=35, status="failed", agent="Other")
    add_sessions(ingest, ["old-pinned"], days_ago=50)
    add_sessions(ingest, ["new"], days_ago=1)
    models.Session.objects.filter(session_id="old-pinned").update(pinned=True)


@pytest.fixture
def ada(db, django_user_model):
    """An admin of the default project, and no superuser (Django's admin is not hers)."""
    user = django_user_model.objects.create_user("ada", password="ada-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=user, role=models.Membership.ADMIN
    )
    return user


def prune_history(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("prune_history", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def link(session_id: str) -> str:
    return (
        f'<a href="{models.Session.objects.get(session_id=session_id).get_absolute_url()}">{session_id}</a>'
    )


# -- the command -----------------------------------------------------------------------


def test_the_command_dry_run_names_the_sessions_the_pinned_kept_and_search_documents(sessions):
    out, err = prune_history("--older-than", "30", "--dry-run")
    # The summary, alone on stdout as before (scripts read it), counts search documents.
    assert out.strip().startswith("Would remove: 2 sessions, 4 runs,")
    assert out.strip().endswith(", 4 search documents.")
    lines = err.splitlines()
    assert "Kept because pinned: 1 session." in lines
    listed = [line.split()[0] for line in lines if line.startswith("  ")]
    assert listed == ["old-1", "old-2"]  # oldest first, as a prune takes them
    old_2 = next(line for line in lines if line.startswith("  old-2"))
    assert "Other" in old_2 and old_2.endswith("2 runs")
    assert "more" not in err
    assert models.Session.objects.count() == 4


def test_the_command_speaks_in_the_singular_of_one(sessions, ingest):
    add_sessions(ingest, ["lonely"], days_ago=400, runs=1)
    out, err = prune_history("--older-than", "100", "--dry-run")
    assert out.startswith("Would remove: 1 session, 1 run, 1 iteration, 1 tool call,")
    assert out.strip().endswith(", 1 search document.")
    assert "Kept because pinned" not in err  # old-pinned is idle for 50 days only
    assert [line.split()[0] for line in err.splitlines() if line.startswith("  ")] == ["lonely"]
    assert err.splitlines()[-1].endswith("  1 run")
    _, err = prune_history("--older-than", "45", "--dry-run")
    assert "Kept because pinned: 1 session." in err
    # A project's own retention of one day, in the heading.
    models.Project.objects.update(retention_days=1)
    out, _ = prune_history("--dry-run")
    assert out.startswith("Project default (idle more than 1 day):\nWould remove: 4 sessions,")


def test_the_command_lists_the_first_ones_and_counts_the_rest(ingest):
    names = [f"s-{n:02}" for n in range(retention.PREVIEW_SIZE + 5)]
    add_sessions(ingest, names, days_ago=60, runs=1)
    out, err = prune_history("--older-than", "30", "--dry-run")
    assert out.startswith(f"Would remove: {len(names)} sessions, {len(names)} runs,")
    listed = [line.split()[0] for line in err.splitlines() if line.startswith("  ") and "more" not in line]
    assert listed == names[: retention.PREVIEW_SIZE]
    assert err.splitlines()[-1] == "  … and 5 more"


def test_a_real_prune_lists_nothing_and_counts_progress_in_words(sessions):
    out, err = prune_history("--older-than", "38", "--batch-size", "1")
    assert out.startswith("Removed: 1 session, 2 runs,")
    assert "batch 1: 1 session, " in err and "Sessions that would go" not in err


# -- the admin's retention page ----------------------------------------------------------


def test_the_admin_preview_lists_the_sessions_with_links_and_the_pinned_kept(sessions, admin_client):
    preview = admin_client.post(ADMIN_PAGE, {"older_than_days": 30, "batch_size": 500, "preview": "1"})
    page = preview.content.decode()
    assert "These criteria select 2 sessions, 4 runs," in page and "4 search documents" in page
    assert "1 pinned session matching these criteria is kept." in page
    assert link("old-1") in page and link("old-2") in page
    assert "old-pinned" not in page and ">new<" not in page
    assert page.index(link("old-1")) < page.index(link("old-2"))
    # The link to all of them: the admin's list, showing exactly those.
    url = preview.context["all_url"]
    assert html.escape(url) in page and "All 2 sessions to go" in page
    listed = admin_client.get(url)
    assert listed.status_code == 200 and "?e=1" not in listed.get("Location", "")
    shown = {s.session_id for s in listed.context["cl"].result_list}
    assert shown == {"old-1", "old-2"}
    assert models.Session.objects.count() == 4


def test_the_admin_preview_of_one_session_and_its_filtered_link(sessions, admin_client):
    preview = admin_client.post(
        ADMIN_PAGE, {"older_than_days": 30, "batch_size": 500, "status": ["failed"], "preview": "1"}
    )
    page = preview.content.decode()
    assert "These criteria select 1 session, 2 runs," in page
    assert "0 pinned sessions matching these criteria are kept." in page
    assert "The session to go, oldest first" in page and link("old-2") in page
    listed = admin_client.get(preview.context["all_url"])
    assert [s.session_id for s in listed.context["cl"].result_list] == ["old-2"]


def test_the_admin_preview_lists_the_first_ones_and_says_how_many_more(ingest, admin_client):
    names = [f"s-{n:02}" for n in range(retention.PREVIEW_SIZE + 3)]
    add_sessions(ingest, names, days_ago=60, runs=1)
    preview = admin_client.post(ADMIN_PAGE, {"older_than_days": 30, "batch_size": 500, "preview": "1"})
    page = preview.content.decode()
    assert [s.session_id for s in preview.context["result"].preview] == names[: retention.PREVIEW_SIZE]
    assert link(names[retention.PREVIEW_SIZE - 1]) in page and names[retention.PREVIEW_SIZE] not in page
    assert "… and 3 more." in page and f"All {len(names)} sessions to go" in page


def test_the_admin_prune_counts_its_batches_in_words(sessions, admin_client):
    done = admin_client.post(ADMIN_PAGE, {"older_than_days": 38, "batch_size": 500, "confirm": "1"})
    assert b"Batch 1: 1 session, " in done.content and b"Removed 1 session, 2 runs" in done.content


# -- a project's settings page -------------------------------------------------------------


def test_the_settings_preview_lists_the_sessions_and_the_pinned_kept(sessions, client, ada, settings):
    settings.HISTORY_RETENTION_DAYS = None
    client.force_login(ada)
    preview = client.post(SETTINGS_PAGE, {"retention_days": "30", "preview": "1"})
    page = preview.content.decode()
    assert preview.status_code == 200
    assert "idle more than 30 days would remove: 2 sessions, 4 runs, 4 search documents," in page
    assert "1 pinned session idle as long is kept." in page
    assert link("old-1") in page and link("old-2") in page and "old-pinned" not in page
    # Django's admin is for superusers: no link into it for her.
    assert "/admin/" not in page and "more." not in page
    assert models.Session.objects.count() == 4


def test_the_settings_preview_in_the_singular(sessions, client, ada):
    client.force_login(ada)
    page = client.post(SETTINGS_PAGE, {"retention_days": "45", "preview": "1"}).content.decode()
    assert "would remove: 0 sessions," in page and "1 pinned session idle as long is kept." in page
    assert 'id="prune-preview"' not in page
    page = client.post(SETTINGS_PAGE, {"retention_days": "1", "preview": "1"}).content.decode()
    assert "idle more than 1 day would remove: 3 sessions, 6 runs, 6 search documents," in page


def test_the_settings_preview_of_a_superuser_links_to_all_of_them(ingest, client, admin_user):
    names = [f"s-{n:02}" for n in range(retention.PREVIEW_SIZE + 2)]
    add_sessions(ingest, names, days_ago=60, runs=1)
    add_sessions(ingest, ["keep"], days_ago=70, runs=1)
    models.Session.objects.filter(session_id="keep").update(pinned=True)
    client.force_login(admin_user)
    preview = client.post(SETTINGS_PAGE, {"retention_days": "30", "preview": "1"})
    page = preview.content.decode()
    assert "… and 2 more." in page and "1 pinned session idle as long is kept." in page
    url = preview.context["prune_all_url"]
    assert html.escape(url) in page and f"All {len(names)} in the admin" in page
    listed = client.get(url)
    assert {s.session_id for s in listed.context["cl"].result_list} == set(names)


# -- queries -------------------------------------------------------------------------------


def test_the_previews_make_the_same_queries_however_many_sessions_would_go(
    ingest, client, ada, admin_client, django_assert_num_queries
):
    """A preview counts with one query per kind of row and fetches only the first rows it
    lists, so its queries do not grow with the sessions (nor the rows with them)."""
    # The admin's 19: its session and user, the projects, then in the one project the prune
    # log written and finished, the pinned count, the first rows, eleven counts (one per kind
    # of row, annotations included) and the search documents' count. The settings page's 22:
    # the same prune's 16, and the session, user, role with the project switcher, audit
    # trail, members and tokens.
    admin_queries, settings_queries = 19, 22
    client.force_login(ada)
    # The project she last opened, as her first page would have remembered it (no write of
    # her session in the counted request).
    session = client.session
    session["history_project"] = "default"
    session.save()
    add_sessions(ingest, ["first"], days_ago=60, runs=1)
    for more in (0, retention.PREVIEW_SIZE + 10):
        if more:
            add_sessions(ingest, [f"s-{n}" for n in range(more)], days_ago=90, runs=3)
            add_sessions(ingest, [f"p-{n}" for n in range(5)], days_ago=90, runs=1)
            models.Session.objects.filter(session_id__startswith="p-").update(pinned=True)
        with django_assert_num_queries(admin_queries):
            admin = admin_client.post(ADMIN_PAGE, {"older_than_days": 30, "batch_size": 500, "preview": "1"})
        with django_assert_num_queries(settings_queries):
            own = client.post(SETTINGS_PAGE, {"retention_days": "30", "preview": "1"})
        for response in (admin, own):
            result = response.context["result" if response is admin else "prune_result"]
            assert result.counts["sessions"] == 1 + more
            assert len(result.preview) == min(1 + more, retention.PREVIEW_SIZE)
            assert result.skipped_pinned == (5 if more else 0)


def test_the_admin_preview_merges_the_projects_oldest_first(sessions, client, admin_client):
    from history_app.access.auth import register_token

    beta = models.Project.objects.create(slug="beta", name="Beta")
    token = "aht_beta-ingest-0123456789abcdefgh"
    register_token(name="beta", token=token, scopes=["ingest"], project=beta)

    def ingest_beta(payload):
        return client.post(
            "/api/v1/ingest",
            json.dumps(payload),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    add_sessions(ingest_beta, ["beta-old"], days_ago=37)
    preview = admin_client.post(ADMIN_PAGE, {"older_than_days": 30, "batch_size": 500, "preview": "1"})
    assert [s.session_id for s in preview.context["result"].preview] == ["old-1", "beta-old", "old-2"]
    assert '<a href="/p/beta/sessions/beta-old/">beta-old</a>' in preview.content.decode()
    assert "These criteria select 3 sessions, 6 runs," in preview.content.decode()
    listed = admin_client.get(preview.context["all_url"])
    assert {s.session_id for s in listed.context["cl"].result_list} == {"old-1", "old-2", "beta-old"}
