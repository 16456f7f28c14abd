"""OpenTelemetry intake beside the native endpoint, and loss under a burst, in one run.

    python -m history_app.benchmarks.otlp [--runs 2000] [--configs sqlite,pg]
        [--workers 2] [--clients 4] [--batch 100] [--rounds 3] [--no-loss]
    python -m history_app.benchmarks.otlp --rivals --runs 400 [--rounds 1]

For each configuration it starts gunicorn (``--workers``) on a fresh SQLite file, or on
PostgreSQL (``BENCH_DATABASE_URL``: its history tables are EMPTIED; without it the
PostgreSQL configuration is skipped), three times:

1. **native**: ``--clients`` processes post the runs of the standard shape with 5 model
   calls (``shape.py``) to ``/api/v1/ingest`` as arrays of ``--batch`` runs;
2. **OTLP**: the same runs as spans (each run 1 agent span, 5 model spans and 10 tool
   spans carrying the same texts: about 20 KB), ``--batch`` runs (16 × ``--batch``
   spans) a protobuf request to ``/v1/traces``. Both sets of bodies are encoded before
   the clock starts; each answer is read; every run, tool call and model call stored is
   counted afterwards.

Before the clock each server gets two requests a worker of ten runs under other ids (the
native ones as ``ingest.warm_up`` does, the OTLP ones as spans), so what a worker does
once is counted on neither side. Native and OTLP alternate ``--rounds`` times; each round
prints OTLP's time over native's for the same runs (the baseline measured in the same
run) and the load average, and the last line their median.

3. **loss**: the OpenTelemetry SDK emits the same spans for every run as fast as it can
   (a burst), through the standard ``BatchSpanProcessor`` and the standard
   ``OTLPSpanExporter`` (protobuf over HTTP). The spans the exporter reported sent are
   counted against the spans stored. Spans the SDK dropped before export (its queue full)
   are printed apart: they never reached any server.

With ``--rivals`` it runs only our OTLP intake (SQLite) beside MLflow and Phoenix on the
same pre-encoded bodies (``rivals.py``): traces/s until every span is stored and queryable,
spans lost, KB per trace, and ours over each rival's throughput.

Targets: OTLP within 1.2× of native ingest of the same runs, on both databases; no span
the exporter reported sent is lost.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import hashlib
import http.client
import json
import multiprocessing
import os
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from history_app.benchmarks import shape
from history_app.benchmarks.hostile import Server, _servers, stop_all
from history_app.benchmarks.ingest import CONFIGS, runs_for, warm_up

SPANS_PER_RUN = 16


def _nanos(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _attr(key: str, value: object) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _parts(text: str) -> list[dict]:
    return [{"type": "text", "content": text}]


def span_attributes(run: dict) -> list[tuple[str, str, str, int, int, dict, int]]:
    """The spans of a native run of the shape: (span id, parent id, name, start, end,
    attributes, status code) each; the agent span first."""
    agent = "a" * 16
    spans = [
        (
            agent,
            "",
            f"invoke_agent {run['agent_name']}",
            _nanos(run["started_at"]),
            _nanos(run["ended_at"]),
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": run["agent_name"],
                "session.id": run["session_id"],
                "user.id": run["user_id"],
                "input.value": run["input"],
                **({"output.value": run["output"]} if run["output"] is not None else {}),
            },
            2 if run["status"] == "failed" else 0,
        )
    ]
    for k, iteration in enumerate(run["iterations"]):
        for call in iteration["model_calls"]:
            system = [m for m in call["messages"] if m["role"] == "system"]
            rest = [m for m in call["messages"] if m["role"] != "system"]
            spans.append(
                (
                    f"{k + 1:016x}",
                    agent,
                    f"chat {call['model']}",
                    _nanos(call["started_at"]),
                    _nanos(call["ended_at"]),
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": call["provider"],
                        "gen_ai.request.model": call["model"],
                        "gen_ai.system_instructions": json.dumps(_parts(system[0]["content"]))
                        if system
                        else "",
                        "gen_ai.input.messages": json.dumps(
                            [{"role": m["role"], "parts": _parts(m["content"])} for m in rest]
                        ),
                        "gen_ai.output.messages": json.dumps(
                            [
                                {
                                    "role": "assistant",
                                    "parts": _parts(call["output"]),
                                    "finish_reason": "tool_calls",
                                }
                            ]
                        ),
                        "gen_ai.usage.input_tokens": call["input_tokens"],
                        "gen_ai.usage.output_tokens": call["output_tokens"],
                    },
                    0,
                )
            )
        for c, tool in enumerate(iteration["tool_calls"]):
            spans.append(
                (
                    f"{0x100 + 16 * k + c:016x}",
                    agent,
                    f"execute_tool {tool['tool']}",
                    _nanos(tool["started_at"]),
                    _nanos(tool["ended_at"]),
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool["tool"],
                        "gen_ai.tool.call.id": tool["call_id"],
                        "gen_ai.tool.call.arguments": json.dumps(tool["params"]),
                        "gen_ai.tool.call.result": tool["result"],
                    },
                    0,
                )
            )
    return spans


def trace_id(prefix: str, i: int) -> str:
    return f"{prefix}{i:024x}"


def otlp_json(runs: list[dict], prefix: str, first: int, *, unique_span_ids: bool = False) -> dict:
    """The runs as one ExportTraceServiceRequest in OTLP/JSON. The span ids repeat from
    trace to trace (unique within each, as the specification asks) unless
    ``unique_span_ids``: then each is drawn from its trace id too, as an SDK's random ids
    are (Phoenix keeps one span per span id whatever its trace)."""

    def span_key(trace: str, span: str) -> str:
        if not unique_span_ids or not span:
            return span
        return hashlib.blake2b(f"{trace}{span}".encode(), digest_size=8).hexdigest()

    spans = []
    for n, run in enumerate(runs):
        trace = trace_id(prefix, first + n)
        for span_id, parent, name, start, end, attributes, status in span_attributes(run):
            spans.append(
                {
                    "traceId": trace,
                    "spanId": span_key(trace, span_id),
                    "parentSpanId": span_key(trace, parent),
                    "name": name,
                    "kind": 1,
                    "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(end),
                    "attributes": [_attr(k, v) for k, v in attributes.items() if v != ""],
                    "status": {"code": status},
                }
            )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "bench")]},
                "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}],
            }
        ]
    }


def protobuf(request: dict) -> bytes:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = trace_service_pb2.ExportTraceServiceRequest()
    json_format.ParseDict(request, message)
    return message.SerializeToString()


def _client(args: tuple[int, dict[str, str], str, list[bytes], float]) -> tuple[float, float, int, int]:
    """Post the bodies in order on one connection; (start, end, failures, retries)."""
    port, headers, path, bodies, start_at = args
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    while time.time() < start_at:
        time.sleep(0.001)
    started, failures, retries = time.perf_counter(), 0, 0
    for body in bodies:
        while True:
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            response.read()
            if response.status == 503:
                retries += 1
                time.sleep(float(response.getheader("Retry-After") or 1))
                continue
            failures += response.status != 200
            break
    return started, time.perf_counter(), failures, retries


def warm_up_otlp(server: Server, runs: list[dict], workers: int) -> None:
    """Two requests a worker, at once, of ten runs each as spans of other traces (not
    counted or checked afterwards): ``ingest.warm_up``'s counterpart."""
    bodies = [protobuf(otlp_json(runs[:10], f"feed{n:04x}", 0)) for n in range(2 * workers)]
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {server.token}"}

    def post(body: bytes) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            connection.request("POST", "/v1/traces", body, headers)
            return connection.getresponse().status
        finally:
            connection.close()

    with ThreadPoolExecutor(len(bodies)) as pool:
        statuses = list(pool.map(post, bodies))
    if any(status != 200 for status in statuses):
        raise SystemExit(f"the warm-up requests answered {statuses}")


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _server(name: str, workers: int, workdir: Path) -> Server:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    used = workdir / CONFIGS[name]
    if used.exists():  # each server of a configuration starts on a fresh database
        used.rename(workdir / f"{CONFIGS[name]}-{time.time_ns()}")
    server = Server(CONFIGS[name], port, workdir)
    _servers.append(server)
    server.workers = workers
    server.prepare()
    server.start()
    return server


