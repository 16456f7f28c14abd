"""Run page benchmark: the size and server time of a run page, its next slice and its
streamed exports, for a run of 100,000 tool calls in one iteration, one of 1,000
iterations × 100 calls and one of 20,000 injected contexts (1,000 sent at each of its 20
steps, 2,000 characters each).

    python -m history_app.benchmarks.run_page [--repeat 5] [--runs r-20k-contexts,…]

Runs on a throwaway SQLite file by default. BENCH_DATABASE_URL=postgres://… runs it on
PostgreSQL instead: that database is migrated and its history tables are EMPTIED.
Targets (issue #10): a run page ≤ 2 MB of HTML and ≤ 0.5 s of server time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from history_app.benchmarks.prune import empty_history_tables, setup_django

SHAPES = {"r-100k-calls": (1, 100_000), "r-1000-iterations": (1_000, 100)}
# Run id -> (steps: iterations named step-0, step-1…, of one call each; injected contexts,
# sent in turn at each step).
CONTEXT_SHAPES = {"r-20k-contexts": (20, 20_000)}
CONTEXT_CHARS = 2_000


def populate() -> None:
    """The runs, written straight into the tables (ingesting them would take minutes)."""
    from datetime import timedelta

    from django.db import connection, transaction
    from django.utils import timezone

    from history_app import models

    empty_history_tables()
    now = timezone.now()
    project = models.Project.default()
    session = models.Session.objects.create(project=project, session_id="bench", last_activity_at=now)
    for run_id, (iterations, calls) in SHAPES.items():
        with transaction.atomic():
            run = models.Run.objects.create(
                run_id=run_id,
                project=project,
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
    for run_id, (steps, contexts) in CONTEXT_SHAPES.items():
        with transaction.atomic():
            run = models.Run.objects.create(
                run_id=run_id,
                project=project,
                session=session,
                kind="workflow",
                input="benchmark",
                output="done",
                started_at=now,
                ended_at=now + timedelta(seconds=60),
                iteration_count=steps,
                tool_call_count=steps,
                content_hash=run_id,
            )
            for position in range(steps):
                it = models.Iteration.objects.create(
                    run=run, position=position, index=position, name=f"step-{position}", started_at=now
                )
                models.ToolCall.objects.create(run=run, iteration=it, position=0, tool="web_search")
            models.InjectedContext.objects.bulk_create(
                (
                    models.InjectedContext(
                        run=run,
                        position=p,
                        step=f"step-{p % steps}",
                        kind="workflow_history",
                        text=f"[run-{p}] " + "history " * (CONTEXT_CHARS // 8),
                        source_run_ids=[f"run-{p}"],
                    )
                    for p in range(contexts)
                ),
                batch_size=2000,
            )
    if connection.vendor == "postgresql":
        # A live database has planner statistics; tables bulk-loaded a second ago do not.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def measure(client, url: str, repeat: int, **headers: str) -> tuple[int, float]:
    """Bytes of the answer and the median seconds to produce all of it."""
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, **headers)
        size = len(response.getvalue())
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return size, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="requests per page (median time)")
    every = [*SHAPES, *CONTEXT_SHAPES]
    parser.add_argument("--runs", default=",".join(every), help=f"which runs, of {', '.join(every)}")
    args = parser.parse_args()
    chosen = set(args.runs.split(","))
    if chosen - set(every):
        parser.error(f"--runs: no run {', '.join(sorted(chosen - set(every)))}")
    for shapes in (SHAPES, CONTEXT_SHAPES):
        for run_id in set(shapes) - chosen:
            del shapes[run_id]
    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    started = time.perf_counter()
    populate()
    print(f"{connection.vendor}: stored the runs in {time.perf_counter() - started:.1f} s")
    from history_app import models

    user, _ = get_user_model().objects.get_or_create(username="bench")
    models.Membership.objects.update_or_create(
        project=models.Project.default(), user=user, defaults={"role": models.Membership.EDITOR}
    )
    client = Client()
    client.force_login(user)
    print(
        f"slices: {settings.HISTORY_RUN_PAGE_ITERATIONS} iterations × "
        f"{settings.HISTORY_RUN_PAGE_TOOL_CALLS} tool calls per page, "
        f"{settings.HISTORY_RUN_PAGE_CONTEXTS} injected contexts"
    )
    print(f"{'run':<20} {'answer':<34} {'bytes':>12} {'median s':>9}")
    for run_id in SHAPES:
        pages = [
            ("run page", f"/p/default/runs/{run_id}/", args.repeat),
            ("next calls (no-JS)", f"/p/default/runs/{run_id}/iterations/0/calls/?start=20", args.repeat),
            ("next iterations (no-JS)", f"/p/default/runs/{run_id}/iterations/?start=20", args.repeat),
            ("JSON twin (streamed)", f"/api/v1/runs/{run_id}", 1),
            ("export.json (streamed)", f"/p/default/runs/{run_id}/export.json", 1),
            ("export.md (streamed)", f"/p/default/runs/{run_id}/export.md", 1),
        ]
        for label, url, repeat in pages:
            size, seconds = measure(client, url, repeat)
            print(f"{run_id:<20} {label:<34} {size:>12,} {seconds:>9.3f}")
    for run_id in CONTEXT_SHAPES:
        pages = [
            ("run page", f"/p/default/runs/{run_id}/", args.repeat),
            ("next contexts (no-JS)", f"/p/default/runs/{run_id}/contexts/?start=20", args.repeat),
            ("next contexts (htmx)", f"/p/default/runs/{run_id}/contexts/?start=20", args.repeat),
            ("last contexts (no-JS)", f"/p/default/runs/{run_id}/contexts/?start=19990", args.repeat),
            ("session page", "/p/default/sessions/bench/", args.repeat),
            ("export.json (streamed)", f"/p/default/runs/{run_id}/export.json", 1),
        ]
        for label, url, repeat in pages:
            headers = {"HTTP_HX_REQUEST": "true"} if "htmx" in label else {}
            size, seconds = measure(client, url, repeat, **headers)
            print(f"{run_id:<20} {label:<34} {size:>12,} {seconds:>9.3f}")


if __name__ == "__main__":
    main()
