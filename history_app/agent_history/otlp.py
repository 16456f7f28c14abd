"""OpenTelemetry traces → canonical records. Standard library only.

Two steps, both usable by an agent as well as by the server:

1. ``read_request`` reads an OTLP/HTTP trace request in its JSON form (what
   ``opentelemetry-exporter-otlp`` exporters send as JSON, or the dashboard's decoding of
   the protobuf form) into flat span dicts (``Span``), reporting each span it cannot read
   with the path of the bad field.
2. ``assemble`` turns the spans of one trace, however many requests they came in and in
   whatever order, into runs: each agent span a run, agents invoked inside it member runs
   under it, model spans model calls, tool spans tool calls, grouped into iterations.

The mapping reads the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, version
1.37, and the older span events and ``gen_ai.prompt.N.*`` attributes of 1.26–1.36) and
OpenInference (``openinference.span.kind``, ``input.value``, ``llm.*``); the README's
"OpenTelemetry" section is its documentation.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from . import messages as wire
from .records import (
    CALL_FLAGS,
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_COST,
    MAX_TOKENS,
    Iteration,
    MemberInteraction,
    ModelCall,
    ModelMessage,
    Run,
    ToolCall,
    ToolRequest,
    json_text_depth,
)
from .text import value_text

# A span as this module keeps it (and the server stores it, redacted): plain JSON values.
Span = dict[str, Any]

FRAMEWORK = "opentelemetry"
# The deepest nesting of array and key-value list values read in an attribute.
MAX_VALUE_DEPTH = 16
# Attributes and events kept per span: beyond, the rest are dropped and counted
# (``otel.dropped_attributes``, shown in the call's or run's metadata).
MAX_ATTRIBUTES = 10_000
MAX_EVENTS = 1_000
# JSON held in a string attribute (tool arguments, messages) is read as JSON up to this
# depth; deeper, it stays the string it came as (a record nests at most 64 levels).
MAX_JSON_DEPTH = 32
_HEX = re.compile(r"[0-9a-fA-F]+")
_DIGITS = re.compile(r"[0-9]{1,20}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT64 = 2**63
# Elements of one array or key-value list value, and values in all of a span's
# attributes: a request of a few kilobytes of gzip must not become a run of megabytes.
MAX_VALUES = 10_000

AGENT, MODEL, TOOL, GUARDRAIL, OTHER = "agent", "model", "tool", "guardrail", "other"
# gen_ai.operation.name → role in a run.
_GENAI_OPERATIONS = {
    "invoke_agent": AGENT,
    "create_agent": AGENT,
    "invoke_workflow": AGENT,
    "chat": MODEL,
    "text_completion": MODEL,
    "generate_content": MODEL,
    "embeddings": MODEL,
    "execute_tool": TOOL,
}
# openinference.span.kind → role in a run. Retrievers, rerankers and evaluators are steps
# the agent took: they are shown as tool calls named after the span. A guardrail checks the
# run's input or output beside the agent's turns, no model asking for it: it is no step.
_OPENINFERENCE_KINDS = {
    "AGENT": AGENT,
    "LLM": MODEL,
    "EMBEDDING": MODEL,
    "TOOL": TOOL,
    "RETRIEVER": TOOL,
    "RERANKER": TOOL,
    "GUARDRAIL": GUARDRAIL,
    "EVALUATOR": TOOL,
}
SESSION_KEYS = ("session.id", "gen_ai.conversation.id")
# Pydantic AI's: the conversation an agent run's conversation was started from.
ROOT_CONVERSATION_KEY = "pydantic_ai.root_conversation_id"
USER_KEYS = ("user.id", "enduser.id", "gen_ai.user.id")
AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "agent_name")
ERROR = 2  # status code of a span that failed
# SpanFlags: the parent's "is remote" bit is known (0x100) and set (0x200). A span whose
# parent is in another service (a W3C traceparent it received) is its service's root.
REMOTE_PARENT = 0x300
SPAN_COUNT_KEY = "otel.span_count"


class SpanError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


def trace_run_id(trace_id: str) -> str:
    """The id of a trace's run: the trace id itself (so a run is found by its trace id)."""
    return trace_id


def member_run_id(trace_id: str, span_id: str) -> str:
    return f"{trace_id}-{span_id}"


def default_session_id(trace_id: str) -> str:
    """The session of a trace that names none (no ``session.id``, ``gen_ai.conversation.id``)."""
    return f"trace-{trace_id}"


def session_key(value: str) -> str:
    """A span's session id as a record's: '/' (a path, a thread id) written ``%2F`` and
    control characters dropped, since ids appear in URLs; at most 255 characters."""
    return _CONTROL.sub("", value.replace("%", "%25").replace("/", "%2F"))[:255]


def count_spans(data: Any) -> int:
    """How many spans a request in OTLP's JSON form holds, counted before any is read
    (anything not a list counts as one), so that an oversized request is refused before
    it costs memory."""
    if not isinstance(data, dict):
        return 0
    resources = _field(data, "resourceSpans", "resource_spans")
    return sum(_count_spans(r) for r in resources) if isinstance(resources, list) else 0


# --- Reading the OTLP JSON form -------------------------------------------------------


def _field(data: Mapping[str, Any], camel: str, snake: str) -> Any:
    """OTLP JSON names fields in lowerCamelCase; protobuf's JSON parsers also accept the
    original snake_case names, and some exporters send those."""
    value = data.get(camel)
    return data.get(snake) if value is None else value


