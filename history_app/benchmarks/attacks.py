"""What each small hostile request costs the server: CPU seconds and memory growth.

    python -m history_app.benchmarks.hostile --attacks [--only NAME,NAME] [--database-url URL]

(or ``python -m history_app.benchmarks.attacks``). Each attack runs in a fresh process
that loads Django on a copy of a freshly migrated SQLite database (or on the empty
PostgreSQL database ``--database-url`` names: its history tables are EMPTIED), prepares
what the attack needs (not measured), then sends the attack through Django's test client
and prints the status, the process's CPU seconds (user + system) and how far its resident
memory rose above where it stood before (``VmHWM`` after ``/proc/self/clear_refs``, the
peak, not the end). Target: every attack at most 1 s of CPU and 200 MB.

A legitimate request of the size at which the limits start is measured beside them, to
show that its cost stays what its size makes it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "aht_attack-benchmark-token-0123456789"
TRACE = "ab" * 16
PB, JSON = "application/x-protobuf", "application/json"


def _status_kb(name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- Bodies ---------------------------------------------------------------------------


def _ld(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    length, out = len(payload), bytearray([tag])
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + payload


def _ingest(client, payload) -> None:
    response = client.post(
        "/api/v1/ingest",
        json.dumps(payload),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
    )
    assert response.status_code == 200, response.content[:300]


def _lines_text(seed: int, size: int) -> str:
    """About ``size`` characters of lines drawn from 101 short values, cycling through
    them in an order fixed by ``seed`` (a stride through the 101): every line has many
    equal lines on the other side and no two runs of them agree for long, and no value is
    common enough for difflib to set aside as junk. difflib's matcher grows cubically on
    such pairs (2.6-3.2 s at 24 KB, eight times that at twice the size)."""
    stride = 1 + (seed * 36) % 100
    values = [f"v{(n * stride) % 101}" for n in range(101)]
    lines: list[str] = []
    while len(lines) * 4 < size:
        lines.extend(values)
    return "\n".join(lines)


def _native(run_id: str, session: str, **fields) -> dict:
    return {"schema": "agent-history/v1", "run_id": run_id, "session_id": session, **fields}


def _span(span_id: int, parent: int | None, name: str, **attributes) -> dict:
    return {
        "traceId": TRACE,
        "spanId": f"{span_id:016x}",
        "parentSpanId": f"{parent:016x}" if parent else "",
        "name": name,
        "startTimeUnixNano": str(1_790_000_000_000_000_000 + span_id * 1000),
        "endTimeUnixNano": str(1_790_000_000_000_000_000 + span_id * 1000 + 500),
        "attributes": [{"key": k, "value": {"stringValue": str(v)}} for k, v in attributes.items()],
    }


def _trace_request(spans: list[dict]) -> bytes:
    return json.dumps(
        {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}
    ).encode()


# --- Attacks: (setup, attack) --------------------------------------------------------


def setup_nothing(client) -> None:
    return None


class Otlp:
    """An OTLP body, encoded and compressed during the setup (not measured)."""

    def __init__(self, body: bytes, content_type: str, *, gz: bool = True):
        self.content_type, self.gz = content_type, gz
        self.body = gzip.compress(body, 9) if gz else body

    def setup(self, client) -> Otlp:
        return self


def send(client, otlp: Otlp):
    extra = {"HTTP_CONTENT_ENCODING": "gzip"} if otlp.gz else {}
    return client.post(
        "/v1/traces", otlp.body, content_type=otlp.content_type, HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **extra
    )


def pb_scalar_fields() -> bytes:
    """One span holding five million copies of one number field (10 MB)."""
    span = _ld(0x0A, bytes.fromhex(TRACE)) + _ld(0x12, b"\x11" * 8) + b"\x50\x00" * 5_000_000
    return _ld(0x0A, _ld(0x12, _ld(0x12, span)))


def pb_empty_attributes() -> bytes:
    """One span holding five million empty attributes (10 MB)."""
    span = _ld(0x0A, bytes.fromhex(TRACE)) + _ld(0x12, b"\x11" * 8) + b"\x4a\x00" * 5_000_000
    return _ld(0x0A, _ld(0x12, _ld(0x12, span)))


def legit_otlp_setup(spans: int) -> Callable:
    def setup(client):
        return Otlp(
            _trace_request(
                [_span(1, None, "agent", **{"gen_ai.operation.name": "invoke_agent"})]
                + [
                    _span(
                        n, 1, "tool", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{n}"}
                    )
                    for n in range(2, spans + 1)
                ]
            ),
            "application/json",
        )

    return setup


def setup_inspector(client):
    _ingest(
        client,
        _native(
            "diff-run",
            "diff-session",
            injected_contexts=[
                {"kind": "custom", "target": "system", "text": _lines_text(1, 24_000)},
                {"kind": "custom", "target": "system", "text": _lines_text(2, 24_000)},
            ],
        ),
    )
    return _logged_in(client)


def attack_inspector(client, _):
    return client.get("/p/default/runs/diff-run/context/2/")


def attack_inspector_json(client, _):
    return client.get("/api/v1/runs/diff-run/contexts/2", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def setup_compare(client):
    def run(run_id: str, seed: int) -> dict:
        texts = [_lines_text(seed * 10 + n, 15_000) for n in range(7)]
        return _native(
            run_id,
            "compare-session",
            input=texts[0],
            output=texts[1],
            error=texts[2],
            metadata={"notes": texts[3]},
            iterations=[{"index": n, "thought": texts[4 + n]} for n in range(3)],
        )

    _ingest(client, [run("compare-a", 1), run("compare-b", 2)])
    return _logged_in(client)


def attack_compare(client, _):
    return client.get("/p/default/compare/", {"a": "compare-a", "b": "compare-b"})


def setup_big_trace(client):
    """A trace of 19,999 spans (an agent and its tool calls), sent in two requests."""
    spans = [_span(1, None, "agent", **{"gen_ai.operation.name": "invoke_agent", "session.id": "big"})] + [
        _span(n, 1, "tool", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"})
        for n in range(2, 20_000)
    ]
    for start in range(0, len(spans), 10_000):
        response = send(client, Otlp(_trace_request(spans[start : start + 10_000]), JSON))
        assert response.status_code == 200, response.content[:300]

    return Otlp(_trace_request([_span(30_000, 1, "tool", **{"gen_ai.operation.name": "execute_tool"})]), JSON)


def setup_export(client):
    long_answer = "\n\n".join(
        f"## Part {n}\n\n- *item* `{n}` and **bold** [link](https://example.com/{n})" for n in range(60)
    )
    for start in range(0, 300, 100):
        _ingest(
            client,
            [
                _native(f"export-{n}", "export-session", input="q", output=long_answer)
                for n in range(start, start + 100)
            ],
        )
    return _logged_in(client)


def attack_export(client, _):
    response = client.get("/p/default/sessions/export-session/export.html")
    b"".join(response.streaming_content)
    return response


def _logged_in(client):
    from django.contrib.auth import get_user_model

    from history_app.models import Membership, Project

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    Membership.objects.create(project=Project.default(), user=user, role=Membership.EDITOR)
    client.force_login(user)
    return None


ATTACKS: dict[str, tuple[str, Callable, Callable]] = {
    # name: (what, setup, attack)
    "otlp-pb-1m-resourcespans": (
        "\\x0a\\x00 × 1,000,000 (1.9 KB gzip), protobuf",
        Otlp(b"\x0a\x00" * 1_000_000, PB).setup,
        send,
    ),
    "otlp-pb-2m-resourcespans": (
        "\\x0a\\x00 × 2,000,000 (3.9 KB gzip), protobuf",
        Otlp(b"\x0a\x00" * 2_000_000, PB).setup,
        send,
    ),
    "otlp-pb-5m-attributes": (
        "a span of 5,000,000 empty attributes, protobuf",
        lambda c: Otlp(pb_empty_attributes(), PB),
        send,
    ),
    "otlp-pb-5m-number-fields": (
        "a span of 5,000,000 copies of one number field, protobuf",
        lambda c: Otlp(pb_scalar_fields(), PB),
        send,
    ),
    "otlp-json-resourcespans": (
        '{"resourceSpans":[{},{},…]} (≈17 KB gzip)',
        lambda c: Otlp(b'{"resourceSpans":[' + b"{}," * 5_500_000 + b"{}]}", JSON),
        send,
    ),
    "otlp-json-floats": (
        "4,000,000 numbers in one attribute's array, JSON",
        lambda c: Otlp(b'{"resourceSpans":[{"x":[' + b"1.5," * 4_000_000 + b"1.5]}]}", JSON),
        send,
    ),
    "inspector-24kb": (
        "context inspector, two 24 KB contexts of 101 values",
        setup_inspector,
        attack_inspector,
    ),
    "inspector-24kb-json": ("its JSON twin", setup_inspector, attack_inspector_json),
    "compare-7x15kb": ("compare page, two runs of seven 15 KB texts", setup_compare, attack_compare),
    "otlp-near-cap-trace": (
        "one new span of a trace of 19,999 spans",
        setup_big_trace,
        send,
    ),
    "export-html-300-runs": (
        "export.html of a session of 300 runs (legitimate, linear)",
        setup_export,
        attack_export,
    ),
    "legit-otlp-1000-spans": ("a legitimate OTLP request of 1,000 spans", legit_otlp_setup(1_000), send),
    "legit-otlp-2000-spans": (
        "the same with 2,000 spans (linear: about twice)",
        legit_otlp_setup(2_000),
        send,
    ),
}


def run_one(name: str) -> dict:
    import django

    django.setup()
    from django.test import Client

    from history_app.access.auth import register_token

    register_token(name="bench", token=TOKEN, scopes=["ingest", "read"])
    client = Client()
    _, setup, attack = ATTACKS[name]
    prepared = setup(client)
    import gc

    gc.collect()
    exact = _reset_peak()
    before_rss = _status_kb("VmRSS") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = _cpu(), time.perf_counter()
    response = attack(client, prepared)
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    peak = _status_kb("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body = b"" if response.streaming else response.content
    return {
        "status": response.status_code,
        "cpu": round(cpu, 3),
        "wall": round(wall, 3),
        "mb": round(max(peak - before_rss, 0) / 1024, 1),
        "answer": body[:160].decode("utf-8", "replace") if body[:1] in (b"{", b"<") else f"{len(body)} bytes",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated attack names")
    parser.add_argument("--database-url", default="", help="an empty PostgreSQL database (default: SQLite)")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        print(json.dumps(run_one(args.run)))
        return
    names = [n for n in args.only.split(",") if n] or list(ATTACKS)
    work = Path(tempfile.mkdtemp(prefix="attacks-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "history_app.settings",
        "HISTORY_DATA_DIR": str(work / "template"),
        "ALLOWED_HOSTS": "testserver",
    }
    if args.database_url:
        env["DATABASE_URL"] = args.database_url
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    print(f"{'attack':28} {'status':>6} {'CPU s':>7} {'wall s':>7} {'+MB':>7}  what")
    try:
        for name in names:
            data_dir = work / name
            shutil.copytree(work / "template", data_dir)
            if args.database_url:
                _empty_postgres(manage, env)
            child = subprocess.run(
                [sys.executable, "-m", "history_app.benchmarks.attacks", "--run", name],
                env={**env, "HISTORY_DATA_DIR": str(data_dir)},
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            lines = child.stdout.strip().splitlines()
            if child.returncode or not lines:
                print(f"{name:28} failed: {child.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(lines[-1])
            print(
                f"{name:28} {r['status']:>6} {r['cpu']:>7.2f} {r['wall']:>7.2f} {r['mb']:>7.1f}  {ATTACKS[name][0]}"
            )
            if r["status"] >= 400:
                print(f"{'':28} answer: {r['answer'][:120]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _empty_postgres(manage: list[str], env: dict) -> None:
    code = (
        "from history_app import models; from django.contrib.auth import get_user_model;"
        "models.Session.objects.all().delete(); models.SpanBatch.objects.all().delete();"
        "models.IngestReceipt.objects.all().delete(); models.IngestToken.objects.all().delete();"
        "get_user_model().objects.filter(username='bench').delete()"
    )
    subprocess.run([*manage, "shell", "-c", code], env=env, check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
