"""A database that refuses or fails answers 503 with Retry-After everywhere (issue #30,
item 5): the OTLP endpoint in OTLP's shape (its token lookup included), the API in its
JSON shape, pages as a plain 503 page. The failures are real: PostgreSQL refusing the
connection (a closed port, a role with no connection left), a lock wait past
``lock_timeout``, a backend terminated by an administrator mid-request."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client

from history_app.intake import writer

from .conftest import TOKEN, native
from .otlp_spans import request, span

on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's failures")
REFUSED_ROLE = "history_refused"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _admin() -> psycopg.Connection:
    """A connection of its own to the test database (not Django's)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


@contextlib.contextmanager
def _database_settings(**changes):
    """Django's connections (every thread's) made with ``changes``; restored after."""
    saved = {key: connection.settings_dict.get(key) for key in changes}
    saved_options = dict(connection.settings_dict.get("OPTIONS", {}))
    connection.close()
    close_pool = getattr(connection, "close_pool", None)
    if close_pool:
        close_pool()
    connection.settings_dict.update(changes)
    try:
        yield
    finally:
        connection.close()
        if close_pool:
            close_pool()
        connection.settings_dict.update(saved)
        connection.settings_dict["OPTIONS"] = saved_options


def _fail_fast_options(**extra) -> dict:
    """The connection's options, with a pool (where there is one) that waits 1 s at most."""
    options = {**connection.settings_dict.get("OPTIONS", {}), **extra}
    if isinstance(options.get("pool"), dict):
        options["pool"] = {**options["pool"], "timeout": 1}
    return options


def _requests(client: Client, session_client: Client) -> dict:
    """Each endpoint's answer while the database fails."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    spans = request(span("ab" * 16, "cd" * 8, name="agent run"))
    from .test_otlp import protobuf_body

    return {
        "otlp-json": client.post("/v1/traces", json.dumps(spans), content_type="application/json", **headers),
        "otlp-protobuf": client.post(
            "/v1/traces", protobuf_body(spans), content_type="application/x-protobuf", **headers
        ),
        "ingest": client.post(
            "/api/v1/ingest", json.dumps(native()), content_type="application/json", **headers
        ),
        "api-read": client.get("/api/v1/sessions", **headers),
        "page": session_client.get("/"),
    }


def _assert_all_unavailable(answers: dict) -> None:
    from google.rpc import status_pb2

    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 503)
    assert {name: r["Retry-After"] for name, r in answers.items()} == dict.fromkeys(answers, "5")
    otlp = answers["otlp-json"]
    assert otlp["Content-Type"] == "application/json"
    assert otlp.json() == {"code": 14, "message": "temporary database failure; send the request again"}
    pb = answers["otlp-protobuf"]
    assert pb["Content-Type"] == "application/x-protobuf"
    status = status_pb2.Status.FromString(pb.content)
    assert (status.code, status.message) == (14, "temporary database failure; send the request again")
    for name in ("ingest", "api-read"):
        body = answers[name].json()
        assert body["ok"] is False and body["status"] == 503 and body["retry_after"] == 5, name
        assert body["error"] == "temporary database failure; send the request again in 5 s"
    page = answers["page"].content.decode()
    assert "<h1>Temporarily unavailable</h1>" in page and "Try again in 5 seconds" in page
    for answer in answers.values():  # nothing of the database's message is shown
        text = answer.content.decode(errors="replace").lower()
        for leak in ("refused", "fatal", "psycopg", REFUSED_ROLE, "lock timeout", "terminating", "traceback"):
            assert leak not in text


@pytest.fixture
def clients(token, alice):
    session_client = Client()
    session_client.force_login(alice)
    return Client(), session_client


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_postgresql_refusing_connections_answers_503_everywhere(clients):
    """Nothing listens on the port: the first query of each request (the token lookup,
    the session of the page) cannot connect."""
    with _database_settings(HOST="127.0.0.1", PORT=str(_closed_port()), OPTIONS=_fail_fast_options()):
        answers = _requests(*clients)
    _assert_all_unavailable(answers)
    # The database back, the same requests succeed.
    assert _requests(*clients)["otlp-json"].status_code == 200


@pytest.fixture
def refused_role():
    with _admin() as admin:
        admin.execute(f"DROP ROLE IF EXISTS {REFUSED_ROLE}")
        admin.execute(f"CREATE ROLE {REFUSED_ROLE} LOGIN CONNECTION LIMIT 0")
    yield REFUSED_ROLE
    with _admin() as admin:
        admin.execute(f"DROP ROLE IF EXISTS {REFUSED_ROLE}")


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_role_out_of_connections_answers_503_everywhere(clients, refused_role):
    """PostgreSQL answers "too many connections for role" to every connection."""
    with _database_settings(USER=refused_role, OPTIONS=_fail_fast_options()):
        answers = _requests(*clients)
    _assert_all_unavailable(answers)


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_lock_wait_past_lock_timeout_answers_503_everywhere(clients):
    """Another transaction holds the token and session tables (a migration, say): each
    request's first query gives up after ``lock_timeout``."""
    options = _fail_fast_options(options="-c lock_timeout=200")
    with _admin() as admin, _database_settings(OPTIONS=options), admin.transaction():
        admin.execute("LOCK TABLE history_app_ingesttoken, django_session IN ACCESS EXCLUSIVE MODE")
        answers = _requests(*clients)
    _assert_all_unavailable(answers)


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", ["otlp-json", "ingest", "page"])
def test_a_backend_terminated_mid_request_answers_503(clients, endpoint):
    """An administrator (or a failover) ends the request's backend while it waits."""
    client, session_client = clients
    answers: dict = {}

    def send() -> None:
        try:
            every = {
                "otlp-json": lambda: client.post(
                    "/v1/traces",
                    json.dumps(request(span("ab" * 16, "cd" * 8))),
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
                ),
                "ingest": lambda: client.post(
                    "/api/v1/ingest",
                    json.dumps(native()),
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
                ),
                "page": lambda: session_client.get("/"),
            }
            answers[endpoint] = every[endpoint]()
        except BaseException as exc:
            answers[endpoint] = exc
            raise
        finally:
            connection.close()

    with _admin() as admin, _database_settings(OPTIONS=_fail_fast_options()), admin.transaction():
        admin.execute("LOCK TABLE history_app_ingesttoken, django_session IN ACCESS EXCLUSIVE MODE")
        thread = threading.Thread(target=send)
        thread.start()
        for _ in range(200):
            # Within a transaction pg_stat_activity is read once, unless cleared.
            admin.execute("SELECT pg_stat_clear_snapshot()")
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchall()
            if waiting:
                break
            time.sleep(0.05)
        assert waiting, "the request never waited on the lock"
        admin.execute("SELECT pg_terminate_backend(%s)", [waiting[0][0]])
        thread.join(timeout=30)
    answer = answers[endpoint]
    assert (answer.status_code, answer["Retry-After"]) == (503, "5")


# -- which failures are transient: real errors raised by the server -----------------------


@on_postgresql
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sqlstate", "transient"),
    [
        ("40001", True),  # serialization failure
        ("40P01", True),  # deadlock detected
        ("53200", True),  # out of (shared) memory: max_locks_per_transaction
        ("53300", True),  # too many connections
        ("53100", True),  # disk full
        ("55P03", True),  # lock not available
        ("57P01", True),  # admin shutdown
        ("57P03", True),  # cannot connect now (starting up)
        ("57014", True),  # query cancelled (statement_timeout)
        ("08006", True),  # connection failure
        ("54000", False),  # a program limit: the same request fails again
        ("23505", False),  # unique violation
        ("22001", False),  # value too long
    ],
)
def test_transient_failures_are_told_from_lasting_ones(sqlstate, transient):
    with pytest.raises(DatabaseError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'failure' USING ERRCODE = '{sqlstate}'; END $$")
    assert caught.value.__cause__.sqlstate == sqlstate
    assert writer.is_transient(caught.value) is transient


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "content_type", "shape"),
    [
        ("/sessions/", "text/html", "page"),
        ("/api/v1/sessions", "application/json", "api"),
        ("/v1/traces", "application/json", "otlp"),
    ],
)
def test_a_failure_outside_any_view_answers_503_too(path, content_type, shape):
    """Django hands an exception raised in a middleware (the session saved after the
    view, say) to the 500 handler, inside its ``except`` block: a transient one answers
    503 in the endpoint's shape there too."""
    from django.test import RequestFactory

    from history_app.errors import server_error

    request = RequestFactory().get(path, CONTENT_TYPE=content_type)
    with _database_settings(HOST="127.0.0.1", PORT=str(_closed_port()), OPTIONS=_fail_fast_options()):
        try:
            connection.ensure_connection()
        except DatabaseError:
            response = server_error(request)
    assert (response.status_code, response["Retry-After"]) == (503, "5")
    body = response.content.decode()
    expected = {
        "page": "<h1>Temporarily unavailable</h1>",
        "api": '"retry_after": 5',
        "otlp": '"code": 14',
    }[shape]
    assert expected in body
    try:
        raise ValueError("a bug, not the database")
    except ValueError:
        assert server_error(request).status_code == 500


class _ProgramLimit(Exception):
    sqlstate = "54000"


@pytest.mark.django_db
def test_a_lasting_database_failure_outside_the_items_is_not_answered_retry(ingest, monkeypatch):
    """A failure that a later try meets again (a value past a program limit) must not
    tell the client to send the batch again: that would loop forever."""
    from django.db import OperationalError

    lasting = OperationalError("index row size exceeds btree version 4 maximum")
    lasting.__cause__ = _ProgramLimit()

    def fails(pending, project_id):
        raise lasting

    monkeypatch.setattr(writer, "_write_batch", fails)
    with pytest.raises(OperationalError):  # a 500 for the client (the test client raises it)
        ingest([native("r1")])