def _list(data: Mapping[str, Any], camel: str, snake: str, path: str) -> list[Any]:
    value = _field(data, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpanError(f"{path}.{camel}", "must be an array")
    return value


def read_request(data: Any) -> tuple[list[Span], list[SpanError], int]:
    """The spans of an ``ExportTraceServiceRequest`` in OTLP's JSON form, the errors of those
    that cannot be read (each with its path), and how many spans the request held.

    A request that is not an object at all raises ``SpanError``."""
    if not isinstance(data, dict):
        raise SpanError("$", "must be an ExportTraceServiceRequest object")
    spans: list[Span] = []
    errors: list[SpanError] = []
    total = 0
    for r, resource_spans in enumerate(_list(data, "resourceSpans", "resource_spans", "$")):
        rpath = f"$.resourceSpans[{r}]"
        try:
            if not isinstance(resource_spans, dict):
                raise SpanError(rpath, "must be an object")
            resource = resource_spans.get("resource") or {}
            if not isinstance(resource, dict):
                raise SpanError(f"{rpath}.resource", "must be an object")
            resource_attributes = _attributes(resource, f"{rpath}.resource")
            scope_list = _list(resource_spans, "scopeSpans", "scope_spans", rpath)
        except SpanError as exc:
            total += _count_spans(resource_spans)
            errors.append(exc)
            continue
        for s, scope_spans in enumerate(scope_list):
            spath = f"{rpath}.scopeSpans[{s}]"
            try:
                if not isinstance(scope_spans, dict):
                    raise SpanError(spath, "must be an object")
                scope = scope_spans.get("scope") or {}
                if not isinstance(scope, dict):
                    raise SpanError(f"{spath}.scope", "must be an object")
                scope_name = _text(scope.get("name"), f"{spath}.scope.name")
                scope_version = _text(scope.get("version"), f"{spath}.scope.version")
                items = _list(scope_spans, "spans", "spans", spath)
            except SpanError as exc:
                total += _scope_count(scope_spans)
                errors.append(exc)
                continue
            for n, item in enumerate(items):
                total += 1
                try:
                    span = _read_span(item, f"{spath}.spans[{n}]")
                except SpanError as exc:
                    errors.append(exc)
                    continue
                span["resource"] = resource_attributes
                span["scope"] = scope_name
                if scope_version:
                    span["scope_version"] = scope_version
                spans.append(span)
    return spans, errors, total


def _count_spans(resource_spans: Any) -> int:
    if not isinstance(resource_spans, dict):
        return 1
    scopes = _field(resource_spans, "scopeSpans", "scope_spans")
    if scopes is None:
        return 0
    if not isinstance(scopes, list):
        return 1
    return sum(_scope_count(s) for s in scopes)


def _scope_count(scope_spans: Any) -> int:
    if not isinstance(scope_spans, dict):
        return 1
    spans = scope_spans.get("spans")
    return len(spans) if isinstance(spans, list) else 0 if spans is None else 1


def _text(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpanError(path, "must be a string")
    return value


def _read_id(value: Any, size: int, path: str, *, required: bool) -> str:
    """A trace id (16 bytes) or span id (8 bytes) as lowercase hex. OTLP's JSON form sends
    hex; protobuf's generic JSON mapping (some hand-made senders) base64: both are read."""
    if value is None or value == "":
        if required:
            raise SpanError(path, "is required")
        return ""
    if not isinstance(value, str):
        raise SpanError(path, "must be a string of hex digits")
    if len(value) == size * 2 and _HEX.fullmatch(value):
        ident = value.lower()
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != size:
            raise SpanError(path, f"must be {size * 2} hex digits") from None
        ident = raw.hex()
    if ident == "0" * (size * 2):
        if required:
            raise SpanError(path, "must not be all zeros")
        return ""
    return ident


def _nanos(value: Any, path: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        if not _DIGITS.fullmatch(value):
            raise SpanError(path, "must be a count of nanoseconds")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise SpanError(path, "must be a count of nanoseconds (an unsigned 64-bit integer)")
    return value


def _attributes(data: Mapping[str, Any], path: str) -> dict[str, Any]:
    items = data.get("attributes")
    if items is None:
        return {}
    if not isinstance(items, list):
        raise SpanError(f"{path}.attributes", "must be an array of key-value pairs")
    out: dict[str, Any] = {}
    for n, item in enumerate(items[:MAX_ATTRIBUTES]):
        ipath = f"{path}.attributes[{n}]"
        if not isinstance(item, dict):
            raise SpanError(ipath, "must be a key-value pair")
        if not isinstance(item.get("key"), str):
            raise SpanError(f"{ipath}.key", "must be a string")
        out[item["key"]] = _value(item.get("value"), f"{ipath}.value", 0)
    dropped = max(len(items) - MAX_ATTRIBUTES, 0)
    reported = _field(data, "droppedAttributesCount", "dropped_attributes_count")
    if isinstance(reported, int) and not isinstance(reported, bool) and 0 < reported < 2**32:
        dropped += reported  # dropped by the sender (its SDK's limits)
    if dropped:
        out["otel.dropped_attributes"] = dropped
    return out


def _value(value: Any, path: str, depth: int) -> Any:
    """An ``AnyValue`` as a plain JSON value (bytes as base64 text)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpanError(path, "must be an AnyValue object")
    if depth > MAX_VALUE_DEPTH:
        raise SpanError(path, f"nests deeper than {MAX_VALUE_DEPTH} levels")
    if not value:
        return None
    if len(value) != 1:
        raise SpanError(path, f"must hold one value, not {len(value)}")
    ((kind, inner),) = value.items()
    if kind in ("stringValue", "string_value"):
        return _text(inner, f"{path}.{kind}")
    if kind in ("boolValue", "bool_value"):
        if not isinstance(inner, bool):
            raise SpanError(f"{path}.{kind}", "must be true or false")
        return inner
    if kind in ("intValue", "int_value"):
        if isinstance(inner, str) and re.fullmatch(r"-?[0-9]{1,20}", inner):
            inner = int(inner)
        if isinstance(inner, bool) or not isinstance(inner, int) or not -_INT64 <= inner < _INT64:
            raise SpanError(f"{path}.{kind}", "must be a 64-bit integer")
        return inner
    if kind in ("doubleValue", "double_value"):
        if isinstance(inner, str) and inner in ("NaN", "Infinity", "-Infinity"):
            return inner  # JSON has no such numbers; kept as the text it came as
        if isinstance(inner, bool) or not isinstance(inner, int | float):
            raise SpanError(f"{path}.{kind}", "must be a number")
        try:
            number = float(inner)
        except OverflowError:  # an integer past any double: kept as its text
            return str(inner)
        return double_value(number)
    if kind in ("bytesValue", "bytes_value"):
        return _bytes_text(_text(inner, f"{path}.{kind}"), f"{path}.{kind}")
    if kind in ("arrayValue", "array_value", "kvlistValue", "kvlist_value") and not isinstance(inner, dict):
        raise SpanError(f"{path}.{kind}", "must be an object with a values array")
    if kind in ("arrayValue", "array_value"):
        values = inner.get("values") if isinstance(inner, dict) else None
        if values is None:
            return []
        if not isinstance(values, list):
            raise SpanError(f"{path}.{kind}.values", "must be an array")
        if len(values) > MAX_VALUES:
            raise SpanError(f"{path}.{kind}.values", f"holds {len(values)} values; at most {MAX_VALUES}")
        return [_value(v, f"{path}.{kind}.values[{n}]", depth + 1) for n, v in enumerate(values)]
    if kind in ("kvlistValue", "kvlist_value"):
        values = inner.get("values") if isinstance(inner, dict) else None
        if values is None:
            return {}
        if not isinstance(values, list):
            raise SpanError(f"{path}.{kind}.values", "must be an array")
        if len(values) > MAX_VALUES:
            raise SpanError(f"{path}.{kind}.values", f"holds {len(values)} values; at most {MAX_VALUES}")
        out = {}
        for n, item in enumerate(values):
            ipath = f"{path}.{kind}.values[{n}]"
            if not isinstance(item, dict):
                raise SpanError(ipath, "must be a key-value pair")
            if "key" in item:
                if not isinstance(item["key"], str):
                    raise SpanError(f"{ipath}.key", "must be a string")
                out[item["key"]] = _value(item.get("value"), f"{ipath}.value", depth + 1)
            else:  # {"name": AnyValue}: a shape seen from hand-made encoders
                for key, inner_value in item.items():
                    out[str(key)] = _value(inner_value, f"{ipath}.{key}", depth + 1)
        return out
    raise SpanError(
        path,
        "holds no known AnyValue field (stringValue, boolValue, intValue, doubleValue, arrayValue, kvlistValue, bytesValue)",
    )


def double_value(number: float) -> float | str:
    """A double as a JSON value: NaN and ±Infinity, which JSON has no numbers for, as the
    text OTLP/JSON writes them in."""
    if math.isfinite(number):
        return number
    return "NaN" if number != number else "Infinity" if number > 0 else "-Infinity"


def _bytes_text(encoded: str, path: str) -> str:
    """A bytes value (base64 in OTLP/JSON) as the text it holds, so that redaction reads
    it; bytes that are not UTF-8 text are not kept (only how many there were)."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise SpanError(path, "must be base64") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(raw)} bytes of binary data>"


_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}


def _enum(value: Any, names: Mapping[str, int], path: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, bool) or not isinstance(value, int) or value not in names.values():
        raise SpanError(path, f"must be one of {', '.join(names)} (or its number)")
    return value


def _read_span(item: Any, path: str) -> Span:
    if not isinstance(item, dict):
        raise SpanError(path, "must be a Span object")
    status = item.get("status") or {}
    if not isinstance(status, dict):
        raise SpanError(f"{path}.status", "must be an object")
    span: Span = {
        "trace_id": _read_id(_field(item, "traceId", "trace_id"), 16, f"{path}.traceId", required=True),
        "span_id": _read_id(_field(item, "spanId", "span_id"), 8, f"{path}.spanId", required=True),
        "parent_span_id": _read_id(
            _field(item, "parentSpanId", "parent_span_id"), 8, f"{path}.parentSpanId", required=False
        ),
        "name": _text(item.get("name"), f"{path}.name"),
        "kind": _enum(item.get("kind"), _KIND_NAMES, f"{path}.kind"),
        "start": _nanos(
            _field(item, "startTimeUnixNano", "start_time_unix_nano"), f"{path}.startTimeUnixNano"
        ),
        "end": _nanos(_field(item, "endTimeUnixNano", "end_time_unix_nano"), f"{path}.endTimeUnixNano"),
        "status": _enum(status.get("code"), _STATUS_NAMES, f"{path}.status.code"),
        "status_message": _text(status.get("message"), f"{path}.status.message"),
        "attributes": _attributes(item, path),
    }
    if span["parent_span_id"] == span["span_id"]:
        raise SpanError(f"{path}.parentSpanId", "must differ from the span's own id")
    events = item.get("events")
    if events is not None:
        if not isinstance(events, list):
            raise SpanError(f"{path}.events", "must be an array")
        read = []
        for n, event in enumerate(events[:MAX_EVENTS]):
            epath = f"{path}.events[{n}]"
            if not isinstance(event, dict):
                raise SpanError(epath, "must be an Event object")
            read.append(
                {
                    "name": _text(event.get("name"), f"{epath}.name"),
                    "time": _nanos(_field(event, "timeUnixNano", "time_unix_nano"), f"{epath}.timeUnixNano"),
                    "attributes": _attributes(event, epath),
                }
            )
        if read:
            span["events"] = read
    dropped = max(len(events), MAX_EVENTS) - MAX_EVENTS if isinstance(events, list) else 0
    reported = _field(item, "droppedEventsCount", "dropped_events_count")
    if isinstance(reported, int) and not isinstance(reported, bool) and 0 < reported < 2**32:
        dropped += reported
    if dropped:
        span["attributes"]["otel.dropped_events"] = dropped
    flags = item.get("flags")
    if isinstance(flags, int) and not isinstance(flags, bool) and flags & REMOTE_PARENT == REMOTE_PARENT:
        span["remote_parent"] = True
    return span


# --- Assembling a trace's spans into runs ---------------------------------------------


def _time(nanos: int) -> datetime | None:
    if not nanos:
        return None
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanos // 1000)
    return moment if EARLIEST_TIME <= moment <= LATEST_TIME else None


def role(span: Span) -> str:
    attributes = span["attributes"]
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation in _GENAI_OPERATIONS:
        return _GENAI_OPERATIONS[operation]
    kind = attributes.get("openinference.span.kind")
    if isinstance(kind, str) and kind.upper() in _OPENINFERENCE_KINDS:
        return _OPENINFERENCE_KINDS[kind.upper()]
    if any(key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in attributes):
        return MODEL  # OpenLLMetry's LLM spans (gen_ai.prompt.N.* attributes)
    return OTHER


def _first_text(attributes: Mapping[str, Any], keys: Iterable[str]) -> str:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return ""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


class JsonText(str):
    """A string attribute whose JSON was read already (``json``): ``json_value`` answers
    with that instead of reading the string again."""

    json: Any


def json_value(value: Any) -> Any:
    """A string attribute holding JSON, read as JSON: unless it is not JSON (NaN and
    Infinity are not), or nests deeper than ``MAX_JSON_DEPTH``; then the string. Any other
    value (one read already) as it is."""
    if type(value) is JsonText:
        return value.json
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        if value.count("[") + value.count("{") > MAX_JSON_DEPTH and json_text_depth(value) > MAX_JSON_DEPTH:
            return value
        try:
            return json.loads(value, parse_constant=_no_constant, parse_float=_finite)
        except (ValueError, RecursionError):
            return value
    return value


def _as_text(value: Any) -> str:
    return value_text(value) or ""


def _tokens(attributes: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and _DIGITS.fullmatch(value):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
            return value
    return None


_INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
_OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
)
_CACHED_TOKENS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_REASONING_TOKENS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
)
_AGGREGATE_INPUT = ("gen_ai.aggregated_usage.input_tokens", *_INPUT_TOKENS)
_AGGREGATE_OUTPUT = ("gen_ai.aggregated_usage.output_tokens", *_OUTPUT_TOKENS)
_COST_KEYS = ("gen_ai.usage.cost", "llm.cost.total", "operation.cost", "gen_ai.cost")


def _cost(attributes: Mapping[str, Any]) -> float | None:
    for key in _COST_KEYS:
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_COST:
            return float(value)
    return None


# --- Messages ------------------------------------------------------------------------


_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _event_body(attributes: Mapping[str, Any]) -> Any:
    for key in ("event_body", "body", "message"):
        if key in attributes:
            return json_value(attributes[key])
    return dict(attributes)


def _event_message(body: Any, role: str = "") -> tuple[ModelMessage, str]:
    item = body if isinstance(body, dict) else {"content": body}
    if role and not item.get("role"):
        item = {**item, "role": role}
    return wire.genai_message(item)


def _request_body(attributes: Mapping[str, Any]) -> tuple[list[ModelMessage], str] | None:
    """The request an instrumentation recorded whole (OpenInference's ``input.value``
    holds the client's JSON request): its messages, exactly as sent, and its API."""
    body = json_value(attributes.get("input.value"))
    answer = json_value(attributes.get("output.value"))
    if isinstance(body, list) and isinstance(answer, dict) and answer.get("object") == "response":
        # OpenInference's OpenAI Agents spans: the Responses ``input`` items as sent, and
        # the response, which echoes the request's ``instructions``.
        body = {"instructions": answer.get("instructions"), "input": body, "model": answer.get("model")}
    if not isinstance(body, dict):
        return None
    messages = body.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m for m in messages):
        return [wire.chat_message(m) for m in messages], wire.CHAT
    if "input" in body and "model" in body:
        return wire.responses_messages(body), wire.RESPONSES
    return None


