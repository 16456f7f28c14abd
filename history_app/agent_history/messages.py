"""Model-call messages as they were sent, from every shape a source reports them in.

One module decides how a request's messages become ``ModelMessage`` records, so that the
middleware, the OTLP reader and the formats keep the same things: the role verbatim, the
text, ordered content parts, tool-call requests (id, name, the arguments as the exact text
sent), the ``tool_call_id`` a tool message answers, the sender's ``name``, and every other
key in ``extra`` (nothing is dropped).

Shapes read here:

- OpenAI chat completions messages (``{"role", "content", "tool_calls", …}``, dicts or the
  client's objects) and answers (``choices[0].message``).
- The Responses API, which has no message list: ``responses_messages`` normalises its
  ``instructions`` and ``input`` items in one documented way (see that function).
- The OpenTelemetry GenAI conventions' messages (``{"role", "parts"}``) and the older
  GenAI events' bodies.
- OpenInference's and OpenLLMetry's flattened attributes (``openinference_message``,
  ``openllmetry_message``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .records import ModelMessage, ToolRequest
from .text import value_text

CHAT = "chat.completions"
RESPONSES = "responses"

# Part types whose text is the message's text, in the shapes each source names them.
_TEXT_PARTS = {"text", "input_text", "output_text"}
_REASONING_PARTS = {"reasoning", "thinking"}


def _plain(value: Any) -> Any:
    """A client's object (pydantic models of the openai package, dataclasses) as plain
    data; plain data as itself."""
    if isinstance(value, Mapping):
        return dict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(exclude_unset=True)
        except TypeError:
            return dump()
    return value


def _text(value: Any) -> str:
    return value_text(value) or ""


def text_part(text: str, **rest: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **rest}


def _content(message: ModelMessage, content: Any) -> None:
    """Fill ``message``'s content from a chat or Responses content value: a text, null,
    or a list of parts (text parts become ``{"type": "text", "text"}``, a part whose type
    was another name for text keeps that name as ``wire_type``; every other part is kept
    verbatim)."""
    if content is None:
        message.content_null = True
        return
    if isinstance(content, str):
        message.content = content
        return
    if not isinstance(content, list | tuple):
        message.content = _text(content)
        return
    parts: list[dict[str, Any]] = []
    for item in content:
        item = _plain(item)
        if isinstance(item, str):
            parts.append(text_part(item))
        elif isinstance(item, dict) and item.get("type") in _TEXT_PARTS and isinstance(item.get("text"), str):
            rest = {k: v for k, v in item.items() if k not in ("type", "text")}
            if item["type"] != "text":
                rest["wire_type"] = item["type"]
            parts.append(text_part(item["text"], **rest))
        elif isinstance(item, dict):
            parts.append(item)
        else:
            parts.append({"type": "value", "value": item})
    message.parts = parts
    message.content = parts_text(parts)


def parts_text(parts: Iterable[Mapping[str, Any]]) -> str:
    """The text of a message's parts: its text parts, one a line."""
    return "\n".join(p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str))


def _arguments(value: Any) -> tuple[str, bool]:
    """Tool-call arguments as text, and whether that text is the one sent."""
    if isinstance(value, str):
        return value, True
    if value is None:
        return "", False
    return json.dumps(value, ensure_ascii=False), False


def chat_tool_request(call: Any) -> ToolRequest:
    """A chat completions ``tool_calls`` item (``{"id", "type", "function": {"name",
    "arguments"}}``), its arguments the exact text."""
    call = _plain(call)
    if not isinstance(call, dict):
        return ToolRequest(name=_text(call), arguments_exact=False)
    function = _plain(call.get("function"))
    if not isinstance(function, dict):
        function = {}
    arguments, exact = _arguments(function.get("arguments"))
    extra = {k: v for k, v in call.items() if k not in ("id", "type", "function")}
    extra.update({f"function.{k}": v for k, v in function.items() if k not in ("name", "arguments")})
    return ToolRequest(
        name=_text(function.get("name")),
        arguments=arguments,
        id=_text(call.get("id")),
        type=_text(call.get("type")) or "function",
        arguments_exact=exact,
        extra=extra,
    )


