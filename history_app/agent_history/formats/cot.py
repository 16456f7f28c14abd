"""A SmartClient CoT process's history: ``{"process_id", "history": [entries…]}``.

The process becomes one run (re-sending a longer history updates it), each entry an
iteration (its action as the name, its summary or intent as the thought, the entry
itself as metadata), and the two-zone block the library renders from those entries is
recorded as a reconstructed (not reported) injected context.
"""

from __future__ import annotations

import json
from typing import Any

from ..context import render_cot_history
from ..records import (
    INDEX_RANGE,
    InjectedContext,
    Iteration,
    RecordError,
    Run,
    is_index,
    parse_time,
    type_errors,
)

FRAMEWORK = "smartclient-cot"


def detect(payload: dict[str, Any]) -> bool:
    return "process_id" in payload and isinstance(payload.get("history", payload.get("entries")), list)


def parse(payload: dict[str, Any]) -> list[Run]:
    process_id = payload.get("process_id")
    if not isinstance(process_id, str | int) or isinstance(process_id, bool) or not str(process_id):
        raise RecordError([("$.process_id", "must be a non-empty string")])
    key = "history" if "history" in payload else "entries"
    entries = payload[key]
    errors = [
        (f"$.{key}[{i}]", "must be an object") for i, e in enumerate(entries) if not isinstance(e, dict)
    ]
    errors += type_errors(
        payload,
        "$",
        {"settings": "object", "run_id": "string", "session_id": "string", "status": "string"},
    )
    settings = payload.get("settings") if isinstance(payload.get("settings"), dict) else {}
    for name in ("history_detail_items", "history_result_max_chars"):
        if name in settings and not is_index(settings[name]):
            errors.append((f"$.settings.{name}", INDEX_RANGE))
    if errors:
        raise RecordError(errors)
    iterations = []
    for i, entry in enumerate(entries, start=1):
        action = entry.get("goTo") or entry.get("taskID") or entry.get("action") or f"entry {i}"
        thought = entry.get("summary") or entry.get("intent") or entry.get("result")
        try:
            started = parse_time(
                entry["ts"] / 1000
                if isinstance(entry.get("ts"), int | float) and entry["ts"] > 1e11
                else entry.get("ts")
            )
        except ValueError:
            # An entry's time is informative only; the entry itself is kept whole.
            started = None
        iterations.append(
            Iteration(
                index=i,
                name=str(action)[:255],
                thought=thought
                if isinstance(thought, str)
                else (json.dumps(thought) if thought is not None else None),
                started_at=started,
                metadata={"entry": entry},
            )
        )
    detail = settings.get("history_detail_items", 5)
    max_chars = settings.get("history_result_max_chars", 160)
    run_id = str(payload.get("run_id") or f"cot:{process_id}")
    return [
        Run(
            run_id=run_id,
            session_id=str(payload.get("session_id") or f"cot:{process_id}"),
            kind="agent",
            status=str(payload.get("status") or "completed").lower()
            if str(payload.get("status") or "completed").lower()
            in {"pending", "running", "completed", "failed", "cancelled"}
            else "completed",
            agent_name=str(payload.get("process_name") or process_id),
            framework=FRAMEWORK,
            input=str(payload.get("task") or payload.get("input") or ""),
            iterations=iterations,
            started_at=iterations[0].started_at if iterations else None,
            ended_at=iterations[-1].started_at if iterations else None,
            injected_contexts=[
                InjectedContext(
                    text=render_cot_history(entries, detail_items=detail, result_max_chars=max_chars),
                    kind="cot_history",
                    target="user",
                    step="history",
                    settings={"history_detail_items": detail, "history_result_max_chars": max_chars},
                    reported=False,
                )
            ]
            if entries
            else [],
            metadata={"process_id": process_id},
        )
    ]
