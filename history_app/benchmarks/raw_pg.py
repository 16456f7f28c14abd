"""PostgreSQL's raw baseline: the rows of ``raw_sqlite.py`` loaded by ``COPY`` into plain
tables, with a search document per run in a plain ``tsvector`` column (``to_tsvector``
of the same texts, 'simple' configuration, as ours) under a GIN index; then our storage of
the same runs beside it, table by table: what is kept in the table, what is TOASTed
(stored apart, compressed), what the indexes take, and the GIN index's share.

    BENCH_DATABASE_URL=postgres://… python -m history_app.benchmarks.raw_pg [--runs 2000]

The database's history tables are EMPTIED (ours are filled through
``ingestion.ingest_items``, in this process, 100 runs a call, as a request of 100 runs
stores them), and a schema ``raw_bench`` is dropped and made again. The raw load is timed
(100 runs a transaction, a ``COPY`` a table), beside raw ``sqlite3`` + FTS5 of the same
rows in the same run; the sizes are read after ``VACUUM ANALYZE`` on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

RAW_SCHEMA = """
DROP SCHEMA IF EXISTS raw_bench CASCADE;
CREATE SCHEMA raw_bench;
SET search_path = raw_bench;
CREATE TABLE runs (id bigint PRIMARY KEY, run_id text NOT NULL UNIQUE, session_id text NOT NULL,
  status text, agent_name text, input text, output text, error text, started_at timestamptz,
  ended_at timestamptz);
CREATE TABLE iterations (id bigint PRIMARY KEY, run_id bigint NOT NULL REFERENCES runs(id),
  idx integer, thought text, started_at timestamptz, ended_at timestamptz);
CREATE TABLE tool_calls (id bigint PRIMARY KEY, run_id bigint NOT NULL REFERENCES runs(id),
  iteration_id bigint NOT NULL REFERENCES iterations(id), tool text, params text, result text,
  started_at timestamptz, ended_at timestamptz);
CREATE TABLE model_calls (id bigint PRIMARY KEY, run_id bigint NOT NULL REFERENCES runs(id),
  iteration_id bigint REFERENCES iterations(id), model text, messages text, output text,
  input_tokens integer, output_tokens integer, started_at timestamptz, ended_at timestamptz);
CREATE TABLE docs (run_id bigint PRIMARY KEY REFERENCES runs(id), document text NOT NULL,
  tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, document)) STORED);
CREATE INDEX runs_session ON runs(session_id);
CREATE INDEX it_run ON iterations(run_id);
CREATE INDEX tc_run ON tool_calls(run_id);
CREATE INDEX mc_run ON model_calls(run_id);
CREATE INDEX docs_tsv ON docs USING gin (tsv);
"""

SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid),
  COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0), pg_indexes_size(c.oid),
  COALESCE((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
            JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
            WHERE i.indrelid = c.oid AND am.amname = 'gin'), 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname = %s AND c.relname LIKE %s
ORDER BY pg_total_relation_size(c.oid) DESC
"""


