"""PostgreSQL connections under quickstart's threaded server (issue #30, item 6): a
thread per request must not mean a connection per request kept open. A real role limited
to three connections, a real ``quickstart`` (runserver, threaded) on 127.0.0.1, more
concurrent and sequential requests than the limit: every one succeeds, the role never
holds more than its pool, and idle connections are given back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from .conftest import TOKEN, native

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 3

on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connections")


def _admin() -> psycopg.Connection:
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "dbname"):
        params.pop(key, None)
    return psycopg.connect(**params, dbname="postgres", autocommit=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _held(admin: psycopg.Connection, role: str) -> int:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [role]).fetchone()[0]


@pytest.fixture
def limited_server(tmp_path):
    """``quickstart`` on a database of its own, as a role limited to ``LIMIT`` connections."""
    name = f"{connection.settings_dict['NAME']}_limited"[:60]
    role = f"{name}_role"
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {LIMIT}')
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
    port = _free_port()
    params = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "history_app.settings",
        "HISTORY_DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://{role}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{name}",
        "DATABASE_POOL_MAX_SIZE": str(LIMIT),
        "DATABASE_POOL_MAX_IDLE": "1",
        "HISTORY_INGEST_TOKEN": TOKEN,
        "HISTORY_ADMIN_PASSWORD": "admin-password-for-the-suite",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("DATABASE_CONN_MAX_AGE", None)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "quickstart", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stderr.read()
                time.sleep(0.1)
        yield port, role
    finally:
        server.terminate()
        server.wait(timeout=30)
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def _call(port: int, n: int) -> int:
    """One request of three kinds in turn: a write, a read of the API, an OTLP export."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    if n % 3 == 0:
        body, path = json.dumps([native(f"pool-{n}", f"pool-s{n % 5}")]).encode(), "/api/v1/ingest"
    elif n % 3 == 1:
        body, path = None, "/api/v1/sessions"
    else:
        spans = {"resourceSpans": [{"scopeSpans": [{"spans": [_span(n)]}]}]}
        body, path = json.dumps(spans).encode(), "/v1/traces"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _span(n: int) -> dict:
    return {
        "traceId": f"{n:032x}",
        "spanId": f"{n:016x}",
        "name": "agent run",
        "startTimeUnixNano": "1790000000000000000",
        "endTimeUnixNano": "1790000001000000000",
    }


@on_postgresql
@pytest.mark.django_db
def test_quickstart_on_a_role_of_three_connections_answers_every_request_and_gives_them_back(limited_server):
    port, role = limited_server
    with _admin() as admin:
        with ThreadPoolExecutor(max_workers=4 * LIMIT) as pool:
            futures = [pool.submit(_call, port, n) for n in range(8 * LIMIT)]
            peak = 0
            while not all(f.done() for f in futures):
                peak = max(peak, _held(admin, role))
                time.sleep(0.02)
            concurrent = [f.result() for f in futures]
        sequential = [_call(port, 100 + n) for n in range(4 * LIMIT)]
        assert concurrent == [200] * len(concurrent)
        assert sequential == [200] * len(sequential)
        assert 1 <= peak <= LIMIT
        # Idle, the pool closes one connection a second (DATABASE_POOL_MAX_IDLE=1).
        for _ in range(100):
            if _held(admin, role) == 0:
                break
            time.sleep(0.2)
        assert _held(admin, role) == 0
        # And a request after that opens one again.
        assert _call(port, 1000) == 200


def _database_settings(**env: str) -> subprocess.CompletedProcess:
    script = (
        "import json; from django.conf import settings; d = settings.DATABASES['default']; "
        "print(json.dumps({'CONN_MAX_AGE': d['CONN_MAX_AGE'], 'OPTIONS': d.get('OPTIONS', {})}))"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "history_app.settings", **env}
    for name in ("DATABASE_CONN_MAX_AGE", "DATABASE_POOL_MAX_SIZE", "DATABASE_POOL_TIMEOUT"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True)


def test_postgresql_connections_are_pooled_by_default_and_the_settings_checked(tmp_path):
    url = {"DATABASE_URL": "postgres://someone@127.0.0.1:5432/somewhere", "HISTORY_DATA_DIR": str(tmp_path)}
    pooled = json.loads(_database_settings(**url).stdout)
    assert pooled == {
        "CONN_MAX_AGE": 0,
        "OPTIONS": {
            "pool": {"min_size": 0, "max_size": 4, "timeout": 10, "max_idle": 30, "reconnect_timeout": 10}
        },
    }
    unpooled = json.loads(_database_settings(**url, DATABASE_POOL_MAX_SIZE="0").stdout)
    assert unpooled == {"CONN_MAX_AGE": 60, "OPTIONS": {}}
    both = _database_settings(**url, DATABASE_CONN_MAX_AGE="60")
    assert both.returncode != 0
    assert "DATABASE_CONN_MAX_AGE=60" in both.stderr and "DATABASE_POOL_MAX_SIZE=0" in both.stderr
    bad = _database_settings(**url, DATABASE_POOL_TIMEOUT="soon")
    assert "DATABASE_POOL_TIMEOUT='soon' is not an integer" in bad.stderr
