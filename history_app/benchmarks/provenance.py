"""Provenance benchmark: does ingesting a run cost the same in a session of 1,000 runs as in
a new one? Each run quotes the last 3 runs of its session in a workflow history block (our
renderer, in an injected context of the run) that the server links to its sources.

    python -m history_app.benchmarks.provenance [--runs 1000] [--around 9] [--repeat 3]

Two orders: "sources first" (each run after the runs it quotes) and "late sources" (the
runs sent newest first, so every run arrives after the three runs that quote it and
links their entries then). Each run goes through ``ingestion.ingest_items`` on its own,
timed; the figure at the 1st and at the Nth run is the median of the ``--around`` runs
there, best of ``--repeat`` passes. Prints figures only, asserts no time. Target: the Nth
run no slower than 1.5 × the 1st.

Runs on a throwaway SQLite file by default. BENCH_DATABASE_URL=postgres://… runs it on
PostgreSQL instead: that database is migrated and its history tables are EMPTIED.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from history_app.benchmarks.prune import empty_history_tables, setup_django
from history_app.benchmarks.shape import _text

WINDOW = 3


def session_runs(session: str, n: int) -> list[dict]:
    """Runs 0…n-1 of one workflow session; run i quotes runs i-3…i-1 (fewer at the start)."""
    from history_app.agent_history import render_workflow_history

    rng = random.Random(session)
    contents = [{"input": _text(rng, 300), "output": _text(rng, 800)} for _ in range(n)]
    runs = []
    for i in range(n):
        quoted = contents[max(0, i - WINDOW) : i]
        runs.append(
            {
                "schema": "agent-history/v1",
                "run_id": f"{session}-{i}",
                "session_id": session,
                "kind": "workflow",
                "agent_name": "bench-workflow",
                "input": contents[i]["input"],
                "output": contents[i]["output"],
                "started_at": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "injected_contexts": [
                    {"kind": "workflow_history", "target": "system", "text": render_workflow_history(quoted)}
                ]
                if quoted
                else [],
            }
        )
    return runs


def ingest_timed(runs: list[dict]) -> tuple[list[float], list[float]]:
    """Each run's ingest time, and the part of it spent linking (``provenance.link_run``;
    zeros with a version without it)."""
    from history_app.intake import ingestion

    try:
        from history_app.store import provenance
    except ImportError:  # the version before fingerprints, for comparison
        provenance = None
    linking = [0.0]
    if provenance is not None:
        link_run = provenance.link_run

        def timed_link_run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return link_run(*args, **kwargs)
            finally:
                linking[0] += time.perf_counter() - started

        provenance.link_run = timed_link_run
    times, links = [], []
    try:
        for run in runs:
            linking[0] = 0.0
            started = time.perf_counter()
            (result,) = ingestion.ingest_items(items=[run])
            times.append(time.perf_counter() - started)
            links.append(linking[0])
            assert result.status == "created", result.errors
    finally:
        if provenance is not None:
            provenance.link_run = link_run
    return times, links


def check_links(session: str, n: int) -> int:
    """How many contexts are linked to exactly their three (or fewer) sources."""
    from history_app import models

    good = 0
    for context in models.InjectedContext.objects.filter(run__session__session_id=session).select_related(
        "run"
    ):
        i = int(context.run.run_id.rsplit("-", 1)[1])
        good += context.source_run_ids == [f"{session}-{j}" for j in range(max(0, i - WINDOW), i)]
    return good


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--around", type=int, default=9, help="runs whose median makes each figure")
    parser.add_argument("--repeat", type=int, default=3, help="passes; the best median is kept")
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    n, k = args.runs, args.around
    print(f"database: {connection.vendor}; {n} runs per session, each quoting the last {WINDOW}")
    print(
        f"{'order':<16} {'1st runs (ms)':>14} {f'{n}th runs (ms)':>15} {'ratio':>7} "
        f"{'linking: 1st / last (ms)':>25} {'linked':>12}"
    )
    for order in ("sources first", "late sources"):
        firsts, lasts, link_firsts, link_lasts = [], [], [], []
        for attempt in range(args.repeat):
            empty_history_tables()
            session = f"bench-{order.split()[0]}-{attempt}"
            runs = session_runs(session, n)
            if order == "late sources":
                runs.reverse()
            # Warm up the connection and the code paths outside the session measured.
            ingest_timed(session_runs(f"warm-{session}", 4))
            times, links = ingest_timed(runs)
            firsts.append(statistics.median(times[:k]) * 1000)
            lasts.append(statistics.median(times[-k:]) * 1000)
            link_firsts.append(statistics.median(links[:k]) * 1000)
            link_lasts.append(statistics.median(links[-k:]) * 1000)
            linked = check_links(session, n)
        first, last = min(firsts), min(lasts)
        linking = f"{min(link_firsts):.2f} / {min(link_lasts):.2f}"
        print(
            f"{order:<16} {first:>14.2f} {last:>15.2f} {last / first:>6.2f}× {linking:>25} "
            f"{linked:>5}/{n - 1:<6}"
        )


if __name__ == "__main__":
    main()