def raw_copy(runs: list[dict], url: str, per_tx: int = 100) -> float:
    """Load ``runs`` into ``raw_bench``; the seconds the load took (the schema excluded)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(RAW_SCHEMA)
        connection.execute("SET search_path = raw_bench")
        run_pk = iteration_pk = tool_pk = call_pk = 0
        started = time.perf_counter()
        for k in range(0, len(runs), per_tx):
            rows: dict[str, list[tuple]] = {"runs": [], "iterations": [], "tool_calls": [], "model_calls": []}
            documents = []
            for r in runs[k : k + per_tx]:
                run_pk += 1
                rows["runs"].append(
                    (run_pk, r["run_id"], r["session_id"], r["status"], r["agent_name"], r["input"])
                    + (r["output"], r["error"], r["started_at"], r["ended_at"])
                )
                parts = [r["agent_name"], r["input"], r["output"] or "", r["error"] or ""]
                for it in r["iterations"]:
                    iteration_pk += 1
                    rows["iterations"].append(
                        (iteration_pk, run_pk, it["index"], it["thought"], it["started_at"], it["ended_at"])
                    )
                    parts.append(it["thought"])
                    for c in it["tool_calls"]:
                        tool_pk += 1
                        params = json.dumps(c["params"], ensure_ascii=False)
                        rows["tool_calls"].append(
                            (tool_pk, run_pk, iteration_pk, c["tool"], params, c["result"])
                            + (c["started_at"], c["ended_at"])
                        )
                        parts += [c["tool"], params, c["result"]]
                    for m in it.get("model_calls", ()):
                        call_pk += 1
                        rows["model_calls"].append(
                            (
                                call_pk,
                                run_pk,
                                iteration_pk,
                                m["model"],
                                json.dumps(m["messages"], ensure_ascii=False),
                            )
                            + (
                                m["output"],
                                m["input_tokens"],
                                m["output_tokens"],
                                m["started_at"],
                                m["ended_at"],
                            )
                        )
                documents.append((run_pk, "\n".join(parts)))
            with connection.transaction(), connection.cursor() as cursor:
                for table, table_rows in rows.items():
                    if table_rows:
                        with cursor.copy(f"COPY {table} FROM STDIN") as copy:
                            for row in table_rows:
                                copy.write_row(row)
                with cursor.copy("COPY docs (run_id, document) FROM STDIN") as copy:
                    for row in documents:
                        copy.write_row(row)
        elapsed = time.perf_counter() - started
        (count,) = connection.execute("SELECT count(*) FROM runs").fetchone()
        assert count == len(runs), count
        connection.execute("VACUUM ANALYZE")
    return elapsed


def sizes(url: str, schema: str, like: str) -> list[tuple[str, int, int, int, int, int]]:
    """(table, total, heap, TOAST, indexes, GIN indexes) in bytes, largest first."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        return [(row[0], *map(int, row[1:])) for row in connection.execute(SIZES, (schema, like)).fetchall()]


COLUMNS = """
SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
  AND t.typname IN ('text', 'varchar', 'jsonb', 'json', 'tsvector')
"""


def columns(url: str, schema: str, table: str) -> list[tuple[str, int, int, int, int]]:
    """The table's text, JSON and tsvector columns: (column, bytes as stored, bytes as text,
    values stored compressed, values) — ``pg_column_size`` is the size after compression,
    in the table or its TOAST table."""
    import psycopg
    from psycopg import sql

    found = []
    with psycopg.connect(url, autocommit=True) as connection:
        for name, kind in connection.execute(COLUMNS, (schema, table)).fetchall():
            column = sql.Identifier(name)
            as_text = sql.SQL("octet_length({}::text)" if kind != "tsvector" else "0").format(column)
            query = sql.SQL(
                "SELECT COALESCE(sum(pg_column_size({c})), 0), COALESCE(sum({t}), 0),"
                " count(*) FILTER (WHERE pg_column_compression({c}) IS NOT NULL), count({c}) FROM {s}.{r}"
            ).format(c=column, t=as_text, s=sql.Identifier(schema), r=sql.Identifier(table))
            stored, text, compressed, values = connection.execute(query).fetchone()
            found.append((name, int(stored), int(text), compressed, values))
    return sorted(found, key=lambda row: -row[1])


def _truncate_history() -> None:
    """Every run table emptied by ``TRUNCATE`` (deleted rows would stay in the files and
    be counted)."""
    from django.db import connection

    from history_app import models

    tables = [
        model._meta.db_table
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
            models.IngestReceipt,
        )
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


def fill_ours(runs: list[dict]) -> float:
    """Our history tables emptied and filled with ``runs`` (100 a call, as a request of 100
    runs stores them); the seconds the calls took."""
    from history_app.benchmarks.prune import setup_django

    setup_django()
    from django.db import connection

    from history_app.intake import ingestion

    _truncate_history()
    ingestion.ingest_items(items=runs[:10])  # what a worker does once, not timed nor kept
    _truncate_history()
    started = time.perf_counter()
    for k in range(0, len(runs), 100):
        results = ingestion.ingest_items(items=runs[k : k + 100])
        assert all(r.status == "created" for r in results), [r.errors for r in results if r.errors][:3]
    elapsed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return elapsed


