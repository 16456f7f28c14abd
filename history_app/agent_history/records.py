"""The canonical record every input format is normalised into (schema "agent-history/v1").

Plain dataclasses, standard library only: agent code builds them, the dashboard stores
them, and ``to_dict``/``from_dict`` are the wire format of the ingestion endpoint.
``from_dict`` validates as it goes and reports every bad field with its JSON path, so a
client learns exactly what to fix instead of getting a half-stored run.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from .text import value_text

SCHEMA = "agent-history/v1"
RUN_KINDS = ("agent", "team", "workflow", "member")
RUN_STATUSES = ("pending", "running", "completed", "failed", "cancelled")
FINISHED_STATUSES = ("completed", "failed", "cancelled")
CONTEXT_TARGETS = ("system", "user", "task")
CONTEXT_KINDS = (
    "workflow_history",
    "team_history",
    "member_interactions",
    "chat_history",
    "cot_history",
    "session_summary",
    "memories",
    "instructions",
    "custom",
)
# What a message a model received was, where known (``ModelMessage.part``): the agent's
# instructions, history replayed from earlier runs, other injected context, the new input,
# or this run's own earlier turns (answers and tool results of the loop so far).
MESSAGE_PARTS = ("instructions", "history", "context", "input", "run")
# How a call's cost is known: as the model client reported it, or estimated on the server
# from its tokens and a price list (``price_source`` names which).
COST_SOURCES = ("reported", "estimated")
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
# Bounds on one call, far above any real one (a million-token context costs dollars), so
# that no sum of them (a run's, a session's, a day's) can overflow a 64-bit column or a
# float: 2**31 calls at the bound would be needed.
MAX_TOKENS = 2**32
MAX_COST = 1_000_000.0
# What the server writes into a call's metadata, checked when a client sends them.
CALL_FLAGS = {"aggregate": "true", "calls": "count", "omitted_messages": "count"}
MAX_ID_LENGTH = 255
# Levels of objects and arrays an item may hold, the item itself being the first. Deeper
# values exhaust Python's recursion limit in the code that copies, redacts and shows them.
MAX_DEPTH = 64
# Iteration numbers are stored in an integer column: PostgreSQL's holds 32 bits.
MAX_INDEX = 2**31 - 1
# Every time must survive conversion to any UTC offset (at most a day) inside the range
# Python and both databases can hold, years 1 to 9999.
EARLIEST_TIME = datetime(1, 1, 2, tzinfo=UTC)
LATEST_TIME = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
TIME_RANGE = "must be between 0001-01-02 and 9999-12-30 (UTC)"
LONE_SURROGATE = "lone_surrogate"
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class RecordError(ValueError):
    """A payload that cannot become a record; ``errors`` holds ``(path, message)`` pairs."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{path}: {message}" for path, message in errors))


@dataclass
class ToolCall:
    tool: str
    params: Any = None
    result: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


# Which request body a model call's messages came from: OpenAI's chat completions (a
# message list), its Responses API (``instructions`` plus ``input`` items, normalised to
# messages by ``messages.responses_messages``), or another shape ("" where unknown).
MODEL_APIS = ("chat.completions", "responses", "")


@dataclass
class ToolRequest:
    """A tool call a model asked for (in an assistant message, or in a call's answer)."""

    name: str
    # The arguments exactly as sent (a JSON text); a source that gave a JSON value instead
    # (the OTLP GenAI conventions) has it encoded here, and ``arguments_exact`` false.
    arguments: str = ""
    id: str = ""
    type: str = "function"
    arguments_exact: bool = True
    # Whatever else the request held that no field above does, verbatim.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelMessage:
    """One message a model call received, in the order it received them, as it was sent:
    the role verbatim, the text (``content``), and where the content was a list of parts
    those parts in order (``parts``: a text part as ``{"type": "text", "text": …}``, every
    other part as the source gave it), the tool calls an assistant message asked for, the
    ``tool_call_id`` a tool message answers, the sender's ``name``, and in ``extra`` any
    other key the message held."""

    role: str
    content: str = ""
    # One of MESSAGE_PARTS, or "" where unknown.
    part: str = ""
    # The position (0-based) in the run's ``injected_contexts`` of the context this
    # message carries, where known: pages link the message to the inspector.
    context: int | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolRequest] = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    # True when the content was sent as null (an assistant message asking for tools).
    content_null: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass
