"""OpenTelemetry intake: ``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON, gzip or not).

The protobuf form is decoded here (``opentelemetry-proto``, a dependency of the app, never
of the library) into OTLP's JSON form, and ``agent_history.otlp`` reads that form into
spans; ``spans.intake_spans`` keeps them and assembles each trace's spans into runs,
which the run writer stores.

Answers follow the OTLP/HTTP specification: ``ExportTraceServiceResponse`` (with
``partial_success`` naming the spans refused and why) on success, ``google.rpc.Status``
on failure, each in the encoding of the request; 400 for what no retry can fix, 503 with
``Retry-After`` for a transient database failure (exporters retry those).
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from history_app import models
from history_app.access.auth import mark_used, token_from_request
from history_app.agent_history import otlp
from history_app.intake import guards, ingestion, otlp_limits, writer
from history_app.intake import spans as span_store

logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# A gzip body may be several members one after the other (exporters send one).
MAX_GZIP_MEMBERS = 100
# google.rpc.Code values used in error bodies.
INVALID_ARGUMENT, UNAUTHENTICATED, RESOURCE_EXHAUSTED, UNAVAILABLE, UNIMPLEMENTED = 3, 16, 8, 14, 12
PERMISSION_DENIED = 7


class TooManySpans(Exception):
    """A request holding more than ``HISTORY_OTLP_MAX_SPANS`` spans, found before they are read."""

    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


# --- Encodings -----------------------------------------------------------------------


def _status_body(code: int, message: str, encoding: str) -> bytes:
    if encoding == PROTOBUF:
        from google.rpc import status_pb2

        return status_pb2.Status(code=code, message=message).SerializeToString()
    return json.dumps({"code": code, "message": message}).encode()


def _error(status: int, code: int, message: str, encoding: str) -> HttpResponse:
    response = HttpResponse(_status_body(code, message, encoding), status=status, content_type=encoding)
    if status == 503:
        guards.retry_after(response)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="agent-history"'
    return response


def _success(rejected: int, message: str, encoding: str) -> HttpResponse:
    if encoding == PROTOBUF:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        answer = trace_service_pb2.ExportTraceServiceResponse()
        if rejected or message:
            answer.partial_success.rejected_spans = rejected
            answer.partial_success.error_message = message
        body = answer.SerializeToString()
    else:
        data: dict[str, Any] = {}
        if rejected or message:
            data["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
        body = json.dumps(data).encode()
    return HttpResponse(body, status=200, content_type=encoding)


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` in protobuf as OTLP's JSON form (ids in hex, as
    the OTLP/JSON specification writes them). ``ValueError`` when it is not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError) as exc:
        raise ValueError(f"the body is not an OTLP ExportTraceServiceRequest in protobuf: {exc}") from None
    count = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if count > settings.HISTORY_OTLP_MAX_SPANS:
        raise TooManySpans(count)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _pb_attributes(rs.resource.attributes)},
                "scopeSpans": [
                    {
                        "scope": {"name": ss.scope.name, "version": ss.scope.version},
                        "spans": [_pb_span(span) for span in ss.spans],
                    }
                    for ss in rs.scope_spans
                ],
            }
            for rs in request.resource_spans
        ]
    }


def _pb_span(span: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
        "attributes": _pb_attributes(span.attributes),
        "droppedAttributesCount": span.dropped_attributes_count
        + max(len(span.attributes) - otlp.MAX_ATTRIBUTES, 0),
        "status": {"code": span.status.code, "message": span.status.message},
        "flags": span.flags,
    }
    if span.events:
        data["events"] = [
            {"name": e.name, "timeUnixNano": e.time_unix_nano, "attributes": _pb_attributes(e.attributes)}
            for e in span.events[: otlp.MAX_EVENTS]
        ]
    dropped_events = span.dropped_events_count + max(len(span.events) - otlp.MAX_EVENTS, 0)
    if dropped_events:
        data["droppedEventsCount"] = dropped_events
    return data


def _pb_attributes(attributes: Any) -> list[dict[str, Any]]:
    """At most ``otlp.MAX_ATTRIBUTES`` of them (the rest are counted as dropped)."""
    return [{"key": kv.key, "value": _pb_value(kv.value, 0)} for kv in attributes[: otlp.MAX_ATTRIBUTES]]


def _pb_value(value: Any, depth: int) -> dict[str, Any]:
    """(Too deep a value is refused by ``otlp.read_request``, with its path; protobuf's
    decoder refuses a message nested past 100 levels before this runs.)"""
    kind = value.WhichOneof("value")
    if kind is None:
        return {}
    if kind == "array_value":
        values = value.array_value.values
        if len(values) > otlp.MAX_VALUES:  # refused by read_request, with its path
            return {"arrayValue": {"values": [{}] * len(values)}}
        return {"arrayValue": {"values": [_pb_value(v, depth + 1) for v in values]}}
    if kind == "kvlist_value":
        values = value.kvlist_value.values
        if len(values) > otlp.MAX_VALUES:
            return {"kvlistValue": {"values": [{"key": ""}] * len(values)}}
        return {
            "kvlistValue": {
                "values": [{"key": kv.key, "value": _pb_value(kv.value, depth + 1)} for kv in values]
            }
        }
    if kind == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode()}
    if kind == "double_value":
        return {"doubleValue": otlp.double_value(value.double_value)}
    camel = {"string_value": "stringValue", "bool_value": "boolValue", "int_value": "intValue"}[kind]
    return {camel: getattr(value, kind)}


def _decompress(body: bytes, encoding: str) -> bytes | None:
    """The body decoded; None when it decompresses to more than the cap. ``ValueError``
    for a body that is not what its ``Content-Encoding`` says (cut short, a bad
    checksum, bytes after the end); a gzip body of several members is read whole."""
    if encoding in ("", "identity") or not body:
        return body
    if encoding not in ("gzip", "deflate"):
        raise LookupError(encoding)
    limit = settings.HISTORY_OTLP_MAX_DECOMPRESSED_BYTES
    out = bytearray()
    rest = body
    members = 0
    while rest:
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise ValueError(f"the body is not valid {encoding}: more than {MAX_GZIP_MEMBERS} members")
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib, by its header
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise ValueError(f"the body is not valid {encoding}: {exc}") from None
        if len(out) > limit:
            return None
        if not inflater.eof:
            raise ValueError(f"the body is not valid {encoding}: it ends before its stream does")
        rest = inflater.unused_data
        if rest and encoding != "gzip":
            raise ValueError(f"the body is not valid {encoding}: bytes after the end of the stream")
    return bytes(out)


# A JSON attribute is four values (its object, key, value object and string), a
# protobuf one a single element: the JSON form is allowed this many values per element.
JSON_VALUES_PER_ELEMENT = 4


def request_limits() -> otlp_limits.Limits:
    """What one request may hold (resource and scope groups are bounded like spans: an
    exporter sends at least one span in each)."""
    return otlp_limits.Limits(
        spans=settings.HISTORY_OTLP_MAX_SPANS,
        groups=settings.HISTORY_OTLP_MAX_SPANS,
        elements=settings.HISTORY_OTLP_MAX_ELEMENTS,
    )


def _check_json_counts(data: Any, limits: otlp_limits.Limits) -> None:
    """``OverLimit`` for a request in JSON with too many spans, resource or scope groups
    (empty ones count: each still costs a pass of the reader)."""
    count = otlp.count_spans(data)
    if count > limits.spans:
        raise TooManySpans(count)
    resources = (data.get("resourceSpans") or data.get("resource_spans")) if isinstance(data, dict) else None
    if not isinstance(resources, list):
        return
    if len(resources) > limits.groups:
        raise otlp_limits.OverLimit("ResourceSpans", len(resources), limits.groups, exact=True)
    scopes = sum(
        len(s) if isinstance(s, list) else 0
        for s in (r.get("scopeSpans") or r.get("scope_spans") for r in resources if isinstance(r, dict))
    )
    if scopes > limits.groups:
        raise otlp_limits.OverLimit("ScopeSpans", scopes, limits.groups, exact=True)


# --- The view --------------------------------------------------------------------------


def _encoding(request: HttpRequest) -> str:
    """The encoding the answer is given in: the request's."""
    return PROTOBUF if request.content_type.lower() == PROTOBUF else JSON


