"""The management commands, run for real."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from history_app import models

from .conftest import AUTOURGOS

pytestmark = pytest.mark.django_db


def run(*args, **kwargs) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **kwargs)
    return out.getvalue()


def test_import_history_imports_the_samples_once(client):
    first = run("import_history", str(AUTOURGOS))
    assert "11 created, 0 updated, 0 duplicate, 0 rejected, 1 file(s) skipped" in first
    assert "MANIFEST.json: not a history file" in first
    assert models.Run.objects.count() == 11
    second = run("import_history", str(AUTOURGOS))
    assert "0 created, 0 updated, 11 duplicate" in second
    assert models.Run.objects.count() == 11


def test_import_and_endpoint_agree_on_ids(ingest):
    path = AUTOURGOS / "named_run_custom.json"
    run("import_history", str(path))
    assert ingest(json.loads(path.read_text())).json()["results"][0]["status"] == "duplicate"


def test_markdown_is_the_fallback_when_no_json_exists(tmp_path):
    shutil.copy(AUTOURGOS / "Task_20261129_224355_610116_7bfd7d3a.md", tmp_path)
    shutil.copy(AUTOURGOS / "named_run_custom.md", tmp_path)
    shutil.copy(AUTOURGOS / "named_run_custom.json", tmp_path)
    output = run("import_history", str(tmp_path))
    assert "2 created" in output
    from_md = models.Run.objects.get(metadata__imported_from="markdown")
    assert from_md.status == "failed" and "HTTP 502" in from_md.error
    assert from_md.iteration_count == 3
    # Stored as the format it arrived in, not as the native record it passed through.
    assert from_md.source_format == "autourgos-markdown"
    assert models.Run.objects.exclude(pk=from_md.pk).get().source_format == "autourgos"


def test_a_markdown_upload_keeps_its_format(ingest):
    body = (AUTOURGOS / "Task_20261129_224355_610116_7bfd7d3a.md").read_text()
    response = ingest(body, content_type="text/markdown")
    assert response.status_code == 200, response.content
    assert models.Run.objects.get().source_format == "autourgos-markdown"


def test_rejections_are_listed_with_reasons(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"iterations": "x", "final_response": None}))
    (tmp_path / "broken.json").write_text("{nope")
    output = run("import_history", str(tmp_path))
    assert "2 rejected" in output
    assert "bad.json: $.iterations: must be an array" in output
    assert "broken.json:" in output


def test_missing_path_is_an_error():
    with pytest.raises(CommandError, match="no such file"):
        run("import_history", "/no/such/place")


def test_create_ingest_token_prints_a_working_token(client):
    token = run("create_ingest_token", "my-agent").strip()
    assert token.startswith("aht_")
    assert models.IngestToken.objects.get().name == "my-agent"
    response = client.post(
        "/api/v1/ingest",
        json.dumps({"iterations": [], "final_response": "ok"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200


def test_quickstart_sets_everything_up_idempotently(client, monkeypatch):
    monkeypatch.setenv("HISTORY_ADMIN_PASSWORD", "quick-start-pw-1")
    monkeypatch.setenv("HISTORY_INGEST_TOKEN", "aht_quickstart-token-000000")
    output = run("quickstart", "--no-serve")
    assert "Created user 'admin'" in output
    assert "Ingest token: aht_quickstart-token-000000" in output
    assert "curl -sS -X POST http://127.0.0.1:8000/api/v1/ingest" in output
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:8000/v1/traces" in output
    assert "Authorization=Bearer%20aht_quickstart-token-000000" in output
    created = models.Run.objects.count()
    assert created >= 15
    assert models.Run.objects.filter(kind="member").exists()
    assert models.InjectedContext.objects.exists()
    login = client.post("/accounts/login/", {"username": "admin", "password": "quick-start-pw-1"})
    assert login.status_code == 302
    assert client.get("/p/default/").status_code == 200

    again = run("quickstart", "--no-serve")
    assert "User 'admin' exists" in again
    assert "0 runs created" in again
    assert models.Run.objects.count() == created
    assert get_user_model().objects.count() == 1


def test_quickstart_keeps_a_revoked_token_revoked_and_says_so(client, monkeypatch):
    monkeypatch.setenv("HISTORY_INGEST_TOKEN", "aht_quickstart-token-000000")
    run("quickstart", "--no-serve")
    models.IngestToken.objects.update(revoked=True)
    again = run("quickstart", "--no-serve")
    assert "was revoked and stays revoked" in again and "create_ingest_token" in again
    assert "Ingest token: aht_quickstart-token-000000" not in again
    assert models.IngestToken.objects.get().revoked
    response = client.post(
        "/api/v1/ingest",
        json.dumps({"iterations": [], "final_response": "ok"}),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer aht_quickstart-token-000000",
    )
    assert response.status_code == 401
