"""Phoenix and MLflow beside our OTLP intake, on the same pre-encoded spans.

    python -m history_app.benchmarks.otlp --rivals [--runs 400] [--clients 4] [--rounds 1]

Each rival lives in a virtual environment of its own, made once from the exact pins in
``rivals-phoenix.txt`` / ``rivals-mlflow.txt`` beside this file and cached under
``~/.cache/agent-history/rivals-<hash>`` (the hash of the pins and of this Python): their
packages are never the app's dependencies. Each server starts on 127.0.0.1 on a fresh
data directory; the same protobuf bodies are posted by the same number of client
processes as for ours; the clock stops when every span is stored and queryable (counted
in the tool's own SQLite database), and the data directory's size gives the disk per trace.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-history"
RIVALS = ("mlflow", "phoenix")


def requirements(name: str) -> Path:
    return HERE / f"rivals-{name}.txt"


def environment_dir(name: str, pins: bytes) -> Path:
    """Where the environment of these pins lives: a change of pin or of Python makes another."""
    return CACHE / f"rivals-{name}-{hashlib.sha256(pins + sys.version.encode()).hexdigest()[:12]}"


def environment(name: str) -> Path:
    """The Python of one rival's virtual environment, made once from its exact pins."""
    pins = requirements(name).read_bytes()
    target = environment_dir(name, pins)
    python = target / "bin" / "python"
    if (target / "ready").exists():
        return python
    print(f"  making {target} from {requirements(name).name} (once)", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            str(requirements(name)),
        ],
        check=True,
    )
    (target / "ready").write_text(pins.decode())
    return python


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def disk_bytes(directory: Path) -> int:
    """The size of every file under a data directory, once each SQLite database's WAL is
    folded into it (a server stopped by a signal may leave its WAL behind, as large as
    what was last written: counted, it would count those pages twice)."""
    for wal in directory.rglob("*-wal"):
        database = wal.with_name(wal.name[: -len("-wal")])
        with (
            contextlib.suppress(sqlite3.Error),
            contextlib.closing(sqlite3.connect(database, timeout=30)) as db,
        ):
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


class Rival:
    """One rival's server on 127.0.0.1, on a fresh data directory, and its span count read
    from its own SQLite database (what its API and UI read)."""

    name = ""
    headers: dict[str, str] = {}

    def __init__(self, workdir: Path):
        self.python = environment(self.name)
        self.data_dir = workdir / f"{self.name}-{time.time_ns()}"
        self.data_dir.mkdir(parents=True)
        self.port = free_port()
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}

    def database(self) -> Path:
        raise NotImplementedError

    def ready_path(self) -> str:
        return "/"

    def version(self) -> str:
        package = {"phoenix": "arize-phoenix", "mlflow": "mlflow"}[self.name]
        return subprocess.run(
            [str(self.python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def start(self, timeout: float = 300) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=self.data_dir,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_path.read_text()[-3000:]}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}{self.ready_path()}", timeout=5
                ) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.process = None

    def spans(self) -> int:
        """Spans stored and queryable: counted in the tool's own database, read only."""
        path = self.database()
        if not path.exists():
            return 0
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
                return db.execute("SELECT count(*) FROM spans").fetchone()[0]
        except sqlite3.OperationalError:  # the tables not made yet, or locked past the timeout
            return -1


class Phoenix(Rival):
    """``phoenix serve``: OTLP/HTTP at ``/v1/traces``, SQLite in PHOENIX_WORKING_DIR."""

    name = "phoenix"

    def command(self) -> list[str]:
        return [str(self.python.parent / "phoenix"), "serve"]

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "PHOENIX_WORKING_DIR": str(self.data_dir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }

    def database(self) -> Path:
        return self.data_dir / "phoenix.db"

    def ready_path(self) -> str:
        return "/healthz"