def timed(server: Server, path: str, content_type: str, bodies: list[bytes], clients: int) -> dict:
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {server.token}"}
    return post_all(server.port, headers, path, bodies, clients)


def post_all(port: int, headers: dict[str, str], path: str, bodies: list[bytes], clients: int) -> dict:
    """``clients`` processes post their share of the bodies at once; the seconds from the
    first request to the last answer, and ``started``/``ended`` on ``time.perf_counter``'s
    clock (one clock for every process on Linux)."""
    shares = [bodies[n::clients] for n in range(clients)]
    start_at = time.time() + 1.0
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        results = pool.map(_client, [(port, headers, path, s, start_at) for s in shares])
    started = min(start for start, _, _, _ in results)
    ended = max(end for _, end, _, _ in results)
    return {
        "seconds": ended - started,
        "started": started,
        "ended": ended,
        "failures": sum(r[2] for r in results),
        "retries": sum(r[3] for r in results),
    }


def loss(server: Server, runs: list[dict], prefix: str) -> dict:
    """The SDK's burst: every run's spans through the standard batch processor and exporter."""
    from opentelemetry import trace as trace_api
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Counting(OTLPSpanExporter):
        sent = 0

        def export(self, spans):
            result = super().export(spans)
            if result is SpanExportResult.SUCCESS:
                Counting.sent += len(spans)
            return result

    class Ids(RandomIdGenerator):
        next = 0

        def generate_trace_id(self) -> int:
            Ids.next += 1
            return int(trace_id(prefix, Ids.next), 16)

    exporter = Counting(
        endpoint=f"http://127.0.0.1:{server.port}/v1/traces",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    # The queue holds the whole burst (unless OTEL_BSP_MAX_QUEUE_SIZE says otherwise): with
    # the default 2,048 the SDK drops most of a burst itself, before any server sees it.
    queue = int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") or len(runs) * SPANS_PER_RUN)
    processor = BatchSpanProcessor(exporter, max_queue_size=queue)
    provider = TracerProvider(resource=Resource.create({"service.name": "burst"}), id_generator=Ids())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    settings = {
        key: os.environ.get(key, default)
        for key, default in (
            ("OTEL_BSP_MAX_QUEUE_SIZE", str(queue)),
            ("OTEL_BSP_SCHEDULE_DELAY", "5000"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "30000"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10"),
        )
    }
    created = 0
    started = time.perf_counter()
    for run in runs:
        spans = span_attributes(run)
        root_id, _, root_name, root_start, root_end, root_attributes, root_status = spans[0]
        root = tracer.start_span(root_name, attributes=root_attributes, start_time=root_start)
        context = trace_api.set_span_in_context(root)
        for _, _, name, start, end, attributes, _ in spans[1:]:
            child = tracer.start_span(name, context=context, attributes=attributes, start_time=start)
            child.end(end_time=end)
            created += 1
        if root_status:
            root.set_status(trace_api.Status(trace_api.StatusCode.ERROR))
        root.end(end_time=root_end)
        created += 1
    provider.force_flush(120_000)
    provider.shutdown()
    elapsed = time.perf_counter() - started
    stored = json.loads(server.manage("-m", __spec__.name, "--db-task", "spans", "--prefix", prefix))
    return {"created": created, "sent": Counting.sent, "seconds": elapsed, "settings": settings, **stored}


def db_task(prefix: str) -> None:
    import django

    django.setup()
    from history_app import models
    from history_app.intake import spans as span_store

    trace_ids = list(
        models.SpanBatch.objects.filter(trace_id__startswith=prefix)
        .values_list("trace_id", flat=True)
        .distinct()
    )
    kept, _ = span_store.kept_spans(trace_ids, models.Project.default().pk)
    print(
        json.dumps(
            {
                "spans": sum(len(spans) for spans in kept.values()),
                "runs": models.Run.objects.filter(run_id__startswith=prefix).count(),
                "running": models.Run.objects.filter(run_id__startswith=prefix, status="running").count(),
            }
        )
    )


def _round(name: str, args: argparse.Namespace, workdir: Path, round_: int) -> float:
    """One native run and one OTLP run of the same runs on fresh databases; OTLP's time over
    native's."""
    stamp = f"{int(time.time()) & 0xFFFFFFFF:08x}"
    native_runs = runs_for(f"bench-{name}-{stamp}-", args.runs)
    native_bodies = [
        json.dumps(native_runs[k : k + args.batch]).encode() for k in range(0, args.runs, args.batch)
    ]
    base = [shape.run_dict(i, model_calls=True) for i in range(args.runs)]
    otlp_bodies = [
        protobuf(otlp_json(base[k : k + args.batch], stamp, k)) for k in range(0, args.runs, args.batch)
    ]
    server = _server(name, args.workers, workdir)
    try:
        warm_up(server, runs_for("warm-", 10), args.workers)
        load_native = _load()
        native = timed(server, "/api/v1/ingest", "application/json", native_bodies, args.clients)
        stored_native = server.runs(f"bench-{name}-{stamp}-")
    finally:
        server.stop()
    server = _server(name, args.workers, workdir)
    try:
        warm_up_otlp(server, base, args.workers)
        load_otlp = _load()
        otlp = timed(server, "/v1/traces", "application/x-protobuf", otlp_bodies, args.clients)
        stored_otlp = server.runs(stamp)
        spans = json.loads(server.manage("-m", __spec__.name, "--db-task", "spans", "--prefix", stamp))
    finally:
        server.stop()
    native_rate, otlp_rate = args.runs / native["seconds"], args.runs / otlp["seconds"]
    print(
        f"  {name:6} {round_} native /api/v1/ingest  {native_rate:7.0f} runs/s  (stored {len(stored_native['run_ids'])} runs, "
        f"{stored_native['tool_calls']} tool calls, {stored_native['model_calls']} model calls; "
        f"{native['failures']} failed requests, {native['retries']} retries; {load_native})"
    )
    print(
        f"  {name:6} {round_} OTLP   /v1/traces      {otlp_rate:7.0f} runs/s  (stored {len(stored_otlp['run_ids'])} runs, "
        f"{stored_otlp['tool_calls']} tool calls, {stored_otlp['model_calls']} model calls, {spans['spans']} spans, "
        f"{spans['running']} still running; {otlp['failures']} failed requests, {otlp['retries']} retries; {load_otlp})"
    )
    ratio = native_rate / otlp_rate
    print(f"  {name:6} {round_} OTLP / native time = {ratio:.2f}x (target: within 1.2x)", flush=True)
    return ratio


PHASES = (
    ("history_app.intake.traces", "decode_protobuf", "OTLP: protobuf decoded"),
    ("history_app.agent_history.otlp", "read_request", "OTLP: spans read"),
    ("history_app.intake.spans", "redact_spans", "OTLP: spans redacted (their JSON read once)"),
    ("history_app.agent_history.otlp", "assemble", "OTLP: runs assembled"),
    ("history_app.intake.spans", "_pack", "OTLP: spans packed to be kept"),
    ("history_app.intake.ingestion", "prepare_item", "run prepared (checked, redacted, read, hashed)"),
    ("history_app.intake.ingestion", "_checked_native", "  of which: checked"),
    ("history_app.agent_history.redact", "Redactor.redact_with_report", "  of which: redaction walk"),
    ("history_app.agent_history.records", "Run.from_dict", "  of which: record read"),
    ("history_app.intake.writer", "content_hash", "  of which: hashed"),
    ("history_app.intake.writer", "write_runs", "rows written (the transaction)"),
)


def phases(runs: int, batch: int) -> None:
    """Where the time of each path goes, in this process on a fresh SQLite file: the
    native records and the same runs as protobuf spans, through the functions the two
    endpoints call (no HTTP), each phase timed by a wrapper (no profiler: its overhead
    falls unevenly on the two paths), in CPU time, which a busy machine disturbs less."""
    import importlib

    os.environ["HISTORY_DATA_DIR"] = tempfile.mkdtemp(prefix="otlp-phases-")
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "history_app.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from history_app.agent_history import otlp as reader
    from history_app.intake import ingestion, traces
    from history_app.intake import spans as span_store

    spent: dict[str, float] = dict.fromkeys((label for _, _, label in PHASES), 0.0)

    def timed_call(function, label):
        def wrapper(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - started

        return wrapper

    for module_name, name, label in PHASES:
        owner = importlib.import_module(module_name)
        if "." in name:
            owner_name, name = name.split(".")
            owner = getattr(owner, owner_name)
            function = owner.__dict__[name]
            if isinstance(function, classmethod):
                setattr(owner, name, classmethod(timed_call(function.__func__, label)))
                continue
        else:
            function = getattr(owner, name)
        setattr(owner, name, timed_call(function, label))
    native_bodies = [
        json.dumps(runs_for("native-", runs)[k : k + batch]).encode() for k in range(0, runs, batch)
    ]
    base = [shape.run_dict(i, model_calls=True) for i in range(runs)]
    otlp_bodies = [protobuf(otlp_json(base[k : k + batch], "0badcafe", k)) for k in range(0, runs, batch)]
    ingestion.ingest_items(items=runs_for("warm-", 10))
    warm, _, _ = reader.read_request(traces.decode_protobuf(protobuf(otlp_json(base[:10], "feedf00d", 0))))
    span_store.intake_spans(spans=warm, errors=[])

    def native() -> None:
        for body in native_bodies:
            ingestion.ingest_items(items=json.loads(body))

    def spans() -> None:
        for body in otlp_bodies:
            read, errors, _ = reader.read_request(traces.decode_protobuf(body))
            span_store.intake_spans(spans=read, errors=errors)

    print(f"{runs} runs, {batch} a call, in this process on SQLite, {os.cpu_count()} cores; ms of CPU a run:")
    for title, work in (("native", native), ("OTLP", spans)):
        for label in spent:
            spent[label] = 0.0
        load = _load()
        started, cpu = time.perf_counter(), time.process_time()
        work()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(
            f"  {title:6} {1000 * cpu / runs:6.2f} ms of CPU a run in all "
            f"({1000 * elapsed / runs:.2f} ms by the clock; {load})"
        )
        for label, seconds in spent.items():
            if seconds:
                print(f"         {1000 * seconds / runs:6.2f}  {label}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--configs", default="sqlite,pg")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="native and OTLP, alternated")
    parser.add_argument("--no-loss", action="store_true", help="skip the SDK burst")
    parser.add_argument(
        "--phases", action="store_true", help="only where the time goes, in this process (no server)"
    )
    parser.add_argument(
        "--rivals",
        action="store_true",
        help="only our OTLP intake (SQLite) beside MLflow and Phoenix on the same bodies "
        "(rivals.py; their packages in virtual environments of their own)",
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=180,
        help="--rivals: give up on a rival whose span count stops growing this long",
    )
    parser.add_argument("--db-task", choices=["spans"], help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.db_task:
        db_task(args.prefix)
        return
    if args.phases:
        phases(args.runs, args.batch)
        return
    atexit.register(stop_all)
    if args.rivals:
        from history_app.benchmarks import rivals

        rivals.compare(args)
        return
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    if "pg" in names and not os.environ.get("BENCH_DATABASE_URL"):
        print(
            "pg: skipped (set BENCH_DATABASE_URL to a PostgreSQL database whose history tables may be emptied)"
        )
        names.remove("pg")
    workdir = Path(tempfile.mkdtemp(prefix="otlp-bench-"))
    sample = shape.run_dict(0, model_calls=True)
    sample_body = json.dumps(otlp_json([sample], "0" * 8, 0))
    print(
        f"{args.runs} runs of the standard shape with 5 model calls; as OTLP, {SPANS_PER_RUN} spans a run "
        f"({len(sample_body):,} bytes of OTLP/JSON, {len(protobuf(json.loads(sample_body))):,} of protobuf); "
        f"{args.batch} runs a request, {args.clients} clients, gunicorn -w {args.workers}, {os.cpu_count()} cores"
    )
    for name in names:
        ratios = []
        for round_ in range(1, args.rounds + 1):
            ratios.append(_round(name, args, workdir, round_))
        ratios.sort()
        print(
            f"  {name:6} OTLP / native time, median of {len(ratios)}: {ratios[len(ratios) // 2]:.2f}x "
            f"[{ratios[0]:.2f}-{ratios[-1]:.2f}] (target: within 1.2x)"
        )
        if args.no_loss:
            continue
        base = [shape.run_dict(i, model_calls=True) for i in range(args.runs)]
        server = _server(name, args.workers, workdir)
        try:
            burst = loss(server, base, f"{int(time.time() + 1) & 0xFFFFFFFF:08x}")
        finally:
            server.stop()
        print(
            f"  {name:6} SDK burst: {burst['created']} spans created in {burst['seconds']:.1f} s, "
            f"{burst['sent']} reported sent by the exporter, {burst['spans']} stored "
            f"(lost: {burst['sent'] - burst['spans']}; dropped by the SDK before export: "
            f"{burst['created'] - burst['sent']}); {burst['runs']} runs, {burst['running']} still running"
        )
        print(
            f"  {name:6} exporter settings: BatchSpanProcessor {burst['settings']}, OTLPSpanExporter protobuf"
        )


if __name__ == "__main__":
    main()