def _response_body(attributes: Mapping[str, Any]) -> tuple[ModelMessage, str] | None:
    body = json_value(attributes.get("output.value"))
    if isinstance(body, dict) and ("choices" in body or isinstance(body.get("output"), list)):
        answer, reason = wire.chat_answer(body)
        if answer is not None:
            return answer, reason
    return None


def _first_answer(found: list[tuple[ModelMessage, str]]) -> tuple[ModelMessage | None, str]:
    return found[0] if found else (None, "")


def _call_messages(span: Span) -> tuple[list[ModelMessage], ModelMessage | None, str, str, str]:
    """The messages a model span received, as sent, its answer as a message, its finish
    reason, the convention they were read from, and the API where it is known."""
    attributes = span["attributes"]
    messages: list[ModelMessage] = []
    answers: list[tuple[ModelMessage, str]] = []
    source = api = ""
    events = span.get("events", [])
    details = next(
        (e["attributes"] for e in events if e["name"] == "gen_ai.client.inference.operation.details"), {}
    )
    genai = {**details, **{k: v for k, v in attributes.items() if k.startswith("gen_ai.")}}
    instructions = json_value(genai.get("gen_ai.system_instructions"))
    if instructions:
        parts = instructions if isinstance(instructions, list) else [instructions]
        system, _ = wire.genai_message({"role": "system", "parts": parts})
        messages.append(system)
    inputs = json_value(genai.get("gen_ai.input.messages"))
    if isinstance(inputs, list):
        provider = _first_text(attributes, ("gen_ai.provider.name", "gen_ai.system"))
        split = bool(provider) and wire.one_message_per_tool_result(provider)
        for item in inputs:
            messages.extend(wire.genai_messages(item, split_tool_results=split))
    outputs = json_value(genai.get("gen_ai.output.messages"))
    if isinstance(outputs, list):
        answers.extend(wire.genai_message(item) for item in outputs)
    if messages or answers:
        source = "otlp genai"
    request = _request_body(attributes)
    if request is not None and not messages:
        messages, api = request
        source = "openinference input.value"
    if not messages:  # OpenInference's flattened messages
        messages = wire.openinference_messages(attributes, "llm.input_messages.")
        source = "openinference" if messages else source
    if not answers:
        response = _response_body(attributes)
        if response is not None:
            answers.append(response)
    if not answers:
        answers.extend((m, "") for m in wire.openinference_messages(attributes, "llm.output_messages."))
    if not messages:  # OpenLLMetry (gen_ai.prompt.N.*)
        messages = wire.openllmetry_messages(attributes, "gen_ai.prompt.")
        source = "openllmetry" if messages else source
    if not answers:
        for flat in _groups(attributes, "gen_ai.completion."):
            answers.append((wire.openllmetry_message(flat), _as_text(flat.get("finish_reason"))))
    if not messages and not answers:  # GenAI 1.28–1.36: one event per message
        for event in events:
            name = event["name"]
            if name in _MESSAGE_EVENTS:
                messages.append(_event_message(_event_body(event["attributes"]), _MESSAGE_EVENTS[name])[0])
            elif name == "gen_ai.choice":
                body = json_value(event["attributes"].get("event_body", event["attributes"]))
                inner = json_value(body.get("message", body)) if isinstance(body, dict) else body
                message, _ = _event_message(inner, "assistant")
                reason = _as_text(body.get("finish_reason")) if isinstance(body, dict) else ""
                answers.append((message, reason))
            elif name in ("gen_ai.content.prompt", "gen_ai.content.completion"):
                value = json_value(event["attributes"].get(name.replace("content.", "")))
                for item in value if isinstance(value, list) else [value]:
                    message, reason = _event_message(item)
                    if name.endswith("prompt"):
                        messages.append(message)
                    else:
                        answers.append((message, reason))
        if messages or answers:
            source = "otlp genai events"
    if not messages and attributes.get("input.value") is not None:
        messages.append(ModelMessage(role="user", content=_as_text(attributes.get("input.value"))))
        source = "input.value"
    if not answers and attributes.get("output.value") is not None:
        answers.append((ModelMessage(role="assistant", content=_as_text(attributes.get("output.value"))), ""))
    answer, finish = _first_answer(answers)
    reasons = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons:
        finish = _as_text(reasons[0])
    finish = finish or _first_text(attributes, ("llm.finish_reason", "gen_ai.response.finish_reason"))
    return messages, answer, finish, source, api


def _groups(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Flattened lists (``gen_ai.completion.0.content``) as dicts of their remaining keys."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix) :].partition(".")
            if index.isdigit() and rest:
                found.setdefault(int(index), {})[rest] = value
    return [found[n] for n in sorted(found)]


# Attributes a model or tool call's fields already hold, not repeated in its metadata.
_MAPPED_PREFIXES = (
    "gen_ai.input.",
    "gen_ai.output.",
    "gen_ai.system_instructions",
    "gen_ai.usage.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "gen_ai.tool.call.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.token_count.",
    "input.value",
    "output.value",
    "pydantic_ai.all_messages",
    "model_request_parameters",
    "logfire.",
)


def _unmapped(attributes: Mapping[str, Any], also: tuple[str, ...] = ()) -> dict[str, Any]:
    """The attributes no field of the record holds (they go to its metadata)."""
    return {
        key: value
        for key, value in attributes.items()
        if not key.startswith(_MAPPED_PREFIXES) and key not in SESSION_KEYS + USER_KEYS + also
    }


def _metadata(span: Span) -> dict[str, Any]:
    kept = _unmapped(span["attributes"])
    for flag in CALL_FLAGS.keys() & kept.keys():  # the server's own keys: an attribute is renamed
        kept[f"attribute.{flag}"] = kept.pop(flag)
    kept["otel.span_id"] = span["span_id"]
    if span["name"]:
        kept["otel.span_name"] = span["name"]
    return kept


def _model_call(span: Span) -> tuple[ModelCall, list[ModelMessage]]:
    attributes = span["attributes"]
    messages, answer, finish, source, api = _call_messages(span)
    output = None if answer is None else wire.answer_text(answer)
    cost = _cost(attributes)
    call = ModelCall(
        model=_first_text(attributes, ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")),
        provider=_first_text(
            attributes, ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
        ),
        output=output,
        finish_reason=finish[:255],
        answer=answer,
        api=api,
        messages_source=source,
        input_tokens=_tokens(attributes, _INPUT_TOKENS),
        output_tokens=_tokens(attributes, _OUTPUT_TOKENS),
        cached_tokens=_tokens(attributes, _CACHED_TOKENS),
        reasoning_tokens=_tokens(attributes, _REASONING_TOKENS),
        cost=cost,
        cost_source="reported" if cost is not None else "",
        price_source="reported by the instrumentation" if cost is not None else "",
        started_at=_time(span["start"]),
        ended_at=_time(span["end"]),
        metadata=_metadata(span),
    )
    if call.started_at and call.ended_at and call.ended_at < call.started_at:
        call.ended_at = call.started_at
    return call, messages


def _tool_call(span: Span, trace: _Trace | None = None) -> ToolCall:
    attributes = span["attributes"]
    name = _first_text(attributes, ("gen_ai.tool.name", "tool.name")) or span["name"] or "tool"
    if "gen_ai.tool.call.arguments" in attributes:
        params = json_value(attributes["gen_ai.tool.call.arguments"])
    else:
        params = _call_arguments(
            json_value(attributes.get("input.value")), json_value(attributes.get("tool.parameters"))
        )
    if "gen_ai.tool.call.result" in attributes:
        result = attributes["gen_ai.tool.call.result"]
    else:
        result = attributes.get("output.value")
    call_id = _first_text(attributes, ("gen_ai.tool.call.id", "tool_call.id"))
    message = json_value(result)
    if isinstance(message, dict) and message.get("type") == "tool" and isinstance(message.get("data"), dict):
        # LangChain's ToolMessage, as its instrumentation serialises it: its content is
        # the result, and it names the call it answers.
        data = message["data"]
        content = data.get("content")
        result = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        call_id = call_id or (data.get("tool_call_id") if isinstance(data.get("tool_call_id"), str) else "")
    parent = trace.by_id.get(span["parent_span_id"]) if trace is not None else None
    if parent is not None and role(parent) == OTHER:
        # LangGraph's tool node runs each call it was sent as ``{"tool_call": {...}}``:
        # the call's arguments and id as the model asked for them.
        # LangChain 1's tool node, and one resumed or failing, sends the list of calls.
        sent = json_value(parent["attributes"].get("input.value"))
        request = sent.get("tool_call") if isinstance(sent, dict) else _sent_call(sent, name, call_id)
        if isinstance(request, dict) and request.get("name") == name:
            if isinstance(request.get("id"), str):
                call_id = call_id or request["id"]
            if not isinstance(params, dict) and isinstance(request.get("args"), dict):
                params = request["args"]
    failed = span["status"] == ERROR
    started, ended = _time(span["start"]), _time(span["end"])
    if started and ended and ended < started:
        ended = started
    return ToolCall(
        tool=name[:255],
        params=params,
        result=None if result is None else _as_text(result),
        error=(_error_text(span) or "failed") if failed else None,
        started_at=started,
        ended_at=ended,
        call_id=call_id[:255] or None,
    )


def _sent_call(sent: Any, name: str, call_id: str) -> dict[str, Any] | None:
    """The call named ``name`` (with id ``call_id`` where known) in a list of LangChain tool
    calls (``[{"name": ..., "args": {...}, "id": ..., "type": "tool_call"}]``); None where the
    list holds no such call or, without an id, several of that name."""
    if not isinstance(sent, list):
        return None
    found = [
        item
        for item in sent[:1000]
        if isinstance(item, dict) and item.get("type") == "tool_call" and item.get("name") == name
    ]
    if call_id:
        found = [item for item in found if item.get("id") == call_id]
    return found[0] if len(found) == 1 else None


# How smolagents' instrumentation records a tool's arguments: the Python call's.
_PYTHON_CALL_KEYS = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})


