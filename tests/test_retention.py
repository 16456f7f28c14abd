"""Retention: pruning by command, admin page and admin action; pinning; audit; automatic."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from history_app import models
from history_app.upkeep import retention

pytestmark = pytest.mark.django_db

CHILD_MODELS = (models.Iteration, models.ToolCall, models.MemberInteraction, models.InjectedContext)


def make_session(ingest, name, *, days_ago, runs=2, status="completed", agent="Bot"):
    when = (timezone.now() - timedelta(days=days_ago)).isoformat()
    payload = [
        {
            "schema": "agent-history/v1",
            "run_id": f"{name}-{i}",
            "session_id": name,
            "agent_name": agent,
            "status": status,
            "started_at": when,
            "ended_at": when,
            "iterations": [
                {"thought": "t", "tool_calls": [{"tool": "a", "params": {}}, {"tool": "b", "params": {}}]}
            ],
            "member_interactions": [{"member": "m", "task": "t", "response": "r"}],
            "injected_contexts": [{"text": "ctx", "kind": "custom"}],
        }
        for i in range(runs)
    ]
    assert ingest(payload).status_code == 200


@pytest.fixture
def sessions(ingest):
    make_session(ingest, "old-1", days_ago=40)
    make_session(ingest, "old-2", days_ago=35, status="failed", agent="Other")
    make_session(ingest, "old-pinned", days_ago=50)
    make_session(ingest, "new", days_ago=1)
    models.Session.objects.filter(session_id="old-pinned").update(pinned=True)


def counts() -> dict[str, int]:
    return {
        "sessions": models.Session.objects.count(),
        "runs": models.Run.objects.count(),
        **{m.__name__: m.objects.count() for m in CHILD_MODELS},
    }


def run_command(*args) -> str:
    out = io.StringIO()
    call_command("prune_history", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_dry_run_reports_exact_counts_and_deletes_nothing(sessions):
    before = counts()
    output = run_command("--older-than", "30", "--dry-run")
    assert output.strip() == (
        "Would remove: 2 sessions, 4 runs, 4 iterations, 8 tool calls, 0 model calls, 4 member interactions, "
        "4 injected contexts, 4 search documents."
    )
    assert counts() == before
    log = models.PruneLog.objects.get()
    assert log.dry_run and log.counts["tool_calls"] == 8 and log.trigger == "command"


def test_prune_removes_exactly_the_old_unpinned_sessions_and_leaves_no_orphans(sessions):
    output = run_command("--older-than", "30", "--batch-size", "1")
    assert "Removed: 2 sessions, 4 runs, 4 iterations, 8 tool calls" in output
    assert "2 batch(es)" in output
    assert set(models.Session.objects.values_list("session_id", flat=True)) == {"old-pinned", "new"}
    assert counts() == {
        "sessions": 2,
        "runs": 4,
        "Iteration": 4,
        "ToolCall": 8,
        "MemberInteraction": 4,
        "InjectedContext": 4,
    }
    # No orphans: every child row belongs to a run of a remaining session.
    for model in CHILD_MODELS:
        assert not model.objects.exclude(run__session__session_id__in=["old-pinned", "new"]).exists()
    assert not models.ToolCall.objects.exclude(
        iteration__run__session__session_id__in=["old-pinned", "new"]
    ).exists()
    log = models.PruneLog.objects.get()
    assert log.counts["sessions"] == 2 and log.batches == 2 and log.finished_at


def test_filters_by_status_and_agent(sessions):
    assert "Removed: 1 session," in run_command("--older-than", "30", "--status", "failed")
    assert not models.Session.objects.filter(session_id="old-2").exists()
    assert "Removed: 0 sessions" in run_command("--older-than", "30", "--agent", "Nobody")
    assert "Removed: 1 session," in run_command("--older-than", "30", "--agent", "Bot")
    assert set(models.Session.objects.values_list("session_id", flat=True)) == {"old-pinned", "new"}


def test_pinned_sessions_survive_every_path(sessions, admin_client):
    pinned = models.Session.objects.get(session_id="old-pinned")
    retention.prune_sessions(older_than_days=0)
    retention.prune_sessions(session_ids=[pinned.pk])
    admin_client.post(
        "/admin/history_app/session/",
        {"action": "prune_selected", "_selected_action": [pinned.pk], "confirm": "yes"},
    )
    admin_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": 0, "batch_size": 10, "confirm": "1"}
    )
    assert models.Session.objects.filter(session_id="old-pinned").exists()
    assert models.Run.objects.filter(session=pinned).count() == 2


def test_an_interrupted_prune_is_finished_by_the_next_one(sessions):
    first = retention.prune_sessions(older_than_days=30, batch_size=1, max_batches=1)
    assert first.counts["sessions"] == 1
    second = retention.prune_sessions(older_than_days=30, batch_size=1)
    assert second.counts["sessions"] == 1
    assert set(models.Session.objects.values_list("session_id", flat=True)) == {"old-pinned", "new"}


def test_a_session_that_got_a_new_run_is_kept(ingest, sessions):
    make_session(ingest, "old-1", days_ago=0, runs=1)  # re-sends old-1-0 with a fresh time
    retention.prune_sessions(older_than_days=30)
    assert models.Session.objects.filter(session_id="old-1").exists()


def test_the_admin_delete_action_asks_first_and_names_what_goes(sessions, admin_client):
    """Issue #17: "Delete selected sessions" shows what would go (and what is kept because
    pinned) and deletes only once confirmed."""
    chosen = list(
        models.Session.objects.filter(session_id__in=["old-1", "old-pinned"]).values_list("pk", flat=True)
    )
    asked = admin_client.post(
        "/admin/history_app/session/", {"action": "prune_selected", "_selected_action": chosen}
    )
    page = asked.content.decode()
    assert asked.status_code == 200 and "2 sessions selected" in page and "removes 2 runs" in page
    assert "1 of them is pinned (legal hold) and kept." in page and "<code>old-1</code>" in page
    assert models.Session.objects.filter(session_id="old-1").exists()
    done = admin_client.post(
        "/admin/history_app/session/",
        {"action": "prune_selected", "_selected_action": chosen, "confirm": "yes"},
        follow=True,
    )
    assert (
        "Deleted 1 session and " in done.content.decode()
        and "Kept 1 pinned session." in done.content.decode()
    )
    assert not models.Session.objects.filter(session_id="old-1").exists()
    assert models.Session.objects.filter(session_id="old-pinned").exists()


def test_the_command_counts_in_words(sessions):
    out = io.StringIO()
    call_command("prune_history", "--older-than", "38", "--dry-run", stdout=out)
    assert out.getvalue().startswith("Would remove: 1 session, 2 runs,")


def test_admin_retention_page_previews_confirms_and_prunes(sessions, admin_client):
    page = admin_client.get("/admin/history_app/session/retention/")
    assert page.status_code == 200 and b"Last activity older than" in page.content
    preview = admin_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": 30, "batch_size": 500, "preview": "1"}
    )
    assert b"These criteria select 2 sessions, 4 runs, 4 iterations, 8 tool calls" in preview.content
    assert models.Session.objects.count() == 4
    done = admin_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": 30, "batch_size": 500, "confirm": "1"}
    )
    assert b"Removed 2 sessions, 4 runs" in done.content and b"Batch 1" in done.content
    assert models.Session.objects.count() == 2
    assert list(models.PruneLog.objects.values_list("trigger", "dry_run")) == [
        ("admin", False),
        ("admin", True),
    ]
    bad = admin_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": -1, "batch_size": 0, "confirm": "1"}
    )
    assert bad.status_code == 200 and b"errorlist" in bad.content
    assert models.Session.objects.count() == 2


def test_admin_action_deletes_selected_sessions_in_batches(sessions, admin_client):
    chosen = list(
        models.Session.objects.filter(session_id__in=["new", "old-pinned"]).values_list("pk", flat=True)
    )
    response = admin_client.post(
        "/admin/history_app/session/",
        {"action": "prune_selected", "_selected_action": chosen, "confirm": "yes"},
        follow=True,
    )
    assert b"Deleted 1 session and" in response.content and b"Kept 1 pinned" in response.content
    assert not models.Session.objects.filter(session_id="new").exists()
    assert models.PruneLog.objects.get().trigger == "action"


def test_admin_pin_action(sessions, admin_client):
    chosen = list(models.Session.objects.filter(session_id="new").values_list("pk", flat=True))
    admin_client.post("/admin/history_app/session/", {"action": "pin_sessions", "_selected_action": chosen})
    assert models.Session.objects.get(session_id="new").pinned


def test_retention_is_staff_only(client, alice_client, sessions):
    assert client.get("/admin/history_app/session/retention/").status_code == 302
    assert alice_client.get("/admin/history_app/session/retention/").status_code == 302
    alice_client.post(
        "/admin/history_app/session/retention/", {"older_than_days": 0, "batch_size": 5, "confirm": "1"}
    )
    assert models.Session.objects.count() == 4


def test_staff_without_delete_permission_cannot_prune(client, django_user_model, sessions):
    """Django's admin is for superusers only (issue #16): a staff user, even one given the
    permission to see sessions, is sent to the admin's login and prunes nothing."""
    from django.contrib.auth.models import Permission

    bob = django_user_model.objects.create_user("bob", password="bob-password-1", is_staff=True)
    bob.user_permissions.add(
        Permission.objects.get(codename="view_session", content_type__app_label="history_app")
    )
    client.force_login(bob)
    before = models.Session.objects.count()
    response = client.get("/admin/history_app/session/retention/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    response = client.post("/admin/history_app/session/retention/", {"older_than_days": "0", "confirm": "1"})
    assert response.status_code == 302 and models.Session.objects.count() == before == 4


@pytest.mark.parametrize(
    "url",
    [
        "/admin/history_app/session/",
        "/admin/history_app/run/",
        "/admin/history_app/iteration/",
        "/admin/history_app/toolcall/",
        "/admin/history_app/memberinteraction/",
        "/admin/history_app/injectedcontext/",
        "/admin/history_app/ingesttoken/",
        "/admin/history_app/prunelog/",
        "/admin/history_app/ingestreceipt/",
    ],
)
def test_every_admin_list_renders_with_bounded_queries(
    sessions, admin_client, url, django_assert_max_num_queries
):
    with django_assert_max_num_queries(12):
        assert admin_client.get(url).status_code == 200


def test_admin_search_by_ids(sessions, admin_client):
    page = admin_client.get("/admin/history_app/run/?q=old-1-0")
    assert b"old-1-0" in page.content and b"old-2-0" not in page.content


def test_automatic_retention_prunes_every_n_runs(ingest, settings, sessions):
    settings.HISTORY_RETENTION_DAYS = 30
    settings.HISTORY_RETENTION_EVERY_RUNS = 3
    retention._runs_since_prune = 0
    make_session(ingest, "fresh-1", days_ago=0, runs=2)
    assert models.Session.objects.filter(session_id="old-1").exists()
    make_session(ingest, "fresh-2", days_ago=0, runs=1)  # the third run triggers one batch
    assert not models.Session.objects.filter(session_id__in=["old-1", "old-2"]).exists()
    assert models.Session.objects.filter(session_id="old-pinned").exists()
    assert models.PruneLog.objects.get().trigger == "automatic"


def test_command_rejects_bad_arguments():
    from django.core.management import CommandError

    with pytest.raises(CommandError):
        run_command("--older-than", "-3")
    with pytest.raises(CommandError):
        run_command("--older-than", "3", "--batch-size", "0")