class ModelCall:
    """One call to a model: what it received, what it answered, its tokens and cost."""

    model: str = ""
    provider: str = ""
    messages: list[ModelMessage] = field(default_factory=list)
    output: str | None = None
    finish_reason: str = ""
    # The answer as a message (its text, parts and the tool calls it asked for), where the
    # source gave more than ``output``'s text; ``output`` stays its text.
    answer: ModelMessage | None = None
    # One of MODEL_APIS: which request shape the messages were normalised from.
    api: str = ""
    # Who reported the messages ("middleware", "otlp genai", "openinference"…): the pages
    # say whose roles they show when those are not the wire's own.
    messages_source: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    # In US dollars; None when no price is known (never a made-up figure).
    cost: float | None = None
    cost_source: str = ""  # one of COST_SOURCES, or "" without a cost
    price_source: str = ""  # who reported or priced it ("genai-prices 0.0.40", "autourgos")
    started_at: datetime | None = None
    ended_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> int | None:
        return _duration_ms(self.started_at, self.ended_at)

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass
class Iteration:
    index: int
    name: str = ""
    thought: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


# The tools a team calls to hand members a task: agno's, and the names its older releases
# and other frameworks use.
DELEGATION_TOOLS = frozenset(
    {
        "delegate_task_to_member",
        "delegate_task_to_members",
        "transfer_task_to_member",
        "forward_task_to_member",
        "atransfer_task_to_member",
    }
)


def is_delegation(tool: str, params: Any) -> bool:
    """Whether a tool call hands a team member a task: a delegation tool, or any call
    whose parameters name a ``member_id``. One definition for every reader: the agno
    format's member interactions and history boundaries, and the dashboard's links."""
    return tool in DELEGATION_TOOLS or (isinstance(params, dict) and "member_id" in params)


@dataclass
class MemberInteraction:
    member: str
    task: str = ""
    response: str = ""
    member_run_id: str | None = None


@dataclass
class InjectedContext:
    text: str
    kind: str = "custom"
    target: str = "system"
    step: str = ""
    source_run_ids: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    reported: bool = True

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass
class Run:
    run_id: str
    session_id: str
    kind: str = "agent"
    status: str = "completed"
    parent_run_id: str | None = None
    agent_name: str = ""
    team_id: str = ""
    workflow_id: str = ""
    user_id: str = ""
    framework: str = ""
    input: str = ""
    output: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    iterations: list[Iteration] = field(default_factory=list)
    member_interactions: list[MemberInteraction] = field(default_factory=list)
    injected_contexts: list[InjectedContext] = field(default_factory=list)
    # Model calls not placed in an iteration (an agent without iterations; the totals a
    # run reported for all its calls, ``metadata["aggregate"]``, when it gave no more).
    model_calls: list[ModelCall] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    redactions: dict[str, int] = field(default_factory=dict)

    @property
    def duration_ms(self) -> int | None:
        return _duration_ms(self.started_at, self.ended_at)

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def all_model_calls(self) -> list[ModelCall]:
        """Every model call of the run in order: each iteration's, then the run's own."""
        return [call for it in self.iterations for call in it.model_calls] + list(self.model_calls)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema": SCHEMA}
        data.update(_plain(self))
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)

    @classmethod
    def from_dict(cls, data: Any, *, max_depth: int = MAX_DEPTH, structure_checked: bool = False) -> Run:
        """Build a run from its dict form, raising ``RecordError`` listing every bad field.

        A value nested deeper than ``max_depth`` levels, or a number that is not finite,
        is refused before anything else reads the data (unless ``structure_checked``: the
        caller ran ``structure_errors`` on this data, or on data it only redacted)."""
        errors = [] if structure_checked else structure_errors(data, "$", max_depth=max_depth)
        if errors:
            raise RecordError(errors)
        run = _read_run(data, "$", errors)
        if errors or run is None:
            raise RecordError(errors or [("$", "not a run")])
        return run


