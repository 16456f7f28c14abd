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
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from .. import jsonstream
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
from ..text import SOURCE_REDACTED, thought_text, value_text

FRAMEWORK = "autourgos"
# autourgos reports a failing tool through on_tool_end with one of these prefixes.
_TOOL_ERROR_PREFIXES = ("Error executing '", "Error: ")


_UNSET: Any = object()


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


def _pair_tool_calls(tools: list[dict[str, Any]], observations: list[dict[str, Any]]) -> list[ToolCall]:
    """Match observations to calls by tool name, in order; extra observations stand alone."""
    calls = [ToolCall(tool=str(t.get("tool") or "unknown"), params=t.get("params")) for t in tools]
    answered = [False] * len(calls)
    for obs in observations:
        name = str(obs.get("tool") or "unknown")
        result = value_text(obs.get("result"))
        slot = next((i for i, c in enumerate(calls) if not answered[i] and c.tool == name), None)
        if slot is None:
            calls.append(ToolCall(tool=name))
            answered.append(False)
            slot = len(calls) - 1
        answered[slot] = True
        if obs.get("error") is not None:
            # Written by this project's middleware, which keeps on_tool_error's message.
            calls[slot].error = value_text(obs["error"])
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
        user_id=value_text(payload.get("user_id")) or "",
        framework=FRAMEWORK,
        input=value_text(payload.get("query")) or "",
        output=value_text(final),
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


# -- Writing: the layout autourgos-history writes, for the recorder and the exports ------


def _same(value: Any) -> Any:
    return value


def log_document(
    run: Run,
    *,
    iterations: Iterable[Iteration] | None = None,
    redact: Callable[[Any], Any] = _same,
    thought: Callable[[Iteration], Any] | None = None,
    query: Any = _UNSET,
    final: Any = _UNSET,
    include_query: bool = True,
    include_tools: bool = True,
    include_observations: bool = True,
    include_final: bool = True,
    for_markdown: bool = False,
    with_ids: bool = False,
) -> dict[str, Any]:
    """A run as the JSON document autourgos-history writes, in its exact layout.

    ``iterations`` (read once, as the Markdown is written) stand in for the run's own, so
    an export streams a run of any length. ``redact`` is applied to every value, and the
    ``include_*`` flags withhold what autourgos's privacy flags withhold: the Markdown file
    names withheld tools one by one (``[REDACTED]`` parameters) where the JSON file has the
    single string ``"[REDACTED]"``. ``with_ids`` adds our run and session ids and the
    injected contexts (the recorder's files carry them).
    """
    query = run.input if query is _UNSET else query
    final = run.output if final is _UNSET else final

    def iteration_entry(iteration: Iteration) -> dict[str, Any]:
        calls = iteration.tool_calls
        tools: Any = [
            {"tool": c.tool, "params": redact(c.params if c.params is not None else {})} for c in calls
        ]
        observations: Any = []
        for c in calls:
            if c.result is None and c.error is None:
                continue
            entry: dict[str, Any] = {
                "tool": c.tool,
                "result": redact(c.result if c.result is not None else c.error),
            }
            if c.error is not None:
                entry["error"] = redact(c.error)
            observations.append(entry)
        if not include_tools and tools:
            tools = (
                [{"tool": c.tool, "params": SOURCE_REDACTED} for c in calls]
                if for_markdown
                else SOURCE_REDACTED
            )
        if not include_observations and observations:
            observations = (
                [{"tool": o["tool"], "result": SOURCE_REDACTED} for o in observations]
                if for_markdown
                else SOURCE_REDACTED
            )
        said = thought(iteration) if thought else iteration.thought
        return {
            "iteration": iteration.index,
            "thought": redact(said),
            "tools": tools,
            "observations": observations,
        }

    document: dict[str, Any] = {
        "query": redact(query) if include_query else f"[REDACTED: length={len(query or '')}]",
        "agent_name": run.agent_name or "Agent",
        "start_time": run.started_at.isoformat() if run.started_at else None,
        "end_time": run.ended_at.isoformat() if run.ended_at else None,
        "iterations": map(iteration_entry, run.iterations if iterations is None else iterations),
        "final_response": (redact(final) if include_final else SOURCE_REDACTED)
        if final is not None
        else None,
        "error": redact(run.error) if run.error is not None else None,
    }
    if with_ids:
        document["iterations"] = list(document["iterations"])
        document["run_id"] = run.run_id
        document["session_id"] = run.session_id
        document["injected_contexts"] = [
            {"text": redact(c.text), "kind": c.kind, "target": c.target, "step": c.step,
             "source_run_ids": c.source_run_ids, "settings": c.settings}
            for c in run.injected_contexts
        ]  # fmt: skip
    return document


def _md_value(value: Any) -> str:
    """autourgos writes values as JSON literals, except its own "[REDACTED…]" markers."""
    if isinstance(value, str) and value.startswith("[REDACTED"):
        return value
    return json.dumps(value)


def render_autourgos_markdown(data: Mapping[str, Any]) -> str:
    """The ``.md`` twin of an autourgos JSON log, in the package's exact layout."""
    return "".join(iter_autourgos_markdown(data))


def iter_autourgos_markdown(data: Mapping[str, Any]) -> Iterator[str]:
    """``render_autourgos_markdown`` an iteration at a time; ``data["iterations"]`` may be
    any iterable, read once (an export streams a run of any length this way)."""
    start = data.get("start_time")
    started = datetime.fromisoformat(start).strftime("%Y-%m-%d %H:%M:%S") if start else ""
    lines = [f"# Task Session: {data.get('agent_name')}", f"**Started At:** {started}", ""]
    lines += ["## Initial Query", _md_value(data.get("query")), "", "---", ""]
    yield "\n".join(lines) + "\n"
    for iteration in data.get("iterations", []):
        lines = [f"## Iteration {iteration.get('iteration')}", ""]
        thought = iteration.get("thought")
        if thought is not None:
            lines += ["### Thought", thought if isinstance(thought, str) else str(thought), ""]
        tools = iteration.get("tools")
        if tools:
            lines.append("### Action (Tools)")
            for tool in tools if isinstance(tools, list) else []:
                params = tool.get("params")
                lines += [f"**Tool:** `{tool.get('tool')}`", "**Parameters:**", "```json"]
                text = params if params == SOURCE_REDACTED else jsonstream.dumps(params, indent=2)
                lines += [text, "```", ""]
        observations = iteration.get("observations")
        if observations and isinstance(observations, list):
            lines.append("### Observations")
            for obs in observations:
                lines += [f"**{obs.get('tool')}**:", _md_value(obs.get("result")), ""]
        lines += ["---", ""]
        yield "\n".join(lines) + "\n"
    lines = ["## Final Answer"]
    if data.get("error") is not None:
        lines.append(json.dumps(f"Error: {data['error']}"))
    else:
        lines.append(_md_value(data.get("final_response")))
    yield "\n".join(lines) + "\n"
