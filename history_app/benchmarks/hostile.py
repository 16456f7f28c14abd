"""Hostile-load benchmark: real servers, concurrent clients, races, SIGKILL and poison input.

    python -m history_app.benchmarks.hostile [--configs sqlite,pg] [--runs-per-client 250]
    python -m history_app.benchmarks.hostile --attacks [--only NAME,…] [--database-url URL]

(``--attacks``: what each small hostile request of the attack families costs the server,
in CPU seconds and memory growth, in a process of its own; see ``attacks.py``.)

For each configuration it starts a real server on 127.0.0.1 — ``manage.py quickstart``
(runserver, one process with threads) or ``gunicorn history_app.wsgi -w 4`` — on SQLite
(the default path, and once named through ``DATABASE_URL=sqlite:///…``) or on PostgreSQL
(``BENCH_DATABASE_URL``: that database is migrated, its history tables are EMPTIED and its
``admin`` user's password is reset; without it the PostgreSQL configurations are
skipped), and prints:

1. a burst of 8 clients × 250 runs in batches of 25 (JSON arrays and NDJSON): what each
   run's result said, partial (207) and 5xx answers, latency per request, and how many
   of the runs sent are in the database afterwards;
2. the same burst resent (every run should be a duplicate);
3. many clients posting one run_id with different content at once (one row, no 5xx);
4. two clients moving runs between two sessions in opposite directions at once;
5. SIGKILL of the server's process group mid-burst, a restart, and the burst resent
   (each run stored exactly once);
6. the latency of ordinary ingests while four poison requests run beside them, then
   while four first views of the poison runs do (target: p99 under 1 s, no failures).

A 503 answer is retried after its ``Retry-After`` (as ``HttpSink`` does) and counted.
The script reports what happens rather than asserting: every figure is printed.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import concurrent.futures
import contextlib
import http.client
import http.cookiejar
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from history_app.benchmarks.shape import run_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {
    # name: (server, database)
    "quickstart-sqlite": ("quickstart", "sqlite"),
    "quickstart-sqlite-url": ("quickstart", "sqlite-url"),
    "gunicorn-sqlite": ("gunicorn", "sqlite"),
    "gunicorn-sqlite-url": ("gunicorn", "sqlite-url"),
    "gunicorn-pg": ("gunicorn", "pg"),
}
GROUPS = {
    "all": list(CONFIGS),
    "sqlite": [name for name, (_, db) in CONFIGS.items() if db != "pg"],
    "pg": [name for name, (_, db) in CONFIGS.items() if db == "pg"],
    "quickstart": [name for name, (server, _) in CONFIGS.items() if server == "quickstart"],
    "gunicorn": [name for name, (server, _) in CONFIGS.items() if server == "gunicorn"],
}
POISON = {
    "brackets": "[" * 20_000,
    "link openers": "[a](" * 4_000,
    "list nested 500 deep": "".join("  " * depth + "- item\n" for depth in range(500)),
    "quote nested 500 deep": ">" * 500 + " deep\n",
}
TRANSIENT = re.compile(r"locked|deadlock|serializ|could not serialize|connection", re.IGNORECASE)
MAX_RETRY_AFTER = 5.0
RETRIES = 10
MIN_BESIDE = 3.0

_servers: list[Server] = []


# --- HTTP ---------------------------------------------------------------------------


@dataclass
class Reply:
    status: int  # 0: no answer (connection refused or reset, timeout)
    seconds: float
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def json(self) -> dict:
        try:
            data = json.loads(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


def call(
    port: int, method: str, path: str, *, body: bytes | None = None, headers=None, timeout=60.0
) -> Reply:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        return Reply(
            response.status,
            time.perf_counter() - started,
            data,
            {k.lower(): v for k, v in response.getheaders()},
        )
    except (OSError, http.client.HTTPException) as exc:
        return Reply(0, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


class Tally:
    """Counts of answers and item results, and request latencies, from many threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.responses: collections.Counter[str] = collections.Counter()
        self.items: collections.Counter[str] = collections.Counter()
        self.latencies: list[float] = []
        self.messages: collections.Counter[str] = collections.Counter()
        self.acknowledged: set[str] = set()
        self.retried = 0  # 503 answers whose request was sent again

    def add(self, reply: Reply, sent_ids: list[str], *, retrying: bool = False) -> None:
        data = reply.json()
        with self.lock:
            self.latencies.append(reply.seconds)
            self.responses["no answer" if reply.status == 0 else str(reply.status)] += 1
            if reply.status == 0:
                self.messages[reply.error[:120]] += 1
            elif reply.status >= 500 or (reply.status >= 400 and not data.get("results")):
                self.messages[f"{reply.status} {str(data.get('error') or reply.body[:120])[:120]}"] += 1
            if retrying:
                self.retried += 1
                return  # a 503 sent again: its items are counted on the final answer
            for result, run_id in zip(data.get("results") or [], sent_ids, strict=False):
                status = result.get("status", "?")
                self.items[status] += 1
                if status in {"created", "updated", "duplicate"}:
                    self.acknowledged.add(run_id)
                elif status == "rejected":
                    message = "; ".join(e.get("message", "") for e in result.get("errors") or [])
                    # First line only: PostgreSQL's DETAIL lines name processes and differ each time.
                    message = (message.splitlines() or [""])[0]
                    kind = "transient" if TRANSIENT.search(message) else "other"
                    self.items[f"rejected ({kind})"] += 1
                    self.messages[f"rejected: {message[:120]}"] += 1

    def failures(self) -> int:
        """Answers other than 200, not counting the 503s that were sent again."""
        return sum(n for status, n in self.responses.items() if status != "200") - self.retried


