"""The native ingestion endpoint, `POST /api/v1/ingest`: a thin adapter (the guard sequence of
``guards``, the body read into runs, the run writer, the answer). The pages' JSON twins are
the pages' own views (``reading/views``)."""

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
from history_app.errors import require_POST, unavailable_json
from history_app.intake import guards, ingestion, writer
from history_app.intake.guards import RETRY_AFTER_SECONDS

logger = logging.getLogger(__name__)


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
        if not writer.is_transient(exc):
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
    """Decode the body into items, have them written, answer each item's result."""
    try:
        items, format_name, escape_free = _items(request)
    except guards.Refused as exc:
        return _refuse(request, exc.message, exc.status, exc.path, **exc.extra)
    token = request.ingest_token
    with ingestion.receipt_kept(
        source="api", token=token, item_count=len(items), project_id=token.project_id
    ) as receipt:
        results = ingestion.ingest_items(
            items=items,
            format=format_name,
            receipt=receipt,
            project_id=token.project_id,
            escape_free=escape_free,
        )
    ingestion.close_receipt(receipt=receipt, results=results)
    if any(r.status == "retry" for r in results):
        return _retry_later(results)
    rejected = sum(1 for r in results if r.status == "rejected")
    guards.prune_after(changed=sum(1 for r in results if r.status in {"created", "updated"}))
    status = 200 if rejected == 0 else 207 if rejected < len(results) else 400
    return JsonResponse({"ok": rejected == 0, "results": [r.as_dict() for r in results]}, status=status)


def _items(request: HttpRequest) -> tuple[list[Any], str | None, bool]:
    """The body's items, the format named (None: each item's own), and whether the body
    holds no escape that ingestion must look for (``formats.escape_free``); ``Refused``
    for a body that cannot be read."""
    content_type, body = guards.checked_body(
        request,
        content_types=formats.CONTENT_TYPES,
        accepted="application/json, application/x-ndjson or text/markdown (an autourgos .md log)",
    )
    format_name = request.GET.get("format") or None
    if format_name is not None and format_name not in formats.FORMATS:
        accepted = ", ".join(formats.accepted_formats())
        raise guards.Refused(400, f"unknown format {format_name!r}; accepted: {accepted}", "format")
    try:
        items = formats.read_body(body, content_type, max_depth=settings.HISTORY_MAX_DEPTH)
    except formats.BodyError as exc:
        raise guards.Refused(400, str(exc), exc.path) from None
    if not items:
        raise guards.Refused(400, "the body holds no runs")
    limit = settings.HISTORY_MAX_ITEMS_PER_REQUEST
    if len(items) > limit:
        message = f"the body holds {len(items)} runs; at most {limit} per request"
        raise guards.Refused(413, message, count=len(items), limit=limit)
    return items, format_name, formats.escape_free(body)


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
    return guards.retry_after(response)