_CHAT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def chat_message(message: Any, part: str = "") -> ModelMessage:
    """An OpenAI chat completions message (a dict or the client's object) as sent."""
    message = _plain(message)
    if isinstance(message, str):
        return ModelMessage(role="user", content=message, part=part)
    if not isinstance(message, dict):
        role = getattr(message, "role", None)
        content = getattr(message, "content", message)
        message = {"role": role, "content": content}
    found = ModelMessage(role=_text(message.get("role")), part=part)
    _content(found, message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list | tuple):
        found.tool_calls = [chat_tool_request(c) for c in calls]
    found.tool_call_id = _text(message.get("tool_call_id"))
    found.name = _text(message.get("name"))
    found.extra = {k: v for k, v in message.items() if k not in _CHAT_KEYS}
    return found


def chat_answer(response: Any) -> tuple[ModelMessage | None, str]:
    """A chat completions response's answer (its first choice's message) and finish
    reason; (None, "") when ``response`` is not one."""
    response = _plain(response)
    if not isinstance(response, dict):
        return None, ""
    choices = response.get("choices")
    if isinstance(choices, list | tuple) and choices:
        first = _plain(choices[0])
        if isinstance(first, dict) and first.get("message") is not None:
            return chat_message(first["message"]), _text(first.get("finish_reason"))
    if isinstance(response.get("output"), list):
        return responses_answer(response)
    return None, ""


# -- The Responses API ----------------------------------------------------------------


def responses_messages(body: Mapping[str, Any]) -> list[ModelMessage]:
    """The messages a Responses API request sent, normalised (the one documented way):

    - ``instructions``, when present, is the first message, role ``system``.
    - ``input`` as a string is one ``user`` message.
    - Each ``input`` item is one message, in order:
      a ``message`` item (or an item with a ``role`` and no type) keeps its role and
      content (``input_text``/``output_text`` parts become text parts with ``wire_type``);
      a ``function_call`` is an ``assistant`` message with null content asking for one
      tool (its ``call_id`` as the request's id, the arguments as the exact text);
      a ``function_call_output`` is a ``tool`` message answering ``call_id`` with its
      output; a ``reasoning`` item is an ``assistant`` message of one ``reasoning`` part
      (the item verbatim); any other item is a message with an empty role and the item
      verbatim as its one part.
    - What an item holds besides those (``id``, ``status``…) is kept in ``extra``.
    """
    found: list[ModelMessage] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        found.append(ModelMessage(role="system", content=instructions, extra={"from": "instructions"}))
    elif isinstance(instructions, list):
        found.extend(responses_item(item) for item in instructions)
    items = body.get("input")
    if isinstance(items, str):
        found.append(ModelMessage(role="user", content=items))
    elif isinstance(items, list | tuple):
        found.extend(responses_item(item) for item in items)
    return found


def responses_item(item: Any) -> ModelMessage:
    item = _plain(item)
    if not isinstance(item, dict):
        return ModelMessage(role="user", content=_text(item))
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        found = ModelMessage(role=_text(item.get("role")))
        _content(found, item.get("content"))
        found.extra = {k: v for k, v in item.items() if k not in ("role", "content")}
        return found
    if kind == "function_call":
        arguments, exact = _arguments(item.get("arguments"))
        rest = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", "arguments")}
        request = ToolRequest(
            name=_text(item.get("name")),
            arguments=arguments,
            id=_text(item.get("call_id")),
            arguments_exact=exact,
            extra=rest,
        )
        return ModelMessage(role="assistant", content_null=True, tool_calls=[request], extra={"type": kind})
    if kind == "function_call_output":
        found = ModelMessage(role="tool", tool_call_id=_text(item.get("call_id")))
        _content(found, item.get("output"))
        found.extra = {k: v for k, v in item.items() if k not in ("call_id", "output")}
        return found
    if kind == "reasoning":
        return ModelMessage(role="assistant", parts=[item], content_null=True, extra={"type": kind})
    return ModelMessage(role="", parts=[item], extra={"type": _text(kind)})


def responses_answer(response: Mapping[str, Any]) -> tuple[ModelMessage, str]:
    """A Responses API response's ``output`` items as one assistant message: the text of
    its message items, their other parts, its reasoning items as parts, and each
    ``function_call`` as a tool-call request; its ``status`` as the finish reason."""
    answer = ModelMessage(role="assistant")
    parts: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        message = responses_item(item)
        answer.tool_calls.extend(message.tool_calls)
        if message.parts:
            parts.extend(message.parts)
        elif message.content:
            parts.append(text_part(message.content))
    if any(p.get("type") != "text" for p in parts) or len(parts) > 1:
        answer.parts = parts
    answer.content = parts_text(parts)
    answer.content_null = not parts
    return answer, _text(response.get("status"))