def post_runs(port: int, token: str, runs: list[dict], *, ndjson: bool, tally: Tally, timeout=60.0) -> Reply:
    """Post runs as a JSON array or NDJSON; a 503 is retried after its Retry-After."""
    if ndjson:
        body = "\n".join(json.dumps(run) for run in runs).encode()
        content_type = "application/x-ndjson"
    else:
        body = json.dumps(runs if len(runs) > 1 else runs[0]).encode()
        content_type = "application/json"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    ids = [run["run_id"] for run in runs]
    for attempt in range(RETRIES):
        reply = call(port, "POST", "/api/v1/ingest", body=body, headers=headers, timeout=timeout)
        last = attempt == RETRIES - 1
        tally.add(reply, ids, retrying=reply.status == 503 and not last)
        if reply.status != 503 or last:
            return reply
        try:
            wait = float(reply.headers.get("retry-after", "1"))
        except ValueError:
            wait = 1.0
        time.sleep(min(max(wait, 0.05), MAX_RETRY_AFTER))
    return reply


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


def latency_line(latencies: list[float]) -> str:
    if not latencies:
        return "no requests"
    return (
        f"p50 {percentile(latencies, 0.5) * 1000:,.0f} ms, p99 {percentile(latencies, 0.99) * 1000:,.0f} ms, "
        f"max {max(latencies) * 1000:,.0f} ms ({len(latencies)} requests)"
    )


def report(tally: Tally, indent: str = "     ") -> None:
    items = ", ".join(f"{k} {v}" for k, v in sorted(tally.items.items())) or "none"
    responses = ", ".join(f"{k} ×{v}" for k, v in sorted(tally.responses.items()))
    partial = tally.responses.get("207", 0)
    server_errors = sum(n for k, n in tally.responses.items() if k.isdigit() and int(k) >= 500)
    print(f"{indent}items: {items}")
    print(
        f"{indent}answers: {responses}; partial (207) {partial}; 5xx {server_errors}"
        f" (of which 503 sent again after Retry-After: {tally.retried})"
    )
    print(f"{indent}latency per request: {latency_line(tally.latencies)}")
    for message, n in tally.messages.most_common(4):
        print(f"{indent}  {n} × {message}")


# --- Servers ------------------------------------------------------------------------


