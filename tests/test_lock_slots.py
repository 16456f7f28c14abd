"""Writers' locks do not grow with a request (issue #30, item 4): a request of thousands
of new traces or sessions takes a fixed number of advisory locks (``history_app.store.locks``),
and concurrent requests writing the same new sessions and traces stay correct."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from django.db import close_old_connections, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from history_app import models
from history_app.intake import ingestion, writer
from history_app.intake import spans as span_store
from history_app.store import locks

from .conftest import TOKEN, native
from .otlp_spans import genai_agent_trace, request, span

pytestmark = pytest.mark.django_db
on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's advisory locks")


def _otlp(client: Client, payload: dict):
    return client.post(
        "/v1/traces",
        json.dumps(payload),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
    )


def _lock_statements(queries) -> int:
    return sum("pg_advisory" in q["sql"] for q in queries)


def _locks_taken(queries) -> int:
    """Distinct advisory locks asked for (a lock held already is taken again at once)."""
    return len({q["sql"] for q in queries if "pg_advisory" in q["sql"]})


def test_one_otlp_request_of_eight_thousand_single_span_traces_is_stored_whole(client, token):
    """Each trace is a new run in a new session: with a lock per trace and per new session
    PostgreSQL's lock table ran out (503, every time the exporter sent it again)."""
    count = 8000
    spans = [span(f"{n:032x}", f"{n:016x}", name="agent run") for n in range(1, count + 1)]
    with CaptureQueriesContext(connection) as queries:
        response = _otlp(client, request(*spans))
    assert response.status_code == 200, response.content
    assert response.json() == {}
    assert models.Run.objects.count() == count
    assert models.Session.objects.filter(session_id__startswith="trace-").count() == count
    assert models.SpanBatch.objects.count() == count
    assert models.IngestReceipt.objects.get(source="otlp").counts["created"] == count
    assert _locks_taken(queries) <= 2 * locks.SLOTS  # was one per trace and per session: 16,000


@on_postgresql
def test_a_native_batch_of_many_new_sessions_takes_a_few_locks_per_transaction(ingest):
    runs = [native(f"r{n}", f"s{n}") for n in range(1000)]
    with CaptureQueriesContext(connection) as queries:
        response = ingest(runs)
    assert response.status_code == 200
    assert {r["status"] for r in response.json()["results"]} == {"created"}
    assert models.Session.objects.count() == 1000
    batches = 1000 // writer.BATCH_ITEMS
    assert _lock_statements(queries) <= batches * locks.SLOTS  # was one per new session: 1000


def test_slots_are_the_same_in_every_process_and_spread_keys():
    assert locks.slot_of(locks.SESSIONS, 1, "s-1") == locks.slot_of(locks.SESSIONS, 1, "s-1")
    used = {locks.slot_of(locks.TRACES, 1, f"{n:032x}") for n in range(200)}
    assert used == set(range(locks.SLOTS))


# -- concurrent writers on PostgreSQL ------------------------------------------------------


def _in_threads(work, count: int) -> list:
    """``work(n)`` in ``count`` threads started together; their results (or exceptions)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(n: int) -> None:
        try:
            barrier.wait()
            results[n] = work(n)
        except Exception as exc:  # noqa: BLE001 — the test asserts on it
            results[n] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_creating_the_same_new_sessions_in_any_order_store_every_run(monkeypatch):
    """Four writers at once, each with runs of the same 60 new sessions in its own order,
    across several batches (transactions): every run created on the first attempt (the
    lock order alone prevents deadlocks), each session once, its counters exact."""
    monkeypatch.setattr(writer, "STORE_ATTEMPTS", 1)
    monkeypatch.setattr(writer, "BATCH_ITEMS", 25)
    sessions = [f"shared-{n}" for n in range(60)]

    def write(worker: int) -> list[str]:
        order = random.Random(worker).sample(sessions, len(sessions))
        runs = [native(f"w{worker}-{s}-{k}", s) for s in order for k in range(2)]
        return [r.status for r in ingestion.ingest_items(items=runs)]

    outcomes = _in_threads(write, 4)
    assert outcomes == [["created"] * 120] * 4
    assert models.Session.objects.count() == 60
    assert set(models.Session.objects.values_list("run_count", flat=True)) == {8}


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_concurrent_otlp_requests_with_spans_of_the_same_new_traces_assemble_all_of_them(monkeypatch):
    """Each trace's spans arrive split over two requests sent at once, and their write
    waits inside the transaction (as a slow one would): the second to lock the traces'
    slots sees the first's spans, so every run has both model calls. The traces are
    chosen to fall in the same slot and in different ones."""
    from history_app.access.auth import register_token

    register_token(name="suite", token=TOKEN, scopes=["ingest", "read"])
    real_write = span_store._write

    def slow_write(*args, **kwargs):
        time.sleep(0.3)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(span_store, "_write", slow_write)
    project = models.Project.default().pk
    ids = [f"{n:032x}" for n in range(1, 400)]
    first = ids[0]
    same_slot = [
        t
        for t in ids[1:]
        if locks.slot_of(locks.TRACES, project, t) == locks.slot_of(locks.TRACES, project, first)
    ][:2]
    other_slot = [
        t
        for t in ids[1:]
        if locks.slot_of(locks.TRACES, project, t) != locks.slot_of(locks.TRACES, project, first)
    ][:2]
    chosen = [first, *same_slot, *other_slot]
    halves: list[list[dict]] = [[], []]
    for trace_id in chosen:
        chat1, tool, chat2, root = genai_agent_trace(trace_id, session=f"conv-{trace_id}")
        halves[0] += [chat1]
        halves[1] += [tool, chat2, root]

    responses = _in_threads(lambda n: _otlp(Client(), request(*halves[n])), 2)
    assert [r.status_code for r in responses] == [200, 200]
    for trace_id in chosen:
        run = models.Run.objects.get(run_id=trace_id)
        assert (run.status, run.model_call_count, run.input_tokens) == ("completed", 2, 2300), trace_id
        assert run.session.session_id == f"conv-{trace_id}"
    assert models.Session.objects.count() == len(chosen)
