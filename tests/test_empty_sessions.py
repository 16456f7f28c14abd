"""Sessions without runs: every prune path removes them (none crashes), and a run moved to
another session (sent again with a new session id) leaves no empty session behind, nor
makes the one it left newer."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from history_app import models
from history_app.upkeep import retention

from .conftest import native

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def run(
    run_id: str, session_id: str, *, days_ago: float, status: str = "completed", tokens: int = 10
) -> dict:
    when = (timezone.now() - timedelta(days=days_ago)).isoformat()
    return native(
        run_id,
        session_id,
        agent_name="Bot",
        status=status,
        started_at=when,
        ended_at=when,
        iterations=[{"thought": "t", "tool_calls": [{"tool": "clock", "params": {}}]}],
        model_calls=[{"model": "gpt-4o-mini", "input_tokens": tokens, "output_tokens": tokens}],
    )


def send(ingest, *runs: dict) -> list[str]:
    response = ingest(list(runs))
    assert response.status_code == 200, response.content
    return [result["status"] for result in response.json()["results"]]


def session(session_id: str) -> models.Session:
    return models.Session.objects.get(session_id=session_id)


def empty_session(session_id: str, *, days_ago: float, pinned: bool = False) -> models.Session:
    """A session without runs, as earlier versions left behind after a move."""
    return models.Session.objects.create(
        project=models.Project.default(),
        session_id=session_id,
        last_status="completed",
        last_activity_at=timezone.now() - timedelta(days=days_ago),
        pinned=pinned,
    )


@pytest.fixture
def mixed(ingest):
    """Old sessions of every kind: empty, empty and pinned, one whose run moved out (two
    runs, one left), the one it moved to, and a recent one."""
    empty_session("empty-old", days_ago=60)
    empty_session("empty-older", days_ago=70)
    empty_session("empty-pinned", days_ago=65, pinned=True)
    send(ingest, run("a-1", "left", days_ago=50), run("a-2", "left", days_ago=50))
    send(ingest, run("a-2", "target", days_ago=40, tokens=7))  # moves a-2 out of "left"
    send(ingest, run("n-1", "recent", days_ago=0))


def remaining() -> set[str]:
    return set(models.Session.objects.values_list("session_id", flat=True))


PRUNED = {"empty-pinned", "recent"}


def test_the_admin_action_deletes_sessions_without_runs(mixed, admin_client):
    def delete(session_ids: list[str]):
        chosen = list(models.Session.objects.filter(session_id__in=session_ids).values_list("pk", flat=True))
        confirm = admin_client.post(
            "/admin/history_app/session/", {"action": "prune_selected", "_selected_action": chosen}
        )
        assert confirm.status_code == 200 and b"Yes" in confirm.content
        response = admin_client.post(
            "/admin/history_app/session/",
            {"action": "prune_selected", "_selected_action": chosen, "confirm": "yes"},
            follow=True,
        )
        assert response.status_code == 200
        return response.content.decode()

    # Only sessions without runs: a batch with no run at all.
    page = delete(["empty-old", "empty-older", "empty-pinned"])
    assert "Deleted 2 sessions and 0 related rows. Kept 1 pinned session." in page
    page = delete(["left", "target", "recent"])
    assert "Deleted 3 sessions and" in page
    assert remaining() == {"empty-pinned"}


def test_the_command_deletes_sessions_without_runs(mixed):
    out = io.StringIO()
    call_command("prune_history", "--older-than", "0", "--batch-size", "2", stdout=out, stderr=io.StringIO())
    assert "Removed: 5 sessions, 3 runs" in out.getvalue()
    assert remaining() == {"empty-pinned"}
    assert not models.Iteration.objects.exists() and not models.ModelCall.objects.exists()


def test_automatic_retention_deletes_sessions_without_runs(mixed, ingest, settings):
    settings.HISTORY_RETENTION_DAYS = 30
    settings.HISTORY_RETENTION_EVERY_RUNS = 1
    settings.HISTORY_RETENTION_BATCH_SIZE = 1
    retention._runs_since_prune = 0
    # One batch of one session (the oldest first) after each run: the empty ones first.
    send(ingest, run("n-2", "recent", days_ago=0))
    assert "empty-older" not in remaining()
    for n in range(3):
        send(ingest, run(f"n-{n + 3}", "recent", days_ago=0))
    assert remaining() == PRUNED
    logs = models.PruneLog.objects.filter(trigger="automatic")
    assert sum(log.counts["sessions"] for log in logs) == 4
    assert sum(log.counts["runs"] for log in logs) == 2


def test_a_dry_run_and_a_chosen_prune_count_sessions_without_runs(mixed):
    dry = retention.prune_sessions(older_than_days=30, dry_run=True)
    assert dry.counts["sessions"] == 4 and dry.skipped_pinned == 1
    chosen = retention.prune_sessions(session_ids=[session("empty-old").pk])
    assert chosen.counts["sessions"] == 1 and chosen.counts["runs"] == 0
    assert "empty-old" not in remaining()


# -- runs moved to another session ----------------------------------------------------


def test_a_session_its_only_run_left_is_deleted_and_the_other_counts_it(ingest, client):
    assert send(ingest, run("r-1", "first", days_ago=3, status="failed", tokens=5)) == ["created"]
    send(ingest, run("r-0", "second", days_ago=4, tokens=2))
    receipts = models.IngestReceipt.objects.count()
    assert send(ingest, run("r-1", "second", days_ago=3, status="failed", tokens=5)) == ["updated"]
    assert "first" not in remaining()
    second = session("second")
    assert (second.run_count, second.failed_count) == (2, 1)
    assert (second.input_tokens, second.output_tokens) == (7, 7)
    # The receipts stay; the deletion is on the audit trail, saying why.
    assert models.IngestReceipt.objects.count() == receipts + 1
    event = models.AuditEvent.objects.get(action="session_deleted", target="first")
    assert event.actor == "ingestion" and "second" in event.details["reason"]
    # Its page is gone, the list does not show it.
    assert client.get("/api/v1/sessions/first").status_code in (401, 404)


def test_a_pinned_session_left_empty_stays_where_it_was(ingest):
    send(ingest, run("r-1", "held", days_ago=9))
    models.Session.objects.filter(session_id="held").update(pinned=True)
    before = session("held").last_activity_at
    send(ingest, run("r-1", "elsewhere", days_ago=9))
    held = session("held")
    assert held.pinned and held.run_count == 0 and held.failed_count == 0
    assert held.input_tokens == 0 and held.cost is None
    assert held.last_activity_at == before  # not reset to now: it does not jump to the top
    assert held.last_status == ""  # not the "completed" of the run that left
    assert session("elsewhere").run_count == 1


def test_a_run_leaving_never_makes_its_session_newer(ingest):
    send(ingest, run("r-old", "stays", days_ago=20), run("r-new", "stays", days_ago=10))
    before = session("stays").last_activity_at
    send(ingest, run("r-new", "other", days_ago=10))
    stays = session("stays")
    assert stays.run_count == 1
    assert stays.last_activity_at <= before
    assert abs(stays.last_activity_at - (timezone.now() - timedelta(days=20))) < timedelta(minutes=1)


def test_the_sessions_list_does_not_show_a_session_whose_runs_moved(ingest, alice_client):
    send(ingest, run("r-1", "moved-away", days_ago=5))
    send(ingest, run("r-1", "moved-here", days_ago=5))
    page = alice_client.get("/p/default/").content.decode()
    assert "moved-here" in page and "moved-away" not in page


def test_import_history_moving_a_run_leaves_no_empty_session(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run("r-1", "imported-a", days_ago=2)))
    call_command("import_history", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    path.write_text(json.dumps(run("r-1", "imported-b", days_ago=2)))
    call_command("import_history", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert remaining() == {"imported-b"}
    assert session("imported-b").run_count == 1


def test_the_readme_ingest_example_creates_a_run_after_a_fresh_quickstart(client):
    """The README's curl example (which posts a sample file) answers what the README
    shows, ``created``, on a fresh quickstart: the demo's copy of that sample, moved in
    time, is a run of its own, not the same run."""
    call_command("quickstart", "--no-serve", stdout=io.StringIO(), stderr=io.StringIO())
    from history_app.access.auth import register_token

    register_token(name="readme", token="aht_readme-example-token-0123456789", scopes=["ingest"])
    text = (ROOT / "README.md").read_text()
    example = re.search(
        r"curl -sS -X POST http://127\.0\.0\.1:8000/api/v1/ingest \\\n.*?--data-binary @(\S+)\n```\n\n(.*?)\n\n",
        text,
        re.S,
    )
    assert example, "the README's ingest example"
    path, answer = example.group(1), example.group(2)
    shown = re.search(r'"status": "(\w+)"', answer)
    sessions_before = models.Session.objects.count()
    response = client.post(
        "/api/v1/ingest",
        (ROOT / path).read_bytes(),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer aht_readme-example-token-0123456789",
    )
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert result["status"] == shown.group(1) == "created"
    assert (
        models.Session.objects.get(run_count__gt=0, runs__run_id=result["run_id"]).session_id
        == result["session_id"]
    )
    assert not models.Session.objects.filter(run_count=0).exists()
    assert models.Session.objects.count() in (sessions_before, sessions_before + 1)