class Server:
    def __init__(self, name: str, port: int, workdir: Path):
        self.name, self.port = name, port
        self.kind, database = CONFIGS[name]
        self.token = "hostile-" + secrets.token_urlsafe(16)
        self.password = secrets.token_urlsafe(12)
        data_dir = workdir / name
        data_dir.mkdir()
        self.log_path = data_dir / "server.log"
        self.env = {
            **os.environ,
            "HISTORY_DATA_DIR": str(data_dir),
            "HISTORY_INGEST_TOKEN": self.token,
            "HISTORY_ADMIN_PASSWORD": self.password,
            "ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SETTINGS_MODULE": "history_app.settings",
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("DATABASE_URL", None)
        if database == "sqlite-url":
            self.env["DATABASE_URL"] = f"sqlite:///{data_dir / 'history.sqlite3'}"
        elif database == "pg":
            self.env["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
        self.process: subprocess.Popen | None = None
        self.workers = 4  # gunicorn's worker processes

    def manage(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done.stdout

    def prepare(self) -> None:
        if "DATABASE_URL" in self.env and not self.env["DATABASE_URL"].startswith("sqlite"):
            self.manage("-m", __spec__.name, "--db-task", "empty")
        if self.kind == "gunicorn":
            # The same setup quickstart does (database, admin, token, demo data), then serve.
            self.manage("manage.py", "quickstart", "--no-serve")

    def start(self, timeout: float = 120) -> None:
        if self.kind == "quickstart":
            command = [sys.executable, "manage.py", "quickstart", f"127.0.0.1:{self.port}"]
        else:
            command = [sys.executable, "-m", "gunicorn", "history_app.wsgi", "-w", str(self.workers)]
            command += ["-b", f"127.0.0.1:{self.port}", "--timeout", "30"]
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log_path.read_text()[-3000:]}")
            if call(self.port, "GET", "/accounts/login/", timeout=5).status == 200:
                return
            time.sleep(0.3)
        raise RuntimeError(f"the server did not answer within {timeout:.0f} s")

    def signal(self, signum: int) -> None:
        # The group, not just the process: gunicorn's workers go too, even once the master
        # has exited (the group is the server's own: it was started in a new session).
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group (gunicorn's master and workers)."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
        self.signal(signal.SIGKILL)  # nothing of the group may outlive the benchmark
        self.process = None

    def runs(self, prefix: str) -> dict:
        """The stored run ids and session counts under ``prefix``, read by a separate process
        with this server's own settings (so it sees exactly the database the server uses)."""
        return json.loads(self.manage("-m", __spec__.name, "--db-task", "runs", "--prefix", prefix))

    def log_findings(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        found = {
            "tracebacks": text.count("Traceback (most recent call last)"),
            "worker timeouts": text.count("WORKER TIMEOUT"),
            "'database is locked'": text.count("database is locked"),
            "'deadlock detected'": text.count("deadlock detected"),
            "RecursionError": text.count("RecursionError"),
        }
        return ", ".join(f"{k} {v}" for k, v in found.items())


def stop_all() -> None:
    for server in _servers:
        server.stop()


# --- Phases -------------------------------------------------------------------------


def make_runs(prefix: str, count: int) -> list[dict]:
    runs = []
    for i in range(count):
        run = run_dict(i)
        run["run_id"] = f"{prefix}-r{i:05d}"
        run["session_id"] = f"{prefix}-s{i // 10:04d}"
        runs.append(run)
    return runs


def burst(server: Server, runs: list[dict], args, tally: Tally) -> int:
    """``args.clients`` clients, each posting its share of ``runs`` in batches, odd clients as
    NDJSON; returns the number of batches left unsent when the phase's time ran out."""
    share = len(runs) // args.clients
    deadline = time.monotonic() + args.phase_timeout
    unsent = [0]

    def client(number: int) -> None:
        mine = runs[number * share : (number + 1) * share]
        for start in range(0, len(mine), args.batch):
            if time.monotonic() > deadline:
                unsent[0] += 1
                continue
            batch = mine[start : start + args.batch]
            post_runs(server.port, server.token, batch, ndjson=number % 2 == 1, tally=tally)

    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(client, range(args.clients)))
    return unsent[0]


def check_stored(server: Server, prefix: str, sent: list[str], indent: str = "     ") -> dict:
    stored = server.runs(prefix)
    ids = collections.Counter(stored["run_ids"])
    missing = [run_id for run_id in sent if run_id not in ids]
    doubled = sum(n - 1 for n in ids.values() if n > 1)
    print(
        f"{indent}database: {len(set(sent)) - len(missing)} of {len(set(sent))} runs sent are stored; "
        f"missing {len(missing)}; stored twice {doubled}"
    )
    return stored


def phase_burst(server: Server, args) -> list[dict]:
    runs = make_runs("burst", args.clients * args.runs_per_client)
    tally = Tally()
    started = time.perf_counter()
    unsent = burst(server, runs, args, tally)
    elapsed = time.perf_counter() - started
    print(
        f"  1. burst: {args.clients} clients × {args.runs_per_client} runs, batches of {args.batch}: "
        f"{elapsed:.1f} s ({len(runs) / elapsed:,.0f} runs/s)"
        + (f"; {unsent} batches unsent (phase time limit)" if unsent else "")
    )
    report(tally)
    check_stored(server, "burst", [run["run_id"] for run in runs])
    return runs


def phase_resend(server: Server, runs: list[dict], args) -> None:
    tally = Tally()
    started = time.perf_counter()
    burst(server, runs, args, tally)
    duplicates = tally.items.get("duplicate", 0)
    print(
        f"  2. the same resent: {time.perf_counter() - started:.1f} s; {duplicates} of {len(runs)} "
        f"answered duplicate ({'all' if duplicates == len(runs) else 'NOT all'})"
    )
    report(tally)


def phase_same_id(server: Server, args) -> None:
    tally = Tally()
    for round_ in range(args.race_rounds):
        barrier = threading.Barrier(args.racers)

        def racer(number: int, round_=round_, barrier=barrier) -> None:
            run = run_dict(number)
            run["run_id"] = f"race-r{round_}"
            run["session_id"] = "race-s"
            run["output"] = f"answer of racer {number}"
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=30)
            post_runs(server.port, server.token, [run], ndjson=False, tally=tally)

        with concurrent.futures.ThreadPoolExecutor(args.racers) as pool:
            list(pool.map(racer, range(args.racers)))
    stored = server.runs("race-r")
    rows = collections.Counter(stored["run_ids"])
    exact = sum(1 for r in range(args.race_rounds) if rows.get(f"race-r{r}") == 1)
    print(
        f"  3. same run_id race: {args.race_rounds} rounds × {args.racers} clients, different content; "
        f"rounds with exactly one stored run: {exact} of {args.race_rounds}"
    )
    report(tally)


def phase_move(server: Server, args) -> None:
    """Run X goes A → B while run Y goes B → A, at the same time, back and forth."""
    base = {"X": run_dict(1), "Y": run_dict(2)}
    setup = Tally()
    for name, session in (("X", "move-A"), ("Y", "move-B")):
        base[name].update(run_id=f"move-{name}", session_id=session)
        post_runs(server.port, server.token, [base[name]], ndjson=False, tally=setup)
    tally = Tally()
    deadline = time.monotonic() + args.phase_timeout
    barrier = threading.Barrier(2)

    def mover(name: str) -> None:
        sessions = ("move-B", "move-A") if name == "X" else ("move-A", "move-B")
        barrier.wait(timeout=30)
        for step in range(args.moves):
            if time.monotonic() > deadline:
                return
            run = dict(base[name], session_id=sessions[step % 2])
            post_runs(server.port, server.token, [run], ndjson=False, tally=tally)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(mover, "XY"))
    stored = server.runs("move-")
    wrong = [s for s in stored["sessions"] if s[1] != s[2]]
    deadlocks = sum(n for m, n in tally.messages.items() if "deadlock" in m.lower())
    print(
        f"  4. session-move race: 2 clients × {args.moves} moves in opposite directions, "
        f"{time.perf_counter() - started:.1f} s; 503 sent again {tally.retried}; "
        f"400 {tally.responses.get('400', 0)}; messages naming a deadlock {deadlocks}"
    )
    report(tally)
    print(
        f"     database: runs {sorted(set(stored['run_ids']))}; sessions whose run count is wrong: "
        f"{len(wrong)}"
    )


def phase_kill(server: Server, args) -> None:
    runs = make_runs("kill", args.clients * args.runs_per_client)
    tally = Tally()
    total_requests = len(runs) // args.batch
    worker = threading.Thread(target=burst, args=(server, runs, args, tally), daemon=True)
    worker.start()
    deadline = time.monotonic() + args.phase_timeout
    while len(tally.latencies) < max(1, total_requests // 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    answered = len(tally.latencies)
    server.kill()
    worker.join(args.phase_timeout)
    acknowledged = set(tally.acknowledged)
    print(
        f"  5. SIGKILL mid-burst: killed after {answered} of ~{total_requests} requests were answered; "
        f"{len(acknowledged)} runs acknowledged before the kill"
    )
    report(tally)
    started = time.perf_counter()
    server.start()
    restart = time.perf_counter() - started
    again = Tally()
    burst(server, runs, args, again)
    print(f"     restarted in {restart:.1f} s; everything resent:")
    report(again)
    stored = check_stored(server, "kill", [run["run_id"] for run in runs])
    lost = acknowledged - set(stored["run_ids"])
    print(f"     acknowledged before the kill but not stored: {len(lost)}")


def ordinary_load(server: Server, args, busy, tally: Tally, prefix: str, clients: int = 2) -> None:
    """Clients posting one ordinary run at a time while ``busy()`` (or until time runs out)."""
    deadline = time.monotonic() + args.poison_timeout + 5
    counter = iter(range(10**9))
    lock = threading.Lock()

    def client(number: int) -> None:
        while busy() and time.monotonic() < deadline:
            with lock:
                i = next(counter)
            run = run_dict(i)
            run.update(run_id=f"{prefix}-r{i:05d}", session_id=f"{prefix}-s{i // 10}")
            post_runs(
                server.port, server.token, [run], ndjson=False, tally=tally, timeout=args.poison_timeout
            )

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))