def _call_arguments(params: Any, schema: Any = None) -> Any:
    """A tool's arguments: where an instrumentation recorded the Python call that ran the
    tool (``{"args": [], "kwargs": {"city": "Paris"}, ...}``), the arguments it was given,
    by name: positional ones (a CodeAgent's ``final_answer(r)``) named after the tool's
    parameters (``tool.parameters``: smolagents' ``{"answer": {...}}`` or a JSON schema)."""
    if isinstance(params, dict) and "kwargs" in params and params.keys() <= _PYTHON_CALL_KEYS:
        args, kwargs = params.get("args"), params.get("kwargs")
        if isinstance(kwargs, dict) and not args:
            return kwargs
        names = _parameter_names(schema)
        if isinstance(args, list) and args and len(args) <= len(names):
            named = dict(zip(names, args, strict=False))
            if isinstance(kwargs, dict) and not named.keys() & kwargs.keys():
                return {**named, **kwargs}
        if isinstance(args, list) and not kwargs:
            return args[0] if len(args) == 1 else args
    return params


def _parameter_names(schema: Any) -> list[str]:
    """A tool's parameter names, in order, from its ``tool.parameters``: a JSON schema's
    ``properties``, or smolagents' own mapping of each input to its type."""
    if not isinstance(schema, dict):
        return []
    properties = schema.get("properties") if schema.get("type") == "object" else schema
    if not isinstance(properties, dict) or not all(isinstance(v, dict) for v in properties.values()):
        return []
    return list(properties)


def _error_text(span: Span) -> str:
    if span["status_message"]:
        return span["status_message"]
    for event in span.get("events", []):
        if event["name"] == "exception":
            attributes = event["attributes"]
            kind = _as_text(attributes.get("exception.type"))
            message = _as_text(attributes.get("exception.message"))
            return f"{kind}: {message}" if kind and message else kind or message
    return ""


# OpenInference's instrumentations of agent frameworks, by scope: their runs are named
# after the framework a user wrote them with (a trace of the OpenAI client alone, or of
# OpenInference's decorators, stays "openinference").
FRAMEWORK_SCOPES = {
    "openinference.instrumentation.agno": "agno",
    "openinference.instrumentation.crewai": "crewai",
    "openinference.instrumentation.langchain": "langchain",
    "openinference.instrumentation.openai_agents": "openai-agents",
    "openinference.instrumentation.smolagents": "smolagents",
    "openinference.instrumentation.llama_index": "llama-index",
    "openinference.instrumentation.dspy": "dspy",
    "openinference.instrumentation.autogen": "autogen",
    "openinference.instrumentation.autogen_agentchat": "autogen",
    "openinference.instrumentation.beeai": "beeai",
    "openinference.instrumentation.google_adk": "google-adk",
    "openinference.instrumentation.haystack": "haystack",
    "openinference.instrumentation.mcp": "mcp",
}


def _framework(spans: list[Span]) -> str:
    """The framework that sent a trace, by the instrumentation scope of its spans (the
    root's first): an agent framework's own instrumentation wherever it is in the trace
    (its spans enclose the model client's), else the instrumentation's family, else the
    convention the attributes follow."""
    family = ""
    for span in spans:
        scope = span.get("scope", "")
        if scope.startswith("pydantic-ai"):
            return "pydantic-ai"
        if scope in FRAMEWORK_SCOPES:
            return FRAMEWORK_SCOPES[scope]
        if scope.startswith("openinference") and not family:
            family = "openinference"
        elif scope.startswith("opentelemetry.instrumentation.") and not family:
            family = "openllmetry"
    if family:
        return family
    if any("openinference.span.kind" in span["attributes"] for span in spans):
        return "openinference"
    return FRAMEWORK


class _Trace:
    """The spans of one trace, indexed by id and by parent."""

    def __init__(self, spans: list[Span]):
        self.by_id: dict[str, Span] = {}
        for span in spans:
            self.by_id[span["span_id"]] = span  # the last copy of a span sent twice wins
        self.trace_id = spans[0]["trace_id"]
        self.children: dict[str, list[Span]] = {}
        self.roots: list[Span] = []
        cyclic = self._in_cycles()
        # Spans whose parent had ended before they began, and no span above encloses them:
        # each starts a run of its own (``_enclosing``).
        self.detached: set[str] = set()
        for span in self.by_id.values():
            parent = span["parent_span_id"]
            if parent and parent in self.by_id and span["span_id"] not in cyclic:
                parent = self._enclosing(span)
                if parent:
                    self.children.setdefault(parent, []).append(span)
                else:
                    self.detached.add(span["span_id"])
                    self.roots.append(span)
            else:
                self.roots.append(span)
        for items in self.children.values():
            items.sort(key=span_order)
        self.roots.sort(key=span_order)
        # The trace's root: the span without a parent, or whose parent is in another
        # service (OTLP sends only ended spans, so until it has arrived the trace's run
        # is still running).
        self.root = next((s for s in self.roots if is_root(s)), None)

    def _enclosing(self, span: Span) -> str:
        """The span ``span`` ran inside: its parent, unless the parent is an agent span that
        had ended before ``span`` began (agno's instrumentation leaves the last agent span
        it opened as the context of what follows it: the outer team's last model call
        under the inner team's span, the next ``Agent.run`` under the team run before it).
        Then the nearest span above that encloses it in time; "" where none does. Called
        on spans outside cycles only; the walk is bounded all the same."""
        parent = span["parent_span_id"]
        hops = 0
        while parent and parent in self.by_id and hops < 256:
            above = self.by_id[parent]
            if not (role(above) == AGENT and 0 < above["end"] <= span["start"]):
                return parent
            parent, hops = above["parent_span_id"], hops + 1
        return parent if parent in self.by_id else ""

    def wrapping_models(self) -> set[str]:
        """The model spans that enclose another model span: a framework's span around
        the client call that an instrumentation of the client recorded too (smolagents'
        or LangChain's beside OpenInference's OpenAI one). The innermost is the request
        that went on the wire; the wrapper would count the call twice. Linear: each
        chain of parents is walked up once."""
        models = {span_id for span_id, span in self.by_id.items() if role(span) == MODEL}
        enclosing: set[str] = set()
        seen: set[str] = set()
        for span_id in models:
            parent = self.by_id[span_id]["parent_span_id"]
            while parent and parent in self.by_id and parent not in seen:
                seen.add(parent)
                if parent in models:
                    enclosing.add(parent)
                parent = self.by_id[parent]["parent_span_id"]
        # A walk stops at a span seen before: every model above it was marked then.
        return enclosing

    def _in_cycles(self) -> set[str]:
        """The spans whose chain of parents loops (each is then a root), in linear time:
        every chain is walked once, its outcome remembered for every span on it."""
        state: dict[str, bool] = {}  # span id: whether its chain loops
        for start in self.by_id:
            path: list[str] = []
            on_path: set[str] = set()
            current: str | None = start
            loops = False
            while current and current in self.by_id and current not in state:
                if current in on_path:
                    loops = True
                    break
                path.append(current)
                on_path.add(current)
                current = self.by_id[current]["parent_span_id"]
            if not loops and current in state:
                loops = state[current]
            for span_id in path:
                state[span_id] = loops
        return {span_id for span_id, loops in state.items() if loops}


def is_root(span: Span) -> bool:
    return not span["parent_span_id"] or bool(span.get("remote_parent"))


def span_order(span: Span) -> tuple[int, int, str]:
    return (span["start"], span["end"], span["span_id"])


def _value_of(trace: _Trace, keys: tuple[str, ...], first: Span | None) -> str:
    """A trace-wide attribute (session, user): the root's, else the first span's that has it."""
    ordered = ([first] if first is not None else []) + sorted(trace.by_id.values(), key=span_order)
    for span in ordered:
        value = _first_text(span["attributes"], keys)
        if value:
            return value
    return ""


class _RunBuilder:
    def __init__(self, run: Run, span: Span | None):
        self.run = run
        self.span = span
        # (role, span, graph node) of model and tool spans, in order; the graph node is
        # the span id of the graph node execution the span ran in ("" outside any).
        self.steps: list[tuple[str, Span, str]] = []
        self.nodes: list[tuple[Span, str]] = []  # graph node executions of the run
        self.members: list[Run] = []
        self.guardrails: list[Span] = []  # guardrail spans of the run
        self.errors: list[Span] = []  # spans of no role of their own that ended in error
        self.subgraphs: dict[str, Run] = {}  # graph node execution span id → its subgraph's member run
        self.named_by: Span | None = None  # the span the run is named after, where not its own
        self.io_span: Span | None = None  # the span whose input and output are the run's, where not its own
        self.runner_run = False  # an Agents SDK Runner.run's task span: a team, not a workflow


# The trace name the OpenAI Agents SDK gives a run that names none: such a run is named
# after the agent it started with.
_DEFAULT_WORKFLOW_NAMES = frozenset({"Agent workflow"})
AGENTS_SDK_SCOPE = "openinference.instrumentation.openai_agents"


def _agents_sdk_tasks(trace: _Trace) -> list[Span]:
    """The ``Runner.run`` calls of an OpenAI Agents SDK trace: the task spans (``CHAIN``,
    holding the agents that ran) right under the trace's span. A trace holds several
    where the user wrapped several runs in one ``agents.trace(...)``."""
    root = trace.root
    if root is None or root.get("scope") != AGENTS_SDK_SCOPE or role(root) != AGENT:
        return []
    return [
        child
        for child in trace.children.get(root["span_id"], [])
        if _kind(child) == "CHAIN"
        and any(role(inner) == AGENT for inner in trace.children.get(child["span_id"], []))
    ]


def _kind(span: Span) -> str:
    kind = span["attributes"].get("openinference.span.kind")
    return kind.upper() if isinstance(kind, str) else ""


