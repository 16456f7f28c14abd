"""agno-go workflow history: a ``WorkflowSession`` (with its ``runs``) or one ``WorkflowRun``.

Times are RFC 3339 (Go writes nanoseconds; they are cut to microseconds). A session
payload becomes one run per ``WorkflowRun``; the session's user is given to each.
"""

from __future__ import annotations

from typing import Any

from ..context import as_text
from ..records import Iteration, RecordError, Run, parse_time, type_errors

FRAMEWORK = "agno-go"
STATUSES = {"pending", "running", "completed", "failed", "cancelled"}
RUN_FIELDS = {
    "run_id": "string",
    "session_id": "string",
    "workflow_id": "string",
    "user_id": "string",
    "status": "string",
    "messages": "array",
    "events": "array",
    "metadata": "object",
}


def _is_run(payload: dict[str, Any]) -> bool:
    return (
        "run_id" in payload
        and "workflow_id" in payload
        and str(payload.get("status", "")).lower() in STATUSES
        and any(
            key in payload for key in ("started_at", "completed_at", "last_step_id", "cancellation_reason")
        )
    )


def detect(payload: dict[str, Any]) -> bool:
    if isinstance(payload.get("runs"), list) and "session_id" in payload and "workflow_id" in payload:
        return True
    return _is_run(payload)


def _run(data: Any, path: str, session: dict[str, Any], errors: list[tuple[str, str]]) -> Run | None:
    if not isinstance(data, dict):
        errors.append((path, "must be an object"))
        return None
    if not data.get("run_id"):
        errors.append((f"{path}.run_id", "is required"))
        return None
    wrong = type_errors(data, path, RUN_FIELDS)
    messages = data.get("messages") if isinstance(data.get("messages"), list) else []
    wrong += [
        (f"{path}.messages[{i}]", "must be an object")
        for i, m in enumerate(messages)
        if not isinstance(m, dict)
    ]
    if wrong:
        errors.extend(wrong)
        return None
    times = {}
    for key in ("started_at", "completed_at"):
        try:
            times[key] = parse_time(data.get(key))
        except ValueError as exc:
            errors.append((f"{path}.{key}", f"must be an RFC 3339 time ({exc})"))
            times[key] = None
    status = str(data.get("status") or "completed").lower()
    if status not in STATUSES:
        errors.append((f"{path}.status", f"must be one of {', '.join(sorted(STATUSES))}"))
        return None
    iterations = []
    for message in messages:
        if message.get("role") == "assistant":
            iterations.append(
                Iteration(index=len(iterations) + 1, thought=str(message.get("content") or "") or None)
            )
    metadata = {k: data[k] for k in ("cancellation_reason", "last_step_id", "metadata") if data.get(k)}
    if data.get("events"):
        metadata["events"] = data["events"]
    return Run(
        run_id=str(data["run_id"]),
        session_id=str(data.get("session_id") or session.get("session_id") or data["run_id"]),
        kind="workflow",
        status=status,
        workflow_id=str(data.get("workflow_id") or session.get("workflow_id") or ""),
        agent_name=str(data.get("workflow_id") or session.get("workflow_id") or ""),
        user_id=str(session.get("user_id") or data.get("user_id") or ""),
        framework=FRAMEWORK,
        input=str(data.get("input") or ""),
        # A structured output is kept, as JSON, rather than dropped.
        output=as_text(data["output"]) if data.get("output") is not None else None,
        error=str(data["error"]) if data.get("error") else None,
        started_at=times["started_at"],
        ended_at=times["completed_at"],
        iterations=iterations,
        metadata=metadata,
    )


def parse(payload: dict[str, Any]) -> list[Run]:
    errors: list[tuple[str, str]] = []
    if isinstance(payload.get("runs"), list):
        errors += type_errors(
            payload, "$", {"session_id": "string", "workflow_id": "string", "user_id": "string"}
        )
        runs = [_run(item, f"$.runs[{i}]", payload, errors) for i, item in enumerate(payload["runs"])]
    else:
        runs = [_run(payload, "$", {}, errors)]
    if errors:
        raise RecordError(errors)
    if not runs:
        raise RecordError([("$.runs", "holds no runs")])
    return [run for run in runs if run is not None]