def beside(server: Server, args, label: str, prefix: str, heavy) -> None:
    """Ordinary ingests while the four ``heavy`` calls run; prints their latency."""
    tally = Tally()
    with concurrent.futures.ThreadPoolExecutor(len(POISON)) as pool:
        futures = [pool.submit(heavy, name, text) for name, text in POISON.items()]
        time.sleep(0.2)  # let the heavy requests reach the server first
        # At least MIN_BESIDE seconds of ordinary load, so there is a figure when they are quick.
        until = time.monotonic() + MIN_BESIDE
        ordinary_load(
            server,
            args,
            lambda: time.monotonic() < until or not all(f.done() for f in futures),
            tally,
            prefix,
        )
        results = [f.result() for f in futures]
    failures = tally.failures()
    p99 = percentile(tally.latencies, 0.99)
    met = "met" if failures == 0 and p99 < 1.0 else "NOT met"
    print(f"     ordinary ingests beside {label}: {latency_line(tally.latencies)}; failures {failures}")
    print(f"       target p99 < 1 s and no failure: {met}")
    for message, n in tally.messages.most_common(3):
        print(f"         {n} × {message}")
    for name, reply in results:
        what = reply.error or str(reply.json().get("error") or "")[:100]
        print(f"       {name:<24} {reply.status or 'no answer':>9}  {reply.seconds:6.1f} s  {what}")