def unavailable(request: HttpRequest) -> HttpResponse:
    """503 with ``Retry-After`` in OTLP's shape: exporters send the request again."""
    return _error(503, UNAVAILABLE, "temporary database failure; send the request again", _encoding(request))


@csrf_exempt
def traces(request: HttpRequest) -> HttpResponse:
    try:
        return _authorized_intake(request)
    except DatabaseError as exc:
        # The token lookup included: PostgreSQL refusing connections fails the first query.
        if not writer.is_transient(exc):
            raise
        logger.warning("OTLP request not handled, to be sent again: %s", exc)
        return unavailable(request)


def _authorized_intake(request: HttpRequest) -> HttpResponse:
    encoding = _encoding(request)
    token = token_from_request(request)
    if request.method != "POST":
        # With a valid ingest token the refusal leaves a receipt, as every other does.
        response = _error(405, UNIMPLEMENTED, "send spans with POST", encoding)
        if token is not None and token.allows(models.IngestToken.INGEST):
            try:
                response = _refuse(token, 405, UNIMPLEMENTED, "send spans with POST", encoding)
            except DatabaseError:  # the answer matters more than its receipt
                logger.warning("the receipt of a %s request to /v1/traces was not written", request.method)
        response["Allow"] = "POST"
        return response
    if token is None:
        return _error(
            401, UNAUTHENTICATED, "a valid 'Authorization: Bearer <token>' header is required", encoding
        )
    if not token.allows(models.IngestToken.INGEST):
        return _error(403, PERMISSION_DENIED, "this token does not have the 'ingest' scope", encoding)
    mark_used(token)
    return _intake(request, token, encoding)


