"""HttpSink against the real ingestion endpoint and against a flaky server."""

from __future__ import annotations

import http.server
import json
import socket
import time

import pytest

from history_app import models
from history_app.agent_history import HttpSink, Run

from .conftest import TOKEN
from .fake_openai import serve_in_a_thread


def run(i):
    return Run(
        run_id=f"sink-{i}", session_id="sink-session", input=f"q{i} with key sk-proj-{'a' * 30}", output="ok"
    )


@pytest.mark.django_db(transaction=True)
def test_runs_reach_the_dashboard(live_server, token, tmp_path):
    sink = HttpSink(
        f"{live_server.url}/api/v1/ingest", TOKEN, batch_size=4, flush_interval=0.05, spool_dir=tmp_path
    )
    for i in range(10):
        sink.send(run(i))
    result = sink.flush(20)
    assert result and result.delivered == 10 and result.rejected == result.spooled == 0
    assert sink.delivered == 10
    assert models.Run.objects.filter(session__session_id="sink-session").count() == 10
    assert "sk-proj-" not in models.Run.objects.get(run_id="sink-3").input
    sink.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_spooled_runs_are_delivered_when_the_server_is_back(live_server, token, tmp_path):
    down = HttpSink(
        f"http://127.0.0.1:{free_port()}/api/v1/ingest",
        TOKEN,
        flush_interval=0.05,
        spool_dir=tmp_path,
        timeout=1,
    )
    for i in range(3):
        down.send(run(i))
    waiting = down.flush(0.5)
    assert not waiting and waiting.spooled == 3  # nothing can be delivered, and send() never blocked
    down._stop.set()
    assert list(tmp_path.glob("*.ndjson"))
    up = HttpSink(f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path)
    assert up.flush(20).delivered == 3
    assert list(tmp_path.glob("*.ndjson")) == []
    assert models.Run.objects.filter(session__session_id="sink-session").count() == 3
    up.close()


