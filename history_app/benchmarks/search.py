"""Search benchmark: how long the sessions list takes to answer a full-text query, against
a plain ``LIKE '%term%'`` scan of the same documents (the ratio is the index's worth).

    python -m history_app.benchmarks.search [--runs 50000]

Runs on a throwaway SQLite file by default. BENCH_DATABASE_URL=postgres://… runs it on
PostgreSQL instead: that database is migrated and its history tables are EMPTIED.
Each run gets a ~1 KB search document of English words, with a Japanese sentence in one
run of ten; the queries hit a rare word, a common word, a prefix and a CJK word.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from .prune import empty_history_tables, setup_django

WORDS = [
    "agent",
    "tool",
    "search",
    "result",
    "answer",
    "thought",
    "model",
    "prompt",
    "history",
    "token",
    "context",
    "workflow",
    "team",
    "member",
    "session",
    "error",
    "retry",
    "cache",
    "latency",
    "database",
    "index",
    "query",
    "vector",
    "embed",
    "parse",
    "render",
    "format",
    "inject",
]
JAPANESE = ["東京都の人口を調べる", "大阪の天気を確認する", "京都の観光地を探す"]


def populate(runs: int) -> None:
    from django.db import transaction
    from django.utils import timezone

    from history_app import models, search

    empty_history_tables()
    rng = random.Random(7)
    now = timezone.now()
    chunk = 2000
    for start in range(0, runs, chunk):
        ids = range(start + 1, min(start + chunk, runs) + 1)
        with transaction.atomic():
            models.Session.objects.bulk_create(
                [
                    models.Session(pk=i, session_id=f"s-{i}", last_activity_at=now, run_count=1)
                    for i in ids
                    if i % 2
                ]
            )
            models.Run.objects.bulk_create(
                [
                    models.Run(pk=i, run_id=f"r-{i}", session_id=i - (0 if i % 2 else 1), content_hash="x")
                    for i in ids
                ]
            )
            documents = []
            for i in ids:
                words = rng.choices(WORDS, k=140)
                if i % 1000 == 0:
                    words.append("zebrafish")  # rare: one run in a thousand
                if i % 10 == 0:
                    words.append(JAPANESE[i % 3])
                documents.append(models.RunSearch(run_id=i, document=search.index_text(" ".join(words))))
            models.RunSearch.objects.bulk_create(documents)


def timed(fn, repeat: int = 15) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50_000)
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    from history_app import listing, models, paging

    started = time.perf_counter()
    populate(args.runs)
    if connection.vendor == "postgresql":
        # A live database has planner statistics; tables bulk-loaded a second ago do not.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(f"{connection.vendor}: {args.runs:,} runs indexed in {time.perf_counter() - started:.1f} s")

    def indexed(query: str):
        def run():
            filters = listing.SessionFilters(q=query)
            page = listing.sessions_page(limit=50, filters=filters)
            listing.search_hits(page.items, query)
            return page

        return run

    def scan(term: str):
        def run():
            # The same query shape as the indexed one, with a LIKE scan for the match.
            matching = models.RunSearch.objects.filter(document__contains=term).values("run_id")
            sessions = models.Run.objects.filter(pk__in=matching).values("session_id")
            queryset = models.Session.objects.filter(pk__in=sessions)
            return paging.keyset_page(queryset, field="last_activity_at", after=None, limit=50)

        return run

    print(f"{'query':<22}{'sessions':>9}{'index ms':>10}{'scan ms':>10}{'scan/index':>12}")
    for label, query, term in (
        ("rare word", "zebrafish", "zebrafish"),
        ("common word", "workflow", "workflow"),
        ("prefix", "zebra", "zebra"),
        ("two words", "zebrafish agent", "zebrafish"),
        ("Japanese word", "人口", "人口"),
    ):
        found = len(indexed(query)().items)
        fast = timed(indexed(query))
        slow = timed(scan(term), repeat=5)
        print(f"{label:<22}{found:>9}{fast:>10.1f}{slow:>10.1f}{slow / fast:>11.1f}×")


if __name__ == "__main__":
    main()