def log_in(server: Server, timeout: float) -> str:
    """Log in through the login form, trying again until ``timeout``; the Cookie header
    of the logged-in session."""
    base = f"http://127.0.0.1:{server.port}"
    deadline = time.monotonic() + timeout
    failures: collections.Counter[str] = collections.Counter()
    while time.monotonic() < deadline:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        try:
            page = opener.open(f"{base}/accounts/login/", timeout=30).read().decode()
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
            form = {
                "username": "admin",
                "password": server.password,
                "csrfmiddlewaretoken": csrf,
                "next": "/",
            }
            opener.open(
                f"{base}/accounts/login/", data=urllib.parse.urlencode(form).encode(), timeout=30
            ).read()
        except OSError as exc:
            failures[str(exc)[:80]] += 1
            time.sleep(1)
            continue
        if any(cookie.name == "sessionid" for cookie in jar):
            if failures:
                print(f"     logging in failed first: {dict(failures)}")
            return "; ".join(f"{cookie.name}={cookie.value}" for cookie in jar)
        failures["no session cookie"] += 1
        time.sleep(1)
    raise RuntimeError(f"logging in failed for {timeout:.0f} s: {dict(failures)}")


def phase_poison(server: Server, args) -> None:
    print(f"  6. poison ({', '.join(POISON)}), each request timing out after {args.poison_timeout:.0f} s:")

    def ingest_poison(name: str, text: str) -> tuple[str, Reply]:
        run = {
            "schema": "agent-history/v1",
            "run_id": "poison-" + name.replace(" ", "-"),
            "session_id": "poison-s",
            "input": "poison",
            "output": text,
        }
        body = json.dumps(run).encode()
        headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
        return name, call(
            server.port, "POST", "/api/v1/ingest", body=body, headers=headers, timeout=args.poison_timeout
        )

    beside(server, args, "four poison ingests", "ordinary-a", ingest_poison)
    started = time.perf_counter()
    try:
        cookie = log_in(server, args.poison_timeout)
    except RuntimeError as exc:
        print(f"     {exc}; the first views are not measured")
        return
    print(f"     logged in through the login form after {time.perf_counter() - started:.1f} s")

    def view_poison(name: str, text: str) -> tuple[str, Reply]:
        path = "/p/default/runs/poison-" + name.replace(" ", "-") + "/"
        reply = call(server.port, "GET", path, headers={"Cookie": cookie}, timeout=args.poison_timeout)
        if reply.status == 200:
            reply.error = f"{len(reply.body):,} bytes of HTML"
        return name, reply

    beside(server, args, "four first views of the poison runs", "ordinary-b", view_poison)


