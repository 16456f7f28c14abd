"""Raw sqlite3 baseline (a copy of ``../shared/bench/raw_sqlite.py``, so a fresh clone has it): the same run shape, 1 run row + 5 iteration rows + 10 tool-call rows
(text columns), and, for runs that carry them, a row per model call (its messages as JSON), 100 runs per transaction, WAL, synchronous=NORMAL, into a fresh file.
Input: already-parsed run dicts (the same ones the HTTP client sends); params are
json.dumps'ed as the service stores them. Returns runs/s.

    python -m history_app.benchmarks.raw_sqlite [N] [ROUNDS]
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import time

SCHEMA = """
CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
  status TEXT, agent_name TEXT, input TEXT, output TEXT, error TEXT, started_at TEXT, ended_at TEXT);
CREATE TABLE iterations (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
  idx INTEGER, thought TEXT, started_at TEXT, ended_at TEXT);
CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
  iteration_id INTEGER NOT NULL REFERENCES iterations(id), tool TEXT, params TEXT, result TEXT,
  started_at TEXT, ended_at TEXT);
CREATE TABLE model_calls (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
  iteration_id INTEGER REFERENCES iterations(id), model TEXT, messages TEXT, output TEXT,
  input_tokens INTEGER, output_tokens INTEGER, started_at TEXT, ended_at TEXT);
CREATE INDEX runs_session ON runs(session_id);
CREATE INDEX mc_run ON model_calls(run_id);
CREATE INDEX it_run ON iterations(run_id);
CREATE INDEX tc_run ON tool_calls(run_id);
"""


FTS_SCHEMA = """
CREATE TABLE docs (run_id INTEGER PRIMARY KEY REFERENCES runs(id), document TEXT NOT NULL);
CREATE VIRTUAL TABLE docs_fts USING fts5(document, content='docs', content_rowid='run_id',
  tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN
  INSERT INTO docs_fts(rowid, document) VALUES (new.run_id, new.document); END;
"""


def raw_insert(runs: list[dict], path: str, per_tx: int = 100, fts: bool = False) -> float:
    """Insert ``runs``; returns elapsed seconds (connection open + schema excluded).
    With ``fts``: also a search document per run (the same texts joined) in a table indexed
    by an external-content FTS5 table through a trigger, as the service's SQLite schema does."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    if fts:
        db.executescript(FTS_SCHEMA)
    cur = db.cursor()
    started = time.perf_counter()
    for k in range(0, len(runs), per_tx):
        cur.execute("BEGIN")
        for r in runs[k : k + per_tx]:
            cur.execute(
                "INSERT INTO runs (run_id, session_id, status, agent_name, input, output, error, started_at,"
                " ended_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    r["run_id"],
                    r["session_id"],
                    r["status"],
                    r["agent_name"],
                    r["input"],
                    r["output"],
                    r["error"],
                    r["started_at"],
                    r["ended_at"],
                ),
            )
            run_pk = cur.lastrowid
            for it in r["iterations"]:
                cur.execute(
                    "INSERT INTO iterations (run_id, idx, thought, started_at, ended_at) VALUES (?,?,?,?,?)",
                    (run_pk, it["index"], it["thought"], it["started_at"], it["ended_at"]),
                )
                it_pk = cur.lastrowid
                for c in it["tool_calls"]:
                    cur.execute(
                        "INSERT INTO tool_calls (run_id, iteration_id, tool, params, result, started_at,"
                        " ended_at) VALUES (?,?,?,?,?,?,?)",
                        (
                            run_pk,
                            it_pk,
                            c["tool"],
                            json.dumps(c["params"], ensure_ascii=False),
                            c["result"],
                            c["started_at"],
                            c["ended_at"],
                        ),
                    )
                for m in it.get("model_calls", ()):  # issue #14's shape: the same rows as ours
                    cur.execute(
                        "INSERT INTO model_calls (run_id, iteration_id, model, messages, output, input_tokens,"
                        " output_tokens, started_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?)",
                        (
                            run_pk,
                            it_pk,
                            m["model"],
                            json.dumps(m["messages"], ensure_ascii=False),
                            m["output"],
                            m["input_tokens"],
                            m["output_tokens"],
                            m["started_at"],
                            m["ended_at"],
                        ),
                    )
            if fts:
                parts = [r["agent_name"], r["input"], r["output"] or "", r["error"] or ""]
                for it in r["iterations"]:
                    parts.append(it["thought"])
                    for c in it["tool_calls"]:
                        parts += [c["tool"], json.dumps(c["params"], ensure_ascii=False), c["result"]]
                cur.execute("INSERT INTO docs (run_id, document) VALUES (?, ?)", (run_pk, "\n".join(parts)))
        cur.execute("COMMIT")
    elapsed = time.perf_counter() - started
    (n,) = db.execute("SELECT count(*) FROM runs").fetchone()
    (t,) = db.execute("SELECT count(*) FROM tool_calls").fetchone()
    db.close()
    assert n == len(runs) and t == 10 * len(runs), (n, t)
    return elapsed


def measure(runs: list[dict], fts: bool = False, per_tx: int = 100) -> float:
    """runs/s into a fresh file in a temporary folder."""
    folder = tempfile.mkdtemp(prefix="raw-", dir=None)
    path = os.path.join(folder, "raw.sqlite3")
    elapsed = raw_insert(runs, path, fts=fts, per_tx=per_tx)
    size = os.path.getsize(path) + (os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    os.rmdir(folder)
    measure.last_size = size
    return len(runs) / elapsed


if __name__ == "__main__":
    import statistics

    from history_app.benchmarks import shape

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    runs = [shape.run_dict(i) for i in range(n)]
    plain, fts, ratio, plain1, fts1 = [], [], [], [], []
    for _ in range(rounds):  # interleaved
        plain.append(measure(runs))
        size_plain = measure.last_size
        fts.append(measure(runs, fts=True))
        size_fts = measure.last_size
        ratio.append(plain[-1] / fts[-1])
        plain1.append(measure(runs, per_tx=1))
        fts1.append(measure(runs, fts=True, per_tx=1))

    def f(xs):
        return f"{statistics.median(xs):.0f} [{min(xs):.0f}-{max(xs):.0f}]"

    print(f"raw sqlite, {n} runs x {rounds} rounds: {f(plain)} runs/s, {size_plain / n:.0f} bytes/run")
    print(f"raw sqlite + FTS5 search document: {f(fts)} runs/s, {size_fts / n:.0f} bytes/run")
    print(f"ratio plain/fts: {statistics.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]")
    print(f"1 run per transaction (the service's shape): raw {f(plain1)} runs/s; raw + FTS5 {f(fts1)} runs/s")