# -- The OpenTelemetry GenAI conventions ------------------------------------------------


# Providers whose APIs take a model request's tool results together in one message (content
# blocks of one user turn); the others (OpenAI's chat completions and Responses APIs, and
# the many compatible with them) take one tool message per result.
_GROUPED_TOOL_RESULTS = frozenset(
    {
        "anthropic",
        "aws.bedrock",
        "bedrock",
        "gcp.gemini",
        "gcp.gen_ai",
        "gcp.vertex_ai",
        "google",
        "google-gla",
        "google-vertex",
    }
)


def one_message_per_tool_result(provider: str) -> bool:
    """Whether ``provider``'s wire sends each tool result as a message of its own."""
    return provider.lower() not in _GROUPED_TOOL_RESULTS


def genai_messages(item: Any, *, split_tool_results: bool = False) -> list[ModelMessage]:
    """A GenAI input message as the messages it was sent as. With ``split_tool_results``
    (a provider whose wire sends one tool message per result, as Pydantic AI's OpenAI
    model does), a message holding several ``tool_call_response`` parts is one message per
    result, in order, each answering its call, and the parts between them one message
    each run of them; otherwise the one message ``genai_message`` reads."""
    parts = item.get("parts") if isinstance(item, dict) else None
    if (
        not split_tool_results
        or not isinstance(parts, list)
        or len(parts) < 2
        or not any(isinstance(p, dict) and p.get("type") == "tool_call_response" for p in parts)
    ):
        return [genai_message(item)[0]]
    found: list[ModelMessage] = []
    others: list[Any] = []

    def flush() -> None:
        if others:
            found.append(genai_message({**item, "parts": list(others)})[0])
            others.clear()

    for part in parts:
        if isinstance(part, dict) and part.get("type") == "tool_call_response":
            flush()
            found.append(genai_message({**item, "parts": [part]})[0])
        else:
            others.append(part)
    flush()
    return found


def genai_message(item: Any) -> tuple[ModelMessage, str]:
    """A GenAI message (1.37+: ``{"role", "parts", "name"?, "finish_reason"?}``; or the
    older events' ``{"role"?, "content", "tool_calls"?, "id"?}`` body) and its finish
    reason. Part types: ``text`` becomes a text part; ``tool_call`` a tool-call request
    (its arguments, any JSON, encoded unless they were a text); ``tool_call_response``
    makes the message answer that call (``tool_call_id``); ``reasoning``/``thinking`` a
    ``reasoning`` part; ``blob``, ``file``, ``uri`` and unknown types are kept verbatim."""
    if not isinstance(item, dict):
        return ModelMessage(role="user", content=_text(item)), ""
    role = _text(item.get("role"))
    finish = _text(item.get("finish_reason"))
    if not isinstance(item.get("parts"), list):
        # The older events' body: chat-completions-like, a tool message's call id in "id".
        body = dict(item)
        if "id" in body and "tool_call_id" not in body and role in ("tool", ""):
            body["tool_call_id"] = body.pop("id")
        body.pop("finish_reason", None)
        body.setdefault("role", role)
        return chat_message(body), finish
    found = ModelMessage(role=role, name=_text(item.get("name")))
    parts: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for part in item["parts"]:
        if not isinstance(part, dict):
            parts.append(text_part(_text(part)))
            continue
        kind = part.get("type")
        if kind == "text":
            rest = {k: v for k, v in part.items() if k not in ("type", "content")}
            parts.append(text_part(_text(part.get("content")), **rest))
        elif kind == "tool_call":
            arguments, exact = _arguments(part.get("arguments"))
            rest = {k: v for k, v in part.items() if k not in ("type", "id", "name", "arguments")}
            found.tool_calls.append(
                ToolRequest(
                    name=_text(part.get("name")),
                    arguments=arguments,
                    id=_text(part.get("id")),
                    arguments_exact=exact,
                    extra=rest,
                )
            )
        elif kind == "tool_call_response":
            responses.append(part)
            parts.append(part)
        elif kind in _REASONING_PARTS:
            rest = {k: v for k, v in part.items() if k not in ("type", "content")}
            parts.append({"type": "reasoning", "text": _text(part.get("content")), **rest})
        else:
            parts.append(part)
    if len(responses) == 1 and len(parts) == 1:
        # One answer to one call: the tool message of the chat wire.
        response = responses[0]
        found.tool_call_id = _text(response.get("id"))
        body = response.get("response", response.get("result"))
        found.content = body if isinstance(body, str) else _text(body)
        extra = {k: v for k, v in response.items() if k not in ("type", "id", "response", "result")}
        if extra:
            found.extra["part"] = extra
        return found, finish
    if len(parts) == 1 and parts[0].get("type") == "text" and len(parts[0]) == 2:
        found.content = parts[0]["text"]
    elif parts:
        found.parts = parts
        found.content = parts_text(parts)
    else:
        found.content_null = bool(found.tool_calls)
    found.extra.update({k: v for k, v in item.items() if k not in ("role", "parts", "name", "finish_reason")})
    return found, finish