def assemble(spans: list[Span]) -> list[Run]:
    """The runs of one trace's spans (all of one ``trace_id``): the trace's run first
    (``run_id`` = the trace id; ``running`` until the trace's root span has arrived), then
    a member run for each agent span under it (``<trace id>-<span id>``).

    Where a run begins is read from the spans' kinds and attributes, so that a run is what
    the framework's user calls one:

    - a graph node execution (LangGraph: ``metadata.langgraph_node``) is a step of the
      graph's run, whatever its span kind, unless it runs a graph of its own (a subgraph:
      then a member run);
    - a span that names a session other than its run's (``session.id``,
      ``gen_ai.conversation.id``) starts a run of that session, however it is nested (agno
      runs a workflow under the span of the team run before it, in one trace)."""
    if not spans:
        return []
    trace = _Trace(spans)
    session_id = session_key(_value_of(trace, SESSION_KEYS, trace.root)) or default_session_id(trace.trace_id)
    user_id = _value_of(trace, USER_KEYS, trace.root)
    framework = _framework(
        ([trace.root] if trace.root else []) + sorted(trace.by_id.values(), key=span_order)
    )
    top = _RunBuilder(
        Run(
            run_id=trace_run_id(trace.trace_id),
            session_id=session_id[:255],
            user_id=user_id[:255],
            framework=framework,
            status="running",
        ),
        trace.root,
    )
    builders = [top]
    wrappers = trace.wrapping_models()
    graph = _Graph(trace)
    if framework == "langchain" and graph.meta:
        top.run.framework = framework = "langgraph"  # LangChain's instrumentation, a graph's nodes
    # Several Runner.run calls in one trace: one run each, in the trace's session (the
    # first is the trace's run, named after it).
    tasks = _agents_sdk_tasks(trace)
    later_tasks = {span["span_id"] for span in tasks[1:]}
    top.runner_run = bool(tasks)
    if later_tasks:
        top.named_by = tasks[0]

    def visit(span: Span, owner: _RunBuilder, is_top: bool, node: str) -> tuple[_RunBuilder, str]:
        kind = role(span)
        if span["span_id"] in wrappers:
            return owner, node
        if kind in (MODEL, TOOL):
            owner.steps.append((kind, span, node))
            return owner, node
        if kind == GUARDRAIL:
            owner.guardrails.append(span)
            return owner, node
        if is_top:
            return owner, node
        if span["span_id"] in later_tasks:
            task = _RunBuilder(
                Run(
                    run_id=member_run_id(trace.trace_id, span["span_id"]),
                    session_id=top.run.session_id,
                    user_id=top.run.user_id,
                    framework=framework,
                ),
                span,
            )
            task.runner_run = True
            builders.append(task)
            return task, ""
        own_session = session_key(_first_text(span["attributes"], SESSION_KEYS))[:255]
        if (
            own_session
            and session_key(_as_text(span["attributes"].get(ROOT_CONVERSATION_KEY))) == owner.run.session_id
        ):
            # Pydantic AI's agent run inside another's tool (its delegation): a conversation
            # of its own, whose root is the delegating run's: a member run of it.
            own_session = ""
        if (own_session and own_session != owner.run.session_id) or (
            kind == AGENT and span["span_id"] in trace.detached
        ):
            # A run of another session, started inside this trace, or an agent run that
            # began after the run it was left under had ended: a run of its own.
            other = _RunBuilder(
                Run(
                    run_id=member_run_id(trace.trace_id, span["span_id"]),
                    session_id=own_session or top.run.session_id,
                    user_id=_first_text(span["attributes"], USER_KEYS)[:255] or top.run.user_id,
                    framework=framework,
                ),
                span,
            )
            builders.append(other)
            return other, ""
        step = graph.node(span)
        if graph.is_subgraph_of(span, owner.span):
            # The graph a node runs (the node itself, or a graph the node's function
            # invoked): the node's member run, with that graph's input and output, named
            # after it where it is an agent of a name of its own (``create_agent(...,
            # name=...)``).
            owner.io_span = span
            if kind == AGENT:
                owner.named_by = span
            return owner, node
        if step and span["span_id"] in graph.callers:
            # A node (an ``@entrypoint``) whose tasks are its steps: no step of its own.
            return owner, span["span_id"]
        if step and not graph.runs_a_graph(span):
            owner.nodes.append((span, step))
            return owner, span["span_id"]
        if kind == AGENT or step:
            member = _RunBuilder(
                Run(
                    run_id=member_run_id(trace.trace_id, span["span_id"]),
                    session_id=owner.run.session_id,
                    kind="member",
                    parent_run_id=owner.run.run_id,
                    user_id=owner.run.user_id,
                    framework=framework,
                ),
                span,
            )
            builders.append(member)
            owner.members.append(member.run)
            if step:
                # A node running a subgraph: a step of the graph's run too, linked to the
                # subgraph's member run.
                owner.nodes.append((span, step))
                owner.subgraphs[span["span_id"]] = member.run
            return member, ""
        if span["status"] == ERROR and kind == OTHER:
            owner.errors.append(span)
        return owner, node

    # Depth first, in start order, without recursion (a trace may nest thousands deep).
    stack = [(root, top, root is trace.root, "") for root in reversed(trace.roots)]
    while stack:
        span, owner, is_top, node = stack.pop()
        owner, node = visit(span, owner, is_top, node)
        stack.extend(
            (child, owner, False, node) for child in reversed(trace.children.get(span["span_id"], []))
        )
    agents = {
        _first_text(s["attributes"], AGENT_NAME_KEYS) or s["name"]
        for s in trace.by_id.values()
        if role(s) == AGENT
    }
    for builder in reversed(builders):  # members first: their runs fill their parents' interactions
        _fill(builder, trace, agents)
    # How many spans the trace's run was assembled from: a server that keeps a trace's
    # spans tells by it how many arrived since (``SPAN_COUNT_KEY``).
    top.run.metadata[SPAN_COUNT_KEY] = len(trace.by_id)
    return [builder.run for builder in builders]


# LangGraph's entry and exit: ``__start__`` runs as a node where the graph's entry is a
# conditional edge (its branch function, its ``Send``s), but is no step of the user's graph.
_GRAPH_ENDS = frozenset({"__start__", "__end__"})


class _Graph:
    """The graph node executions of a trace (LangGraph's, as OpenInference's LangChain
    instrumentation reports them: every span of a node carries ``metadata`` with
    ``langgraph_node`` and ``langgraph_checkpoint_ns``; the node's own span is named
    after it). A node whose spans hold a deeper checkpoint namespace runs a subgraph."""

    def __init__(self, trace: _Trace):
        self.trace = trace
        self.meta: dict[str, dict[str, Any]] = {}
        for span_id, span in trace.by_id.items():
            meta = json_value(span["attributes"].get("metadata"))
            if isinstance(meta, dict) and isinstance(meta.get("langgraph_node"), str):
                self.meta[span_id] = meta
        self.parents_of_subgraphs: set[str] = set()
        # Nodes that called tasks (the functional API's ``@task``, called from an
        # ``@entrypoint`` or a node): their tasks are the steps, in a deeper namespace
        # that is no subgraph.
        self.callers: set[str] = set()
        for span_id in self.meta:
            if not self.node(trace.by_id[span_id]):
                continue
            depth = self._depth(span_id)
            called = self._called(span_id)
            parent, hops = trace.by_id[span_id]["parent_span_id"], 0
            while parent and parent in trace.by_id and hops < 256:
                if self.node(trace.by_id[parent]) and self._depth(parent) < depth:
                    (self.callers if called else self.parents_of_subgraphs).add(parent)
                    break
                parent, hops = trace.by_id[parent]["parent_span_id"], hops + 1
        self.parents_of_subgraphs -= self.callers

    def _called(self, span_id: str) -> bool:
        """Whether the node execution is a task called from inside another node's
        (LangGraph's ``PUSH`` of a call: its path holds the calling task's path; a
        ``Send``'s holds an index)."""
        path = self.meta[span_id].get("langgraph_path")
        return (
            isinstance(path, list)
            and len(path) > 1
            and path[0] == "__pregel_push"
            and isinstance(path[1], list)
        )

    def _depth(self, span_id: str) -> int:
        namespace = self.meta[span_id].get("langgraph_checkpoint_ns")
        return namespace.count("|") if isinstance(namespace, str) else 0

    def node(self, span: Span) -> str:
        """The node's name where ``span`` is a node execution's own span, else ""."""
        meta = self.meta.get(span["span_id"])
        if meta is None or meta["langgraph_node"] != span["name"] or span["name"] in _GRAPH_ENDS:
            return ""
        parent = self.meta.get(span["parent_span_id"])
        if (
            parent is not None
            and parent["langgraph_node"] == meta["langgraph_node"]
            and parent.get("langgraph_checkpoint_ns") == meta.get("langgraph_checkpoint_ns")
        ):
            return ""  # a span inside the node named as the node
        return meta["langgraph_node"]

    def is_subgraph_of(self, span: Span, node: Span | None) -> bool:
        """Whether ``span`` is the graph that the node execution ``node`` runs (the
        compiled subgraph added as the node, or a graph its function invoked: right under
        it, of its node and namespace)."""
        if node is None or span["parent_span_id"] != node["span_id"] or not self.runs_a_graph(node):
            return False
        meta, outer = self.meta.get(span["span_id"]), self.meta[node["span_id"]]
        return (
            meta is not None
            and meta["langgraph_node"] == outer["langgraph_node"]
            and meta.get("langgraph_checkpoint_ns") == outer.get("langgraph_checkpoint_ns")
        )

    def runs_a_graph(self, span: Span) -> bool:
        return span["span_id"] in self.parents_of_subgraphs


