"""Ingestion receipts: every request and import leaves one; a page and a JSON twin list them."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import override_settings

from history_app import models

from .conftest import AUTOURGOS, TOKEN

pytestmark = pytest.mark.django_db

SECRET = "sk-proj-FAKEc2LufYNuydk9sgEWl2agE4aE_Yhc3a_LcBf"


def native(run_id, **fields):
    return {"schema": "agent-history/v1", "run_id": run_id, "session_id": "s", **fields}


def test_a_request_leaves_a_receipt_with_rejections_and_redacted_fields(ingest, alice_client):
    ingest(
        [
            native("ok", input=f"key {SECRET}", metadata={"password": "hunter2"}),
            {"iterations": "x", "final_response": 1},
        ]
    )
    receipt = models.IngestReceipt.objects.get()
    assert receipt.source == "api" and receipt.token.name == "suite"
    assert receipt.counts == {"created": 1, "updated": 0, "duplicate": 0, "rejected": 1}
    assert receipt.rejections == [
        {"index": 1, "run_id": None, "path": "$.iterations", "message": "must be an array"}
    ]
    paths = {(f["path"], tuple(f["rules"])) for f in receipt.changed_fields}
    assert ("$.input", ("openai",)) in paths and ("$.metadata.password", ("secret-key",)) in paths
    page = alice_client.get("/p/default/receipts/").content.decode()
    assert "must be an array" in page and "$.metadata.password" in page and "openai × 1" in page
    assert SECRET not in page and "hunter2" not in page
    # Each changed field names its run, linked to it (issue #17).
    assert '<a href="/p/default/runs/ok/"><code>ok</code></a> <code>$.input</code>' in page
    body = alice_client.get("/api/v1/receipts").json()
    assert body["receipts"][0]["counts"]["rejected"] == 1
    assert SECRET not in json.dumps(body)


@override_settings(HISTORY_MAX_FIELD_CHARS=2000)
def test_cut_fields_are_recorded(ingest):
    ingest(native("long", output="x" * 5000))
    (changed,) = models.IngestReceipt.objects.get().changed_fields
    assert changed == {"run_id": "long", "path": "$.output", "rules": {"truncated": 1}}
    assert models.Run.objects.get().output.endswith("... [TRUNCATED 3000 chars]")


def test_refused_requests_leave_a_receipt_too(ingest):
    ingest("{broken")
    ingest("x", content_type="text/plain")
    reasons = [r.rejections[0]["message"] for r in models.IngestReceipt.objects.order_by("id")]
    assert reasons[0].startswith("invalid JSON") and reasons[1].startswith("unsupported content type")


def test_unauthenticated_requests_leave_none(client):
    client.post("/api/v1/ingest", "{}", content_type="application/json")
    assert not models.IngestReceipt.objects.exists()


def test_imports_leave_receipts(tmp_path):
    call_command("import_history", str(AUTOURGOS), stdout=io.StringIO(), stderr=io.StringIO())
    receipt = models.IngestReceipt.objects.get()
    assert (
        receipt.source == "import_history"
        and receipt.counts["created"] == 11
        and str(AUTOURGOS) in receipt.label
    )


def test_receipts_page_requires_login_and_pages(alice_client, ingest, settings):
    from django.test import Client

    anonymous = Client()
    assert anonymous.get("/p/default/receipts/").status_code == 302
    assert anonymous.get("/api/v1/receipts").status_code == 401
    settings.HISTORY_PAGE_SIZE = 2
    for i in range(3):
        ingest(native(f"r{i}"))
    page = alice_client.get("/p/default/receipts/").content.decode()
    assert page.count('id="receipt-') == 2 and "Older receipts" in page
    fragment = alice_client.get(
        "/p/default/receipts/?_next=" + page.split("?_next=")[1].split('"')[0], HTTP_HX_REQUEST="true"
    )
    assert "<html" not in fragment.content.decode() and fragment.content.decode().count('id="receipt-') == 1
    assert anonymous.get("/api/v1/receipts", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_a_wrong_method_with_a_valid_token_leaves_a_receipt(client, auth_headers, method):
    response = getattr(client, method)("/api/v1/ingest", **auth_headers)
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert response.json()["error"].startswith(f"{method.upper()} is not allowed")
    receipt = models.IngestReceipt.objects.get()
    assert receipt.source == "api" and receipt.rejections[0]["message"] == response.json()["error"]
    otlp = getattr(client, method)("/v1/traces", **auth_headers)
    assert otlp.status_code == 405 and otlp["Allow"] == "POST"
    assert models.IngestReceipt.objects.filter(source="otlp").count() == 1
    # Without a valid token: the same answer, and no receipt (anyone could fill the table).
    assert client.get("/api/v1/ingest").status_code == 405
    assert client.get("/v1/traces", HTTP_AUTHORIZATION="Bearer nope").status_code == 405
    assert models.IngestReceipt.objects.count() == 2
