"""Where the suite's time goes: CPU and wall time of every test, added up by file.

A pytest plugin (``python -m pytest -p tests.cpu_per_test``) that writes one line of JSON
a test to ``$TEST_OUTPUT_DIR/cpu-per-test/`` (else ``test-output/cpu-per-test/``), one
file a process, xdist's workers included: the test's id, its CPU seconds (the process,
all its threads, a live server's among them, and the child processes it has waited for:
subprocesses, and Chromium when a module's browser closes) and its wall seconds, setup and
teardown included. Then ``python tests/cpu_per_test.py`` prints the totals by file, the
heaviest first. Wall time well above CPU time is a test waiting: on a sleep, a timeout, or
a process whose CPU is not counted until it ends (Chromium's, while its module runs)."""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = Path(os.environ.get("TEST_OUTPUT_DIR", ROOT / "test-output")) / "cpu-per-test"


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.monotonic()
    yield
    FOLDER.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {"id": item.nodeid, "cpu": _cpu() - cpu, "wall": time.monotonic() - wall}
    with open(FOLDER / f"{worker}-{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def main() -> None:
    rows = [json.loads(line) for path in sorted(FOLDER.glob("*.jsonl")) for line in path.open()]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for row in rows:
        totals = by_file[row["id"].split("::")[0]]
        totals[0] += 1
        totals[1] += row["cpu"]
        totals[2] += row["wall"]
    print(f"{len(rows)} tests, {sum(t[1] for t in by_file.values()):.1f} s of CPU, from {FOLDER}")
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  file")
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    for name, (count, cpu, wall) in sorted(by_file.items(), key=lambda item: -item[1][1])[:limit]:
        print(f"{cpu:8.1f} {wall:8.1f} {count:6d}  {name}")


if __name__ == "__main__":
    main()