def _refuse(token: models.IngestToken, status: int, code: int, message: str, encoding: str, path: str = "$"):
    message, path = ingestion.server_redactor().redact([message, path])
    ingestion.record_receipt(
        source="otlp",
        token=token,
        project_id=token.project_id,
        results=[ingestion.ItemResult(index=0, errors=[{"path": path, "message": message}])],
    )
    return _error(status, code, message, encoding)


def _intake(request: HttpRequest, token: models.IngestToken, encoding: str) -> HttpResponse:
    """Decode the body into spans, have them kept and their traces written, answer."""
    try:
        spans, errors = _spans(request)
    except guards.Refused as exc:
        code = RESOURCE_EXHAUSTED if exc.status == 413 else INVALID_ARGUMENT
        return _refuse(token, exc.status, code, exc.message, encoding, exc.path)
    outcome = span_store.intake_spans(spans=spans, errors=errors, token=token)
    if outcome.retry:
        return _error(503, UNAVAILABLE, "temporary database failure; send the request again", encoding)
    guards.prune_after(changed=outcome.changed)
    return _success(outcome.rejected, outcome.message(), encoding)


def _spans(request: HttpRequest) -> tuple[list[otlp.Span], list[otlp.SpanError]]:
    """The spans of the request (and those refused, with why); ``Refused`` for a body that
    cannot be read."""
    content_type, body = guards.checked_body(
        request, content_types=(PROTOBUF, JSON), accepted=f"{PROTOBUF} or {JSON}"
    )
    content_encoding = request.headers.get("Content-Encoding", "").strip().lower()
    try:
        body = _decompress(body, content_encoding)
    except LookupError:
        message = f"unsupported Content-Encoding {content_encoding!r}; send gzip, deflate or none"
        raise guards.Refused(415, message) from None
    except ValueError as exc:
        raise guards.Refused(400, str(exc)) from None
    if body is None:
        limit = settings.HISTORY_OTLP_MAX_DECOMPRESSED_BYTES
        raise guards.Refused(413, f"the body decompresses to more than {limit} bytes")
    limit = settings.HISTORY_OTLP_MAX_SPANS
    try:
        # Counted before anything is built: a few kilobytes of gzip can hold millions of
        # empty messages, each costing the decoder far more memory than its two bytes.
        limits = request_limits()
        if content_type == PROTOBUF:
            try:
                otlp_limits.check_protobuf(body, limits)
            except ValueError as exc:
                raise ValueError(
                    f"the body is not an OTLP ExportTraceServiceRequest in protobuf: {exc}"
                ) from None
            data = decode_protobuf(body)
        else:
            if otlp_limits.count_json_values(body) > JSON_VALUES_PER_ELEMENT * limits.elements:
                raise otlp_limits.OverLimit("JSON values", 0, JSON_VALUES_PER_ELEMENT * limits.elements)
            data = json.loads(body)
            _check_json_counts(data, limits)
    except TooManySpans as exc:
        message = f"the request holds {exc.count} spans; at most {limit} per request (lower the exporter's batch size)"
        raise guards.Refused(413, message) from None
    except otlp_limits.OverLimit as exc:
        raise guards.Refused(413, f"{exc} (lower the exporter's batch size)") from None
    except RecursionError:
        raise guards.Refused(400, "the body nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        message = str(exc) if content_type == PROTOBUF else f"the body is not valid JSON: {exc}"
        raise guards.Refused(400, message) from None
    try:
        spans, errors, _ = otlp.read_request(data)
    except otlp.SpanError as exc:
        raise guards.Refused(400, f"{exc.path}: {exc}", exc.path) from None
    return spans, errors