# -- serialisation -----------------------------------------------------------------


_SCALARS = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if isinstance(obj, datetime):
        return obj.isoformat()
    names = _FIELD_NAMES.get(kind)
    if names is None and hasattr(obj, "__dataclass_fields__"):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(obj))
    if names is not None:
        return {name: _plain(getattr(obj, name)) for name in names}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _duration_ms(started: datetime | None, ended: datetime | None) -> int | None:
    if started is None or ended is None:
        return None
    return round((_aware(ended) - _aware(started)).total_seconds() * 1000)


def _children(value: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        # A path is shown and stored (receipts): a key's lone surrogates and NULs cannot be.
        return [(f"{path}.{_UNSTORABLE.sub(chr(0xFFFD), str(key))}", child) for key, child in value.items()]
    if isinstance(value, list | tuple):
        return [(f"{path}[{i}]", child) for i, child in enumerate(value)]
    return [(f"{path}.{f.name}", getattr(value, f.name)) for f in fields(value)]


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def json_text_depth(text: str, *, balanced: bool = False) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (strings skipped), in
    linear time and without parsing: Python's JSON parser recurses, so whether it meets
    the recursion limit depends on its caller's stack. Measuring first gives the same
    answer for the same text everywhere. With ``balanced``, -1 when the brackets do not
    close in order (so the text cannot be JSON)."""
    depth = deepest = 0
    stack: list[str] = []
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if balanced:
                stack.append("]" if bracket == "[" else "}")
        else:
            depth -= 1
            if balanced and (not stack or stack.pop() != bracket):
                return -1
    if balanced and stack:
        return -1
    return deepest


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def json_text_deep_path(text: str, path: str = "$", *, max_depth: int = MAX_DEPTH) -> str | None:
    """The path of the first object or array nested deeper than ``max_depth`` levels in
    JSON ``text`` (the outermost value is the first level), named as ``structure_errors``
    names it, found in one pass over the tokens without parsing or recursion: for a text
    too deep for Python's parser, whose limit depends on its caller's stack, the answer
    still names the field. None when nothing is that deep."""
    stack: list[list] = []  # [bracket, path of the container, key or index, expecting a key]
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        top = stack[-1] if stack else None
        if token in "[{":
            if top is None:
                where = path
            elif top[0] == "[":
                where = f"{top[1]}[{top[2]}]"
            else:
                where = f"{top[1]}.{top[2]}"
            if len(stack) + 1 > max_depth:
                return where
            stack.append([token, where, 0 if token == "[" else "", token == "{"])
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if top is not None:
                if top[0] == "[":
                    top[2] += 1
                else:
                    top[3] = True
        elif token == ":":
            if top is not None:
                top[3] = False
        elif top is not None and top[0] == "{" and top[3]:
            try:
                key = json.loads(token)
            except ValueError:
                key = token[1:-1]
            top[2] = _UNSTORABLE.sub(chr(0xFFFD), str(key))
    return None


def structure_errors(value: Any, path: str = "$", *, max_depth: int = MAX_DEPTH) -> list[tuple[str, str]]:
    """``(path, message)`` for the first value nested deeper than ``max_depth`` levels of
    objects and arrays (``value`` itself is the first level) and for every number that is
    not finite. Works on plain JSON data and on records, without recursion, so that no
    depth of input can exhaust the stack here."""
    if _structure_ok(value, max_depth):
        return []
    errors: list[tuple[str, str]] = []
    stack = [(value, path, 1)]
    while stack:
        item, where, level = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            errors.append((where, "must be a finite number"))
        elif isinstance(item, dict | list | tuple) or hasattr(item, "__dataclass_fields__"):
            if level > max_depth:
                errors.append((where, f"is nested deeper than {max_depth} levels of objects and arrays"))
                break
            stack.extend((child, p, level + 1) for p, child in reversed(_children(item, where)))
    return errors


def _structure_ok(value: Any, max_depth: int) -> bool:
    """``structure_errors`` would find nothing: the same walk without building a path for
    every value (the paths are only built, by a second walk, when something is wrong)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind in _SCALARS and kind is not float:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict | list | tuple) or hasattr(item, "__dataclass_fields__"):
            if level > max_depth:
                return False
            if isinstance(item, dict):
                stack.extend((child, level + 1) for child in item.values())
            elif isinstance(item, list | tuple):
                stack.extend((child, level + 1) for child in item)
            else:
                stack.extend((getattr(item, f.name), level + 1) for f in fields(item))
    return True


