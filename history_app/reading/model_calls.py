"""Reads for one model call's page and its JSON twin: its messages as they were sent (with
their parts and tool-call requests, each tool message linked to the request it answers),
its answer, and its composition (how much of the input was instructions, history,
injected context, new input and the run's own turns)."""

from __future__ import annotations

import json
from typing import Any

from history_app import models

# The sources whose messages are the wire's own (their roles are the ones sent).
WIRE_SOURCES = ("middleware", "native", "")
COMPOSITION_PARTS = ("instructions", "history", "context", "input", "run", "")


def _shown(text: str, whole: bool, limit: int) -> tuple[str, int]:
    shown = text if whole or len(text) <= limit else text[:limit]
    return shown, len(text) - len(shown)


def _part_rows(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for part in parts:
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            rows.append({"type": "text", "text": part["text"]})
        else:
            rows.append(
                {
                    "type": str(part.get("type") or "part"),
                    "json": json.dumps(part, ensure_ascii=False, indent=2),
                }
            )
    return rows


def _message_row(message: dict[str, Any], number: int | str, whole: bool, limit: int) -> dict[str, Any]:
    content = message.get("content") or ""
    shown, hidden = _shown(content, whole, limit)
    parts = message.get("parts") or []
    return {
        **message,
        "number": number,
        "shown": shown,
        "hidden": hidden,
        # Parts are shown one by one where there is more than the text.
        "part_rows": _part_rows(parts)
        if any(p.get("type") != "text" for p in parts) or len(parts) > 1
        else [],
        "requests": [
            {**request, "arguments_shown": _arguments_shown(request.get("arguments", ""))}
            for request in message.get("tool_calls") or ()
        ],
    }


def _arguments_shown(arguments: str) -> str:
    return arguments if arguments else '""'


def message_rows(call: models.ModelCall, *, full: int | None, limit: int) -> list[dict[str, Any]]:
    """The call's messages for its page: each with the text shown (``limit`` characters
    unless it is message ``full``), its parts and tool-call requests, and for a tool
    message the number of the message holding the request it answers."""
    rows = [_message_row(m, n, n == full, limit) for n, m in enumerate(call.messages)]
    asked: dict[str, int] = {}
    for row in rows:
        for request in row["requests"]:
            if request.get("id"):
                asked.setdefault(request["id"], row["number"])
        answered = row.get("tool_call_id")
        row["answers_message"] = asked.get(answered) if answered else None
    return rows


def answer_row(call: models.ModelCall) -> dict[str, Any] | None:
    """The answer as a message row, or None when only its text (``output``) is known."""
    answer = call.answer
    if answer is None:
        return None
    return _message_row(answer, "answer", True, 0)


def composition(call: models.ModelCall) -> list[dict[str, Any]]:
    """What the call's input was made of: characters per part (instructions, history,
    injected context, new input, this run so far, unknown), with their share, and the
    input tokens split by that share where the call reports its input tokens (an
    estimate: no provider reports tokens per message)."""
    sizes = dict.fromkeys(COMPOSITION_PARTS, 0)
    for message in call.messages:
        size = len(message.get("content") or "")
        size += sum(len(r.get("arguments") or "") for r in message.get("tool_calls") or ())
        part = message.get("part") or ""
        if message.get("context") is not None and part not in ("history", "context"):
            part = "context"
        sizes[part if part in sizes else ""] += size
    total = sum(sizes.values())
    rows = []
    for part in COMPOSITION_PARTS:
        chars = sizes[part]
        if not chars:
            continue
        share = chars / total
        tokens = None if call.input_tokens is None else round(call.input_tokens * share)
        rows.append(
            {"part": part or "unknown", "chars": chars, "share": round(share, 4), "tokens_estimated": tokens}
        )
    return rows


def roles_note(call: models.ModelCall) -> str:
    """Whose roles the page shows, when they are not the wire's own."""
    if call.messages_source in WIRE_SOURCES:
        return ""
    return call.messages_source


# The settings a rebuilt replay names, in the order the page lists them.
_REPLAY_SETTINGS = ("num_history_runs", "num_history_messages", "max_tool_calls_from_history")


def reconstructed_note(call: models.ModelCall) -> dict[str, Any] | None:
    """What the page says of replayed history the importer rebuilt into this call (agno
    stores neither the replay nor the settings): how many messages, under which settings,
    from which runs; None when nothing was rebuilt."""
    found = (call.metadata or {}).get("reconstructed_history")
    if not isinstance(found, dict):
        return None
    settings = [f"{key}={found[key]}" for key in _REPLAY_SETTINGS if isinstance(found.get(key), int)]
    sources = found.get("source_run_ids")
    return {
        "messages": found.get("messages"),
        "settings": ", ".join(settings),
        "source_run_ids": [s for s in sources if isinstance(s, str)] if isinstance(sources, list) else [],
    }


def roles_mapped(call: models.ModelCall) -> list[tuple[str, str]]:
    """The stored roles the page shows under the name the provider's role map sent them
    as (agno stores ``system``, its OpenAI models send ``developer``)."""
    found = (call.metadata or {}).get("roles_mapped")
    mapping = found.get("map") if isinstance(found, dict) else None
    if not isinstance(mapping, dict):
        return []
    return [(str(stored), str(sent)) for stored, sent in mapping.items()]


def call_data(call: models.ModelCall) -> dict[str, Any]:
    """The JSON twin of a model call's page."""
    return {
        "number": call.number,
        "model": call.model,
        "provider": call.provider,
        "api": call.api,
        "messages_source": call.messages_source,
        "roles_as_reported_by": roles_note(call) or None,
        "iteration": call.iteration.index if call.iteration_id else None,
        "messages": call.messages,
        "message_count": call.message_count,
        "output": call.output,
        "answer": call.answer,
        "finish_reason": call.finish_reason,
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "cached_tokens": call.cached_tokens,
        "reasoning_tokens": call.reasoning_tokens,
        "cost": call.cost,
        "cost_source": call.cost_source,
        "price_source": call.price_source,
        "started_at": call.started_at.isoformat() if call.started_at else None,
        "ended_at": call.ended_at.isoformat() if call.ended_at else None,
        "duration_ms": call.duration_ms,
        "metadata": call.metadata,
        "composition": composition(call),
    }