class MLflow(Rival):
    """``mlflow server`` on a SQLite backend store: OTLP/HTTP at ``/v1/traces`` into the
    experiment the ``x-mlflow-experiment-id`` header names (0, the default one)."""

    name = "mlflow"
    headers = {"x-mlflow-experiment-id": "0"}

    def __init__(self, workdir: Path, workers: int):
        super().__init__(workdir)
        self.workers = workers

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.database()}",
            "--default-artifact-root",
            str(self.data_dir / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
        ]

    def env(self) -> dict[str, str]:
        return {**super().env(), "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}

    def database(self) -> Path:
        return self.data_dir / "mlflow.db"

    def ready_path(self) -> str:
        return "/health"


def wait_for(count, target: int, stall: float) -> tuple[int, float]:
    """Poll ``count()`` until it reaches ``target`` or stops growing for ``stall`` seconds;
    (the last count, the ``perf_counter`` time it was read)."""
    last, changed = -1, time.monotonic()
    while True:
        seen = count()
        now = time.perf_counter()
        if seen >= target:
            return seen, now
        if seen != last:
            last, changed = seen, time.monotonic()
        elif time.monotonic() - changed > stall:
            return seen, now
        time.sleep(0.1)


def result(
    tool: str, runs: int, sent: int, stored: int, seconds: float, disk: int, load: str, **rest
) -> dict:
    return {
        "tool": tool,
        "runs": runs,
        "sent": sent,
        "stored": stored,
        "seconds": seconds,
        "traces_per_s": runs / seconds if seconds > 0 else 0.0,
        "kb_per_trace": disk / 1024 / runs,
        "load": load,
        **rest,
    }


GOALS = {"MLflow": 3.0, "Phoenix": 30.0}


def table(rows: list[dict]) -> str:
    """One table of a round: each tool's traces/s until every span is stored and
    queryable, spans stored/sent and lost, KB per trace; then ours over each rival's
    throughput against the goal (ours the row whose tool starts with "ours")."""
    lines = [
        f"  {'':20} {'traces/s':>9} {'seconds':>8} {'spans stored/sent':>19} {'lost':>6} {'failed':>6} "
        f"{'KB/trace':>9}  load",
    ]
    for row in rows:
        lines.append(
            f"  {row['tool']:20} {row['traces_per_s']:9.1f} {row['seconds']:8.1f} "
            f"{row['stored']:>9}/{row['sent']:<9} {row['sent'] - row['stored']:6} {row.get('failures', 0):6} "
            f"{row['kb_per_trace']:9.1f}  {row['load']}"
        )
    ours = next((row for row in rows if row["tool"].startswith("ours")), None)
    for row in rows:
        goal = GOALS.get(row["tool"].split()[0])
        if ours is None or goal is None:
            continue
        ratio = ours["traces_per_s"] / row["traces_per_s"] if row["traces_per_s"] else float("inf")
        met = "met" if ratio >= goal and ours["stored"] == ours["sent"] else "NOT met"
        note = ""
        if row["stored"] < row["sent"]:
            note = f"; {row['tool'].split()[0]} stored only {row['stored']} of {row['sent']} spans: its time is until it stalled"
        lines.append(
            f"  ours / {row['tool'].split()[0]:8} {ratio:7.1f}x  (goal >= {goal:g}x with 0 spans lost: {met}{note})"
        )
    return "\n".join(lines)


def _warm(port: int, headers: dict[str, str], bodies: list[bytes]) -> None:
    """The warm-up requests, at once, before the clock (ours gets ``warm_up_otlp``'s)."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    def post(body: bytes) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            connection.request("POST", "/v1/traces", body, headers)
            answer = connection.getresponse()
            answer.read()
            return answer.status
        finally:
            connection.close()

    with ThreadPoolExecutor(len(bodies)) as pool:
        statuses = list(pool.map(post, bodies))
    if any(status != 200 for status in statuses):
        raise RuntimeError(f"the warm-up requests answered {statuses}")


def warm_bodies(base: list[dict], workers: int) -> list[bytes]:
    """Two requests a worker of ten traces each, under other trace ids, posted at once
    before the clock (``warm_up_otlp``'s shape), the same for every tool."""
    from history_app.benchmarks import otlp

    return [
        otlp.protobuf(otlp.otlp_json(base[:10], f"feed{n:04x}", 0, unique_span_ids=True))
        for n in range(2 * workers)
    ]


def ours(args, workdir: Path, base: list[dict], bodies: list[bytes], stamp: str, sent: int) -> dict:
    """Our gunicorn on a fresh SQLite file, as ``otlp._round`` starts it."""
    from history_app.benchmarks import otlp

    server = otlp._server("sqlite", args.workers, workdir)
    data_dir = Path(server.env["HISTORY_DATA_DIR"])
    database = data_dir / "history.sqlite3"

    def count() -> int:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)) as db:
            return db.execute(
                "SELECT coalesce(sum(span_count), 0) FROM history_app_spanbatch WHERE trace_id LIKE ?",
                (f"{stamp}%",),
            ).fetchone()[0]

    try:
        headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {server.token}"}
        _warm(server.port, headers, warm_bodies(base, args.workers))
        before, load = disk_bytes(data_dir), otlp._load()
        posted = otlp.post_all(server.port, headers, "/v1/traces", bodies, args.clients)
        _, at = wait_for(count, sent, stall=60)
        # What a reader of the app gets: the spans kept for those traces, read as the app does.
        import json

        stored = json.loads(server.manage("-m", otlp.__spec__.name, "--db-task", "spans", "--prefix", stamp))
    finally:
        server.stop()
    return result(
        f"ours (SQLite, -w {args.workers})",
        args.runs,
        sent,
        stored["spans"],
        at - posted["started"],
        disk_bytes(data_dir) - before,
        load,
        failures=posted["failures"],
        runs_stored=stored["runs"],
    )


