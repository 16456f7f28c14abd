"""HttpSink against the real ingestion endpoint and against a flaky server."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from history_app import models
from history_app.agent_history import HttpSink, Run

from .conftest import TOKEN


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
    assert sink.flush(20) is True
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
    assert down.flush(0.5) is False  # nothing can be delivered, and send() never blocked
    down._stop.set()
    assert list(tmp_path.glob("*.ndjson"))
    up = HttpSink(f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path)
    assert up.flush(20) is True
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sink = HttpSink(
            f"http://127.0.0.1:{server.server_port}/",
            "t",
            flush_interval=0.05,
            spool_dir=tmp_path,
            max_backoff=0.2,
        )
        sink.send(run(1))
        assert sink.flush(10) is True
        assert len(Flaky.bodies) == 1 and json.loads(Flaky.bodies[0])["run_id"] == "sink-1"
        sink.close()
    finally:
        server.shutdown()


def test_send_never_raises_on_a_bad_record(tmp_path):
    sink = HttpSink("http://127.0.0.1:9/", "t", spool_dir=tmp_path, timeout=0.2)
    sink.send(object())  # not a run: logged, not raised
    sink._stop.set()
