"""One OTLP request of many single-span traces: its time, and the locks it holds.

    DATABASE_URL=postgres://…/scratch ALLOWED_HOSTS=testserver \\
        python -m history_app.benchmarks.wide_otlp [--traces 1000,8000]

Migrates the database named by ``DATABASE_URL`` (or the default SQLite file) and WRITES
into it: use a scratch database. For each count, one OTLP/JSON request of that many
traces of one span each (each a new run in a new session) goes through Django's test
client; printed: the status, the wall time, the app process's CPU time, the time per
trace, the runs stored, and on PostgreSQL the advisory locks and all locks its
transaction holds just before it commits (``pg_locks``). The locks must not grow with the
traces (``history_app.store.locks``); the time grows linearly.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="1000,8000", help="comma-separated counts")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "history_app.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from history_app import models
    from history_app.access.auth import register_token
    from history_app.intake import spans as span_store

    call_command("migrate", verbosity=0)
    token = "aht_benchmark-wide-otlp-0123456789"
    register_token(name="wide-otlp benchmark", token=token, scopes=["ingest"])
    held: dict[str, int] = {}
    write = span_store._write

    def counting_write(*args, **kwargs):
        out = write(*args, **kwargs)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT locktype, count(*) FROM pg_locks WHERE pid = pg_backend_pid() GROUP BY 1"
                )
                held.update(cursor.fetchall())
        return out

    span_store._write = counting_write
    start_id = int(time.time() * 1000) << 20  # new trace ids on every run of the benchmark
    print(f"database: {connection.vendor}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for count in (int(n) for n in args.traces.split(",")):
        spans = [
            {
                "traceId": f"{start_id + n:032x}",
                "spanId": f"{n + 1:016x}",
                "name": "agent run",
                "startTimeUnixNano": "1790000000000000000",
                "endTimeUnixNano": "1790000001000000000",
            }
            for n in range(count)
        ]
        start_id += count
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
        before = models.Run.objects.count()
        held.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        response = Client().post(
            "/v1/traces", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        stored = models.Run.objects.count() - before
        locks = f"advisory locks {held.get('advisory', 0)}, all locks {sum(held.values())}" if held else ""
        print(
            f"{count} traces: {response.status_code}, {wall:.1f} s ({wall / count * 1000:.1f} ms a trace), "
            f"app CPU {cpu:.1f} s, {stored} runs stored; {locks}"
        )


if __name__ == "__main__":
    main()