def without_lone_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` with every lone UTF-16 surrogate (in strings and keys) replaced by
    U+FFFD, and how many were replaced. Such a code point cannot be encoded as UTF-8, so
    neither database can store it; JSON lets a client send one as ``"\\ud800"``."""
    count = 0

    def clean(item: Any) -> Any:
        nonlocal count
        if isinstance(item, str):
            cleaned, found = _SURROGATE.subn("\ufffd", item)
            count += found
            return cleaned
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, list):
            return [clean(v) for v in item]
        return item

    return clean(value), count


def checked_payload(payload: Any, *, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """A payload safe for any parser: ``RecordError`` for a value nested too deep or a
    number that is not finite, else the payload without lone surrogates and their count."""
    errors = structure_errors(payload, "$", max_depth=max_depth)
    if errors:
        raise RecordError(errors)
    return without_lone_surrogates(payload)


def count_lone_surrogates(runs: list[Run], replaced: int) -> list[Run]:
    """Record ``replaced`` lone surrogates in the first run's redactions (the run the item
    is about; members and steps follow it)."""
    if replaced and runs:
        runs[0].redactions[LONE_SURROGATE] = runs[0].redactions.get(LONE_SURROGATE, 0) + replaced
    return runs


def check_time_range(value: datetime) -> datetime:
    """``value`` if it lies in the range every store can hold, else ``ValueError``."""
    try:
        utc = _aware(value).astimezone(UTC)
    except OverflowError:
        raise ValueError(TIME_RANGE) from None
    if not EARLIEST_TIME <= utc <= LATEST_TIME:
        raise ValueError(TIME_RANGE)
    return value


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 / RFC 3339 (with ``Z``) or epoch seconds; naive times are kept naive.

    Raises ``ValueError`` for anything else, and for a time outside years 1 to 9999."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return check_time_range(value)
    if isinstance(value, bool):
        raise ValueError("expected a timestamp")
    if isinstance(value, int | float):
        try:
            return check_time_range(datetime.fromtimestamp(value, tz=UTC))
        except (OverflowError, OSError, ValueError):
            raise ValueError(TIME_RANGE) from None
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        # Go writes nanoseconds; Python's parser accepts at most microseconds.
        if "." in text:
            head, _, tail = text.partition(".")
            digits = len(tail) - len(tail.lstrip("0123456789"))
            if digits > 6:
                tail = tail[:6] + tail[digits:]
            text = f"{head}.{tail}"
        return check_time_range(datetime.fromisoformat(text))
    raise ValueError("expected a timestamp")


class _Reader:
    """Typed field access that records ``(path, message)`` instead of raising."""

    def __init__(self, data: dict[str, Any], path: str, errors: list[tuple[str, str]]):
        self.data, self.path, self.errors = data, path, errors

    def fail(self, key: str, message: str) -> None:
        self.errors.append((f"{self.path}.{key}", message))

    def text(self, key: str, default: str | None = "", *, required: bool = False) -> Any:
        value = self.data.get(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return default
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, dict | list):
            # Structured answers (a dict from a JSON-mode model, say) are kept, as JSON.
            return value_text(value, indent=2)
        self.fail(key, f"must be a string, not {json_type(value)}")
        return default

    def ident(self, key: str, *, required: bool = False) -> Any:
        value = self.text(key, None, required=required)
        if value is None:
            return None
        if not value or len(value) > MAX_ID_LENGTH:
            self.fail(key, f"must be 1 to {MAX_ID_LENGTH} characters")
        elif "/" in value or any(ord(c) < 32 for c in value):
            self.fail(key, "must not contain '/' or control characters")
        elif value in {".", ".."}:
            # A path segment of its own: a link to it would resolve to its parent page.
            self.fail(key, "must not be '.' or '..'")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or value.lower() not in allowed:
            self.fail(key, f"must be one of {', '.join(allowed)}")
            return default
        return value.lower()

    def time(self, key: str) -> datetime | None:
        try:
            return parse_time(self.data.get(key))
        except ValueError as exc:
            self.fail(
                key,
                TIME_RANGE if str(exc) == TIME_RANGE else "must be an ISO 8601 timestamp or epoch seconds",
            )
            return None

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, "must be an object")
            return {}
        return value

    def items(self, key: str) -> list[tuple[str, Any]]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, "must be an array")
            return []
        return [(f"{self.path}.{key}[{i}]", item) for i, item in enumerate(value)]


INDEX_RANGE = f"must be an integer from 0 to {MAX_INDEX}"


def is_index(value: Any) -> bool:
    """Whether ``value`` fits an iteration number: an integer from 0 to ``MAX_INDEX``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INDEX


_JSON_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
}


def type_errors(data: dict[str, Any], path: str, expected: dict[str, str]) -> list[tuple[str, str]]:
    """``(path, message)`` for each key of ``expected`` present in ``data`` (and not null)
    whose value is not of the JSON type named there ("string", "string or integer"…)."""
    errors = []
    for key, wanted in expected.items():
        value = data.get(key)
        kinds = wanted.split(" or ")
        if value is None or (
            not isinstance(value, bool) and isinstance(value, tuple(t for k in kinds for t in _JSON_TYPES[k]))
        ):
            continue
        article = " or ".join(f"{'an' if k[0] in 'aeio' else 'a'} {k}" for k in kinds)
        errors.append((f"{path}.{key}", f"must be {article}, not {json_type(value)}"))
    return errors


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages."""
    for name, kinds in (("boolean", (bool,)), *_JSON_TYPES.items()):
        if isinstance(value, kinds):
            return name
    return "null" if value is None else type(value).__name__


def _obj(data: Any, path: str, errors: list[tuple[str, str]]) -> _Reader | None:
    if not isinstance(data, dict):
        errors.append((path, "must be an object"))
        return None
    return _Reader(data, path, errors)


def _read_tool_call(data: Any, path: str, errors: list[tuple[str, str]]) -> ToolCall | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    return ToolCall(
        tool=r.text("tool", required=True) or "",
        params=data.get("params"),
        result=r.text("result", None),
        error=r.text("error", None),
        started_at=r.time("started_at"),
        ended_at=r.time("ended_at"),
        call_id=r.text("call_id", None),
    )


def _read_tool_request(data: Any, path: str, errors: list[tuple[str, str]]) -> ToolRequest | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    exact = data.get("arguments_exact", True)
    if not isinstance(exact, bool):
        r.fail("arguments_exact", "must be true or false")
        exact = True
    arguments = data.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        # A JSON value where a text was expected: kept, encoded, and marked as not exact.
        arguments, exact = json.dumps(arguments, ensure_ascii=False), False
    return ToolRequest(
        name=r.text("name") or "",
        arguments=arguments or "",
        id=r.text("id") or "",
        type=r.text("type") or "function",
        arguments_exact=exact,
        extra=r.mapping("extra"),
    )


def _read_parts(r: _Reader, key: str) -> list[dict[str, Any]]:
    parts = []
    for p, item in r.items(key):
        if isinstance(item, dict):
            parts.append(item)
        else:
            r.errors.append((p, "must be an object"))
    return parts


def _read_message(data: Any, path: str, errors: list[tuple[str, str]]) -> ModelMessage | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    position = data.get("context")
    if position is not None and not is_index(position):
        r.fail("context", INDEX_RANGE)
        position = None
    part = data.get("part")
    null = data.get("content_null", False)
    if not isinstance(null, bool):
        r.fail("content_null", "must be true or false")
        null = False
    requests = [_read_tool_request(item, p, errors) for p, item in r.items("tool_calls")]
    return ModelMessage(
        role=r.text("role") or "",
        content=r.text("content") or "",
        part=r.choice("part", MESSAGE_PARTS, "") if part not in (None, "") else "",
        context=position,
        parts=_read_parts(r, "parts"),
        tool_calls=[t for t in requests if t is not None],
        tool_call_id=r.text("tool_call_id") or "",
        name=r.text("name") or "",
        content_null=null,
        extra=r.mapping("extra"),
    )


def message_from_dict(data: Any, path: str = "$") -> ModelMessage:
    """A message from its dict form (as stored), ``RecordError`` if it is not one."""
    errors: list[tuple[str, str]] = []
    message = _read_message(data, path, errors)
    if errors or message is None:
        raise RecordError(errors or [(path, "not a message")])
    return message


def _count(r: _Reader, key: str) -> int | None:
    value = r.data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        r.fail(key, f"must be a whole number of tokens from 0 to {MAX_TOKENS}")
        return None
    return value


def _read_model_call(data: Any, path: str, errors: list[tuple[str, str]]) -> ModelCall | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    cost = data.get("cost")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost <= MAX_COST
    ):
        r.fail("cost", f"must be a number of US dollars from 0 to {MAX_COST:,.0f}")
        cost = None
    source = data.get("cost_source")
    messages = [_read_message(item, p, errors) for p, item in r.items("messages")]
    metadata = r.mapping("metadata")
    for flag, kind in CALL_FLAGS.items():
        value = metadata.get(flag)
        if value is None:
            continue
        if kind == "true" and value is not True:
            errors.append((f"{path}.metadata.{flag}", "must be true (the call holds a run's totals)"))
        elif kind == "count" and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX
        ):
            errors.append((f"{path}.metadata.{flag}", INDEX_RANGE))
    started, ended = r.time("started_at"), r.time("ended_at")
    if started is not None and ended is not None and _aware(ended) < _aware(started):
        r.fail("ended_at", "must not be before started_at")
    answer = None if data.get("answer") is None else _read_message(data["answer"], f"{path}.answer", errors)
    return ModelCall(
        model=r.text("model") or "",
        provider=r.text("provider") or "",
        messages=[m for m in messages if m is not None],
        output=r.text("output", None),
        finish_reason=r.text("finish_reason") or "",
        answer=answer,
        api=r.choice("api", MODEL_APIS, ""),
        messages_source=r.text("messages_source") or "",
        input_tokens=_count(r, "input_tokens"),
        output_tokens=_count(r, "output_tokens"),
        cached_tokens=_count(r, "cached_tokens"),
        reasoning_tokens=_count(r, "reasoning_tokens"),
        cost=None if cost is None else float(cost),
        cost_source=(
            ""
            if cost is None
            else r.choice("cost_source", COST_SOURCES, "reported")
            if source not in (None, "")
            else "reported"
        ),
        price_source=r.text("price_source") or "",
        started_at=started,
        ended_at=ended,
        metadata=metadata,
    )


def _read_iteration(data: Any, path: str, errors: list[tuple[str, str]], position: int) -> Iteration | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    index = data.get("index", position)
    if not is_index(index):
        r.fail("index", INDEX_RANGE)
        index = position
    calls = [_read_tool_call(item, p, errors) for p, item in r.items("tool_calls")]
    model_calls = [_read_model_call(item, p, errors) for p, item in r.items("model_calls")]
    return Iteration(
        index=index,
        name=r.text("name") or "",
        thought=r.text("thought", None),
        tool_calls=[c for c in calls if c is not None],
        model_calls=[c for c in model_calls if c is not None],
        started_at=r.time("started_at"),
        ended_at=r.time("ended_at"),
        metadata=r.mapping("metadata"),
    )


def _read_interaction(data: Any, path: str, errors: list[tuple[str, str]]) -> MemberInteraction | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    return MemberInteraction(
        member=r.text("member") or "Unknown",
        task=r.text("task") or "",
        response=r.text("response") or "",
        member_run_id=r.ident("member_run_id"),
    )


def _read_context(data: Any, path: str, errors: list[tuple[str, str]]) -> InjectedContext | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    sources = data.get("source_run_ids") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        r.fail("source_run_ids", "must be an array of strings")
        sources = []
    reported = data.get("reported", True)
    if not isinstance(reported, bool):
        r.fail("reported", "must be true or false")
        reported = True
    return InjectedContext(
        text=r.text("text", required=True) or "",
        kind=r.choice("kind", CONTEXT_KINDS, "custom"),
        target=r.choice("target", CONTEXT_TARGETS, "system"),
        step=r.text("step") or "",
        source_run_ids=list(sources),
        settings=r.mapping("settings"),
        reported=reported,
    )


def _check_message_links(
    call: ModelCall | None, path: str, contexts: int, errors: list[tuple[str, str]]
) -> None:
    for m, message in enumerate(call.messages if call else ()):
        if message.context is not None and message.context >= contexts:
            errors.append(
                (f"{path}.messages[{m}].context", f"names no injected context (the run has {contexts})")
            )


def _read_run(data: Any, path: str, errors: list[tuple[str, str]]) -> Run | None:
    r = _obj(data, path, errors)
    if r is None:
        return None
    iterations = [_read_iteration(item, p, errors, i) for i, (p, item) in enumerate(r.items("iterations"))]
    interactions = [_read_interaction(item, p, errors) for p, item in r.items("member_interactions")]
    contexts = [_read_context(item, p, errors) for p, item in r.items("injected_contexts")]
    model_calls = [_read_model_call(item, p, errors) for p, item in r.items("model_calls")]
    redactions = r.mapping("redactions")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in redactions.values()):
        r.fail("redactions", "must map rule names to counts")
        redactions = {}
    for c, call in enumerate(model_calls):
        _check_message_links(call, f"{path}.model_calls[{c}]", len(contexts), errors)
    for i, iteration in enumerate(iterations):
        for c, call in enumerate(iteration.model_calls if iteration else ()):
            _check_message_links(call, f"{path}.iterations[{i}].model_calls[{c}]", len(contexts), errors)
    known = {f.name for f in fields(Run)} | {"schema"}
    metadata = dict(r.mapping("metadata"))
    # Unknown fields are kept, never dropped silently.
    extra = {k: v for k, v in data.items() if k not in known}
    if extra:
        metadata.setdefault("extra_fields", {}).update(extra)
    return Run(
        run_id=r.ident("run_id", required=True) or "",
        session_id=r.ident("session_id", required=True) or "",
        kind=r.choice("kind", RUN_KINDS, "agent"),
        status=r.choice("status", RUN_STATUSES, "completed"),
        parent_run_id=r.ident("parent_run_id"),
        agent_name=r.text("agent_name") or "",
        team_id=r.text("team_id") or "",
        workflow_id=r.text("workflow_id") or "",
        user_id=r.text("user_id") or "",
        framework=r.text("framework") or "",
        input=r.text("input") or "",
        output=r.text("output", None),
        error=r.text("error", None),
        started_at=r.time("started_at"),
        ended_at=r.time("ended_at"),
        iterations=[i for i in iterations if i is not None],
        member_interactions=[i for i in interactions if i is not None],
        injected_contexts=[c for c in contexts if c is not None],
        model_calls=[c for c in model_calls if c is not None],
        metrics=r.mapping("metrics"),
        metadata=metadata,
        redactions=dict(redactions),
    )
