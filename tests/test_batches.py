"""Big batches and transient failures (issue #10, item 4): a limit on items per request,
a receipt opened before anything is stored, session locks in a fixed order, 503 with
Retry-After (never "rejected") on a transient database failure, and chunked bodies."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import OperationalError, close_old_connections, connection
from django.utils import timezone

from history_app import models
from history_app.intake import ingestion, writer

from .conftest import TOKEN, copy_migrated, native

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


def test_too_many_items_answer_413_naming_count_and_limit(ingest, settings):
    settings.HISTORY_MAX_ITEMS_PER_REQUEST = 3
    response = ingest([native(f"r{i}") for i in range(4)])
    assert response.status_code == 413
    message = "the body holds 4 runs; at most 3 per request"
    assert response.json() == {
        "ok": False,
        "status": 413,
        "error": message,
        "count": 4,
        "limit": 3,
        "errors": [{"path": "$", "message": message}],
    }
    ndjson = "\n".join(json.dumps(native(f"n{i}")) for i in range(5))
    assert ingest(ndjson, content_type="application/x-ndjson").json()["count"] == 5
    assert not models.Run.objects.exists()
    assert models.IngestReceipt.objects.filter(rejections__0__message=message).exists()
    assert ingest([native(f"r{i}") for i in range(3)]).status_code == 200


def test_the_receipt_is_open_before_anything_is_stored_and_says_what_a_stopped_request_stored(
    ingest, alice_client, monkeypatch
):
    """Items are stored a batch per transaction (issue #13): a request stopped in its second
    batch keeps the first, and its receipt says so."""
    monkeypatch.setattr(writer, "BATCH_ITEMS", 2)
    real = writer._write_batch
    seen = []

    def dies_in_the_second(pending, project_id):
        receipt = models.IngestReceipt.objects.get()
        seen.append((receipt.state, receipt.counts.get("created", 0)))
        if len(seen) == 2:
            raise RuntimeError("the worker was killed")  # not a database error
        return real(pending, project_id)

    monkeypatch.setattr(writer, "_write_batch", dies_in_the_second)
    with pytest.raises(RuntimeError):
        ingest([native(f"r{i}") for i in range(5)])
    # Open before the first run was stored, and current after each batch.
    assert seen == [("open", 0), ("open", 2)]
    receipt = models.IngestReceipt.objects.get()
    assert models.Run.objects.count() == 2
    assert (receipt.shown_state, receipt.stored, receipt.item_count) == ("interrupted", 2, 5)
    assert receipt.counts == {"created": 2, "updated": 0, "duplicate": 0, "rejected": 0}
    page = alice_client.get("/p/default/receipts/").content.decode()
    assert "Interrupted" in page and "2 of 5 items stored" in page
    assert alice_client.get("/api/v1/receipts").json()["receipts"][0]["state"] == "interrupted"


def test_an_open_receipt_gone_idle_is_shown_interrupted(alice_client, admin_client):
    """A SIGKILLed worker runs no code: its receipt stays open, and is shown interrupted."""
    receipt = models.IngestReceipt.objects.create(
        project=models.Project.default(),
        source="api",
        state="open",
        item_count=10,
        counts={"created": 4, "rejected": 1},
    )
    assert receipt.shown_state == "open"
    assert "In progress — 4 of 10" in alice_client.get("/p/default/receipts/").content.decode()
    models.IngestReceipt.objects.update(updated_at=timezone.now() - models.IngestReceipt.IDLE_LIMIT * 2)
    assert "Interrupted</strong> — 4 of 10" in alice_client.get("/p/default/receipts/").content.decode()
    assert alice_client.get("/api/v1/receipts").json()["receipts"][0]["state"] == "interrupted"
    assert "interrupted" in admin_client.get("/admin/history_app/ingestreceipt/").content.decode()


def _fails_on(calls: set[int], exc: Exception):
    """``_write_batch`` (one batch's writes, in its transaction) failing on the given calls."""
    real = writer._write_batch
    count = [0]

    def flaky(pending, project_id):
        count[0] += 1
        if count[0] in calls:
            raise exc
        return real(pending, project_id)

    return flaky


def test_a_transient_database_failure_answers_503_with_retry_after_and_items_to_retry(ingest, monkeypatch):
    locked = OperationalError("database is locked")
    monkeypatch.setattr(writer, "BATCH_ITEMS", 1)
    monkeypatch.setattr(writer, "_write_batch", _fails_on({2}, locked))
    response = ingest([native(f"r{i}") for i in range(3)])
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    body = response.json()
    assert body["ok"] is False and body["status"] == 503 and body["retry_after"] == 5
    assert [r["status"] for r in body["results"]] == ["created", "retry", "retry"]
    assert body["results"][1]["errors"] == [
        {"path": "$", "message": "temporary database failure; send it again"}
    ]
    assert "locked" not in response.content.decode()
    receipt = models.IngestReceipt.objects.get()
    assert receipt.counts == {"created": 1, "updated": 0, "duplicate": 0, "rejected": 0, "retry": 2}
    assert receipt.state == "complete"
    # Sending the whole batch again is safe.
    monkeypatch.undo()
    again = ingest([native(f"r{i}") for i in range(3)])
    assert again.status_code == 200
    assert [r["status"] for r in again.json()["results"]] == ["duplicate", "created", "created"]


def test_a_transient_failure_in_a_batch_rolls_all_of_it_back(ingest, monkeypatch):
    """One transaction per batch: after a transient failure none of its items is kept, and
    every one of them is "retry" (the items before it, in earlier batches, stay stored)."""
    monkeypatch.setattr(writer, "BATCH_ITEMS", 3)
    monkeypatch.setattr(writer, "_write_batch", _fails_on({2}, OperationalError("database is locked")))
    response = ingest([native(f"r{i}") for i in range(5)])
    assert response.status_code == 503
    assert [r["status"] for r in response.json()["results"]] == ["created"] * 3 + ["retry"] * 2
    assert sorted(models.Run.objects.values_list("run_id", flat=True)) == ["r0", "r1", "r2"]
    monkeypatch.undo()
    again = ingest([native(f"r{i}") for i in range(5)]).json()["results"]
    assert [r["status"] for r in again] == ["duplicate"] * 3 + ["created"] * 2


class _Deadlock(Exception):
    sqlstate = "40P01"


def test_a_deadlock_is_retried_at_once(ingest, monkeypatch):
    deadlock = OperationalError("deadlock detected")
    deadlock.__cause__ = _Deadlock()
    monkeypatch.setattr(writer, "_write_batch", _fails_on({1}, deadlock))
    response = ingest(native("r"))
    assert response.status_code == 200 and response.json()["results"][0]["status"] == "created"


def test_a_chunked_body_is_refused_with_411_where_it_cannot_be_read(ingest):
    """Django's runserver (and the test client) give no ``wsgi.input_terminated``."""
    response = ingest(native(), HTTP_TRANSFER_ENCODING="chunked")
    assert response.status_code == 411
    assert "chunked" in response.json()["error"] and "Content-Length" in response.json()["error"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_moving_runs_between_two_sessions_both_ways_at_once_does_not_deadlock(monkeypatch):
    # One attempt only: the lock order alone must prevent the deadlock.
    monkeypatch.setattr(writer, "STORE_ATTEMPTS", 1, raising=False)
    n = 20
    runs = {side: [native(f"{side}{i}", f"s-{side}", input=side) for i in range(n)] for side in "ab"}
    ingestion.ingest_items(items=runs["a"] + runs["b"])
    barrier = threading.Barrier(2)
    outcomes: dict[str, list] = {}

    def move(side: str, to: str) -> None:
        try:
            barrier.wait()
            moved = [{**run, "session_id": f"s-{to}"} for run in runs[side]]
            outcomes[side] = [(r.status, r.errors) for r in ingestion.ingest_items(items=moved)]
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=move, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {side: [("updated", [])] * n for side in "ab"}
    assert models.Run.objects.filter(session__session_id="s-a", input="b").count() == n
    assert models.Session.objects.get(session_id="s-a").run_count == n


# -- a real server ----------------------------------------------------------------------------


def _post(port: int, body, *, chunked: bool) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    if chunked:
        headers["Transfer-Encoding"] = "chunked"
    conn.request("POST", "/api/v1/ingest", body=body, headers=headers, encode_chunked=chunked)
    response = conn.getresponse()
    answer = response.status, json.loads(response.read())
    conn.close()
    return answer


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory, migrated_sqlite_file):
    """gunicorn (one sync worker) on a SQLite file named in DATABASE_URL."""
    if shutil.which("gunicorn", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("gunicorn is not installed next to this Python (pip install gunicorn)")
    folder = tmp_path_factory.mktemp("gunicorn")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or "0"
    port = 8131 + int(worker) % 8
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "history_app.settings",
        "HISTORY_DATA_DIR": str(folder),
        "DATABASE_URL": f"sqlite:///{folder / 'named.sqlite3'}",
        "HISTORY_MAX_BODY_BYTES": str(2**21),
        "HISTORY_INGEST_TOKEN": TOKEN,
    }
    setup = "import django; django.setup(); from history_app.access.auth import register_token; "
    setup += f"register_token(name='suite', token={TOKEN!r})"
    copy_migrated(migrated_sqlite_file, folder / "named.sqlite3")
    subprocess.run([sys.executable, "-c", setup], cwd=ROOT, env=env, check=True)
    command = [str(Path(sys.executable).parent / "gunicorn"), "history_app.wsgi", "-w", "1"]
    command += ["-b", f"127.0.0.1:{port}", "--pid", str(folder / "pid"), "--log-level", "warning"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            break
        except OSError:
            time.sleep(0.05)
    yield port, folder / "named.sqlite3", folder / "pid"
    server.terminate()
    server.wait(timeout=30)


def test_a_chunked_body_is_read_under_gunicorn(gunicorn):
    port, _, _ = gunicorn
    pieces = [b'[{"schema": "agent-history/v1", "run_id": "chunked-1", ', b'"session_id": "s"}]']
    status, body = _post(port, iter(pieces), chunked=True)
    assert (status, body["results"][0]["status"]) == (200, "created")
    big = json.dumps([native("chunked-2", input="x" * 2**21)]).encode()
    status, body = _post(port, iter([big[i : i + 8192] for i in range(0, len(big), 8192)]), chunked=True)
    assert status == 413 and f"{2**21} bytes" in body["error"]


def test_a_sigkilled_worker_leaves_an_open_receipt_with_exactly_what_was_stored(gunicorn):
    port, database, pid_file = gunicorn
    runs = [
        native(f"kill-{i}", f"s-{i % 7}", input="x" * 500, iterations=[{"thought": "t"}]) for i in range(1000)
    ]
    request = threading.Thread(target=lambda: _suppress_disconnect(port, json.dumps(runs).encode()))
    request.start()
    db = sqlite3.connect(database, timeout=20)
    counts: dict = {}
    while counts.get("created", 0) < 20:
        assert request.is_alive(), "the request ended before it could be killed"
        row = db.execute("SELECT counts FROM history_app_ingestreceipt WHERE state = 'open'").fetchone()
        counts = json.loads(row[0]) if row else {}
    master = int(pid_file.read_text())
    (worker,) = map(int, Path(f"/proc/{master}/task/{master}/children").read_text().split())
    os.kill(worker, signal.SIGKILL)
    request.join()
    state, counts = db.execute(
        "SELECT state, counts FROM history_app_ingestreceipt WHERE item_count = 1000"
    ).fetchone()
    stored = db.execute("SELECT COUNT(*) FROM history_app_run WHERE run_id LIKE 'kill-%'").fetchone()[0]
    db.close()
    assert state == "open" and 20 <= stored < 1000
    assert json.loads(counts)["created"] == stored


def _suppress_disconnect(port: int, body: bytes) -> None:
    with contextlib.suppress(http.client.HTTPException, OSError):  # the worker was killed: no answer
        _post(port, body, chunked=False)


@pytest.mark.parametrize("where", ["open_receipt", "close_receipt"])
def test_a_transient_failure_outside_the_items_answers_503_not_500(ingest, monkeypatch, where):
    """The receipt cannot be written while another writer holds SQLite's lock for longer
    than the busy timeout: the client is told to send again, never a 500."""

    def locked(**_):
        raise OperationalError("database is locked")

    monkeypatch.setattr(ingestion, where, locked)
    response = ingest([native("r1")])
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    body = response.json()
    assert body["ok"] is False and body["status"] == 503 and "send the request again" in body["error"]
    assert "locked" not in response.content.decode()