class Flaky(http.server.BaseHTTPRequestHandler):
    answers: list[int] = []
    bodies: list[bytes] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.bodies.append(body)
        lines = [json.loads(line) for line in body.decode().splitlines()]
        payload = json.dumps(
            {"ok": status == 200, "results": [{"status": "created", "run_id": x["run_id"]} for x in lines]}
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_server_errors_are_retried_with_backoff(tmp_path):
    Flaky.answers, Flaky.bodies = [503, 500], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    serve_in_a_thread(server)
    try:
        sink = HttpSink(
            f"http://127.0.0.1:{server.server_port}/",
            "t",
            flush_interval=0.05,
            spool_dir=tmp_path,
            max_backoff=0.2,
        )
        sink.send(run(1))
        result = sink.flush(10)
        assert result and result.delivered == 1 and result.rejected == 0
        assert len(Flaky.bodies) == 1 and json.loads(Flaky.bodies[0])["run_id"] == "sink-1"
        sink.close()
    finally:
        server.shutdown()


def test_send_never_raises_on_a_bad_record(tmp_path):
    sink = HttpSink("http://127.0.0.1:9/", "t", spool_dir=tmp_path, timeout=0.2)
    sink.send(object())  # not a run: logged, not raised
    sink._stop.set()


class Scripted(http.server.BaseHTTPRequestHandler):
    """A local ingestion endpoint whose answer to each request is ``answer(items)``:
    ``(status, per-item statuses or None, headers)``. Every request is recorded."""

    answer = staticmethod(lambda items: (200, None, {}))
    requests: list[tuple[float, bytes]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append((time.monotonic(), body))
        items = [json.loads(line) for line in body.decode().splitlines()]
        status, statuses, headers = self.answer(items)
        statuses = statuses or ["created" if status < 300 else "rejected"] * len(items)
        results = [
            {"index": i, "run_id": x["run_id"], "status": s, "errors": []}
            for i, (x, s) in enumerate(zip(items, statuses, strict=True))
        ]
        payload = json.dumps({"ok": status == 200, "status": status, "results": results}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    Scripted.answer, Scripted.requests = staticmethod(lambda items: (200, None, {})), []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    serve_in_a_thread(server)
    yield f"http://127.0.0.1:{server.server_port}/api/v1/ingest"
    server.shutdown()


def sent_ids() -> list[list[str]]:
    return [[json.loads(line)["run_id"] for line in body.splitlines()] for _, body in Scripted.requests]


def test_a_batch_answered_5xx_again_and_again_is_quarantined_and_the_next_goes_through(scripted, tmp_path):
    Scripted.answer = staticmethod(
        lambda items: (500, None, {}) if items[0]["run_id"] == "sink-0" else (200, None, {})
    )
    sink = HttpSink(
        scripted, "t", batch_size=1, flush_interval=0.05, spool_dir=tmp_path, max_backoff=0.05, max_attempts=3
    )
    sink.send(run(0))
    sink.send(run(1))
    result = sink.flush(10)
    assert not result
    assert (result.delivered, result.quarantined, result.rejected, result.spooled) == (1, 1, 0, 0)
    assert sent_ids().count(["sink-0"]) == 3 and ["sink-1"] in sent_ids()
    (kept,) = (tmp_path / "quarantine").glob("*.ndjson")
    assert json.loads(kept.read_text())["run_id"] == "sink-0"
    assert list(tmp_path.glob("*.ndjson")) == []  # nothing left to block the batches behind it
    sink.close()


def test_the_default_spool_is_private_to_the_user_and_one_per_endpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = HttpSink("http://127.0.0.1:9/api/v1/ingest", "t", timeout=0.2)
    second = HttpSink("http://127.0.0.1:8/api/v1/ingest", "t", timeout=0.2)
    first._stop.set(), second._stop.set()
    assert first.spool_dir != second.spool_dir
    for sink in (first, second):
        assert sink.spool_dir.is_relative_to(tmp_path / "cache" / "agent-history")
        assert sink.spool_dir.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "cache" / "agent-history").stat().st_mode & 0o777 == 0o700
    first.send(run(1))
    assert first.flush(1).spooled == 1
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in first.spool_dir.glob("*.ndjson"))


def test_flush_says_the_server_refused_the_batch(scripted, tmp_path):
    Scripted.answer = staticmethod(lambda items: (401, None, {}))
    sink = HttpSink(scripted, "wrong", flush_interval=0.05, spool_dir=tmp_path)
    sink.send(run(1))
    sink.send(run(2))
    result = sink.flush(10)
    assert not result
    assert (result.delivered, result.rejected, result.spooled, result.quarantined) == (0, 2, 0, 0)
    assert len(list((tmp_path / "rejected").glob("*.ndjson"))) == 1
    sink.close()


def test_batches_are_split_to_the_items_limit_and_the_byte_budget(scripted, tmp_path):
    sink = HttpSink(
        scripted,
        "t",
        batch_size=25,
        flush_interval=0.2,
        spool_dir=tmp_path,
        max_items_per_request=10,
        max_request_bytes=1500,
    )
    for i in range(25):
        sink.send(run(i))
    assert sink.flush(10).delivered == 25
    assert sorted(x for ids in sent_ids() for x in ids) == sorted(f"sink-{i}" for i in range(25))
    assert all(len(ids) <= 10 for ids in sent_ids())
    assert all(len(body) <= 1500 for _, body in Scripted.requests)
    assert len(Scripted.requests) > 3  # the byte budget, not only the item limit, split them
    sink.close()


@pytest.mark.django_db(transaction=True)
def test_a_413_splits_the_batch_in_half_and_a_run_too_large_alone_is_rejected(
    live_server, token, tmp_path, settings
):
    settings.HISTORY_MAX_BODY_BYTES = 2048
    sink = HttpSink(
        f"{live_server.url}/api/v1/ingest", TOKEN, batch_size=20, flush_interval=0.2, spool_dir=tmp_path
    )
    for i in range(12):
        sink.send(run(i))
    sink.send(Run(run_id="sink-huge", session_id="sink-session", input="x" * 5000))
    result = sink.flush(20)
    assert not result
    assert (result.delivered, result.rejected, result.spooled) == (12, 1, 0)
    assert models.Run.objects.filter(session__session_id="sink-session").count() == 12
    (refused,) = (tmp_path / "rejected").glob("*.ndjson")
    assert json.loads(refused.read_text())["run_id"] == "sink-huge"
    sink.close()


def test_a_503_is_retried_after_its_retry_after_and_nothing_in_it_counts_as_rejected(scripted, tmp_path):
    answers = [(503, ["created", "rejected"], {"Retry-After": "1"})]
    Scripted.answer = staticmethod(lambda items: answers.pop(0) if answers else (200, None, {}))
    sink = HttpSink(scripted, "t", batch_size=2, flush_interval=0.2, spool_dir=tmp_path, max_backoff=0.05)
    sink.send(run(1))
    sink.send(run(2))
    result = sink.flush(10)
    assert result and (result.delivered, result.rejected) == (2, 0)
    assert sent_ids() == [["sink-1", "sink-2"], ["sink-1", "sink-2"]]  # resending is idempotent
    # A lower bound only (a wait never ends early): the server's Retry-After, not max_backoff.
    assert Scripted.requests[1][0] - Scripted.requests[0][0] >= 0.95
    sink.close()


def test_items_a_207_marks_retry_are_sent_again_never_counted_rejected(scripted, tmp_path):
    answers = [(207, ["created", "retry", "rejected"], {})]
    Scripted.answer = staticmethod(lambda items: answers.pop(0) if answers else (200, None, {}))
    sink = HttpSink(scripted, "t", batch_size=3, flush_interval=0.2, spool_dir=tmp_path, max_backoff=0.05)
    for i in (1, 2, 3):
        sink.send(run(i))
    result = sink.flush(10)
    assert (result.delivered, result.rejected, result.spooled) == (2, 1, 0)
    assert sent_ids() == [["sink-1", "sink-2", "sink-3"], ["sink-2"]]
    sink.close()


@pytest.mark.django_db(transaction=True)
def test_the_middlewares_flush_leaves_the_sinks_report_to_its_owner(live_server, token, tmp_path):
    """``mw.flush()`` waits for the sinks, but what was delivered is still the sink's own
    ``flush`` to say: every run arrived, so it says so, not ``delivered=0``."""
    from history_app.agent_history import AgentHistoryMiddleware

    sink = HttpSink(f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path)
    middleware = AgentHistoryMiddleware(folder=str(tmp_path / "logs"), sinks=[sink])
    for i in range(3):
        sink.send(run(i))
    assert middleware.flush(20) is True
    assert models.Run.objects.filter(session__session_id="sink-session").count() == 3
    result = sink.flush(20)
    assert result and result.delivered == 3
    assert sink.flush(5).delivered == 0  # reported once, by the owner's flush
    sink.close()