def _fill(builder: _RunBuilder, trace: _Trace, agents: set[str]) -> None:
    run, span = builder.run, builder.span
    calls: list[tuple[ModelCall, list[ModelMessage]]] = []
    iterations: list[Iteration] = []
    current: Iteration | None = None
    asked: dict[str, tuple[Iteration, ToolRequest]] = {}  # tool call id → the iteration that asked
    tools: list[tuple[ToolCall, Span]] = []
    for kind, step, node in sorted(builder.steps, key=lambda item: span_order(item[1])):
        if kind == MODEL:
            call, messages = _model_call(step)
            calls.append((call, messages))
            current = Iteration(
                index=len(iterations) + 1,
                name=_node_name(trace, node),
                model_calls=[call],
                started_at=call.started_at,
            )
            iterations.append(current)
            for request in call.answer.tool_calls if call.answer is not None else ():
                if request.id:
                    asked.setdefault(request.id, (current, request))
        else:
            tool = _tool_call(step, trace)
            tools.append((tool, step))
            if current is not None and not tool.call_id:
                _handoff_request(tool, step, current, agents)
            found = asked.get(tool.call_id or "")
            if found is not None:
                # With the model call that asked for it (a graph runs tools in a node of
                # their own, after the model's).
                target, request = found
                if not isinstance(tool.params, dict | list):
                    arguments = json_value(request.arguments)
                    if isinstance(arguments, dict | list):
                        tool.params = arguments
            else:
                if current is None:
                    current = Iteration(
                        index=1, name=_node_name(trace, node), started_at=_time(step["start"])
                    )
                    iterations.append(current)
                target = current
            target.tool_calls.append(tool)
    _ids_of_requests(iterations)
    _unanswered_requests(builder, iterations, {tool.call_id for tool, _ in tools if tool.call_id})
    _retries_as_sent(calls, trace)
    _images_as_sent(calls, trace)
    stepped = {node for _, _, node in builder.steps}
    for node_span, node in builder.nodes:
        if node_span["span_id"] not in stepped:
            # A node that called no model and no tool: a step of its own; one running a
            # subgraph ends in the subgraph's answer, linked to its member run.
            metadata = {"otel.span_id": node_span["span_id"]}
            subgraph = builder.subgraphs.get(node_span["span_id"])
            if subgraph is not None:
                metadata["member_run_id"] = subgraph.run_id
            iterations.append(
                Iteration(
                    index=0,
                    name=node[:255],
                    thought=(subgraph.output or None) if subgraph is not None else None,
                    started_at=_time(node_span["start"]),
                    ended_at=_time(node_span["end"]),
                    metadata=metadata,
                )
            )
    if builder.nodes:
        iterations.sort(key=lambda it: (it.started_at is None, it.started_at or EARLIEST_TIME))
    for number, iteration in enumerate(iterations, start=1):
        iteration.index = number
    _mark_parts(calls)
    _step_errors(builder.errors, iterations)
    for iteration in iterations:
        ends = [c.ended_at for c in iteration.model_calls + iteration.tool_calls if c.ended_at]  # type: ignore[operator]
        if ends:
            iteration.ended_at = max(ends)
        if iteration.model_calls and iteration.tool_calls:
            iteration.thought = _thought(iteration.model_calls[0].output)
    attributes = span["attributes"] if span is not None else {}
    if span is not None:
        run.agent_name = _run_name(builder.named_by or span, builder)[:255]
        run.started_at, run.ended_at = _time(span["start"]), _time(span["end"])
        if run.started_at and run.ended_at and run.ended_at < run.started_at:
            run.ended_at = run.started_at
        failed = span["status"] == ERROR
        run.status = "failed" if failed else "completed"
        run.error = (_error_text(span) or "failed") if failed else None
        if not failed and span.get("scope") == AGENTS_SDK_SCOPE:
            _agents_sdk_failure(builder)
    else:  # the root span has not arrived: what has is shown, the run still running
        starts = [t for t in (_time(s["start"]) for s in trace.by_id.values()) if t]
        run.started_at = min(starts) if starts else None
    kept: dict[str, Any] = {}
    io = builder.io_span["attributes"] if builder.io_span is not None else attributes
    if span is not None and role(span) == MODEL and calls:
        # A model called alone (LangChain's ``ChatOpenAI.invoke``, a client's call): the
        # run's input and output are the call's, not the request and response as JSON.
        io = {}
    run.input = _run_input(io, calls, kept)
    run.output = _run_output(io, calls, kept) if span is not None else None
    if span is not None and _streamed_smolagents_run(span) and "output.value" in attributes:
        # ``agent.run(task, stream=True)``: the instrumentation joins the repr of every
        # event streamed as the output; the answer is the final_answer tool's result (or,
        # out of steps, the last model call's), the joined events one click away.
        answers = [
            tool.result for tool, _ in tools if tool.tool == "final_answer" and tool.result is not None
        ]
        answer = answers[-1] if answers else (calls[-1][0].output if calls else None)
        if answer is not None:
            kept["output.value"] = attributes["output.value"]
            run.output = answer
    _crewai_run(run, span, calls, iterations, kept)
    handoff = _handoff(tools, run.agent_name, agents)
    if handoff and (not calls or not calls[-1][0].output) and "output.value" not in attributes:
        run.output = handoff  # the run ended handing the conversation to another agent
    elif (
        span is not None
        and span.get("scope") == AGENTS_SDK_SCOPE
        and run.status == "completed"
        and not run.output
        and "output.value" not in attributes
        and calls
        and not calls[-1][0].output
        and tools
        and tools[-1][0].result is not None
        and not tools[-1][0].error
    ):
        # ``tool_use_behavior="stop_on_first_tool"`` (or a tool in ``stop_at_tool_names``):
        # the agent's final output is the result of the tool its last model call asked
        # for, and no span says so otherwise.
        run.output = tools[-1][0].result
    if builder.members and not calls and not _has_text(attributes, "input.value"):
        run.input = run.input or builder.members[0].input
        if span is not None and not _has_text(attributes, "output.value"):
            run.output = _last_member(builder.members).output
    if iterations and run.output is not None and iterations[-1].model_calls:
        last = iterations[-1]
        if not last.tool_calls and last.model_calls[0].output == run.output:
            last.thought = None  # the answer is shown as the run's output
    if builder.runner_run and not iterations and builder.members:
        # An Agents SDK Runner.run: its agents' turns, each a step of the run (their model
        # and tool calls stay in the agents' member runs, so as to be counted once), each
        # ending in its agent's answer or handoff.
        iterations = [
            Iteration(
                index=number,
                name=member.agent_name,
                thought=member.output or None,
                started_at=member.started_at,
                ended_at=member.ended_at,
                metadata={"member_run_id": member.run_id},
            )
            for number, member in enumerate(builder.members, start=1)
        ]
    run.iterations = iterations
    if not calls and span is not None:
        aggregate = _aggregate_call(span)
        if aggregate is not None:
            run.model_calls.append(aggregate)
    for member in builder.members:
        run.member_interactions.append(
            MemberInteraction(
                member=member.agent_name or "member",
                task=member.input,
                response=member.output or "",
                member_run_id=member.run_id,
            )
        )
    if builder.members and run.kind == "agent":
        # Agents handing work to agents are a team; a workflow's or graph's steps
        # (a span of no agent kind, or GenAI's invoke_workflow) run agents as a workflow.
        workflow = (
            span is not None
            and not builder.runner_run
            and (role(span) != AGENT or attributes.get("gen_ai.operation.name") == "invoke_workflow")
        )
        run.kind = "workflow" if workflow else "team"
    run.metadata = _run_metadata(span, trace)
    run.metadata.update(kept)
    if builder.guardrails:
        # The guardrails that checked the run (the OpenAI Agents SDK's): no steps of it.
        run.metadata["guardrails"] = [
            {"name": g["name"], "status": "failed" if g["status"] == ERROR else "ok"}
            for g in builder.guardrails
        ]


# What Pydantic AI answers an output tool call it accepted.
FINAL_RESULT_PROCESSED = "Final result processed."


def _retries_as_sent(calls: list[tuple[ModelCall, list[ModelMessage]]], trace: _Trace) -> None:
    """Pydantic AI reports the retry prompt a tool call got (its ``ModelRetry``, or its
    arguments' validation errors) as that call's ``tool_call_response`` result alone; its
    models for the APIs with no error channel of their own (OpenAI's, and those like them)
    send it wrapped, ``{"error": ...}`` in compact JSON (the validation errors as the JSON
    list they are). The call's ``execute_tool`` span says it was a retry
    (``pydantic_ai.tool.retry.cause``). The message is stored as it was sent, what the span
    reported kept in ``extra["reported_content"]``."""
    causes = {
        _as_text(s["attributes"].get("gen_ai.tool.call.id")): _as_text(
            s["attributes"]["pydantic_ai.tool.retry.cause"]
        )
        for s in trace.by_id.values()
        if "pydantic_ai.tool.retry.cause" in s["attributes"] and s["attributes"].get("gen_ai.tool.call.id")
    }
    pydantic = any(str(s.get("scope") or "").startswith("pydantic-ai") for s in trace.by_id.values())
    if not causes and not pydantic:
        return
    for call, messages in calls:
        if call.messages_source != "otlp genai" or not wire.one_message_per_tool_result(call.provider):
            continue
        # An output tool (``final_result``) runs without a span: its answer is "Final
        # result processed." unless an output validator asked for a retry.
        output_tools = {
            request.id
            for message in messages
            for request in message.tool_calls
            if pydantic and request.id and request.name.startswith("final_result")
        }
        for message in messages:
            cause = causes.get(message.tool_call_id)
            if (
                cause is None
                and message.tool_call_id in output_tools
                and message.content != FINAL_RESULT_PROCESSED
            ):
                # The validation errors of its arguments are a JSON list; a validator's
                # ``ModelRetry`` is its text.
                cause = "validation_error" if isinstance(json_value(message.content), list) else "retry"
            if cause is None or message.parts or "reported_content" in message.extra:
                continue
            value: Any = message.content
            if cause == "validation_error":
                decoded = json_value(value)
                value = decoded if isinstance(decoded, list) else value
            message.extra["reported_content"] = message.content
            message.content = json.dumps({"error": value}, ensure_ascii=False, separators=(",", ":"))


def _images_as_sent(calls: list[tuple[ModelCall, list[ModelMessage]]], trace: _Trace) -> None:
    """Pydantic AI reports an image given by its URL (``ImageUrl``) as a GenAI ``uri`` part;
    its OpenAI chat model sends it as an ``image_url`` part. The part is stored as it was
    sent, the reported one kept in the message's ``extra["reported_parts"]`` (by position)."""
    if not any(str(s.get("scope") or "").startswith("pydantic-ai") for s in trace.by_id.values()):
        return
    for call, messages in calls:
        if call.messages_source != "otlp genai" or call.api not in ("", "chat.completions"):
            continue
        if call.provider.lower() != "openai":
            continue
        for message in messages:
            for position, part in enumerate(message.parts):
                uri = part.get("uri")
                if part.get("type") != "uri" or part.get("modality") != "image" or not isinstance(uri, str):
                    continue
                message.extra.setdefault("reported_parts", {})[str(position)] = dict(part)
                message.parts[position] = {"type": "image_url", "image_url": {"url": uri}}


