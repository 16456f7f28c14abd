"""What an OTLP request holds, counted before it is decoded.

A few kilobytes of gzip inflate to megabytes of tiny messages (``\\x0a\\x00`` is an empty
``ResourceSpans``; ``{}`` an empty JSON object), and every one of them costs the decoder
tens of bytes and the conversion hundreds. So the body is measured first, in one pass over
its bytes that builds nothing, and refused with its count when it holds more than the
limits allow:

- protobuf: the wire format is walked (tags, varints, length prefixes) following the
  OTLP message descriptors; every element of a repeated message field is counted
  (resource and scope groups, spans, attributes, events, links, values of arrays and
  key-value lists), and so is every field read, so that the walk itself is bounded;
- JSON: the strings are set aside and the values outside them counted (each ``,``,
  ``[`` and ``{`` starts one), with C-speed string operations.

Only structure is read: a string or bytes field is skipped by its length prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

# A message nested deeper than this is refused (protobuf's own decoder stops at 100).
MAX_DEPTH = 100


class OverLimit(Exception):
    """A request holding more of something than allowed; ``what`` names it for the sender."""

    def __init__(self, what: str, count: int, limit: int, *, exact: bool = False):
        self.what, self.count, self.limit, self.exact = what, count, limit, exact
        amount = f"{count}" if exact else f"more than {limit}"
        super().__init__(f"the request holds {amount} {what}; at most {limit} per request")


@dataclass
class Counts:
    resource_spans: int = 0
    scope_spans: int = 0
    spans: int = 0
    elements: int = 0  # elements of every repeated message field, the three above included
    fields: int = 0  # fields read, at every level walked


@dataclass(frozen=True)
class Limits:
    spans: int
    groups: int  # resource groups, and scope groups, each
    elements: int

    @property
    def fields(self) -> int:
        # An attribute is four fields (itself, its key, its value and the value's one
        # field): a body with more fields than four per element allowed is padding meant
        # to make the walk slow (a span's own scalar fields are few beside its attributes).
        return 4 * self.elements


@dataclass
class _Schema:
    """For one message type: field number → (the child's schema, repeated)."""

    children: dict[int, tuple[Any, bool]] = field(default_factory=dict)


@cache
def _request_schema() -> _Schema:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    schemas: dict[str, _Schema] = {}

    def schema_of(descriptor: Any) -> _Schema:
        name = descriptor.full_name
        if name not in schemas:
            schemas[name] = _Schema()
            for f in descriptor.fields:
                if f.message_type is not None:
                    repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
                    schemas[name].children[f.number] = (schema_of(f.message_type), repeated)
        return schemas[name]

    return schema_of(trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR)


def check_protobuf(body: bytes | bytearray, limits: Limits) -> Counts:
    """The counts of an ``ExportTraceServiceRequest`` in protobuf; ``OverLimit`` as soon as
    one passes its limit (nothing more is read), ``ValueError`` for bytes that are no
    protobuf message (cut short, a length past the end, a group)."""
    top = _request_schema()
    resource = top.children[1][0]
    scope = resource.children[2][0]
    data = bytes(body)
    size = len(data)
    # Plain locals, and one-byte varints read inline: this loop runs once per field.
    resource_spans = scope_spans = spans = elements = fields = 0
    max_fields, max_elements, max_groups, max_spans = (
        limits.fields,
        limits.elements,
        limits.groups,
        limits.spans,
    )
    # (end of the message, its schema's children), innermost last.
    stack: list[tuple[int, dict[int, tuple[Any, bool]]]] = [(size, top.children)]
    end, children = size, top.children
    pos = 0
    while True:
        if pos >= end:
            if pos > end:
                raise ValueError("a field runs past the end of its message")
            stack.pop()
            if not stack:
                break
            end, children = stack[-1]
            continue
        fields += 1
        if fields > max_fields:
            raise OverLimit("protobuf fields", fields, max_fields)
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos, size)
        wire = key & 7
        if wire == 2:
            if pos >= size:
                raise ValueError("the body ends inside a number")
            length = data[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(data, pos, size)
            start, pos = pos, pos + length
            if pos > end:
                raise ValueError("a field's length runs past the end of its message")
            child = children.get(key >> 3)
            if child is None:
                continue
            child_schema, repeated = child
            if repeated:
                elements += 1
                if elements > max_elements:
                    raise OverLimit("repeated elements (spans, attributes, events, values…)", 0, max_elements)
                if child_schema is resource:
                    resource_spans += 1
                    if resource_spans > max_groups:
                        raise OverLimit("ResourceSpans", 0, max_groups)
                elif child_schema is scope:
                    scope_spans += 1
                    if scope_spans > max_groups:
                        raise OverLimit("ScopeSpans", 0, max_groups)
                elif children is scope.children and key >> 3 == 2:
                    spans += 1
                    if spans > max_spans:
                        raise OverLimit("spans", 0, max_spans)
            if length:
                if len(stack) > MAX_DEPTH:
                    raise ValueError(f"messages nest deeper than {MAX_DEPTH} levels")
                stack.append((pos, child_schema.children))
                end, children = pos, child_schema.children
                pos = start
        elif wire == 0:
            if pos < size and data[pos] < 0x80:
                pos += 1
            else:
                _, pos = _varint(data, pos, size)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire} is not used by OTLP")
    if pos != size:
        raise ValueError("the last field runs past the end of the body")
    return Counts(resource_spans, scope_spans, spans, elements, fields)


def _varint(data: bytes | bytearray, pos: int, size: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= size:
            raise ValueError("the body ends inside a number")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("a number is longer than ten bytes")


# A JSON string (valid JSON escapes only ever take one character after the backslash).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def count_json_values(body: bytes | bytearray) -> int:
    """About how many values a JSON text holds (at least as many as it does when it is
    valid): every ``[``, ``{`` and ``,`` outside strings starts one. Linear, in C."""
    bare = _JSON_STRING.sub(b'""', body)
    return 1 + bare.count(b",") + bare.count(b"[") + bare.count(b"{")
