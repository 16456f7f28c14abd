"""autourgos-history run logs: the JSON file, and the Markdown file as a fallback.

Real quirks handled here (all present in the real package's output): naive local
timestamps; no run or session id (a stable one is derived from the content, so
re-importing is idempotent); ``tools``/``observations`` may be the string
``"[REDACTED]"``; observations can outnumber tools; ``thought`` may be null, a list or a
dict; errors give ``final_response: null`` and ``error`` set. Files written by this
project's own middleware add ``run_id``/``session_id``, which are used as they are.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

from ..records import (
    INDEX_RANGE,
    MAX_DEPTH,
    Iteration,
    RecordError,
    Run,
    ToolCall,
    checked_payload,
    count_lone_surrogates,
    is_index,
    json_text_depth,
    parse_time,
)

FRAMEWORK = "autourgos"
SOURCE_REDACTED = "[REDACTED]"
# autourgos reports a failing tool through on_tool_end with one of these prefixes.
_TOOL_ERROR_PREFIXES = ("Error executing '", "Error: ")


def detect(payload: dict[str, Any]) -> bool:
    return "iterations" in payload and ("final_response" in payload or "start_time" in payload)


def derive_run_id(payload: dict[str, Any]) -> str:
    """A stable id for a log that has none: the same content always gives the same id."""
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return "au-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def derive_session_id(agent_name: str, started_at: datetime | None) -> str:
    """Logs of one agent on one day form a session, since autourgos has no sessions."""
    # Session ids may not hold "/" or control characters; an agent name may.
    name = "".join("-" if c == "/" or ord(c) < 32 else c for c in (agent_name or "Agent"))
    day = started_at.date().isoformat() if started_at else "undated"
    return f"autourgos:{name}:{day}"[:255]


def thought_text(thought: Any) -> str | None:
    if thought is None:
        return None
    if isinstance(thought, str):
        return thought
    if isinstance(thought, list):
        return "\n".join(t if isinstance(t, str) else json.dumps(t, ensure_ascii=False) for t in thought)
    return json.dumps(thought, ensure_ascii=False, indent=2)


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _pair_tool_calls(tools: list[dict[str, Any]], observations: list[dict[str, Any]]) -> list[ToolCall]:
    """Match observations to calls by tool name, in order; extra observations stand alone."""
    calls = [ToolCall(tool=str(t.get("tool") or "unknown"), params=t.get("params")) for t in tools]
    answered = [False] * len(calls)
    for obs in observations:
        name = str(obs.get("tool") or "unknown")
        result = _as_text(obs.get("result"))
        slot = next((i for i, c in enumerate(calls) if not answered[i] and c.tool == name), None)
        if slot is None:
            calls.append(ToolCall(tool=name))
            answered.append(False)
            slot = len(calls) - 1
        answered[slot] = True
        if obs.get("error") is not None:
            # Written by this project's middleware, which keeps on_tool_error's message.
            calls[slot].error = _as_text(obs["error"])
        elif isinstance(result, str) and result.startswith(_TOOL_ERROR_PREFIXES):
            calls[slot].error = result
        else:
            calls[slot].result = result
    return calls


def _check(payload: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    iterations = payload.get("iterations")
    if not isinstance(iterations, list):
        errors.append(("$.iterations", "must be an array"))
        return errors
    for i, it in enumerate(iterations):
        path = f"$.iterations[{i}]"
        if not isinstance(it, dict):
            errors.append((path, "must be an object"))
            continue
        for key in ("tools", "observations"):
            value = it.get(key, [])
            if value is None or value == SOURCE_REDACTED:
                continue
            if not isinstance(value, list):
                errors.append((f"{path}.{key}", 'must be an array or "[REDACTED]"'))
                continue
            for j, entry in enumerate(value):
                if not isinstance(entry, dict):
                    errors.append((f"{path}.{key}[{j}]", "must be an object"))
        number = it.get("iteration")
        if number is not None and not is_index(number):
            errors.append((f"{path}.iteration", INDEX_RANGE))
    for key in ("agent_name", "error", "run_id", "session_id", "parent_run_id"):
        value = payload.get(key)
        if value is not None and not isinstance(value, str):
            errors.append((f"$.{key}", "must be a string"))
    return errors


def parse(payload: dict[str, Any], *, imported_from: str = "json") -> list[Run]:
    errors = _check(payload)
    times = {}
    for key in ("start_time", "end_time"):
        try:
            times[key] = parse_time(payload.get(key))
        except ValueError as exc:
            errors.append((f"$.{key}", f"must be an ISO 8601 timestamp ({exc})"))
    if errors:
        raise RecordError(errors)

    iterations = []
    for position, it in enumerate(payload["iterations"]):
        tools, observations = it.get("tools") or [], it.get("observations") or []
        metadata = {}
        if tools == SOURCE_REDACTED:
            metadata["tools_redacted_by_source"] = True
            tools = []
        if observations == SOURCE_REDACTED:
            metadata["observations_redacted_by_source"] = True
            observations = []
        iterations.append(
            Iteration(
                index=it.get("iteration", position + 1),
                thought=thought_text(it.get("thought")),
                tool_calls=_pair_tool_calls(tools, observations),
                metadata=metadata,
            )
        )

    error = payload.get("error")
    final = payload.get("final_response")
    agent_name = payload.get("agent_name") or "Agent"
    known = {
        "query", "agent_name", "start_time", "end_time", "iterations", "final_response",
        "error", "run_id", "session_id", "format", "user_id", "parent_run_id",
        "injected_contexts",
    }  # fmt: skip
    metadata: dict[str, Any] = {"imported_from": imported_from}
    extra = {k: v for k, v in payload.items() if k not in known}
    if extra:
        metadata["extra_fields"] = extra
    run = Run(
        run_id=payload.get("run_id") or derive_run_id(payload),
        session_id=payload.get("session_id") or derive_session_id(agent_name, times["start_time"]),
        parent_run_id=payload.get("parent_run_id"),
        kind="agent",
        status="failed" if error else "completed",
        agent_name=agent_name,
        user_id=_as_text(payload.get("user_id")) or "",
        framework=FRAMEWORK,
        input=_as_text(payload.get("query")) or "",
        output=_as_text(final),
        error=error,
        started_at=times["start_time"],
        ended_at=times["end_time"],
        iterations=iterations,
        metadata=metadata,
    )
    contexts = payload.get("injected_contexts")
    if contexts:
        # The project's own middleware adds the contexts it injected; reuse the native reader.
        run.injected_contexts = Run.from_dict(
            {"run_id": run.run_id, "session_id": run.session_id, "injected_contexts": contexts}
        ).injected_contexts
    return [run]


# -- Markdown fallback -------------------------------------------------------------

_ITERATION = re.compile(r"^## Iteration (\d+)\s*$")
_TOOL = re.compile(r"^\*\*Tool:\*\* `(.*)`\s*$")
_OBSERVATION = re.compile(r"^\*\*(.+?)\*\*:\s*$")


def _json_literal(text: str, path: str, max_depth: int) -> Any:
    text = text.strip()
    if not text:
        return None
    # Measured before parsing: Python's parser recurses, so a deep literal would be JSON
    # or text depending on the caller's stack. The same text gets the same answer: a
    # JSON-shaped literal too deep is refused with its path, deep prose (an answer of
    # "[[[[…") is kept as the text it is.
    if json_text_depth(text) > max_depth:
        if text[0] in "[{" and text[-1] in "]}" and json_text_depth(text, balanced=True) >= 0:
            raise RecordError([(path, f"is nested deeper than {max_depth} levels of objects and arrays")])
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text  # not JSON: kept as the text it is


def parse_markdown(text: str, *, max_depth: int = MAX_DEPTH) -> list[Run]:
    """Parse the ``.md`` log defensively; used only when no ``.json`` exists.

    A thought is raw text and may itself contain ``## Iteration`` or ``## Final Answer``
    lines, so a heading only counts when it is the next expected one and follows a
    ``---`` separator, exactly as the writer lays them out.
    """
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# Task Session:"):
        raise RecordError([("$", "not an autourgos Markdown log (no '# Task Session:' title)")])
    agent_name = lines[0][len("# Task Session:") :].strip() or "Agent"
    started = None
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    expected = 1
    last_content = ""
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("**Started At:**") and not sections:
            started = stripped[len("**Started At:**") :].strip()
            continue
        heading = None
        if line == "## Initial Query" and not sections:
            heading = "query"
        elif last_content == "---":
            match = _ITERATION.match(line)
            if match and int(match.group(1)) == expected:
                heading, expected = f"iteration:{expected}", expected + 1
            elif line == "## Final Answer":
                heading = "final"
        if heading:
            current = []
            sections.append((heading, current))
        elif current is not None:
            current.append(line)
        if stripped:
            last_content = stripped
    # Only the last "## Final Answer" after the last iteration is the real one.
    finals = [i for i, (h, _) in enumerate(sections) if h == "final"]
    for i in reversed(finals[:-1]):
        name, body = sections[i - 1]
        sections[i - 1] = (name, body + ["---", "", "## Final Answer"] + sections[i][1])
        del sections[i]

    payload: dict[str, Any] = {
        "agent_name": agent_name,
        "start_time": started.replace(" ", "T") if started else None,
        "end_time": None,
        "iterations": [],
        "final_response": None,
        "error": None,
    }
    for heading, body in sections:
        while body and body[-1].strip() in ("", "---"):
            body = body[:-1]
        if heading == "query":
            payload["query"] = _json_literal("\n".join(body), "$.query", max_depth)
        elif heading == "final":
            answer = _json_literal("\n".join(body), "$.final_response", max_depth)
            if isinstance(answer, str) and answer.startswith("Error: "):
                payload["error"] = answer[len("Error: ") :]
            else:
                payload["final_response"] = answer
        else:
            position = len(payload["iterations"])
            payload["iterations"].append(
                _parse_md_iteration(int(heading.split(":")[1]), body, f"$.iterations[{position}]", max_depth)
            )
    # Fenced JSON may hold anything: the same checks as a JSON payload's.
    payload, replaced = checked_payload(payload, max_depth=max_depth)
    return count_lone_surrogates(parse(payload, imported_from="markdown"), replaced)


def _parse_md_iteration(number: int, body: list[str], path: str, max_depth: int) -> dict[str, Any]:
    parts: dict[str, list[str]] = {}
    current = None
    for line in body:
        if line in ("### Thought", "### Action (Tools)", "### Observations") and (
            current != "### Thought" or line != "### Thought"
        ):
            current = line
            parts.setdefault(current, [])
        elif current:
            parts[current].append(line)
    thought = "\n".join(parts.get("### Thought", [])).strip("\n") or None
    tools: list[dict[str, Any]] = []
    lines = parts.get("### Action (Tools)", [])
    i = 0
    while i < len(lines):
        match = _TOOL.match(lines[i])
        if match:
            fence_start = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            params: Any = None
            if fence_start is not None:
                fence_end = next(
                    (j for j in range(fence_start + 1, len(lines)) if lines[j].startswith("```")),
                    len(lines),
                )
                params = _json_literal(
                    "\n".join(lines[fence_start + 1 : fence_end]),
                    f"{path}.tools[{len(tools)}].params",
                    max_depth,
                )
                i = fence_end
            # A withheld call still names its tool in Markdown: keep the name.
            tools.append({"tool": match.group(1), "params": params})
        i += 1
    observations: list[dict[str, Any]] = []
    obs_lines = parts.get("### Observations", [])
    current_tool, buffer = None, []
    for line in [*obs_lines, "**__end__**:"]:
        match = _OBSERVATION.match(line)
        if match:
            if current_tool is not None:
                where = f"{path}.observations[{len(observations)}].result"
                observations.append(
                    {"tool": current_tool, "result": _json_literal("\n".join(buffer), where, max_depth)}
                )
            current_tool, buffer = match.group(1), []
        else:
            buffer.append(line)
    return {"iteration": number, "thought": thought, "tools": tools, "observations": observations}
