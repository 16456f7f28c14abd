"""Run page benchmark: the size and server time of a run page, its next slice and its
streamed exports, for a run of 100,000 tool calls in one iteration and one of 1,000
iterations × 100 calls.

    python -m history_app.benchmarks.run_page [--repeat 5]

Runs on a throwaway SQLite file by default. BENCH_DATABASE_URL=postgres://… runs it on
PostgreSQL instead: that database is migrated and its history tables are EMPTIED.
Targets (issue #10): a run page ≤ 2 MB of HTML and ≤ 0.5 s of server time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from .prune import empty_history_tables, setup_django

SHAPES = {"r-100k-calls": (1, 100_000), "r-1000-iterations": (1_000, 100)}


def populate() -> None:
    """Both runs, written straight into the tables (ingesting them would take minutes)."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from history_app import models

    empty_history_tables()
    now = timezone.now()
    session = models.Session.objects.create(session_id="bench", last_activity_at=now)
    for run_id, (iterations, calls) in SHAPES.items():
        with transaction.atomic():
            run = models.Run.objects.create(
                run_id=run_id,
                session=session,
                input="benchmark",
                output="done",
                started_at=now,
                ended_at=now + timedelta(seconds=60),
                iteration_count=iterations,
                tool_call_count=iterations * calls,
                content_hash=run_id,
            )
            for position in range(iterations):
                it = models.Iteration.objects.create(
                    run=run, position=position, index=position, thought="thinking", started_at=now
                )
                models.ToolCall.objects.bulk_create(
                    (
                        models.ToolCall(
                            run=run,
                            iteration=it,
                            position=p,
                            tool="web_search",
                            params_json=json.dumps({"query": f"call {p}"}),
                            result=json.dumps({"hits": [p, p + 1]}),
                            started_at=now + timedelta(milliseconds=p),
                            ended_at=now + timedelta(milliseconds=p + 1),
                        )
                        for p in range(calls)
                    ),
                    batch_size=5000,
                )


def measure(client, url: str, repeat: int) -> tuple[int, float]:
    """Bytes of the answer and the median seconds to produce all of it."""
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        size = len(response.getvalue())
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return size, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="requests per page (median time)")
    args = parser.parse_args()
    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    started = time.perf_counter()
    populate()
    print(f"{connection.vendor}: stored both runs in {time.perf_counter() - started:.1f} s")
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client = Client()
    client.force_login(user)
    print(
        f"slices: {settings.HISTORY_RUN_PAGE_ITERATIONS} iterations × "
        f"{settings.HISTORY_RUN_PAGE_TOOL_CALLS} tool calls per page"
    )
    print(f"{'run':<20} {'answer':<34} {'bytes':>12} {'median s':>9}")
    for run_id in SHAPES:
        pages = [
            ("run page", f"/runs/{run_id}/", args.repeat),
            ("next calls (no-JS)", f"/runs/{run_id}/iterations/0/calls/?start=20", args.repeat),
            ("next iterations (no-JS)", f"/runs/{run_id}/iterations/?start=20", args.repeat),
            ("JSON twin (streamed)", f"/api/v1/runs/{run_id}", 1),
            ("export.json (streamed)", f"/runs/{run_id}/export.json", 1),
            ("export.md (streamed)", f"/runs/{run_id}/export.md", 1),
        ]
        for label, url, repeat in pages:
            size, seconds = measure(client, url, repeat)
            print(f"{run_id:<20} {label:<34} {size:>12,} {seconds:>9.3f}")


if __name__ == "__main__":
    main()
