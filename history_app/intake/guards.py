"""What both ingestion endpoints check of a request before reading its runs: the body is
read only when it can be (``is_chunked``) and only up to the cap (``read_body``)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


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