def _agents_sdk_failure(builder: _RunBuilder) -> None:
    """The OpenAI Agents SDK's instrumentation leaves the agent's and the ``Runner.run``'s
    spans OK when the run raised (an input guardrail's tripwire, the turn limit): the
    error is on the agent's ``turn`` span. Such an agent run failed with that error, and
    so did the ``Runner.run`` whose last agent it was."""
    run = builder.run
    if builder.errors:
        run.status, run.error = "failed", _error_text(builder.errors[-1]) or "failed"
    elif builder.members and builder.members[-1].status == "failed":
        run.status, run.error = "failed", builder.members[-1].error


def _step_errors(errors: list[Span], iterations: list[Iteration]) -> None:
    """A step that failed without a failed tool call (smolagents' ``Step N`` span whose
    code raised, or whose answer did not parse): its error, with the iteration of the
    model call made inside it (``metadata["error"]``); the run goes on to the next step."""
    for error in errors:
        start, end = _time(error["start"]), _time(error["end"])
        text = _error_text(error)
        if not (start and end and text):
            continue
        for iteration in iterations:
            if (
                iteration.model_calls
                and iteration.started_at
                and start <= iteration.started_at <= end
                and not any(tool.error for tool in iteration.tool_calls)
            ):
                iteration.metadata["error"] = text
                break


SMOLAGENTS_SCOPE = "openinference.instrumentation.smolagents"


def _streamed_smolagents_run(span: Span) -> bool:
    if span.get("scope") != SMOLAGENTS_SCOPE or role(span) != AGENT:
        return False
    arguments = json_value(span["attributes"].get("input.value"))
    return isinstance(arguments, dict) and arguments.get("stream") is True


def _node_name(trace: _Trace, node: str) -> str:
    return trace.by_id[node]["name"][:255] if node else ""


def _has_text(attributes: Mapping[str, Any], key: str) -> bool:
    return attributes.get(key) not in (None, "")


def _last_member(members: list[Run]) -> Run:
    return max(members, key=lambda m: (m.ended_at is not None, m.ended_at or EARLIEST_TIME))


def _run_name(span: Span, builder: _RunBuilder) -> str:
    """The run's agent: its name attribute; else the span's name without the method that a
    framework's instrumentation appends (smolagents' ``weather_agent.run``); a run under a
    framework's default workflow name is named after the agent it started with."""
    named = _first_text(span["attributes"], AGENT_NAME_KEYS)
    if named:
        return named
    name = span["name"]
    if name in _DEFAULT_WORKFLOW_NAMES and builder.members:
        return builder.members[0].agent_name or name
    for suffix in (".run", ".arun", ".invoke", ".ainvoke"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _handoff(tools: list[tuple[ToolCall, Span]], agent: str, agents: set[str]) -> str:
    """Where the run's last tool call handed the conversation to another agent (the
    OpenAI Agents SDK's handoff: a tool span from this agent, ``input.value``, to another,
    ``output.value``), what it says: ``handoff to <agent>``."""
    if not tools:
        return ""
    tool, step = tools[-1]
    attributes = step["attributes"]
    source, target = attributes.get("input.value"), attributes.get("output.value")
    if source == agent and isinstance(target, str) and target in agents and target != agent:
        return f"handoff to {target}"
    return ""


def _ids_of_requests(iterations: list[Iteration]) -> None:
    """A tool call whose span carries no call id (CrewAI's, agno's, smolagents', the
    Agents SDK's function tools) takes the id of the request its iteration's model call
    made of its name and arguments, each request answering one call, in order."""
    for iteration in iterations:
        if all(tool.call_id for tool in iteration.tool_calls):
            continue
        taken = {tool.call_id for tool in iteration.tool_calls if tool.call_id}
        requests = [
            request
            for call in iteration.model_calls
            for request in (call.answer.tool_calls if call.answer is not None else ())
            if request.id and request.id not in taken
        ]
        for tool in iteration.tool_calls:
            if tool.call_id:
                continue
            match = next(
                (r for r in requests if r.name == tool.tool and json_value(r.arguments) == tool.params), None
            )
            if match is not None:
                tool.call_id = match.id[:255]
                requests.remove(match)


def _unanswered_requests(builder: _RunBuilder, iterations: list[Iteration], answered: set[str]) -> None:
    """Tool calls a model asked for that no tool span records, where the framework runs
    them without one: a smolagents manager's call of a managed agent (the agent's own run,
    a member run: the call gets its answer, and the member run the task the manager gave
    instead of the prompt smolagents wraps it in, kept in its metadata), and Pydantic AI's
    ``final_result`` (the structured output, which is the run's output too)."""
    members = list(builder.members)
    final_results = builder.run.framework == "pydantic-ai"
    structured = _structured_returns(builder.io_span or builder.span)
    for iteration in iterations:
        for call in iteration.model_calls:
            for request in call.answer.tool_calls if call.answer is not None else ():
                if (request.id and request.id in answered) or any(
                    c.tool == request.name and not c.call_id for c in iteration.tool_calls
                ):
                    continue  # a tool span answered it (one without the call's id: by name)
                arguments = json_value(request.arguments)
                params = arguments if isinstance(arguments, dict | list) else request.arguments
                member = next((m for m in members if m.agent_name == request.name), None)
                if member is not None:
                    members.remove(member)
                    task = params.get("task") if isinstance(params, dict) else None
                    if isinstance(task, str) and task.strip():
                        member.input = task
                    iteration.tool_calls.append(
                        ToolCall(
                            tool=request.name[:255],
                            params=params,
                            result=member.output,
                            error=member.error,
                            started_at=member.started_at,
                            ended_at=member.ended_at,
                            call_id=request.id[:255] or None,
                        )
                    )
                elif final_results and request.name.startswith("final_result"):
                    # Where the model asked for it among the calls it asked for (Pydantic
                    # AI takes the output before running the other tools, ``end_strategy=
                    # "exhaustive"``): before those it asked for after it.
                    later = {
                        r.id
                        for r in call.answer.tool_calls[call.answer.tool_calls.index(request) + 1 :]
                        if r.id
                    }
                    at = next(
                        (n for n, c in enumerate(iteration.tool_calls) if c.call_id and c.call_id in later),
                        len(iteration.tool_calls),
                    )
                    iteration.tool_calls.insert(
                        at,
                        ToolCall(
                            tool=request.name[:255],
                            params=params,
                            result=_tool_return(builder.span, request.id),
                            started_at=call.ended_at,
                            ended_at=call.ended_at,
                            call_id=request.id[:255] or None,
                        ),
                    )
                elif request.id in structured:
                    iteration.tool_calls.append(
                        ToolCall(
                            tool=request.name[:255],
                            params=params,
                            result=structured[request.id],
                            started_at=call.ended_at,
                            ended_at=call.ended_at,
                            call_id=request.id[:255] or None,
                        )
                    )
    _called_in_code(iterations, members)


def _structured_returns(span: Span | None) -> dict[str, str]:
    """LangChain's ``create_agent(..., response_format=ToolStrategy(...))`` answers the
    model's call of the structured output's tool itself, without a tool span: the tool
    messages of the graph's output (``structured_response`` beside ``messages``) by call id."""
    data = json_value(span["attributes"].get("output.value")) if span is not None else None
    if not isinstance(data, dict) or not isinstance(data.get("structured_response"), dict | list):
        return {}
    found: dict[str, str] = {}
    for message in data.get("messages") or ():
        if not isinstance(message, dict):
            continue
        body = message.get("data") if isinstance(message.get("data"), dict) else message
        call_id = body.get("tool_call_id")
        if message.get("type") == "tool" and isinstance(call_id, str) and call_id:
            found[call_id] = _content_text(body.get("content"))
    return found


def _called_in_code(iterations: list[Iteration], members: list[Run]) -> None:
    """A smolagents CodeAgent manager calls its managed agents in the code it writes (no
    tool call was asked for, no tool span sent): each such member run whose task is the
    prompt smolagents wraps a manager's task in is a tool call of the manager's step it
    ran in, with that task as its argument and the member run's input."""
    for member in members:
        found = _MANAGED_PROMPT.match(member.input or "")
        if found is None or found.group(1) != member.agent_name or member.started_at is None:
            continue
        step = next(
            (
                it
                for it in reversed(iterations)
                if it.model_calls and it.started_at is not None and it.started_at <= member.started_at
            ),
            None,
        )
        if step is None:
            continue
        member.input = found.group(2)
        call = ToolCall(
            tool=member.agent_name,
            params={"task": member.input},
            result=member.output,
            error=member.error,
            started_at=member.started_at,
            ended_at=member.ended_at,
        )
        later = [
            n for n, c in enumerate(step.tool_calls) if c.started_at and c.started_at > member.started_at
        ]
        step.tool_calls.insert(later[0] if later else len(step.tool_calls), call)


# The prompt smolagents gives a managed agent (its default ``managed_agent`` template): the
# agent's name, then the task its manager gave it.
_MANAGED_PROMPT = re.compile(
    r"You're a helpful agent named '([^'\n]+)'\.\nYou have been submitted this task by your manager\.\n"
    r"---\nTask:\n(.*?)\n---\n",
    re.DOTALL,
)


def _tool_return(span: Span | None, call_id: str) -> str | None:
    """What Pydantic AI answered a tool call it ran without a span (``final_result``: "Final
    result processed."), from the run's ``pydantic_ai.all_messages``."""
    messages = json_value(span["attributes"].get("pydantic_ai.all_messages")) if span else None
    for message in messages[-1000:] if isinstance(messages, list) and call_id else ():
        for part in message.get("parts") or () if isinstance(message, dict) else ():
            if (
                isinstance(part, dict)
                and part.get("type") == "tool_call_response"
                and part.get("id") == call_id
            ):
                return _as_text(part.get("result"))
    return None


def _handoff_request(tool: ToolCall, step: Span, iteration: Iteration, agents: set[str]) -> None:
    """An OpenAI Agents SDK handoff (its span holds only the two agents' names) takes the
    arguments and id of the ``transfer_to_<agent>`` call the model asked for."""
    attributes = step["attributes"]
    source, target = attributes.get("input.value"), attributes.get("output.value")
    if not (isinstance(source, str) and isinstance(target, str) and {source, target} <= agents):
        return
    wanted = "transfer_to_" + re.sub(r"[^a-zA-Z0-9_]", "_", re.sub(r"\s", "_", target)).lower()
    for call in iteration.model_calls:
        for request in call.answer.tool_calls if call.answer is not None else ():
            if request.name == wanted:
                arguments = json_value(request.arguments)
                if isinstance(arguments, dict | list):
                    tool.params = arguments
                tool.call_id = request.id[:255] or None
                return


def _thought(output: str | None) -> str | None:
    """What a model said besides the tool calls it asked for (shown as their own rows)."""
    return (output or "").strip() or None


def _run_metadata(span: Span | None, trace: _Trace) -> dict[str, Any]:
    meta: dict[str, Any] = {"otel.trace_id": trace.trace_id}
    if span is None:
        meta["otel.waiting_for_root_span"] = True
        return meta
    meta["otel.span_id"] = span["span_id"]
    if span.get("scope"):
        meta["otel.scope"] = span["scope"]
    service = span.get("resource", {}).get("service.name")
    if service:
        meta["service.name"] = service
    meta.update(_unmapped(span["attributes"], also=(*AGENT_NAME_KEYS, "final_result")))
    return meta


def _aggregate_call(span: Span) -> ModelCall | None:
    attributes = span["attributes"]
    input_tokens = _tokens(attributes, _AGGREGATE_INPUT)
    output_tokens = _tokens(attributes, _AGGREGATE_OUTPUT)
    cost = _cost(attributes)
    if input_tokens is None and output_tokens is None and cost is None:
        return None
    return ModelCall(
        model=_first_text(
            attributes, ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "model_name")
        ),
        provider=_first_text(
            attributes, ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
        ),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
        cost_source="reported" if cost is not None else "",
        price_source="reported by the instrumentation" if cost is not None else "",
        started_at=_time(span["start"]),
        ended_at=_time(span["end"]),
        metadata={"aggregate": True},
    )