def rival(rival_server: Rival, args, base: list[dict], bodies: list[bytes], sent: int) -> dict:
    from history_app.benchmarks import otlp

    headers = {"Content-Type": "application/x-protobuf", **rival_server.headers}
    warm = warm_bodies(base, args.workers)
    rival_server.start()
    try:
        _warm(rival_server.port, headers, warm)
        warmed, _ = wait_for(rival_server.spans, 10 * otlp.SPANS_PER_RUN * len(warm), stall=120)
        before, load = disk_bytes(rival_server.data_dir), otlp._load()
        posted = otlp.post_all(rival_server.port, headers, "/v1/traces", bodies, args.clients)
        stored, at = wait_for(lambda: rival_server.spans() - warmed, sent, stall=args.stall)
    finally:
        rival_server.stop()
    return result(
        f"{'MLflow' if rival_server.name == 'mlflow' else 'Phoenix'} {rival_server.version()}",
        args.runs,
        sent,
        stored,
        at - posted["started"],
        disk_bytes(rival_server.data_dir) - before,
        load,
        failures=posted["failures"],
        answered=posted["seconds"],
    )


def compare(args) -> list[list[dict]]:
    """``--rounds`` rounds of ours, MLflow and Phoenix on the same pre-encoded bodies; one
    table a round, then the median ratios."""
    import tempfile

    from history_app.benchmarks import otlp, shape

    for name in RIVALS:  # made (once) before any clock starts
        environment(name)
    workdir = Path(tempfile.mkdtemp(prefix="otlp-rivals-"))
    base = [shape.run_dict(i, model_calls=True) for i in range(args.runs)]
    stamp = f"{int(time.time()) & 0xFFFFFFFF:08x}"
    bodies = [
        otlp.protobuf(otlp.otlp_json(base[k : k + args.batch], stamp, k, unique_span_ids=True))
        for k in range(0, args.runs, args.batch)
    ]
    sent = args.runs * otlp.SPANS_PER_RUN
    print(
        f"{args.runs} traces of {otlp.SPANS_PER_RUN} spans ({sum(map(len, bodies)) / 1e6:.1f} MB of protobuf in "
        f"{len(bodies)} requests of {args.batch} traces, encoded once), {args.clients} clients, "
        f"{os.cpu_count()} cores; each tool on a fresh data directory, timed until every span is "
        f"stored and queryable (counted in its own database)",
        flush=True,
    )
    rounds = []
    for round_ in range(1, args.rounds + 1):
        rows = [ours(args, workdir, base, bodies, stamp, sent)]
        rows.append(rival(MLflow(workdir, args.workers), args, base, bodies, sent))
        rows.append(rival(Phoenix(workdir), args, base, bodies, sent))
        print(f"round {round_}:\n{table(rows)}", flush=True)
        rounds.append(rows)
    if len(rounds) > 1:
        print(summary(rounds))
    return rounds


def summary(rounds: list[list[dict]]) -> str:
    """The median of each ratio over the rounds, with its range."""
    lines = []
    for rival_name, goal in GOALS.items():
        ratios = []
        for rows in rounds:
            mine = next(row for row in rows if row["tool"].startswith("ours"))
            theirs = next((row for row in rows if row["tool"].startswith(rival_name)), None)
            if theirs and theirs["traces_per_s"]:
                ratios.append(mine["traces_per_s"] / theirs["traces_per_s"])
        if ratios:
            ratios.sort()
            lines.append(
                f"  ours / {rival_name}, median of {len(ratios)}: {ratios[len(ratios) // 2]:.1f}x "
                f"[{ratios[0]:.1f}-{ratios[-1]:.1f}] (goal >= {goal:g}x)"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    for rival in sys.argv[1:] or RIVALS:
        print(environment(rival))
