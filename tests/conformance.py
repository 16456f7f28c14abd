"""The rule "stored as it was sent", applied to a recorded request and a stored model call.

- Messages are compared one for one, in order; their number must be equal.
- Roles as the wire had them. Where the stored call's messages came from an
  instrumentation (``messages_source`` is not the wire itself: not "middleware" or
  "native") and it reported another role, that is a *note*, not a difference: the page
  says whose roles it shows.
- Content byte-exact: a text content is one text part; a list of parts is compared part
  for part (text parts by their text; other parts as the values they are). Null and ""
  are both "no content".
- Tool-call requests: id, name, and the arguments as the exact text where the stored
  request says it kept the text (``arguments_exact``) and ``exact_arguments`` asks for
  it; else the arguments as JSON values (key order and whitespace aside).
- ``tool_call_id`` equal; ``name`` equal, except that a name an instrumentation reports
  for a message that was sent without one (LangChain names a tool message's tool) is a
  note.

The expected messages of a Responses API request are its body normalised the library's
one documented way (``messages.responses_messages``).
"""

from __future__ import annotations

import json
from typing import Any

from history_app.agent_history import messages as wire

WIRE_SOURCES = ("middleware", "native", "")


def expected(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages a recorded request body sent, as stored-message dicts."""
    if "messages" in body:
        found = [wire.chat_message(m) for m in body["messages"]]
    else:
        found = wire.responses_messages(body)
    return [m.to_dict() for m in found]


def _parts(message: dict[str, Any]) -> list[Any]:
    parts = message.get("parts") or []
    if not parts:
        content = message.get("content") or ""
        return [("text", content)] if content else []
    shown = []
    for part in parts:
        if part.get("type") == "text":
            shown.append(("text", part.get("text")))
        else:
            shown.append(part)
    return shown


def _arguments_equal(sent: str, stored: dict[str, Any], exact: bool) -> bool:
    if exact and stored.get("arguments_exact", True):
        return sent == stored.get("arguments", "")
    try:
        return json.loads(sent or "{}") == json.loads(stored.get("arguments") or "{}")
    except ValueError:
        return sent == stored.get("arguments", "")


def message_differences(
    sent: dict[str, Any], stored: dict[str, Any], where: str, *, exact_arguments: bool, source: str
) -> tuple[list[str], list[str]]:
    differences: list[str] = []
    notes: list[str] = []
    if sent.get("role") != stored.get("role"):
        line = f"{where}: role {sent.get('role')!r} stored as {stored.get('role')!r}"
        (differences if source in WIRE_SOURCES else notes).append(line)
    if _parts(sent) != _parts(stored):
        differences.append(f"{where}: content {_parts(sent)!r} stored as {_parts(stored)!r}")
    if (sent.get("tool_call_id") or "") != (stored.get("tool_call_id") or ""):
        differences.append(
            f"{where}: tool_call_id {sent.get('tool_call_id')!r} stored as {stored.get('tool_call_id')!r}"
        )
    if (sent.get("name") or "") != (stored.get("name") or ""):
        line = f"{where}: name {sent.get('name')!r} stored as {stored.get('name')!r}"
        # An instrumentation may name a message's sender (a tool message's tool) that the
        # request did not: a note, like a mapped role. A name sent and not kept is lost.
        (notes if sent.get("name") in (None, "") and source not in WIRE_SOURCES else differences).append(line)
    calls, kept = sent.get("tool_calls") or [], stored.get("tool_calls") or []
    if len(calls) != len(kept):
        differences.append(f"{where}: {len(calls)} tool calls stored as {len(kept)}")
    for k, (call, copy) in enumerate(zip(calls, kept, strict=False)):
        for key in ("id", "name"):
            if call.get(key) != copy.get(key):
                differences.append(
                    f"{where}.tool_calls[{k}]: {key} {call.get(key)!r} stored as {copy.get(key)!r}"
                )
        if not _arguments_equal(call.get("arguments", ""), copy, exact_arguments):
            differences.append(
                f"{where}.tool_calls[{k}]: arguments {call.get('arguments')!r} stored as {copy.get('arguments')!r}"
            )
    return differences, notes


def call_differences(
    body: dict[str, Any], call: dict[str, Any], *, exact_arguments: bool = True
) -> tuple[list[str], list[str]]:
    """(differences, notes) between a recorded request body and a stored call's dict."""
    sent, stored = expected(body), call.get("messages") or []
    source = call.get("messages_source", "")
    differences: list[str] = []
    notes: list[str] = []
    if len(sent) != len(stored):
        differences.append(f"{len(sent)} messages sent, {len(stored)} stored")
    for n, (one, other) in enumerate(zip(sent, stored, strict=False)):
        found, said = message_differences(
            one, other, f"messages[{n}]", exact_arguments=exact_arguments, source=source
        )
        differences += found
        notes += said
    return differences, notes


def answer_differences(
    answer: dict[str, Any], call: dict[str, Any], *, exact_arguments: bool = True
) -> list[str]:
    """Differences between what the server answered (a chat message dict) and the stored
    call's answer (its ``answer`` message, else its ``output`` text)."""
    sent = wire.chat_message(answer).to_dict()
    stored = call.get("answer") or {"role": "assistant", "content": call.get("output") or ""}
    found, _ = message_differences(sent, stored, "answer", exact_arguments=exact_arguments, source="")
    return found


def match(
    recorded: list[Any], calls: list[dict[str, Any]], *, exact_arguments: bool = True
) -> tuple[int, list[str], list[str]]:
    """How many recorded requests have a stored call equal to them (each call used once),
    with the differences of the nearest call for each that has none, and the notes."""
    free = list(calls)
    exact = 0
    report: list[str] = []
    notes: list[str] = []
    for n, request in enumerate(recorded):
        best: tuple[int, list[str], list[str], int] | None = None
        for i, call in enumerate(free):
            found, said = call_differences(request.body, call, exact_arguments=exact_arguments)
            found += answer_differences(request.answer, call, exact_arguments=exact_arguments)
            if best is None or len(found) < len(best[1]):
                best = (i, found, said, i)
            if not found:
                break
        if best is not None and not best[1]:
            exact += 1
            notes += best[2]
            free.pop(best[0])
        else:
            report.append(f"request {n + 1}: " + ("; ".join(best[1][:6]) if best else "no stored call"))
    return exact, report, notes