def _mark_parts(calls: list[tuple[ModelCall, list[ModelMessage]]]) -> None:
    """Each call's messages, marked: system messages are the instructions; before the
    first call's last user message, the history the run was given; that message, its
    input; after it, what the run itself added (its answers and tool results)."""
    if not calls:
        return
    first = [m.role for m in calls[0][1] if m.role not in ("system", "developer")]
    last_user = max((n for n, r in enumerate(first) if r == "user"), default=-1)
    for call, messages in calls:
        position = 0
        for message in messages:
            if message.role in ("system", "developer"):
                message.part = "instructions"
            else:
                message.part = (
                    "history" if position < last_user else "input" if position == last_user else "run"
                )
                position += 1
            call.messages.append(message)


def _run_input(
    attributes: Mapping[str, Any], calls: list[tuple[ModelCall, list[ModelMessage]]], kept: dict[str, Any]
) -> str:
    value = attributes.get("input.value")
    if value is not None:
        text = _user_text(value, "input")
        if text is None:
            return _as_text(value)
        kept["input.value"] = value  # the whole value, one click away (the run's metadata)
        return text
    for call, _ in calls[:1]:
        inputs = [m.content for m in call.messages if m.part == "input"]
        if inputs:
            return inputs[-1]
    return ""


def _run_output(
    attributes: Mapping[str, Any], calls: list[tuple[ModelCall, list[ModelMessage]]], kept: dict[str, Any]
) -> str | None:
    for key in ("output.value", "final_result", "gen_ai.output.text"):
        if attributes.get(key) is not None:
            text = _user_text(attributes[key], "output")
            if text is None:
                data = json_value(attributes[key])
                answer = calls[-1][0].output if calls else None
                if answer and isinstance(data, dict) and answer in data.values():
                    # A graph state holding no messages: the value in it that is the last
                    # model call's answer (a ``summary`` key), the state one click away.
                    kept[key] = attributes[key]
                    return answer
                return _as_text(attributes[key])
            kept[key] = attributes[key]
            return text
    if calls:
        return calls[-1][0].output
    return None


# Keys under which a framework's run input (smolagents' ``task``) or output holds the
# user's text.
_INPUT_KEYS = ("task", "input", "query", "question", "prompt", "message", "user_input")
_OUTPUT_KEYS = ("output", "final_answer", "answer", "result", "response")
_USER_ROLES = frozenset({"user", "human", "HumanMessage", "HumanMessageChunk"})
_ASSISTANT_ROLES = frozenset({"assistant", "ai", "AIMessage", "AIMessageChunk", "model"})


def _user_text(value: Any, side: str) -> str | None:
    """The user's text in a run's structured input or output: a graph state's last user
    message (input) or its last answer with text (output), the messages of a request, a
    framework's arguments' ``task``; None where the value is not such a structure (it is
    then shown as it came)."""
    data = json_value(value)
    if side == "input" and _is_command(data):
        # A graph resumed with ``Command(resume=...)`` (after an ``interrupt``): the answer
        # the user resumed it with; a command that only updates the state, the update's.
        if data.get("resume") is not None:
            resume = data["resume"]
            return resume if isinstance(resume, str) else json.dumps(resume, ensure_ascii=False)
        return _user_text(data.get("update"), side) if isinstance(data.get("update"), dict) else None
    if isinstance(data, dict):
        structured = data.get("structured_response")
        if side == "output" and isinstance(structured, dict | list):
            # LangChain's ``create_agent(..., response_format=...)``: the structured
            # response the user asked for is the answer (the messages end in the tool
            # message that returned it).
            return json.dumps(structured, ensure_ascii=False)
        messages = data.get("messages")
        if isinstance(messages, list) and messages:
            found = _last_message(messages, _USER_ROLES if side == "input" else _ASSISTANT_ROLES)
            if found is not None:
                return found
        for key in _INPUT_KEYS if side == "input" else _OUTPUT_KEYS:
            item = data.get(key)
            if isinstance(item, str) and item.strip():
                return item
    if isinstance(data, list) and data and side == "input":
        return _last_message(data, _USER_ROLES)
    return None


# The fields of LangGraph's ``Command``, as OpenInference's LangChain instrumentation
# serialises the value a graph was invoked with.
_COMMAND_KEYS = frozenset({"graph", "update", "resume", "goto"})


def _is_command(data: Any) -> bool:
    return isinstance(data, dict) and "resume" in data and "goto" in data and data.keys() <= _COMMAND_KEYS


def _last_message(messages: list[Any], roles: frozenset[str]) -> str | None:
    for message in reversed(messages[-1000:]):
        role, content = _role_and_content(message)
        if role in roles:
            text = _content_text(content)
            if text:
                return text
    return None


def _role_and_content(message: Any) -> tuple[str, Any]:
    """A message's role and content in the shapes frameworks serialise them in: a dict
    with ``role`` (OpenAI), LangChain's ``{"type": "human", "data": {...}}`` and its
    ``{"lc": 1, "id": [..., "HumanMessage"], "kwargs": {...}}``, and a pair
    ``["user", "text"]``."""
    if isinstance(message, list) and len(message) == 2 and isinstance(message[0], str):
        return message[0], message[1]
    if not isinstance(message, dict):
        return "", None
    if isinstance(message.get("role"), str):
        return message["role"], message.get("content")
    if isinstance(message.get("data"), dict) and isinstance(message.get("type"), str):
        return message["type"], message["data"].get("content")
    if isinstance(message.get("kwargs"), dict) and isinstance(message.get("id"), list) and message["id"]:
        return str(message["id"][-1]), message["kwargs"].get("content")
    if isinstance(message.get("type"), str) and "content" in message:
        return message["type"], message.get("content")
    return "", None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content.strip() and content
    if isinstance(content, list):
        texts = [
            part if isinstance(part, str) else part.get("text")
            for part in content
            if isinstance(part, str) or (isinstance(part, dict) and isinstance(part.get("text"), str))
        ]
        return "\n".join(t for t in texts if t)
    return ""


def group_by_trace(spans: Iterable[Span]) -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    return traces


# -- CrewAI ---------------------------------------------------------------------------------

CREWAI_SCOPE = "openinference.instrumentation.crewai"


def _crewai_run(
    run: Run,
    span: Span | None,
    calls: list[tuple[ModelCall, list[ModelMessage]]],
    iterations: list[Iteration],
    kept: dict[str, Any],
) -> None:
    """A run from CrewAI's OpenInference instrumentation, as a CrewAI user knows it. Its
    spans: a crew's kickoff (``<crew name>.kickoff``, a chain: its input the kickoff's
    ``inputs``, its output the ``CrewOutput`` as JSON), and each task an agent performs
    (``<role>[.<task name>]._execute_core``, an agent span with ``graph.node.id`` = the
    agent's role: its input the arguments of ``Task._execute_core`` (the agent's fields,
    the context, the tools' reprs), its output the ``TaskOutput`` as JSON). The run is
    named after the crew or the agent's role; a task's input is its description as the
    agent was given it (the ``TaskOutput``'s, else the first model call's input); the
    output is the text the crew or the task returned (``raw``). The whole values stay in
    the run's metadata. Other runs are left as they are."""
    if span is None or span.get("scope") != CREWAI_SCOPE:
        return
    attributes = span["attributes"]
    output = json_value(attributes.get("output.value"))
    output = output if isinstance(output, dict) else {}
    if isinstance(output.get("raw"), str):
        run.output = output["raw"]
        kept["output.value"] = attributes["output.value"]
    agent_role = attributes.get("graph.node.id")
    if role(span) == AGENT and "task_id" in attributes and isinstance(agent_role, str) and agent_role:
        run.agent_name = agent_role[:255]
        description = output.get("description")
        if isinstance(description, str) and description.strip():
            run.input = description
        else:
            run.input = _run_input({}, calls, kept)
        if attributes.get("input.value") is not None:
            kept["input.value"] = attributes["input.value"]
    elif span["name"].endswith(".kickoff") and not _first_text(attributes, AGENT_NAME_KEYS):
        run.agent_name = span["name"][: -len(".kickoff")][:255] or run.agent_name