# -- Flattened attributes: OpenInference and OpenLLMetry ---------------------------------


def _natural(key: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in key.split(".")]


def _groups(flat: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.N.rest`` keys as a list of ``{rest: value}`` in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix) :].partition(".")
            if index.isdigit() and rest:
                found.setdefault(int(index), {})[rest] = value
    return [found[n] for n in sorted(found)]


def openinference_message(flat: Mapping[str, Any]) -> ModelMessage:
    """An OpenInference message from its flattened keys (``message.role``,
    ``message.content``, ``message.contents.N.message_content.*``, ``message.name``,
    ``message.tool_call_id``, ``message.tool_calls.N.tool_call.{id,function.name,
    function.arguments}``); keys no field holds are kept in ``extra``."""
    found = ModelMessage(role=_text(flat.get("message.role")))
    used = {"message.role", "message.content", "message.name", "message.tool_call_id"}
    if "message.content" in flat:
        found.content = _text(flat["message.content"])
    contents = _groups(flat, "message.contents.")
    if contents:
        parts = []
        for content in contents:
            kind = content.get("message_content.type", "text")
            if kind == "text":
                parts.append(text_part(_text(content.get("message_content.text"))))
            elif kind == "image":
                parts.append(
                    {
                        "type": "image_url",
                        "image_url": {"url": _text(content.get("message_content.image.image.url"))},
                    }
                )
            else:
                parts.append({k.removeprefix("message_content."): v for k, v in content.items()})
        found.parts = parts
        found.content = found.content or parts_text(parts)
        used.update(k for k in flat if k.startswith("message.contents."))
    for call in _groups(flat, "message.tool_calls."):
        arguments = call.get("tool_call.function.arguments")
        found.tool_calls.append(
            ToolRequest(
                name=_text(call.get("tool_call.function.name")),
                arguments=_text(arguments),
                id=_text(call.get("tool_call.id")),
                arguments_exact=isinstance(arguments, str),
            )
        )
        used.update(k for k in flat if k.startswith("message.tool_calls."))
    if found.tool_calls and "message.content" not in flat and not contents:
        found.content_null = True
    found.name = _text(flat.get("message.name"))
    found.tool_call_id = _text(flat.get("message.tool_call_id"))
    found.extra = {k: v for k, v in flat.items() if k not in used}
    return found


def openllmetry_message(flat: Mapping[str, Any]) -> ModelMessage:
    """An OpenLLMetry message (``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``):
    ``role``, ``content`` (a JSON list of parts when the content was one), ``name``,
    ``tool_call_id``, ``tool_calls.N.{id,name,arguments}``."""
    found = ModelMessage(role=_text(flat.get("role")))
    content = flat.get("content")
    if isinstance(content, str) and content.startswith("[{"):
        try:
            decoded = json.loads(content)
        except ValueError:
            decoded = None
        if isinstance(decoded, list) and all(isinstance(p, dict) and "type" in p for p in decoded):
            content = decoded
    if content is None and any(k.startswith("tool_calls.") for k in flat):
        found.content_null = True
    else:
        _content(found, content if content is not None else "")
    for call in _groups(flat, "tool_calls."):
        arguments = call.get("arguments")
        found.tool_calls.append(
            ToolRequest(
                name=_text(call.get("name")),
                arguments=_text(arguments),
                id=_text(call.get("id")),
                arguments_exact=isinstance(arguments, str),
            )
        )
    found.name = _text(flat.get("name"))
    found.tool_call_id = _text(flat.get("tool_call_id"))
    known = ("role", "content", "name", "tool_call_id", "finish_reason")
    found.extra = {k: v for k, v in flat.items() if k not in known and not k.startswith("tool_calls.")}
    return found


