"""Ingest throughput over HTTP, beside raw sqlite3 (+ FTS5) on the same rows, in one run.

    python -m history_app.benchmarks.ingest [--runs 2000] [--configs sqlite,pg]
        [--workers 2] [--clients 4] [--batch 100] [--rounds 1]

For each configuration it starts gunicorn (``--workers``) on a fresh SQLite file, or on
PostgreSQL (``BENCH_DATABASE_URL``: its history tables are EMPTIED; without it the
PostgreSQL configuration is skipped), then ``--clients`` client processes post the runs
of the standard shape (``shape.py``: 5 iterations, 10 tool calls, ~11k characters of
text; 10 runs a session; with ``--shape model-calls``, the default since issue #14, also
5 model calls made of the same texts, ~23k characters in all) as JSON arrays of ``--batch`` runs, their bodies encoded before
the clock starts. After a warm-up of two requests a worker (``warm_up``, not counted), it
prints runs/s from the first request to the last answer, checks what
was stored (every run, every tool call), and measures raw ``sqlite3`` on the same rows,
100 runs a transaction, without and with the FTS5 search document (``raw_sqlite.py``), so
the ratio is taken on one machine at one time; with both configurations, PostgreSQL's
runs/s over SQLite's. Targets: within 1.5× of raw sqlite + FTS5; PostgreSQL at least
0.8× SQLite. ``--rounds N`` repeats all of it N times, the configurations interleaved
(raw, SQLite, PostgreSQL; raw, SQLite, ...), and prints each round's ratio and their
median.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from history_app.benchmarks import raw_sqlite, shape
from history_app.benchmarks.hostile import Server, _servers, stop_all

CONFIGS = {"sqlite": "gunicorn-sqlite-url", "pg": "gunicorn-pg"}


def runs_for(prefix: str, count: int, *, model_calls: bool = True) -> list[dict]:
    runs = []
    for i in range(count):
        run = shape.run_dict(i, model_calls=model_calls)
        run["run_id"] = f"{prefix}{run['run_id']}"
        run["session_id"] = f"{prefix}{run['session_id']}"
        runs.append(run)
    return runs


def _client(args: tuple[int, str, list[bytes], object]) -> tuple[float, float, int, int]:
    """Post the bodies in order on one connection; (start, end, runs stored, retries)."""
    port, token, bodies, start_at = args
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    while time.time() < start_at:  # every client starts at the same moment
        time.sleep(0.001)
    started, stored, retries = time.perf_counter(), 0, 0
    for body in bodies:
        while True:
            connection.request("POST", "/api/v1/ingest", body, headers)
            response = connection.getresponse()
            answer = json.loads(response.read() or b"{}")
            if response.status == 503:
                retries += 1
                time.sleep(float(response.getheader("Retry-After") or 1))
                continue
            stored += sum(1 for r in answer.get("results", []) if r.get("status") in ("created", "updated"))
            break
    return started, time.perf_counter(), stored, retries


def warm_up(server: Server, runs: list[dict], workers: int) -> None:
    """Two requests a worker, at once, of ten runs each under other ids, before the clock:
    what a worker does once (its first connection to the database, reading the price
    data, compiling the redaction rules) is not counted, as the raw baseline does not
    count opening its file and creating its tables. Not checked or counted afterwards."""
    bodies = []
    for n in range(2 * workers):
        batch = [dict(run) for run in runs[:10]]
        for run in batch:
            run["run_id"] = f"warm-{n}-{run['run_id']}"
            run["session_id"] = f"warm-{run['session_id']}"
        bodies.append(json.dumps(batch).encode())
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {server.token}"}

    def post(body: bytes) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            connection.request("POST", "/api/v1/ingest", body, headers)
            return connection.getresponse().status
        finally:
            connection.close()

    with ThreadPoolExecutor(len(bodies)) as pool:
        statuses = list(pool.map(post, bodies))
    if any(status != 200 for status in statuses):
        raise SystemExit(f"the warm-up requests answered {statuses}")


def endpoint(name: str, runs: list[dict], *, workers: int, clients: int, batch: int, workdir: Path) -> dict:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Server(CONFIGS[name], port, workdir)
    _servers.append(server)
    server.workers = workers
    server.prepare()
    server.start()
    try:
        prefix = runs[0]["run_id"].split("run-")[0]
        warm_up(server, runs, workers)
        bodies = [json.dumps(runs[k : k + batch]).encode() for k in range(0, len(runs), batch)]
        shares = [bodies[n::clients] for n in range(clients)]
        start_at = time.time() + 1.0
        with multiprocessing.get_context("spawn").Pool(clients) as pool:
            results = pool.map(_client, [(server.port, server.token, share, start_at) for share in shares])
        elapsed = max(end for _, end, _, _ in results) - min(start for start, _, _, _ in results)
        stored = server.runs(prefix)
    finally:
        server.stop()
    return {
        "runs/s": len(runs) / elapsed,
        "stored": len(stored["run_ids"]),
        "tool_calls": stored["tool_calls"],
        "model_calls": stored["model_calls"],
        "answered": sum(n for _, _, n, _ in results),
        "retries": sum(r for _, _, _, r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--configs", default="sqlite,pg")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--shape", choices=("model-calls", "plain"), default="model-calls")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with_calls = args.shape == "model-calls"
    atexit.register(stop_all)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    if "pg" in names and not os.environ.get("BENCH_DATABASE_URL"):
        print(
            "pg: skipped (set BENCH_DATABASE_URL to a PostgreSQL database whose history tables may be emptied)"
        )
        names.remove("pg")
    workdir = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    plain_runs = [shape.run_dict(i, model_calls=with_calls) for i in range(args.runs)]
    print(
        f"{args.runs} runs of the standard shape{' with 5 model calls' if with_calls else ''} "
        f"({shape.text_chars(plain_runs[0])} characters of text), "
        f"arrays of {args.batch}, {args.clients} clients, gunicorn -w {args.workers}, "
        f"{os.cpu_count()} cores"
    )
    ratios = []
    for round_number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"round {round_number} of {args.rounds}")
        rates = measure_round(names, plain_runs, args, with_calls, workdir, round_number)
        if {"sqlite", "pg"} <= rates.keys():
            ratios.append(rates["pg"] / rates["sqlite"])
            print(f"  PostgreSQL / SQLite = {ratios[-1]:.2f}x (target: at least 0.8x)")
    if len(ratios) > 1:
        print(
            f"PostgreSQL / SQLite over {len(ratios)} rounds: "
            f"{', '.join(f'{r:.2f}x' for r in ratios)}; median {statistics.median(ratios):.2f}x "
            "(target: at least 0.8x)"
        )


def measure_round(
    names: list[str],
    plain_runs: list[dict],
    args: argparse.Namespace,
    with_calls: bool,
    workdir: Path,
    number: int,
) -> dict[str, float]:
    """One round: raw sqlite3 without and with FTS5, then each configuration, one after
    the other (a round's figures share the machine's load of that minute); runs/s by
    configuration."""
    raw = raw_sqlite.measure(plain_runs)
    raw_fts = raw_sqlite.measure(plain_runs, fts=True)
    print(f"  raw sqlite3, 100 runs a transaction        {raw:8.0f} runs/s")
    print(f"  raw sqlite3 + FTS5 search document         {raw_fts:8.0f} runs/s")
    rates = {}
    (workdir / f"round-{number}").mkdir()
    for name in names:
        result = endpoint(
            name,
            runs_for(f"bench-{name}-{int(time.time())}-{number}-", args.runs, model_calls=with_calls),
            workers=args.workers,
            clients=args.clients,
            batch=args.batch,
            workdir=workdir / f"round-{number}",
        )
        load = "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
        ok = (
            result["stored"] == args.runs
            and result["tool_calls"] == 10 * args.runs
            and result["model_calls"] == (5 * args.runs if with_calls else 0)
        )
        print(
            f"  our endpoint, {name:10}                    {result['runs/s']:8.0f} runs/s  "
            f"(raw + FTS5 / ours = {raw_fts / result['runs/s']:.1f}x; stored {result['stored']} runs, "
            f"{result['tool_calls']} tool calls, {result['model_calls']} model calls: "
            f"{'all' if ok else 'NOT ALL'}; {result['retries']} retries; {load})"
        )
        rates[name] = result["runs/s"]
    return rates


if __name__ == "__main__":
    main()
