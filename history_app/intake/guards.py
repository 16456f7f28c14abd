"""The one guard sequence of both ingestion endpoints (``api.ingest``, ``traces.traces``).

In order: a content type the endpoint reads, a body this server can read (a chunked one
only behind a server that ends the input), at most ``HISTORY_MAX_BODY_BYTES`` read
(``checked_body``, which raises ``Refused``); then the endpoint parses the body and
refuses what it cannot read the same way. What it can read is written under a receipt
opened first and marked interrupted if the request stops (``ingestion.receipt_kept``); a transient
database failure answers 503 with ``Retry-After`` (``retry_after``); and after a write
that stored runs, automatic retention may prune (``prune_after``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from history_app.upkeep import retention

logger = logging.getLogger(__name__)

# What a 503 of either endpoint (and of any page, errors.py) tells a client to wait.
RETRY_AFTER_SECONDS = 5


class Refused(Exception):
    """A request refused whole: its HTTP status, the message, the path of what is wrong
    (``$``: the request itself), and what else the answer says."""

    def __init__(self, status: int, message: str, path: str = "$", **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.path, self.extra = status, message, path, extra


def checked_body(request: HttpRequest, *, content_types: Iterable[str], accepted: str) -> tuple[str, bytes]:
    """The request's content type (lower case) and body, once the checks both endpoints
    make have passed; ``Refused`` (415, 411 or 413) otherwise. ``accepted`` says what to
    send instead of an unsupported content type."""
    content_type = request.content_type.lower()
    if content_type not in content_types:
        raise Refused(415, f"unsupported content type {content_type or '(none)'!r}; send {accepted}")
    if is_chunked(request) and not request.META.get("wsgi.input_terminated"):
        raise Refused(
            411,
            "this server cannot read a chunked body (Transfer-Encoding: chunked without "
            "Content-Length); send Content-Length, or serve the app with gunicorn",
        )
    body = read_body(request)
    if body is None:
        raise Refused(413, f"the body is larger than {settings.HISTORY_MAX_BODY_BYTES} bytes")
    return content_type, body


def retry_after(response: HttpResponseBase) -> HttpResponseBase:
    """``response`` (a 503) telling the client when to send the request again."""
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def prune_after(*, changed: int) -> None:
    """Automatic retention after a request that stored ``changed`` runs; it never fails
    the request."""
    try:
        retention.maybe_prune_automatically(new_runs=changed)
    except Exception:  # noqa: BLE001 — retention must never fail an ingestion request
        logger.exception("automatic retention failed")


def is_chunked(request: HttpRequest) -> bool:
    """Whether the body is sent ``Transfer-Encoding: chunked`` (without Content-Length)."""
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def read_body(request: HttpRequest) -> bytes | None:
    """The body, or None when it is over the limit (checked before reading it all).

    A chunked body has no Content-Length, so Django reads it as empty; when the server
    says the input ends with the body (gunicorn sets ``wsgi.input_terminated``) it is read
    straight from the WSGI stream, up to the limit."""
    limit = settings.HISTORY_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return None
    stream = request.META["wsgi.input"] if is_chunked(request) else request
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)