def measure_loads(plain: list[dict], url: str, runs: int) -> tuple[float, float, float]:
    from history_app.benchmarks import raw_sqlite
    from history_app.benchmarks.ingest import runs_for

    raw_seconds = raw_copy(plain, url)
    raw_sqlite_rate = raw_sqlite.measure(plain, fts=True)
    return raw_seconds, raw_sqlite_rate, fill_ours(runs_for("raw-pg-", runs))


def _mb(n: float) -> str:
    return f"{n / 1e6:8.1f}"


def report(title: str, rows: list[tuple[str, int, int, int, int, int]], runs: int) -> int:
    total = sum(r[1] for r in rows)
    gin = sum(r[5] for r in rows)
    print(
        f"  {title}: {total / runs / 1024:.1f} KB a run ({_mb(total).strip()} MB; GIN {100 * gin / total:.0f}%)"
    )
    print(f"    {'table':34} {'total MB':>8} {'heap':>8} {'TOAST':>8} {'indexes':>8} {'of which GIN':>12}")
    for name, all_, heap, toast, indexes, gin_size in rows:
        if all_ >= 0.005 * total:
            print(f"    {name:34} {_mb(all_)} {_mb(heap)} {_mb(toast)} {_mb(indexes)} {_mb(gin_size):>12}")
    return total


def report_columns(url: str, schema: str, rows: list[tuple[str, int, int, int, int, int]]) -> None:
    """The columns holding most of the bytes: stored (compressed or not) against their text."""
    print(f"    {'column':50} {'stored MB':>9} {'as text':>8} {'compressed values':>18}")
    found = [(table, *column) for table, *_ in rows[:6] for column in columns(url, schema, table)]
    for table, name, stored, text, compressed, values in sorted(found, key=lambda row: -row[2])[:8]:
        shown = _mb(text) if text else "       –"
        print(f"    {table + '.' + name:50} {_mb(stored):>9} {shown} {compressed:>9} of {values}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--sizes-only", action="store_true", help="report what the database holds now")
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL")
    if not url:
        sys.exit("set BENCH_DATABASE_URL to a PostgreSQL database whose history tables may be emptied")
    from history_app.benchmarks import shape

    plain = [shape.run_dict(i, model_calls=True) for i in range(args.runs)]
    load = "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    if args.sizes_only:
        raw_seconds = ours_seconds = 0.0
    else:
        raw_seconds, raw_sqlite_rate, ours_seconds = measure_loads(plain, url, args.runs)
    with_calls = shape.text_chars(plain[0])
    print(
        f"{args.runs} runs of the standard shape with 5 model calls ({with_calls} characters of text), "
        f"{os.cpu_count()} cores, {load}"
    )
    if raw_seconds:
        print(
            f"  raw PostgreSQL, COPY + tsvector + GIN, 100 runs a transaction  {args.runs / raw_seconds:6.0f} runs/s"
        )
        print(
            f"  raw sqlite3 + FTS5 search document, 100 runs a transaction      {raw_sqlite_rate:6.0f} runs/s"
        )
        print(
            f"  ours on PostgreSQL, ingest_items in this process, 100 a call   {args.runs / ours_seconds:6.0f} runs/s"
        )
    raw_rows = sizes(url, "raw_bench", "%")
    raw_total = report("raw PostgreSQL", raw_rows, args.runs)
    report_columns(url, "raw_bench", raw_rows)
    our_rows = sizes(url, "public", "history_%")
    ours_total = report("ours on PostgreSQL", our_rows, args.runs)
    report_columns(url, "public", our_rows)
    print(f"  ours / raw = {ours_total / raw_total:.2f}x (target: at most 1.2x)")


if __name__ == "__main__":
    main()
