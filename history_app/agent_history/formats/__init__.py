"""Parsers: every supported input format becomes canonical ``records.Run`` objects.

This is the one normalisation path: the library's tools, the ingestion endpoint and the
import commands all call :func:`parse`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..records import (
    MAX_DEPTH,
    RecordError,
    Run,
    checked_payload,
    count_lone_surrogates,
    json_text_deep_path,
    structure_errors,
)
from . import agno, agno_go, autourgos, cot, native

# name -> (detector, parser); detection tries them in this order.
FORMATS = {
    "native": (native.detect, native.parse),
    "autourgos": (autourgos.detect, autourgos.parse),
    # agno-go before agno: both have run_id and workflow_id; agno-go's RFC 3339 times and
    # lower-case statuses tell them apart.
    "agno-go": (agno_go.detect, agno_go.parse),
    "agno": (agno.detect, agno.parse),
    "cot": (cot.detect, cot.parse),
}


# The format name of runs read from an autourgos Markdown log (its .json twin is gone):
# stored as the run's source format, so the page says where the run came from.
MARKDOWN_FORMAT = "autourgos-markdown"

JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset(
    {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
)
MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
CONTENT_TYPES = JSON_TYPES | NDJSON_TYPES | MARKDOWN_TYPES
# A file's suffix names its content type, for the import commands and the library's readers.
SUFFIX_TYPES = {
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".md": "text/markdown",
}


def accepted_formats() -> list[str]:
    return list(FORMATS)


class BodyError(ValueError):
    """A body (or one NDJSON line of it) that holds no readable item; ``path`` says where."""

    def __init__(self, message: str, path: str = "$"):
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class MarkdownLog:
    """An item that is an autourgos Markdown log: parsed with its own reader, never as JSON."""

    text: str


@dataclass
class ParsedItem:
    """One item of a body: its runs and the format they were read as, or what is wrong."""

    index: int
    format: str | None = None
    runs: list[Run] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _loads(text: str, path: str, max_depth: int) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BodyError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path) from None
    except RecursionError:
        # Too deep for the parser from here (how deep it can go depends on the caller's
        # stack): name the field that is too deep, as the depth check of a parsed body does.
        deep = json_text_deep_path(text, path, max_depth=max_depth)
        raise BodyError(
            f"invalid JSON: nested deeper than {max_depth} levels of objects and arrays", deep or path
        ) from None
    except ValueError as exc:
        raise BodyError(f"invalid JSON: {exc}", path) from None


# The JSON escapes that decode to a NUL or to a UTF-16 surrogate (\u0000, \uD800-\uDFFF).
_RISKY_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def escape_free(body: bytes | str) -> bool:
    """True when no item read from ``body`` (JSON or NDJSON bytes) can hold a NUL or a lone
    surrogate: UTF-8 cannot encode a surrogate and JSON refuses a raw NUL in a string, so
    either can only come from an escape, and the body holds none of those. One scan of the
    body in C, instead of a check of every item. False for a text (``str``) body, which can
    hold either character as it is, and whenever such an escape may be there (an escaped
    backslash before ``u0000`` counts too: false alarms only cost the full check)."""
    return isinstance(body, bytes | bytearray) and _RISKY_ESCAPE.search(body) is None


def read_body(
    body: bytes | str, content_type: str = "application/json", *, max_depth: int = MAX_DEPTH
) -> list[Any]:
    """The items of a body, by its content type: one JSON object or an array of them, NDJSON
    lines, or one autourgos Markdown log (a ``MarkdownLog`` item).

    Raises ``BodyError`` when the body as a whole cannot be read. A bad NDJSON line does not
    sink its neighbours: it becomes a ``BodyError`` item at its own index.
    """
    content_type = content_type.split(";", 1)[0].strip().lower()
    if content_type not in CONTENT_TYPES:
        raise BodyError(
            f"unsupported content type {content_type or '(none)'!r}; send application/json, "
            "application/x-ndjson or text/markdown (an autourgos .md log)"
        )
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise BodyError(f"the body is not UTF-8 (byte {exc.start})") from None
    else:
        text = body.removeprefix("\ufeff")
    if content_type in MARKDOWN_TYPES:
        return [MarkdownLog(text)]
    if content_type in NDJSON_TYPES:
        items: list[Any] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(_loads(line, f"$[{len(items)}]", max_depth))
            except BodyError as exc:
                items.append(BodyError(f"line {number}: {exc}", exc.path))
        return items
    data = _loads(text, "$", max_depth)
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        return [data]
    raise BodyError("the body must be a JSON object or an array of objects")


def parse_body(
    body: bytes | str,
    content_type: str = "application/json",
    *,
    format: str | None = None,
    max_depth: int = MAX_DEPTH,
) -> list[ParsedItem]:
    """The one entry point for a body in any accepted format: each item's runs with the
    format they were detected in, or its errors with their paths. Raises ``BodyError``
    when the body as a whole is unreadable."""
    parsed = []
    for index, item in enumerate(read_body(body, content_type, max_depth=max_depth)):
        result = ParsedItem(index=index)
        if isinstance(item, BodyError):
            result.errors = [(item.path, str(item))]
        else:
            try:
                result.format, result.runs = parse_detected(item, format, max_depth=max_depth)
            except RecordError as exc:
                result.errors = list(exc.errors)
        parsed.append(result)
    return parsed


def detect(payload: Any) -> str | None:
    """The name of the format ``payload`` is in, judged by its shape, or None."""
    if not isinstance(payload, dict):
        return None
    named = payload.get("format")
    if isinstance(named, str) and named in FORMATS:
        return named
    for name, (detector, _) in FORMATS.items():
        if detector(payload):
            return name
    return None


def parse(payload: Any, format: str | None = None, *, max_depth: int = MAX_DEPTH) -> list[Run]:
    """Parse one payload (one item of a request) into runs; raises ``RecordError``."""
    return parse_detected(payload, format, max_depth=max_depth)[1]


def parse_detected(
    payload: Any, format: str | None = None, *, max_depth: int = MAX_DEPTH
) -> tuple[str, list[Run]]:
    """Like ``parse``, and also the name of the format the payload was read as.

    Whatever the format, the payload is first checked for values nested deeper than
    ``max_depth`` and for numbers that are not finite (reported with their path in the
    payload), and its lone surrogates become U+FFFD (counted as ``lone_surrogate`` in the
    first run's redactions). Every run a parser builds then passes the same validation as
    a native record, so a format cannot produce a run that the store would refuse.
    """
    if isinstance(payload, MarkdownLog):
        runs = autourgos.parse_markdown(payload.text, max_depth=max_depth)
        return MARKDOWN_FORMAT, [validated(run, max_depth=max_depth) for run in runs]
    if not isinstance(payload, dict):
        raise RecordError([("$", f"must be an object, not {type(payload).__name__}")])
    if format is not None and format not in FORMATS:
        raise RecordError([("format", f"unknown format {format!r}; accepted: {', '.join(FORMATS)}")])
    payload, replaced = checked_payload(payload, max_depth=max_depth)
    name = format or detect(payload)
    if name is None:
        raise RecordError([("$", f"matches no accepted format; accepted formats: {', '.join(FORMATS)}")])
    runs = [validated(run, max_depth=max_depth) for run in FORMATS[name][1](payload)]
    return name, count_lone_surrogates(runs, replaced)


def validated(run: Run, *, max_depth: int = MAX_DEPTH) -> Run:
    """``run`` as the record validation reads it back; ``RecordError`` names what is wrong,
    with its path in the canonical record."""
    errors = structure_errors(run, "$", max_depth=max_depth)
    if errors:
        raise RecordError(errors)
    return Run.from_dict(run.to_dict(), max_depth=max_depth)


__all__ = [
    "CONTENT_TYPES",
    "FORMATS",
    "MARKDOWN_FORMAT",
    "SUFFIX_TYPES",
    "BodyError",
    "MarkdownLog",
    "ParsedItem",
    "accepted_formats",
    "agno",
    "agno_go",
    "autourgos",
    "cot",
    "detect",
    "native",
    "parse",
    "parse_body",
    "parse_detected",
    "read_body",
]
