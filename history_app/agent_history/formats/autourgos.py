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
from collections.abc import Callable, Iterable, Iterator
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


def _pair_tool_calls(
    tools: list[dict[str, Any]], observations: list[dict[str, Any]]
) -> tuple[list[ToolCall], dict[str, Any]]:
    """Match observations to calls by tool name, in order, and say in what order they came
    when it is not the usual one (``observation_order``: the writer puts them back so).

    A tool that raised gives two observations in autourgos (``on_tool_error``'s
    ``"Error: …"``, then the ``"Error executing '…'"`` the agent returned): the second
    belongs to the call the first answered, not to a call of its own. Observations with no
    call stand alone (a call with no parameters)."""
    calls = [ToolCall(tool=str(t.get("tool") or "unknown"), params=t.get("params", {})) for t in tools]
    answers: list[list[str]] = [[] for _ in calls]
    arrived: list[tuple[int, int]] = []  # (call position, which of its answers)
    for obs in observations:
        name = str(obs.get("tool") or "unknown")
        text = value_text(obs.get("result"))
        text = "" if text is None else text
        if obs.get("error") is not None:  # this project's older files: the error on its own key
            text = tool_error_text(value_text(obs["error"]) or "")
        slot = next((i for i, c in enumerate(calls) if not answers[i] and c.tool == name), None)
        if slot is None:
            slot = next(
                (
                    i
                    for i, c in enumerate(calls)
                    if c.tool == name and len(answers[i]) == 1 and answers[i][0].startswith("Error: ")
                    and obs.get("error") is None
                ),
                None,
            )  # fmt: skip
        if slot is None:
            calls.append(ToolCall(tool=name))
            answers.append([])
            slot = len(calls) - 1
        answers[slot].append(text)
        arrived.append((slot, len(answers[slot]) - 1))
    kinds: dict[tuple[int, int], str] = {}
    for position, (call, texts) in enumerate(zip(calls, answers, strict=True)):
        if len(texts) == 2:
            call.error, call.result = texts[0][len("Error: ") :], texts[1]
            kinds[(position, 0)], kinds[(position, 1)] = "error", "result"
        elif texts:
            # What the agent returned; a failure it reported this way is the call's error.
            if texts[0].startswith(_TOOL_ERROR_PREFIXES):
                call.error = texts[0]
            else:
                call.result = texts[0]
            kinds[(position, 0)] = "result"
    order = [[position, kinds[(position, which)]] for position, which in arrived]
    return calls, ({OBSERVATION_ORDER: order} if order != usual_order(order) else {})


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
        calls, order = _pair_tool_calls(tools, observations)
        metadata.update(order)
        iterations.append(
            Iteration(
                index=it.get("iteration", position + 1),
                thought=thought_text(it.get("thought")),
                tool_calls=calls,
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


# -- Writing: the files autourgos-history writes, for the recorder and the exports ------
#
# Mirrors autourgos-history 2.2.9 (``AgentHistoryLogger`` and
# ``AgentHistoryMiddleware._sanitize_logs_for_output``) step for step: every value goes
# through one redaction (ours, a superset of the package's shapes, written as the
# package's plain ``[REDACTED]``), strings are cut at 512 characters after redaction with
# ``... [TRUNCATED]``, and the privacy flags withhold what the package withholds. The
# Markdown is not rendered from the JSON document: the package writes them differently
# (a thought is written only when truthy, a tool with no name is "Unknown tool", an error
# is written as the final answer ``"Error: …"``, cut as one string).

AUTOURGOS_MAX_CHARS = 512
AUTOURGOS_TRUNCATION = "... [TRUNCATED]"
_RULE_MARKER = re.compile(r"\[REDACTED:[A-Za-z0-9_.\-]{1,64}\]")
# Where one call's observations go when the record says nothing of their order: the
# package appends them as the callbacks arrive, and an agent reports every tool error
# (on_tool_error, while its tools run) before the results (on_tool_end, after them).
OBSERVATION_ORDER = "observation_order"


class FileValues:
    """A value as autourgos-history writes it in its files (``AgentHistoryLogger._redact``):
    structures walked (tuples and sets become lists, other objects their ``str``), every
    string redacted by ``redactor`` with its rule names dropped (``[REDACTED]``), a value
    under a key that names a secret replaced whole, and strings cut at ``max_chars``.

    Without a redactor (an export of stored runs, redacted when they arrived) only the
    markers are rewritten; ``max_chars=None`` cuts nothing."""

    # Strings already done, for the next time (the JSON file repeats what the Markdown
    # file wrote): kept until they hold this many characters, then started afresh.
    CACHE_CHARS = 4_000_000

    def __init__(self, redactor: Any = None, *, max_chars: int | None = AUTOURGOS_MAX_CHARS):
        self.redactor = redactor
        self.max_chars = max_chars
        self._done: dict[str, str] = {}
        self._cached_chars = 0

    def __call__(self, value: Any) -> Any:
        if type(value) is str and self.redactor is not None:
            done = self._done.get(value)
            if done is None:
                done = self._finish_leaf(self.redactor.redact_text(value))
                if self._cached_chars > self.CACHE_CHARS:
                    self._done.clear()
                    self._cached_chars = 0
                self._done[value] = done
                self._cached_chars += len(value)
            return done
        if self.redactor is None:
            return _rebuild(value, lambda leaf: self._finish_leaf(_plain_leaf(leaf)))
        plain = _rebuild(value, _plain_leaf)
        return _rebuild(self.redactor.redact(plain), self._finish_leaf, secret=self.redactor.is_secret_key)

    def text(self, value: Any) -> str:
        """``str`` of the redacted value (what the package's f-strings write)."""
        done = self(value)
        return done if isinstance(done, str) else str(done)

    def _finish_leaf(self, value: Any) -> Any:
        if isinstance(value, str):
            if "[REDACTED:" in value:
                value = _RULE_MARKER.sub(SOURCE_REDACTED, value)
            if self.max_chars is not None and len(value) > self.max_chars:
                value = value[: self.max_chars] + AUTOURGOS_TRUNCATION
        return value


def _plain_leaf(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _rebuild(value: Any, leaf: Callable[[Any], Any], secret: Callable[[str], bool] | None = None) -> Any:
    """``value`` with its containers rebuilt (tuples and sets as lists), ``leaf`` applied
    to everything else, and (with ``secret``) the value under a key that names a secret
    replaced whole; iterative, so stored values of any depth are written."""
    if not isinstance(value, _CONTAINERS):
        return leaf(value)
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        node, parent, slot = stack.pop()
        if isinstance(node, dict):
            out: Any = {}
            for key, item in node.items():
                if secret is not None and secret(str(key)):
                    out[key] = SOURCE_REDACTED
                elif isinstance(item, _CONTAINERS):
                    out[key] = None
                    stack.append((item, out, key))
                else:
                    out[key] = leaf(item)
        else:
            items = list(node)
            out = [None] * len(items)
            for index, item in enumerate(items):
                if isinstance(item, _CONTAINERS):
                    stack.append((item, out, index))
                else:
                    out[index] = leaf(item)
        parent[slot] = out
    return root[0]


def render_json(values: FileValues, value: Any) -> str:
    """``AgentHistoryLogger._render_json``: the redacted value as indented ASCII JSON."""
    done = values(value)
    try:
        return jsonstream.dumps(done, indent=2, ensure_ascii=True, default=str)
    except (TypeError, ValueError):
        return str(done)


def _tool_name(call: ToolCall) -> Any:
    return call.tool


def tool_error_text(error: str) -> str:
    """The observation the package writes for ``on_tool_error`` (``"Error: …"``)."""
    return f"Error: {error}"


def listed_calls(iteration: Iteration) -> list[ToolCall]:
    """The calls the package lists under ``tools`` (started by ``on_tool_start``): all of
    them but an observation that arrived for no started call, which a record holds as a
    call with no parameters and no start."""
    return [c for c in iteration.tool_calls if c.params is not None or c.started_at is not None]


def _answers(
    iteration: Iteration, name: Callable[[ToolCall], Any] = _tool_name
) -> list[tuple[int, str, Any, str]]:
    """Each call's observations as (call position, kind, tool, text): a tool that raised
    gives its error (``"Error: …"``, kind "error") then what the agent returned (kind
    "result"); a result alone gives one. An error alone that reads as the agent's own
    report (``"Error executing '…"``, ``"Error: …"``: read back from a file) is what the
    agent returned; any other is an ``on_tool_error`` with no result after it."""
    found = []
    for position, call in enumerate(iteration.tool_calls):
        result, error = call.result, call.error
        if error is not None and result is not None:
            found.append((position, "error", name(call), tool_error_text(error)))
            found.append((position, "result", name(call), result))
        elif result is not None:
            found.append((position, "result", name(call), result))
        elif error is not None and error.startswith(_TOOL_ERROR_PREFIXES):
            found.append((position, "result", name(call), error))
        elif error is not None:
            found.append((position, "error", name(call), tool_error_text(error)))
    return found


def usual_order(order: Iterable[list[Any]]) -> list[list[Any]]:
    """The order observations are written in when the record keeps none: every error
    (``on_tool_error`` fires while the tools run), then every result, each in call order.
    ``order`` holds ``[call position, "error" | "result"]`` pairs."""
    pairs = list(order)
    return sorted(o for o in pairs if o[1] == "error") + sorted(o for o in pairs if o[1] == "result")


def observations_of(
    iteration: Iteration, name: Callable[[ToolCall], Any] = _tool_name
) -> list[dict[str, Any]]:
    """The iteration's observations in the order the agent reported them: the order the
    record kept (``metadata["observation_order"]``) where it differs from the usual one."""
    answers = _answers(iteration, name)
    by_key = {(p, k): (tool, text) for p, k, tool, text in answers}
    order = iteration.metadata.get(OBSERVATION_ORDER) if isinstance(iteration.metadata, dict) else None
    keys = [tuple(item) for item in order] if isinstance(order, list) else []
    if sorted(keys, key=repr) != sorted(by_key, key=repr):
        keys = [tuple(item) for item in usual_order([p, k] for p, k, _, _ in answers)]
    return [{"tool": by_key[key][0], "result": by_key[key][1]} for key in keys]


def log_document(
    run: Run,
    *,
    iterations: Iterable[Iteration] | None = None,
    values: FileValues | None = None,
    thought: Callable[[Iteration], Any] | None = None,
    query: Any = _UNSET,
    final: Any = _UNSET,
    include_query: bool = True,
    include_tools: bool = True,
    include_observations: bool = True,
    include_final: bool = True,
    with_ids: bool = False,
    tool_name: Callable[[ToolCall], Any] = _tool_name,
    agent_name: Any = _UNSET,
) -> dict[str, Any]:
    """A run as the JSON document autourgos-history writes, in its exact layout.

    ``iterations`` (read once, as the document is written) stand in for the run's own, so
    an export streams a run of any length. ``values`` redacts and cuts every value
    (default: only our markers rewritten, nothing cut); ``thought`` gives an iteration's
    thought as the agent reported it; ``query``/``final`` the raw query and answer. The
    ``include_*`` flags withhold what the package's withhold. ``with_ids`` adds our run and
    session ids and the injected contexts (the recorder's files carry them).
    """
    values = values or FileValues(max_chars=None)
    query = run.input if query is _UNSET else query
    final = (run.output if run.error is None else None) if final is _UNSET else final

    def iteration_entry(iteration: Iteration) -> dict[str, Any]:
        entry = values(
            {
                "iteration": iteration.index,
                "thought": thought(iteration) if thought else iteration.thought,
                "tools": [{"tool": tool_name(c), "params": c.params} for c in listed_calls(iteration)],
                "observations": observations_of(iteration, tool_name),
            }
        )
        if not include_tools and entry["tools"]:
            entry["tools"] = SOURCE_REDACTED
        if not include_observations and entry["observations"]:
            entry["observations"] = SOURCE_REDACTED
        return entry

    head = values(
        {
            "query": query,
            "agent_name": (run.agent_name or "Agent") if agent_name is _UNSET else agent_name,
            "start_time": run.started_at.isoformat() if run.started_at else None,
            "end_time": run.ended_at.isoformat() if run.ended_at else None,
        }
    )
    if not include_query and query is not None:
        head["query"] = f"[REDACTED: length={len(str(query))}]"
    document: dict[str, Any] = {
        **head,
        "iterations": map(iteration_entry, run.iterations if iterations is None else iterations),
        "final_response": (values(final) if include_final else SOURCE_REDACTED)
        if final is not None
        else None,
        "error": values(run.error) if run.error is not None else None,
    }
    if with_ids:
        document["iterations"] = list(document["iterations"])
        document["run_id"] = run.run_id
        document["session_id"] = run.session_id
        document["injected_contexts"] = values(
            [
                {"text": c.text, "kind": c.kind, "target": c.target, "step": c.step,
                 "source_run_ids": c.source_run_ids, "settings": c.settings}
                for c in run.injected_contexts
            ]
        )  # fmt: skip
    return document


def markdown_head(
    run: Run, *, values: FileValues, query: Any = _UNSET, include_query: bool = True, agent_name: Any = _UNSET
) -> str:
    """``AgentHistoryLogger.start_task``: the title, when it started, the query, the rule."""
    query = run.input if query is _UNSET else query
    started = run.started_at.strftime("%Y-%m-%d %H:%M:%S") if run.started_at else ""
    shown = render_json(values, query) if include_query else f"[REDACTED: length={len(str(query))}]"
    name = (run.agent_name or "Agent") if agent_name is _UNSET else agent_name
    return f"# Task Session: {name}\n**Started At:** {started}\n\n## Initial Query\n{shown}\n\n---\n\n"


def markdown_iteration(
    iteration: Iteration,
    *,
    values: FileValues,
    thought: Any = _UNSET,
    include_tools: bool = True,
    include_observations: bool = True,
    tool_name: Callable[[ToolCall], Any] = _tool_name,
) -> str:
    """``AgentHistoryLogger.log_iteration``: one iteration's section."""
    said = iteration.thought if thought is _UNSET else thought
    block = f"## Iteration {iteration.index}\n\n"
    if said:
        block += f"### Thought\n{values.text(said)}\n\n"
    calls = listed_calls(iteration)
    if calls:
        block += "### Action (Tools)\n"
        for call in calls:
            params = render_json(values, call.params or {}) if include_tools else SOURCE_REDACTED
            block += f"**Tool:** `{tool_name(call) or 'Unknown tool'}`\n**Parameters:**\n```json\n{params}\n```\n\n"
    observations = observations_of(iteration, tool_name)
    if observations:
        block += "### Observations\n"
        for obs in observations:
            shown = render_json(values, obs["result"]) if include_observations else SOURCE_REDACTED
            block += f"**{obs['tool']}**:\n{shown}\n\n"
    return block + "---\n\n"


def markdown_final(answer: Any, *, values: FileValues, include_final: bool = True) -> str:
    """``AgentHistoryLogger.log_final``: the answer (or ``"Error: …"`` for a failed run)."""
    if include_final:
        return f"## Final Answer\n{render_json(values, answer)}\n"
    return f"## Final Answer\n{SOURCE_REDACTED}\n"


def iter_autourgos_markdown(
    run: Run,
    *,
    iterations: Iterable[Iteration] | None = None,
    values: FileValues | None = None,
    thought: Callable[[Iteration], Any] | None = None,
    query: Any = _UNSET,
    final: Any = _UNSET,
    include_query: bool = True,
    include_tools: bool = True,
    include_observations: bool = True,
    include_final: bool = True,
) -> Iterator[str]:
    """A run as the Markdown file autourgos-history writes, a section at a time
    (``iterations``, read once, stand in for the run's own: an export streams)."""
    values = values or FileValues(max_chars=None)
    yield markdown_head(run, values=values, query=query, include_query=include_query)
    for iteration in run.iterations if iterations is None else iterations:
        yield markdown_iteration(
            iteration,
            values=values,
            thought=thought(iteration) if thought else _UNSET,
            include_tools=include_tools,
            include_observations=include_observations,
        )
    answer = f"Error: {run.error}" if run.error is not None else run.output if final is _UNSET else final
    yield markdown_final(answer, values=values, include_final=include_final)


def render_autourgos_markdown(run: Run, **options: Any) -> str:
    """The whole Markdown file of ``iter_autourgos_markdown``."""
    return "".join(iter_autourgos_markdown(run, **options))
