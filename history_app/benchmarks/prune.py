"""Prune benchmark: ≥ 1 million rows, rows per second, longest transaction, and a
concurrent ingestion client that must see no error.

    python -m history_app.benchmarks.prune [--sessions 40000]

Runs on a throwaway SQLite file by default. BENCH_DATABASE_URL=postgres://… runs it on
PostgreSQL instead: that database is migrated and its history tables are EMPTIED.
Targets (issue #6): ≥ 100,000 rows/s; no transaction longer than 0.5 s; no ingestion error.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path


def setup_django() -> None:
    os.environ["HISTORY_DATA_DIR"] = tempfile.mkdtemp(prefix="prune-bench-")
    os.environ["ALLOWED_HOSTS"] = "testserver"
    if os.environ.get("BENCH_DATABASE_URL"):
        os.environ["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "history_app.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def empty_history_tables() -> None:
    """Delete every stored session and everything it holds, children first."""
    from history_app import models
    from history_app.store import search

    search.clear_index()
    for model in (
        models.ContextEntry,
        models.RunFingerprint,
        models.RunSearch,
        models.ModelCall,
        models.ToolCall,
        models.Iteration,
        models.MemberInteraction,
        models.InjectedContext,
        models.Run,
        models.SpanBatch,
        models.SessionFacet,
        models.DailyStat,
        models.DailyUsage,
        models.DailyLatency,
        models.Session,
    ):
        model.objects.all()._raw_delete(model.objects.db)


def populate(sessions: int) -> int:
    """Old sessions: 2 runs each, every run with 3 iterations, 6 tool calls, 1 member
    interaction, 1 injected context and its search document — 27 rows a session (on
    SQLite the document is in the contentless full-text index, not a row)."""
    from django.db import transaction
    from django.utils import timezone

    from history_app import models
    from history_app.store import search

    empty_history_tables()
    project_id = models.Project.default().pk
    old = timezone.now() - timedelta(days=90)
    chunk = 2000
    total = 0
    for start in range(0, sessions, chunk):
        ids = range(start + 1, min(start + chunk, sessions) + 1)
        with transaction.atomic():
            models.Session.objects.bulk_create(
                [
                    models.Session(
                        pk=i,
                        project_id=project_id,
                        session_id=f"bench-{i}",
                        last_activity_at=old,
                        run_count=2,
                        agent_name="bench",
                    )
                    for i in ids
                ]
            )
            runs = [
                models.Run(
                    pk=i * 2 + r,
                    project_id=project_id,
                    run_id=f"bench-{i}-{r}",
                    session_id=i,
                    content_hash="x",
                    started_at=old,
                    input="q" * 80,
                    output="a" * 200,
                )
                for i in ids
                for r in range(2)
            ]
            models.Run.objects.bulk_create(runs)
            iterations = [
                models.Iteration(
                    pk=run.pk * 3 + k, run_id=run.pk, position=k, index=k + 1, thought="thinking " * 10
                )
                for run in runs
                for k in range(3)
            ]
            models.Iteration.objects.bulk_create(iterations)
            models.ToolCall.objects.bulk_create(
                [
                    models.ToolCall(
                        run_id=it.run_id,
                        iteration_id=it.pk,
                        position=t,
                        tool="search",
                        params_json='{"q": "x"}',
                        result="r" * 100,
                    )
                    for it in iterations
                    for t in range(2)
                ]
            )
            models.MemberInteraction.objects.bulk_create(
                [
                    models.MemberInteraction(run_id=run.pk, position=0, member="m", task="t", response="r")
                    for run in runs
                ]
            )
            models.InjectedContext.objects.bulk_create(
                [models.InjectedContext(run_id=run.pk, position=0, text="ctx " * 20) for run in runs]
            )
            # Indexed with the document a prune rebuilds from these rows (SQLite's index is
            # contentless: it must be given back exactly what it was given).
            search.index_runs(search.documents_from_rows([run.pk for run in runs], models))
        total += len(ids) * 27
    # Explicit keys do not advance PostgreSQL's sequences; move them past the data.
    from django.core.management.color import no_style
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(
            no_style(),
            [
                models.Session,
                models.Run,
                models.Iteration,
                models.ToolCall,
                models.MemberInteraction,
                models.InjectedContext,
            ],
        ):
            cursor.execute(statement)
        if connection.vendor == "postgresql":
            # A live database has planner statistics; a table bulk-loaded a second ago
            # does not until autovacuum gets to it, and would be read as if empty.
            cursor.execute("ANALYZE")
    print(f"populated {total:,} rows", file=sys.stderr)
    return total


class Ingester(threading.Thread):
    """A client posting fresh runs to a real server (its own process, as in production)
    for as long as the prune runs."""

    def __init__(self, url: str, token: str):
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            body = json.dumps(
                {
                    "schema": "agent-history/v1",
                    "run_id": f"live-{n}",
                    "session_id": f"live-{n % 50}",
                    "input": "hello",
                    "output": "hi",
                }
            )
            request = urllib.request.Request(
                self.url, data=body.encode(), method="POST",
                headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            )  # fmt: skip
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    if response.status != 200:
                        self.errors.append(f"{response.status}")
            except urllib.error.HTTPError as exc:
                self.errors.append(f"{exc.code}: {exc.read()[:300]!r}")
            except Exception as exc:  # noqa: BLE001 — every failure is a finding here
                self.errors.append(repr(exc))
            self.latencies.append(time.perf_counter() - started)


def start_server(port: int) -> subprocess.Popen:
    env = {**os.environ, "ALLOWED_HOSTS": "127.0.0.1"}
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=Path(__file__).resolve().parents[2], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=40_000, help="old sessions to create (27 rows each)")
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args()
    setup_django()
    from django.conf import settings

    from history_app.access.auth import register_token
    from history_app.upkeep.retention import prune_sessions

    print(f"database: {settings.DATABASES['default']['ENGINE']}", file=sys.stderr)
    rows = populate(args.sessions)
    _, token = register_token(name="bench")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = start_server(port)
    ingester = Ingester(f"http://127.0.0.1:{port}/api/v1/ingest", token)
    ingester.start()
    time.sleep(0.5)
    batch_times: list[float] = []
    last = [time.perf_counter()]

    def progress(result):
        now = time.perf_counter()
        batch_times.append(now - last[0])
        last[0] = now

    started = time.perf_counter()
    result = prune_sessions(older_than_days=30, batch_size=args.batch_size, progress=progress)
    elapsed = time.perf_counter() - started
    ingester.stop.set()
    ingester.join()
    server.terminate()
    server.wait(10)
    removed = result.total_rows
    lat = sorted(ingester.latencies)
    print(f"{'rows in the database before':40} {rows:>12,}")
    print(f"{'rows removed':40} {removed:>12,}")
    print(f"{'batches of ' + str(args.batch_size) + ' sessions':40} {result.batches:>12,}")
    print(f"{'elapsed':40} {elapsed:>11.2f} s")
    print(f"{'rows per second':40} {removed / elapsed:>12,.0f}   target >= 100,000")
    print(f"{'longest transaction':40} {result.longest_transaction_s * 1000:>9.0f} ms   target <= 500 ms")
    ordered = sorted(batch_times)
    print(
        f"{'median / p95 transaction':40} {statistics.median(ordered) * 1000:>9.0f} / {ordered[int(len(ordered) * 0.95)] * 1000:.0f} ms"
    )
    print(f"{'slowest batches (ms)':40} {[round(t * 1000) for t in ordered[-5:]]}")
    print(f"{'concurrent ingestion requests':40} {len(lat):>12,}")
    print(f"{'  errors':40} {len(ingester.errors):>12,}   target 0")
    if lat:
        print(
            f"{'  latency median / max':40} {statistics.median(lat) * 1000:>6.0f} / {lat[-1] * 1000:.0f} ms"
        )
    for error in ingester.errors[:5]:
        print("  ", error)


if __name__ == "__main__":
    main()
