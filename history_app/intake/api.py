"""The JSON API: the ingestion endpoint and the JSON twins of the pages."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from history_app import models
from history_app.access.auth import error_response, token_from_request, token_required
from history_app.agent_history import formats
from history_app.errors import RETRY_AFTER_SECONDS, require_POST, unavailable_json
from history_app.intake import ingestion
from history_app.upkeep import retention

logger = logging.getLogger(__name__)


def _chunked(request: HttpRequest) -> bool:
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def _read_body(request: HttpRequest) -> bytes | None:
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
    stream = request.META["wsgi.input"] if _chunked(request) else request
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


def _refuse(request: HttpRequest, message: str, status: int, path: str = "$", **extra: Any) -> JsonResponse:
    """Refuse the whole request, and leave a receipt saying why."""
    token = getattr(request, "ingest_token", None)
    ingestion.record_receipt(
        source="api",
        token=token,
        project_id=token.project_id if token is not None else None,
        results=[ingestion.ItemResult(index=0, errors=[{"path": path, "message": message}])],
    )
    return error_response(message, status, **extra, errors=[{"path": path, "message": message}])


@csrf_exempt
def ingest(request: HttpRequest) -> JsonResponse:
    try:
        if request.method != "POST":
            return _wrong_method(request)
        return _ingest(request)
    except DatabaseError as exc:
        # A transient failure outside any item (the receipt could not be written while
        # another writer held SQLite's lock, a lost connection): the client sends again.
        if not ingestion.is_transient(exc):
            raise
        logger.warning("ingest request not handled, to be sent again: %s", exc)
        return unavailable_json()


def _wrong_method(request: HttpRequest) -> JsonResponse:
    """405; with a valid ingest token, a receipt too, as for every other refusal, so
    that a client sending with the wrong method sees why nothing arrived. (A request
    without a valid token leaves none: anyone could fill the table.)"""
    message = f"{request.method} is not allowed here; send runs with POST"
    token = token_from_request(request)
    if token is not None and token.allows(models.IngestToken.INGEST):
        request.ingest_token = token
        response = _refuse(request, message, 405)
    else:
        response = error_response(message, 405)
    response["Allow"] = "POST"
    return response


@require_POST
@token_required(allow_session=False, scope=models.IngestToken.INGEST)
def _ingest(request: HttpRequest) -> JsonResponse:
    content_type = request.content_type.lower()
    if content_type not in formats.CONTENT_TYPES:
        return _refuse(
            request,
            f"unsupported content type {content_type or '(none)'!r}; send application/json, "
            "application/x-ndjson or text/markdown (an autourgos .md log)",
            415,
        )
    if _chunked(request) and not request.META.get("wsgi.input_terminated"):
        return _refuse(
            request,
            "this server cannot read a chunked body (Transfer-Encoding: chunked without "
            "Content-Length); send Content-Length, or serve the app with gunicorn",
            411,
        )
    body = _read_body(request)
    if body is None:
        return _refuse(request, f"the body is larger than {settings.HISTORY_MAX_BODY_BYTES} bytes", 413)
    format_name = request.GET.get("format") or None
    if format_name is not None and format_name not in formats.FORMATS:
        return _refuse(
            request,
            f"unknown format {format_name!r}; accepted: {', '.join(formats.accepted_formats())}",
            400,
            "format",
        )
    try:
        items = formats.read_body(body, content_type, max_depth=settings.HISTORY_MAX_DEPTH)
    except formats.BodyError as exc:
        return _refuse(request, str(exc), 400, exc.path)
    if not items:
        return _refuse(request, "the body holds no runs", 400)
    limit = settings.HISTORY_MAX_ITEMS_PER_REQUEST
    if len(items) > limit:
        message = f"the body holds {len(items)} runs; at most {limit} per request"
        return _refuse(request, message, 413, count=len(items), limit=limit)

    project_id = request.ingest_token.project_id
    receipt = ingestion.open_receipt(
        source="api", token=request.ingest_token, item_count=len(items), project_id=project_id
    )
    try:
        results = ingestion.ingest_items(
            items=items,
            format=format_name,
            receipt=receipt,
            project_id=project_id,
            escape_free=formats.escape_free(body),
        )
    except BaseException:
        # Whatever stopped the request (a bug, a worker timeout's SystemExit), the receipt
        # says so, with the counts of what its items' transactions stored.
        ingestion.interrupt_receipt(receipt=receipt)
        raise
    ingestion.close_receipt(receipt=receipt, results=results)
    if any(r.status == "retry" for r in results):
        return _retry_later(results)
    rejected = sum(1 for r in results if r.status == "rejected")
    changed = sum(1 for r in results if r.status in {"created", "updated"})
    try:
        retention.maybe_prune_automatically(new_runs=changed)
    except Exception:  # noqa: BLE001 — retention must never fail an ingestion request
        logger.exception("automatic retention failed")
    status = 200 if rejected == 0 else 207 if rejected < len(results) else 400
    return JsonResponse({"ok": rejected == 0, "results": [r.as_dict() for r in results]}, status=status)


def _retry_later(results: list[ingestion.ItemResult]) -> JsonResponse:
    """503: a transient database failure stopped some items; sending the whole batch again
    is safe (ingestion is idempotent on run_id)."""
    waiting = sum(1 for r in results if r.status == "retry")
    response = error_response(
        f"a temporary database failure stopped {waiting} of {len(results)} runs; send the batch "
        f"again in {RETRY_AFTER_SECONDS} s (runs already stored answer duplicate)",
        503,
        retry_after=RETRY_AFTER_SECONDS,
        results=[r.as_dict() for r in results],
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
