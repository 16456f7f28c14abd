"""Redaction throughput of this checkout against other versions of ``redact.py``, in one
process, alternately (one process at a time is too noisy on a shared machine to show 10%).

    git archive 2eaba71 history_app/agent_history | tar -x -C /tmp/old
    python -m history_app.benchmarks.redaction_compare /tmp/old/history_app/agent_history/redact.py

Each sample is the CPU time of ``Redactor().redact`` of the library benchmark's 1 MB
transcript, and of ``redact_text`` over its distinct strings (without the walk); the least of ``--rounds``
is printed, with the ratio to the first version named. The cycle collector runs before
each sample and is off during it: a collection the walk's allocations trigger at a random
point measures the allocator, not the rules.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from history_app.benchmarks.library import transcript


def _load(index: int, path: str) -> Any:
    # Imported inside the package, so its relative imports (``.records``) resolve.
    name = f"history_app.agent_history._compared_{index}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _strings(obj: Any, out: list[str]) -> list[str]:
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            out.append(key)
            _strings(value, out)
    elif isinstance(obj, list):
        for value in obj:
            _strings(value, out)
    return out


def _cpu(fn: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        fn()
        return time.process_time() - started
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="other versions of redact.py (the first is the baseline)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    versions = {path: _load(i, path) for i, path in enumerate(args.paths)}
    versions["this checkout"] = importlib.import_module("history_app.agent_history.redact")
    data = transcript()
    size = len(json.dumps(data))
    distinct = list(dict.fromkeys(_strings(data, [])))
    redactors = {name: module.Redactor() for name, module in versions.items()}
    whole: dict[str, list[float]] = {name: [] for name in redactors}
    texts: dict[str, list[float]] = {name: [] for name in redactors}
    for _ in range(args.rounds):
        for name, redactor in redactors.items():
            whole[name].append(_cpu(lambda r=redactor: r.redact(data)))
            texts[name].append(_cpu(lambda r=redactor: [r.redact_text(s, Counter()) for s in distinct]))
    base = min(whole[args.paths[0]])
    print(f"{'version':40} {'redact()':>12} {'vs first':>9} {f'redact_text of {len(distinct)} strings':>26}")
    for name in redactors:
        best = min(whole[name])
        print(
            f"{name[-40:]:40} {size / best / 1e6:7.2f} MB/s {base / best:9.3f} {min(texts[name]) * 1e3:23.1f} ms"
        )


if __name__ == "__main__":
    main()
