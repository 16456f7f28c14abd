"""Every page and JSON twin at scale: median and p95 per page, and the database size per run.

    python -m history_app.benchmarks.pages [--runs 1000000] [--requests 9]
        [--path ~/.cache/agent-history-bench/pages-<runs>.sqlite3]   # SQLite (the default)
    BENCH_DATABASE_URL=postgres://… python -m history_app.benchmarks.pages --runs … --pg

The database is filled once with runs of the standard shape (``shape.py``, with
``contexts=True`` so the inspector has pages to open, and ``model_calls=True``: 5 model
calls a run, priced as ingestion prices them; 10 runs a session, one minute apart,
the last one ending now: a million runs start a million minutes ago) and reused by later
runs of the benchmark (a SQLite file outside the work tree; on PostgreSQL the
``BENCH_DATABASE_URL`` database, whose history tables are EMPTIED when it holds a different
number of runs). The filler writes through the same bulk path and rollups as ingestion
(``bulk.insert_runs``), without HTTP and without redaction (the shape holds no secret):
what is measured here is reading. One database at a time. Then the runs are annotated
once (``annotate``: scores on one run in 10, a label on one in 100, a comment on one in
50), counted as ``annotations.add`` counts them.

Each page is requested ``--requests`` times by a logged-in Django test client (after one
unmeasured request), in process: the time is the server's, template rendering included.
Beside the wall-clock median and p95: the median CPU time of this process per request
(``time.process_time``: Python's work, Django's included, without the database server's
on PostgreSQL) and the queries each request makes. ``--only`` measures only the pages
its comma-separated labels name (``--only "run,api run,session"``).
Goal (issue #38): every page and twin ≤ 50 ms median and ≤ 100 ms p95 at 1,000,000 runs, on
both databases; each page over either is marked. Storage on SQLite: ≤ 1.2× the plain raw
figure of ``raw_sqlite.py`` per run, measured in the same run (PostgreSQL's raw baseline is
``raw_pg.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

# Issue #38: every page and twin at most 50 ms median and 100 ms p95 at a million runs.
GOAL_MEDIAN_MS = 50.0
GOAL_P95_MS = 100.0


def _setup(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "history_app.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _fast_text() -> object:
    """``shape._text`` for the filler: a slice of one long text drawn the same way, at a
    random word boundary (drawing every word anew took half the fill's time)."""
    import random

    from history_app.benchmarks import shape

    pool = shape._text(random.Random(7), 4_000_000)

    def text(rng: random.Random, n: int) -> str:
        start = pool.find(" ", rng.randrange(len(pool) - n - 100)) + 1
        return pool[start : start + n]

    return text


def _batch(args: tuple[int, int, object, int]) -> tuple[list, dict, object, list]:
    """A batch's rows, built in the producer process: (new runs, sessions' rows by id,
    daily counts, (session id, tool) pairs)."""
    from history_app.agent_history.records import Run
    from history_app.benchmarks import shape
    from history_app.intake import bulk, pricing
    from history_app.store import mapper, rollups

    start, end, t0, _project = args
    records = []
    for i in range(start, end):
        record = Run.from_dict(shape.run_dict(i, contexts=True, t0=t0, model_calls=True))
        mapper.make_times_aware(record)
        pricing.price_run(record)
        records.append(record)
    groups: dict[str, list] = {}
    for record in records:
        groups.setdefault(record.session_id, []).append(record)
    new = [bulk.new_run(record, f"fill-{record.run_id}", "native") for record in records]
    # Received when written; the shape's runs all have a start, which is what is counted.
    deltas = rollups.record_contributions(records, records[0].started_at)
    facets = sorted({(r.session_id, *facet) for r in records for facet in rollups.facets_of(r)})
    return new, {sid: _session(sid, group) for sid, group in groups.items()}, deltas, facets


def fill(runs: int, *, batch: int = 2000, workers: int = 0) -> float:
    """Fill the database with ``runs`` runs (resuming a partial fill); runs/s written.

    SQLite has one writer: a second process builds the rows while this one writes them.
    PostgreSQL takes ``workers`` writers (default: one per core), each building and
    writing whole batches on its own connection, its commits not waited for
    (``synchronous_commit = off``: a crash loses the last batches, which a resumed fill
    writes again); the GIN index of the search documents is dropped for the fill and
    built once at its end, as PostgreSQL's guide to populating a database advises
    (keeping it up to date run by run cost more than building it)."""
    import multiprocessing

    from django.db import connection
    from django.utils import timezone

    from history_app import models
    from history_app.benchmarks import shape

    shape._text = _fast_text()
    project_id = models.Project.default().pk  # the pages measured are the default project's
    written = _written_batches(runs, batch)
    # Run i of a fill starts i minutes after its first, and a fill of N runs N minutes
    # before it was made: a smaller fill's runs start later.
    stored = models.Run.objects.values_list("run_id", "started_at").first()
    first = stored and stored[1] - timedelta(minutes=int(stored[0][4:]))
    if written is None or (first and first + timedelta(minutes=runs) > timezone.now()):
        print(f"the database holds runs that are not part of this fill of {runs:,}: emptying it")
        _empty()
        written, first = {}, None
    jobs_at = [
        start for start in range(0, runs, batch) if written.get(start // batch, 0) < min(batch, runs - start)
    ]
    postgres = connection.vendor == "postgresql"
    if not jobs_at:
        if postgres:
            _search_index(build=True)
        return 0.0
    t0 = first or (timezone.now() - timedelta(minutes=runs + 5))
    models.Session.objects.filter(runs__isnull=True).delete()
    jobs = [(start, min(runs, start + batch), t0, project_id) for start in jobs_at]
    total = sum(end - start for start, end, *_ in jobs)
    started = time.perf_counter()
    done = 0

    def report(count: int) -> None:
        nonlocal done
        before, done = done, done + count
        if done * 25 // total != before * 25 // total or done == total:
            rate = done / (time.perf_counter() - started)
            print(f"  filled {runs - total + done:,} runs ({rate:,.0f} runs/s)", flush=True)

    if postgres:
        _search_index(build=False)
    connection.close()  # the processes are forked: they must not share this connection
    context = multiprocessing.get_context("fork")
    if postgres:
        with context.Pool(workers or os.cpu_count() or 2) as pool:
            for count in pool.imap_unordered(_build_and_write, jobs):
                report(count)
        print("  building the search index…", flush=True)
        _search_index(build=True)
    else:
        with context.Pool(1) as pool:
            for rows in pool.imap(_batch, jobs):
                report(_write(*rows, project_id))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if postgres else "ANALYZE")
    return total / (time.perf_counter() - started)


def annotate() -> int:
    """Annotate the filled runs as evaluators and editors would (issue #18), once: a
    numeric ``correct`` and a categorical ``verdict`` score on one run in 10, a ``golden``
    label on one in 100, a comment on one in 50; counted, faceted and summed per session
    as ``annotations.add`` does. How many were written (none when the fill has them)."""
    from django.db import transaction

    from history_app import models
    from history_app.store import rollups

    if models.SessionScore.objects.exists():
        return 0
    if models.Annotation.objects.exists():  # written, not yet counted per session
        _annotated_sessions()
        return models.Annotation.objects.count()
    written = 0
    runs = models.Run.objects.order_by("pk").values_list(
        "pk", "project_id", "run_id", "status", "started_at", "received_at", "agent_name"
    )
    chunk: list = []

    def flush() -> None:
        with transaction.atomic():
            models.Annotation.objects.bulk_create(chunk)
            rollups.count_scores(chunk, 1)

    for pk, project_id, run_id, status, started, received, agent in runs.iterator(chunk_size=20_000):
        n = int(run_id[4:])
        common = {
            "project_id": project_id,
            "run_id": pk,
            "author": "token:bench-evaluator",
            "day": rollups.day_of(started or received),
            "agent": agent,
        }
        if n % 10 == 3:
            value = 0.0 if status == "failed" else (n // 10 % 5) / 4
            verdict = "fail" if status == "failed" else ("pass", "partial")[n // 10 % 2]
            chunk.append(models.Annotation(kind="score", name="correct", value=value, **common))
            chunk.append(models.Annotation(kind="score", name="verdict", text=verdict, **common))
        if n % 100 == 42:
            chunk.append(models.Annotation(kind="label", name="golden", **common))
        if n % 50 == 17:
            chunk.append(
                models.Annotation(kind="comment", text=f"Checked run {run_id}: plausible.", **common)
            )
        if len(chunk) >= 5000:
            flush()
            written, chunk = written + len(chunk), []
    if chunk:
        flush()
        written += len(chunk)
    _annotated_sessions()
    return written


def _annotated_sessions() -> None:
    """The sessions' annotation facets, score sums and counts, from all the annotations
    (grouped once: a count per session as a correlated subquery took minutes at a million
    runs on PostgreSQL)."""
    from django.db import connection, transaction

    from history_app import models
    from history_app.store import rollups

    facets = rollups.ANNOTATION_FACETS_SQL.format(where="1 = 1")
    session, annotation, run = (m._meta.db_table for m in (models.Session, models.Annotation, models.Run))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {models.SessionFacet._meta.db_table} (session_id, facet, value) {facets} "
            "ON CONFLICT (session_id, facet, value) DO NOTHING"
        )
        cursor.execute(
            f"INSERT INTO {models.SessionScore._meta.db_table} (session_id, name, count, total, mean) "
            + rollups.SESSION_SCORES_SQL.format(where="1 = 1")
        )
        cursor.execute(
            f"UPDATE {session} SET annotation_count = counted.n FROM (SELECT r.session_id, COUNT(*) AS n "
            f"FROM {annotation} a JOIN {run} r ON r.id = a.run_id GROUP BY r.session_id) AS counted "
            f"WHERE {session}.id = counted.session_id"
        )


def _written_batches(runs: int, batch: int) -> dict[int, int] | None:
    """How many runs of each batch of this fill are stored (a batch is written in one
    transaction: all or none of it, but for a fill interrupted before batches had a fixed
    size); None when the database holds runs that are not this fill's."""
    from history_app import models

    counts: dict[int, int] = {}
    for run_id in models.Run.objects.values_list("run_id", flat=True).iterator(chunk_size=50_000):
        number = run_id[4:]
        if not (run_id.startswith("run-") and number.isdigit() and int(number) < runs):
            return None
        counts[int(number) // batch] = counts.get(int(number) // batch, 0) + 1
    return counts


def _search_index(*, build: bool) -> None:
    """Drop (``build=False``) or build PostgreSQL's GIN index of the search documents,
    as migration 0004 defines it."""
    import importlib

    from django.db import connection

    search_migration = importlib.import_module("history_app.migrations.0004_run_search")
    with connection.cursor() as cursor:
        if build:
            cursor.execute("SET maintenance_work_mem = '1GB'")
            cursor.execute(search_migration.POSTGRES_FORWARD[1].replace("INDEX", "INDEX IF NOT EXISTS", 1))
        else:
            cursor.execute("DROP INDEX IF EXISTS runsearch_tsv_idx")


def _build_and_write(job: tuple) -> int:
    """One batch built and written by one of PostgreSQL's writer processes."""
    from django.db import connection

    if not getattr(_build_and_write, "ready", False):
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        _build_and_write.ready = True
    return _write(*_batch(job), job[3])


def _write(new: list, sessions: dict, deltas: object, pairs: list, project_id: int) -> int:
    """Write one batch's rows in one transaction, as ingestion does; the runs written."""
    from django.db import transaction
    from django.utils import timezone

    from history_app import models
    from history_app.intake import bulk
    from history_app.store import rollups, search

    with transaction.atomic():
        existing = set(
            models.Run.objects.filter(
                project_id=project_id, run_id__in=[n.run["run_id"] for n in new]
            ).values_list("run_id", flat=True)
        )
        new = [n for n in new if n.run["run_id"] not in existing]
        for session in sessions.values():
            session.project_id = project_id
        models.Session.objects.bulk_create(sessions.values(), ignore_conflicts=True)
        keys = dict(
            models.Session.objects.filter(project_id=project_id, session_id__in=list(sessions)).values_list(
                "session_id", "pk"
            )
        )
        session_of = {n.run["run_id"]: f"sess-{int(n.run['run_id'][4:]) // 10:06d}" for n in new}
        pks = bulk.insert_runs(
            new, [keys[session_of[n.run["run_id"]]] for n in new], timezone.now(), project_id
        )
        # The search documents, as the writer's SearchIndex adds them (insert_runs does not
        # since a1dbb34: a fill without them measured the searches on an empty index).
        search.index_runs((pk, n.document) for n, pk in zip(new, pks, strict=True))
        if not existing:
            rollups.apply(deltas, project_id)
            rollups.add_facets((keys[sid], facet, value) for sid, facet, value in pairs)
    return len(new)


def _session(session_id: str, runs: list):
    from history_app import models

    latest = max(runs, key=lambda r: r.started_at)
    return models.Session(
        session_id=session_id,
        user_id=latest.user_id,
        framework=latest.framework,
        agent_name=latest.agent_name,
        run_count=len(runs),
        failed_count=sum(r.status == "failed" for r in runs),
        last_status=latest.status,
        first_started_at=min(r.started_at for r in runs),
        last_activity_at=max(r.ended_at or r.started_at for r in runs),
        input_tokens=sum(c.input_tokens or 0 for r in runs for c in r.all_model_calls()),
        output_tokens=sum(c.output_tokens or 0 for r in runs for c in r.all_model_calls()),
        cost=sum(c.cost or 0 for r in runs for c in r.all_model_calls()),
        timed_runs=sum(r.duration_ms is not None for r in runs),
        duration_total_ms=sum(r.duration_ms or 0 for r in runs),
    )


def _empty() -> None:
    from history_app.benchmarks.prune import empty_history_tables

    empty_history_tables()


def pages(runs: int) -> list[tuple[str, str]]:
    """(label, URL) of every page and JSON twin measured."""
    from history_app.benchmarks import shape

    last = runs - 1
    session = f"sess-{last // 10:06d}"
    inspected = max(i for i in range(min(runs, 1000)) if i % 500 == 499 and i % 10 != 0)
    middle = f"run-{runs // 2 + 3:07d}"  # scored (annotate: one run in 10)
    lists = [
        ("sessions", ""),
        ("sort oldest", "sort=oldest"),
        ("sort runs", "sort=runs"),
        ("sort failures", "sort=failures"),
        ("status failed", "status=failed"),
        ("status running (none)", "status=running"),
        (f"tool {shape.TOOLS[3]}", f"tool={shape.TOOLS[3]}"),
        ("tool unknown (none)", "tool=no_such_tool"),
        (f"agent {shape.AGENTS[0]}", f"agent={shape.AGENTS[0]}"),
        ("errors", "errors=1"),
        ("framework autourgos", "framework=autourgos"),
        ("framework unknown (none)", "framework=native"),
        ("dates", "from=2026-01-01&to=2026-12-31"),
        ("search rare word", "q=zebrafish"),
        ("search common word", "q=workflow"),
        ("search + tool", f"q=workflow&tool={shape.TOOLS[3]}"),
        ("sort annotations", "sort=annotations"),
        ("annotated correct (1 run in 10)", "annotated=correct"),
        ("annotated golden (1 in 100)", "annotated=golden"),
        ("annotated unknown (none)", "annotated=no_such_score"),
        ("sort lowest correct", "annotated=correct&sort=score_low"),
        ("sort highest correct", "annotated=correct&sort=score_high"),
    ]
    found = []
    for label, query in lists:
        found.append((f"/ {label}", f"/p/default/?{query}" if query else "/p/default/"))
        found.append((f"api sessions {label}", f"/api/v1/sessions?{query}"))
    found += [
        ("session", f"/p/default/sessions/{session}/"),
        ("api session", f"/api/v1/sessions/{session}"),
        ("run", f"/p/default/runs/{middle}/"),
        ("run: model calls slice", f"/p/default/runs/{middle}/model-calls/?start=0"),
        ("model call", f"/p/default/runs/{middle}/model-calls/3/"),
        ("api run", f"/api/v1/runs/{middle}"),
        ("api run (logged in)", f"/api/v1/runs/{middle}?_as=session"),
        ("inspector", f"/p/default/runs/run-{inspected:07d}/context/1/"),
        ("context as sent (in place)", f"/p/default/runs/run-{inspected:07d}/context/1/text/"),
        ("api inspector", f"/api/v1/runs/run-{inspected:07d}/contexts/1"),
        ("api session timeline", f"/api/v1/sessions/{session}/timeline"),
        ("stats 30 days", "/p/default/stats/"),
        ("stats 7 days", "/p/default/stats/?days=7"),
        ("api stats 30 days", "/api/v1/stats?days=30"),
        ("compare two runs", f"/p/default/compare/?a={middle}&b=run-{runs // 2 + 4:07d}"),
        ("api compare", f"/api/v1/compare?a={middle}&b=run-{runs // 2 + 4:07d}"),
        ("api run annotations", f"/api/v1/runs/{middle}/annotations"),
        ("receipts", "/p/default/receipts/"),
        ("api receipts", "/api/v1/receipts"),
    ]
    return found


def measure(
    runs: int, requests: int, only: tuple[str, ...] = ()
) -> list[tuple[str, float, float, int, float, int]]:
    """(label, median ms, p95 ms, bytes, median CPU ms, queries) of each page measured."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from history_app import models

    # A viewer of the project, as a member of a team would be (the pages check the role).
    user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_staff": True})
    project = models.Project.default()
    models.Membership.objects.get_or_create(project=project, user=user)
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    token = "bench-" + "x" * 40
    models.IngestToken.objects.get_or_create(
        token_hash=models.IngestToken.hash(token),
        defaults={"name": "bench", "prefix": token[:8], "project": project, "scopes": ["read"]},
    )
    results = []
    for label, url in pages(runs):
        if only and label not in only:
            continue
        # A twin is read with the token, but "(logged in)": as the logged-in user reads it.
        logged_in = url.endswith("?_as=session")
        url = url.removesuffix("?_as=session")
        bearer = url.startswith("/api/") and not logged_in
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if bearer else {}
        first = client.get(url, **headers)
        if first.status_code != 200:
            raise SystemExit(f"{url}: {first.status_code}")
        size = len(first.getvalue())
        times, cpu = [], []
        for _ in range(requests):
            started, started_cpu = time.perf_counter(), time.process_time()
            client.get(url, **headers).getvalue()  # a streamed answer read to its end
            cpu.append((time.process_time() - started_cpu) * 1000)
            times.append((time.perf_counter() - started) * 1000)
        with CaptureQueriesContext(connection) as queries:
            client.get(url, **headers).getvalue()
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        results.append((label, statistics.median(times), p95, size, statistics.median(cpu), len(queries)))
    return results


def size_per_run(runs: int) -> float:
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return cursor.fetchone()[0] / runs
    path = Path(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return total / runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=9)
    parser.add_argument("--path", default="")
    parser.add_argument("--pg", action="store_true", help="use BENCH_DATABASE_URL (PostgreSQL)")
    parser.add_argument("--workers", type=int, default=0, help="PostgreSQL's writers (default: one per core)")
    parser.add_argument("--only", default="", help="measure only these pages (labels, comma-separated)")
    args = parser.parse_args()
    if args.pg:
        url = os.environ.get("BENCH_DATABASE_URL")
        if not url:
            raise SystemExit("--pg needs BENCH_DATABASE_URL (a database whose history tables may be emptied)")
    else:
        path = Path(
            args.path or Path.home() / ".cache" / "agent-history-bench" / f"pages-{args.runs}.sqlite3"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    _setup(url)
    from django.db import connection

    from history_app.benchmarks import raw_sqlite, shape

    print(f"{args.runs:,} runs of the standard shape on {connection.vendor}, {os.cpu_count()} cores")
    rate = fill(args.runs, workers=args.workers)
    print(f"  fill: {'reused' if not rate else f'{rate:,.0f} runs/s'}")
    started = time.perf_counter()
    if annotated := annotate():
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"  annotated: {annotated:,} annotations in {time.perf_counter() - started:.0f} s", flush=True)
    sample = [shape.run_dict(i, model_calls=True) for i in range(2000)]
    raw_sqlite.measure(sample)
    raw = raw_sqlite.measure.last_size / len(sample)
    ours = size_per_run(args.runs)
    print(
        f"  size per run: {ours / 1024:.1f} KB"
        + (
            f" (raw sqlite3 {raw / 1024:.1f} KB: {ours / raw:.2f}x; goal: at most 1.2x)"
            if connection.vendor == "sqlite"
            else " (PostgreSQL's raw baseline: raw_pg.py)"
        )
    )
    print(f"  {'page':38} {'median ms':>10} {'p95 ms':>8} {'bytes':>8} {'CPU ms':>7} {'queries':>7}")
    worst, worst_p95, over = 0.0, 0.0, []
    only = tuple(label for label in args.only.split(",") if label)
    for label, median, p95, size, cpu, queries in measure(args.runs, args.requests, only):
        worst, worst_p95 = max(worst, median), max(worst_p95, p95)
        missed = median > GOAL_MEDIAN_MS or p95 > GOAL_P95_MS
        if missed:
            over.append(label)
        print(
            f"  {label:38} {median:10.1f} {p95:8.1f} {size:8d} {cpu:7.1f} {queries:7d}"
            + ("  over the goal" if missed else ""),
            flush=True,
        )
    print(
        f"  slowest median: {worst:.1f} ms (goal ≤ {GOAL_MEDIAN_MS:.0f} ms); slowest p95: {worst_p95:.1f} ms"
        f" (goal ≤ {GOAL_P95_MS:.0f} ms); {len(over)} page(s) over: {', '.join(over) or 'none'}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
