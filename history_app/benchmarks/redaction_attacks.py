"""Redaction under the outside attacks: each hostile input at the size it was sent, and
at twice that size, with the ratio.

    python -m history_app.benchmarks.redaction_attacks

Each figure is the least CPU time of five redactions with the server's redactor (the one
``ingestion.server_redactor`` builds: the default rules and the field length cap), of a
run shaped as the attack sent it. Linear rules cost about twice as much at twice the
size; a quadratic one four times as much.
"""

from __future__ import annotations

import time

from history_app.agent_history import Redactor

# The field cap of the server's redactor (HISTORY_MAX_FIELD_CHARS' default).
MAX_FIELD_CHARS = 262_144

ATTACKS = (
    # (what, repeated unit, repetitions as sent)
    ('"eyJ" * 20000 in a run\'s input (60 KB)', "eyJ", 20_000),
    ('"eyJ" * 50000 (150 KB)', "eyJ", 50_000),
    ('"eyJ" * 10000 in an OTLP attribute (30 KB)', "eyJ", 10_000),
    ('"%3A%2F%2F" * 100000 (900 KB)', "%3A%2F%2F", 100_000),
    ('"sk-" * 100000 (300 KB)', "sk-", 100_000),
    ('"password=" * 100000 (900 KB)', "password=", 100_000),
    ('"| user | password |\\n|---|---|\\n" * 10000', "| user | password |\n|---|---|\n", 10_000),
    ('"machine h login u password " * 10000', "machine h login u password ", 10_000),
    ('"\\"kty\\": \\"RSA\\", \\"d\\": \\"" * 10000', '"kty": "RSA", "d": "', 10_000),
    ('"ghp\\\\_" * 50000', "ghp\\_", 50_000),
    ('"sk-\\u200b" * 50000', "sk-\u200b", 50_000),
)


def cost(redactor: Redactor, run: dict, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        redactor.redact(run)
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    redactor = Redactor(max_length=MAX_FIELD_CHARS)
    print(f"{'attack':58} {'as sent':>10} {'twice':>10} {'ratio':>7}")
    for what, unit, count in ATTACKS:
        runs = [
            {"schema": "agent-history/v1", "run_id": "r", "session_id": "s", "input": unit * n}
            for n in (count, 2 * count)
        ]
        once, twice = cost(redactor, runs[0]), cost(redactor, runs[1])
        print(f"{what:58} {once * 1e3:8.1f} ms {twice * 1e3:7.1f} ms {twice / once:6.2f}x")


if __name__ == "__main__":
    main()
