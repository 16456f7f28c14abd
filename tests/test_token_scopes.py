"""Token scopes (issue #16, the part that needs no projects): ingest writes only, read
reads the JSON API, annotate is reserved; a token without the scope an endpoint needs
gets 403, whatever else it may do. Created, listed and revoked by command."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from history_app import models
from history_app.access.auth import register_token

from .conftest import native
from .otlp_spans import genai_agent_trace, request

pytestmark = pytest.mark.django_db

READS = ["/api/v1/sessions", "/api/v1/sessions/s-1", "/api/v1/runs/r-1", "/api/v1/receipts"]


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def tokens(db):
    made = {}
    for name, scopes in {
        "ingest": ["ingest"],
        "read": ["read"],
        "both": ["ingest", "read"],
        "annotate": ["annotate"],
    }.items():
        _, made[name] = register_token(name=name, scopes=scopes)
    return made


def test_an_ingest_token_writes_and_cannot_read(client, tokens):
    posted = client.post(
        "/api/v1/ingest", json.dumps(native()), content_type="application/json", **bearer(tokens["ingest"])
    )
    assert posted.status_code == 200
    traces = client.post(
        "/v1/traces",
        json.dumps(request(*genai_agent_trace("ab" * 16))),
        content_type="application/json",
        **bearer(tokens["ingest"]),
    )
    assert traces.status_code == 200
    for url in READS:
        response = client.get(url, **bearer(tokens["ingest"]))
        assert response.status_code == 403, url
        assert response.json()["error"] == "this token does not have the 'read' scope"
        assert "r-1" not in response.content.decode()


def test_a_read_token_reads_and_cannot_write(client, tokens):
    client.post(
        "/api/v1/ingest", json.dumps(native()), content_type="application/json", **bearer(tokens["both"])
    )
    for url in READS:
        assert client.get(url, **bearer(tokens["read"])).status_code == 200, url
    refused = client.post(
        "/api/v1/ingest", json.dumps(native("r-2")), content_type="application/json", **bearer(tokens["read"])
    )
    assert refused.status_code == 403
    traces = client.post(
        "/v1/traces",
        json.dumps(request(*genai_agent_trace("cd" * 16))),
        content_type="application/json",
        **bearer(tokens["read"]),
    )
    assert traces.status_code == 403 and json.loads(traces.content)["code"] == 7
    assert not models.Run.objects.filter(run_id__in=["r-2", "cd" * 16]).exists()


def test_an_annotate_token_does_neither(client, tokens):
    assert (
        client.post(
            "/api/v1/ingest",
            json.dumps(native()),
            content_type="application/json",
            **bearer(tokens["annotate"]),
        ).status_code
        == 403
    )
    assert client.get("/api/v1/sessions", **bearer(tokens["annotate"])).status_code == 403


def test_commands_create_with_scopes_list_and_revoke(client):
    token = run("create_ingest_token", "reader", "--scope", "read").strip()
    assert models.IngestToken.objects.get(name="reader").scopes == ["read"]
    assert client.get("/api/v1/sessions", **bearer(token)).status_code == 200
    default = run("create_ingest_token", "writer").strip()
    assert models.IngestToken.objects.get(name="writer").scopes == ["ingest"]
    listing = run("list_tokens")
    assert "reader" in listing and "writer" in listing and "read " in listing and "active" in listing
    assert token not in listing and default not in listing  # only prefixes, never the tokens
    prefix = models.IngestToken.objects.get(name="reader").prefix
    assert "revoked" in run("revoke_token", prefix)
    assert client.get("/api/v1/sessions", **bearer(token)).status_code == 401
    assert "revoked" in run("list_tokens")
    with pytest.raises(CommandError):
        run("revoke_token", "aht_")  # too short to name one token
    with pytest.raises(CommandError):
        call_command(
            "create_ingest_token", "x", "--scope", "admin", stdout=io.StringIO(), stderr=io.StringIO()
        )


def test_quickstart_token_reads_and_writes(client, monkeypatch):
    monkeypatch.setenv("HISTORY_INGEST_TOKEN", "aht_quickstart-token-000000")
    monkeypatch.setenv("HISTORY_ADMIN_PASSWORD", "quick-start-pw-1")
    run("quickstart", "--no-serve")
    assert models.IngestToken.objects.get().scopes == ["ingest", "read"]
    assert client.get("/api/v1/sessions", **bearer("aht_quickstart-token-000000")).status_code == 200


def test_tokens_made_before_scopes_keep_what_they_could_do(transactional_db):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    before = [("history_app", "0012_otlp_span_batches")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("history_app", "IngestToken")
    old.objects.create(name="old", token_hash="0" * 64, prefix="aht_old")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert models.IngestToken.objects.get(name="old").scopes == ["ingest", "read"]
