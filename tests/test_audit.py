"""The audit trail (issue #16, the part that needs no projects): token creation and
revocation, session deletion, pinning and prunes are recorded with who and when."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from history_app import models
from history_app.upkeep import retention

from .conftest import native

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def events(action: str) -> list[models.AuditEvent]:
    return list(models.AuditEvent.objects.filter(action=action).order_by("pk"))


def test_tokens_created_and_revoked_by_command_are_recorded_without_the_token():
    token = run("create_ingest_token", "ci-agent", "--scope", "ingest").strip()
    (created,) = events("token_created")
    assert created.actor == "command: create_ingest_token" and created.target.startswith("ci-agent (aht_")
    assert (
        created.details == {"scopes": ["ingest"]}
        and token not in json.dumps(created.details) + created.target
    )
    run("revoke_token", models.IngestToken.objects.get().prefix)
    (revoked,) = events("token_revoked")
    assert revoked.actor == "command: revoke_token" and revoked.at >= created.at


def test_quickstart_records_its_token_once(monkeypatch):
    monkeypatch.setenv("HISTORY_INGEST_TOKEN", "aht_quickstart-token-000000")
    monkeypatch.setenv("HISTORY_ADMIN_PASSWORD", "quick-start-pw-1")
    run("quickstart", "--no-serve")
    run("quickstart", "--no-serve")
    assert [e.actor for e in events("token_created")] == ["command: quickstart"]


def test_the_admin_revokes_for_good_and_is_recorded(admin_client, admin_user):
    run("create_ingest_token", "agent")
    row = models.IngestToken.objects.get()
    url = f"/admin/history_app/ingesttoken/{row.pk}/change/"
    assert admin_client.post(url, {"name": "agent", "revoked": "on"}).status_code == 302
    (revoked,) = events("token_revoked")
    assert revoked.actor == admin_user.get_username() and "agent" in revoked.target
    admin_client.post(url, {"name": "agent"})  # trying to take the revocation back
    assert models.IngestToken.objects.get().revoked
    assert len(events("token_revoked")) == 1


def test_deleting_pinning_and_pruning_are_recorded(client, auth_headers, admin_client, admin_user):
    for n in range(3):
        client.post(
            "/api/v1/ingest",
            json.dumps(native(f"r-{n}", f"s-{n}")),
            content_type="application/json",
            **auth_headers,
        )
    sessions = {s.session_id: s for s in models.Session.objects.all()}
    admin_client.post(
        "/admin/history_app/session/", {"action": "pin_sessions", "_selected_action": [sessions["s-0"].pk]}
    )
    (pinned,) = events("pinned")
    assert pinned.actor == admin_user.get_username() and pinned.details["sessions"] == ["s-0"]
    admin_client.post(f"/admin/history_app/session/{sessions['s-1'].pk}/delete/", {"post": "yes"})
    (deleted,) = events("session_deleted")
    assert (deleted.target, deleted.details["runs"]) == ("s-1", 1)
    retention.prune_sessions(session_ids=[sessions["s-2"].pk], dry_run=True)
    assert events("pruned") == []
    retention.prune_sessions(session_ids=[sessions["s-2"].pk, sessions["s-0"].pk], trigger="command")
    (pruned,) = events("pruned")
    assert (pruned.actor, pruned.details["sessions"], pruned.details["runs"]) == ("command", 1, 1)
    assert pruned.target == f"prune log {models.PruneLog.objects.filter(dry_run=False).get().pk}"
    page = admin_client.get("/admin/history_app/auditevent/").content.decode()
    assert "session deleted" in page and "sessions pruned" in page and "sessions pinned" in page
    assert admin_client.get(f"/admin/history_app/auditevent/{pruned.pk}/delete/").status_code == 403


def test_what_a_second_attack_found(client, auth_headers, admin_client, admin_user):
    # Tokens are revoked, never deleted: the kept hash keeps a revoked token revoked.
    run("create_ingest_token", "agent")
    row = models.IngestToken.objects.get(name="agent")
    assert admin_client.get(f"/admin/history_app/ingesttoken/{row.pk}/delete/").status_code == 403
    # revoke_token needs the whole prefix, compared with its case.
    with pytest.raises(Exception, match="12-character prefix"):
        run("revoke_token", row.prefix[:8])
    with pytest.raises(Exception, match="0 active tokens"):
        run("revoke_token", row.prefix.swapcase())
    assert not models.IngestToken.objects.get(name="agent").revoked
    # Runs are not deleted piecemeal; a pinned session is not deleted; pinning in the form is audited.
    client.post("/api/v1/ingest", json.dumps(native()), content_type="application/json", **auth_headers)
    run_row, session = models.Run.objects.get(), models.Session.objects.get()
    assert admin_client.get(f"/admin/history_app/run/{run_row.pk}/delete/").status_code == 403
    admin_client.post(f"/admin/history_app/session/{session.pk}/change/", {"pinned": "on"})
    assert (
        models.Session.objects.get().pinned
        and [e.action for e in models.AuditEvent.objects.order_by("pk")][-1] == "pinned"
    )
    assert (
        admin_client.post(f"/admin/history_app/session/{session.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert models.Session.objects.exists()
    # A prune interrupted after a batch is on the record with what it deleted.
    admin_client.post(f"/admin/history_app/session/{session.pk}/change/", {})
    client.post(
        "/api/v1/ingest", json.dumps(native("r-2", "s-2")), content_type="application/json", **auth_headers
    )

    def stop(result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        retention.prune_sessions(
            session_ids=list(models.Session.objects.values_list("pk", flat=True)), batch_size=1, progress=stop
        )
    (pruned,) = events("pruned")
    assert pruned.details["sessions"] == 1 and models.Session.objects.count() == 1
