"""The demo ``quickstart`` loads (issue #17): weeks of sessions before its first load, with
failures, tokens and costs and one run still running, the same records on every load."""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from history_app import models
from history_app.upkeep import retention

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def quickstart() -> str:
    out = io.StringIO()
    call_command("quickstart", "--no-serve", stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def admin_client(client):
    quickstart()
    client.force_login(get_user_model().objects.get(username="admin"))
    return client


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def runs_per_day(stats_page: str) -> dict[date, tuple[int, int]]:
    """(runs, failed) of each day in the stats page's "Runs per day" table."""
    rows = re.findall(
        r'<tr><td>(\d{4}-\d\d-\d\d)</td><td class="num" data-label="Runs">(\d+)</td>'
        r'<td class="num" data-label="Failed">(\d+)</td>',
        stats_page,
    )
    return {date.fromisoformat(day): (int(runs), int(failed)) for day, runs, failed in rows}


def stored_runs() -> dict[str, tuple[str, str]]:
    return {
        run_id: (session_id, digest)
        for run_id, session_id, digest in models.Run.objects.values_list(
            "run_id", "session__session_id", "content_hash"
        )
    }


def test_the_stats_page_shows_weeks_of_runs_before_the_first_load(admin_client):
    days = runs_per_day(page(admin_client, "/p/default/stats/?days=30"))
    assert len(days) == 30
    busy = sorted(day for day, (runs, _) in days.items() if runs)
    today = timezone.now().date()
    assert len(busy) >= 15
    assert busy[0] <= today - timedelta(days=21)
    assert len({day.isocalendar()[:2] for day in busy}) >= 3
    assert sum(failed for _, failed in days.values()) >= 3
    assert sum(runs for runs, _ in days.values()) == models.Run.objects.count()


def test_the_demo_has_failures_tokens_and_costs(admin_client):
    stats = page(admin_client, "/p/default/stats/?days=30")
    assert re.search(r'<dt>Failed</dt><dd class="error"[^>]*>[1-9]\d*</dd>', stats)
    assert re.search(r"<dt>Tokens in</dt><dd[^>]*>\d{1,3}(,\d{3})+</dd>", stats)
    assert re.search(r"<dt>Cost</dt><dd[^>]*>\$0\.[0-9]*[1-9]", stats)
    # Models the price list knows are priced; the local one says it has no price.
    assert re.search(r"<code>gpt-4o-mini</code></td>(<td[^>]*>[^<]*</td>){3}<td[^>]*>\$0\.\d+", stats)
    assert re.search(r"<code>llama3\.1:8b</code></td>(<td[^>]*>[^<]*</td>){3}<td[^>]*>no price", stats)
    sessions = page(admin_client, "/p/default/")
    costs = re.findall(r'<td class="num"[^>]*>\$(0\.\d+)</td>', sessions)
    assert costs and all(float(cost) > 0 for cost in costs)


def test_live_mode_has_a_recent_run_that_is_still_running(admin_client):
    running = models.Run.objects.get(status="running")
    assert running.run_id == "demo-review-live-run-2"
    assert timezone.now() - running.started_at < timedelta(minutes=10)
    live = page(admin_client, "/p/default/?live=1")
    assert 'hx-trigger="every 3s"' in live and "nothing is running" not in live
    assert "/p/default/sessions/demo-review-live/" in live


def test_a_second_quickstart_creates_nothing_even_days_later(monkeypatch):
    first = quickstart()
    created = models.Run.objects.count()
    assert f"Demo data: {created} runs created, 0 already there, 0 rejected." in first
    before = stored_runs()
    later = timezone.now() + timedelta(days=5, hours=3)
    monkeypatch.setattr(timezone, "now", lambda: later)
    again = quickstart()
    assert f"Demo data: 0 runs created, {created} already there, 0 rejected." in again
    assert stored_runs() == before


def test_the_ids_do_not_depend_on_when_the_demo_is_first_loaded(monkeypatch):
    quickstart()
    first = stored_runs()
    first_starts = dict(models.Run.objects.values_list("run_id", "started_at"))
    for session in models.Session.objects.all():
        retention.delete_session(session, actor="test")
    assert not models.Run.objects.exists()
    later = timezone.now() + timedelta(days=5)
    monkeypatch.setattr(timezone, "now", lambda: later)
    quickstart()
    second = stored_runs()
    assert second.keys() == first.keys()
    for run_id, (session_id, _) in second.items():
        # The whole demo moved by five days; an autourgos session is its agent's day.
        assert second[run_id][0] == first[run_id][0] or session_id.startswith("autourgos:")
    moved = {
        models.Run.objects.get(run_id=run_id).started_at - started for run_id, started in first_starts.items()
    }
    assert len(moved) == 1 and timedelta(days=5) <= moved.pop() <= timedelta(days=5, minutes=1)


def test_a_fresh_database_in_another_process_gets_the_same_run_ids(tmp_path):
    quickstart()
    env = {
        key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "HISTORY_INGEST_TOKEN"}
    }
    env["HISTORY_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "manage.py", "quickstart", "--no-serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "history.sqlite3") as db:
        run_ids = {run_id for (run_id,) in db.execute(f"SELECT run_id FROM {models.Run._meta.db_table}")}
    assert run_ids == set(stored_runs())