def openinference_messages(attributes: Mapping[str, Any], prefix: str) -> list[ModelMessage]:
    return [openinference_message(flat) for flat in _groups(attributes, prefix)]


def openllmetry_messages(attributes: Mapping[str, Any], prefix: str) -> list[ModelMessage]:
    return [openllmetry_message(flat) for flat in _groups(attributes, prefix)]


def answer_text(answer: ModelMessage) -> str | None:
    """What ``ModelCall.output`` holds for an answer: its text, None when it had none."""
    return answer.content or None


# -- Injected contexts inside the messages ------------------------------------------------


def find_contexts(run: Any) -> int:
    """Add to ``run`` (a ``Run``) each known history block found inside its model calls'
    messages that none of its contexts already holds, in place, and link the message to
    it; returns how many were added.

    The blocks are agno's (``<member_interaction_context>``, ``<team_history_context>``,
    ``<workflow_history_context>``), found by the block finder (``blocks``), which reads
    their layout rather than the first closing tag. A block may start anywhere in a message
    (agno-go appends the workflow history to the instructions). Each block is stored once
    a run, byte-exact, with where it was first seen: ``settings["found_in"]`` = the call's
    position in the run, the message's index and the offset of its first character.
    Messages replayed from earlier runs (``part == "history"``) are left out: the blocks
    they quote were those runs' contexts, not this run's."""
    from . import blocks
    from .records import InjectedContext

    held = {(c.kind, c.text) for c in run.injected_contexts}
    added = 0
    for c, call in enumerate(run.all_model_calls()):
        for m, message in enumerate(call.messages):
            text = message.content
            if "_context>" not in text or message.part == "history":
                # A replayed message's blocks are an earlier run's context, not this run's.
                continue
            for start, block in _blocks_in(text, blocks, held):
                key = (block.kind, block.text)
                position = next(
                    (n for n, ctx in enumerate(run.injected_contexts) if (ctx.kind, ctx.text) == key), None
                )
                if key not in held:
                    held.add(key)
                    settings = dict(block.settings)
                    settings["found_in"] = {"call": c, "message": m, "offset": start}
                    run.injected_contexts.append(
                        InjectedContext(
                            text=block.text,
                            kind=block.kind,
                            target="system" if message.role in ("system", "developer") else "user",
                            settings=settings,
                        )
                    )
                    position = len(run.injected_contexts) - 1
                    added += 1
                if message.context is None and position is not None:
                    message.context = position
                    message.part = message.part or "context"
    return added


def _blocks_in(text: str, blocks: Any, held: set[tuple[str, str]] = frozenset()) -> list[tuple[int, Any]]:
    """(offset, located block) of each block in ``text``, wherever it starts. Where the
    text there is a block the run already holds (``held``: (kind, text), located by its
    parser with what settles its boundary: the task, the earlier runs), that block is
    taken as it is, never located again without what settled it."""
    found: list[tuple[int, Any]] = []
    position = 0
    openers = [(kind, opener) for kind, opener in blocks.OPENERS.items()]
    while position < len(text):
        starts = [(text.find(opener, position), kind) for kind, opener in openers]
        starts = [(s, kind) for s, kind in starts if s != -1]
        if not starts:
            break
        start, kind = min(starts)
        rest = text[start:]
        same = [t for k, t in held if k == kind and rest.startswith(t)]
        if same:
            kept = max(same, key=len)
            found.append((start, blocks.Located(kind, kept, 0, len(kept), True)))
            position = start + len(kept)
            continue
        located = (
            [blocks.locate_workflow_block(rest)]
            if kind == "workflow_history"
            else blocks.locate_member_blocks(rest)
        )
        located = [b for b in located if b is not None]
        if not located:
            position = start + 1
            continue
        for block in located:
            found.append((start + block.start, block))
        position = start + max(b.end for b in located)
    return found