PHASES = (phase_same_id, phase_move, phase_kill, phase_poison)


def run_config(name: str, port: int, workdir: Path, args) -> None:
    server = Server(name, port, workdir)
    _servers.append(server)
    kind, database = CONFIGS[name]
    where = {
        "sqlite": "SQLite (default path)",
        "sqlite-url": "SQLite through DATABASE_URL",
        "pg": "PostgreSQL",
    }
    print(f"\n== {name}: {kind} on {where[database]}, 127.0.0.1:{port}", flush=True)
    started = time.perf_counter()
    try:
        server.prepare()
        server.start()
        runs = phase_burst(server, args)
        phase_resend(server, runs, args)
        for phase in PHASES:
            phase(server, args)
            sys.stdout.flush()
    except Exception as exc:  # noqa: BLE001 — report and go on with the next configuration
        print(f"  configuration aborted: {type(exc).__name__}: {str(exc)[:1500]}")
    finally:
        server.stop()
    print(f"  server log: {server.log_findings()}")
    print(f"  ({time.perf_counter() - started:.0f} s for this configuration)")


# --- Entry points -------------------------------------------------------------------


def db_task(task: str, prefix: str) -> None:
    """Run inside a child process with a server's environment."""
    if task == "empty":
        from history_app.benchmarks.prune import empty_history_tables, setup_django

        setup_django()
        empty_history_tables()
        # quickstart keeps an existing admin's password; this run logs in with its own.
        from django.contrib.auth import get_user_model

        for user in get_user_model().objects.filter(username="admin"):
            user.set_password(os.environ["HISTORY_ADMIN_PASSWORD"])
            user.save()
        return
    import django

    django.setup()
    from django.db.models import Count

    from history_app import models

    run_ids = list(models.Run.objects.filter(run_id__startswith=prefix).values_list("run_id", flat=True))
    tool_calls = models.ToolCall.objects.filter(run__run_id__startswith=prefix).count()
    sessions = [
        [s.session_id, s.run_count, s.actual]
        for s in models.Session.objects.filter(session_id__startswith=prefix).annotate(actual=Count("runs"))
    ]
    model_calls = models.ModelCall.objects.filter(run__run_id__startswith=prefix).count()
    print(
        json.dumps(
            {"run_ids": run_ids, "sessions": sessions, "tool_calls": tool_calls, "model_calls": model_calls}
        )
    )


def chosen_configs(text: str) -> list[str]:
    names: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part not in GROUPS and part not in CONFIGS:
            raise SystemExit(f"unknown configuration {part!r}; choose from {', '.join([*GROUPS, *CONFIGS])}")
        names += [n for n in GROUPS.get(part, [part]) if n not in names]
    return names


def main() -> None:
    if "--attacks" in sys.argv[1:]:
        # The cost of each small hostile request, one process each (``attacks.py``).
        from history_app.benchmarks import attacks

        attacks.main([arg for arg in sys.argv[1:] if arg != "--attacks"])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--configs", default="all", help=f"comma-separated, of {', '.join([*GROUPS, *CONFIGS])}"
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--runs-per-client", type=int, default=250)
    parser.add_argument("--batch", type=int, default=25, help="runs per request in the bursts")
    parser.add_argument("--racers", type=int, default=16, help="clients posting one run_id at once")
    parser.add_argument("--race-rounds", type=int, default=5)
    parser.add_argument("--moves", type=int, default=150, help="moves per client in the session-move race")
    parser.add_argument("--phase-timeout", type=float, default=180, help="seconds a burst may take")
    parser.add_argument("--poison-timeout", type=float, default=90, help="seconds a poison request may take")
    parser.add_argument("--port-base", type=int, default=8160)
    parser.add_argument("--db-task", choices=["empty", "runs"], help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.db_task:
        db_task(args.db_task, args.prefix)
        return
    names = chosen_configs(args.configs)
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(
        f"hostile load, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {os.cpu_count()} cores; "
        f"configurations: {', '.join(names)}"
    )
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as workdir:
        try:
            for number, name in enumerate(names):
                if CONFIGS[name][1] == "pg" and not os.environ.get("BENCH_DATABASE_URL"):
                    print(f"\n== {name}: skipped (set BENCH_DATABASE_URL=postgres://… to run it)")
                    continue
                run_config(name, args.port_base + number, Path(workdir), args)
        finally:
            stop_all()


if __name__ == "__main__":
    main()
