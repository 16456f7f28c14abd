"""The JSON API: the ingestion endpoint and the JSON twins of the pages."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import Http404, HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from history_app import models
from history_app.access.auth import error_response, token_from_request, token_required
from history_app.agent_history import formats
from history_app.agent_history.jsonstream import iter_json
from history_app.errors import require_GET, require_POST, unavailable_json
from history_app.intake import guards, ingestion, writer
from history_app.intake.guards import RETRY_AFTER_SECONDS
from history_app.reading import (
    compare,
    inspector,
    listing,
    model_calls,
    paging,
    stats,
    streams,
    timeline,
    transcripts,
)
from history_app.reading.diffs import LineDiff
from history_app.reading.forms import StatsForm
from history_app.upkeep import annotations as annotation_store

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


def _json_page(request: HttpRequest, selector, summary, key: str, warnings=(), **extra) -> JsonResponse:
    try:
        page = selector(after=request.GET.get("_next"), limit=settings.HISTORY_PAGE_SIZE, **extra)
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    data = {"ok": True, key: [summary(row) for row in page.items], "next": page.next_cursor}
    if warnings:
        data["warnings"] = list(warnings)
    return JsonResponse(data)


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def sessions(request: HttpRequest) -> JsonResponse:
    """Sessions, with the same search, filters and sorting as the page (``q``, ``framework``…)."""
    try:
        filters = listing.SessionFilters.from_query(request.GET)
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    warnings = [{"parameter": "q", "message": filters.search_notice}] if filters.search_notice else []
    return _json_page(
        request,
        listing.sessions_page,
        listing.session_summary,
        "sessions",
        warnings,
        filters=filters,
        project=request.project,
    )


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def session_detail(request: HttpRequest, session_id: str) -> JsonResponse:
    try:
        session = listing.get_session(request.project, session_id)
    except Http404:
        return error_response(f"no session {session_id!r}", 404)
    runs = timeline.session_runs(session=session)
    return JsonResponse(
        {
            "ok": True,
            "session": listing.session_summary(session),
            "runs": [listing.run_summary(r) for r in runs],
        }
    )


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def run_detail(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """The run's canonical record, streamed as it is read (a run of any size)."""
    try:
        run = transcripts.get_run(request.project, run_id)
    except Http404:
        return error_response(f"no run {run_id!r}", 404)
    (data,) = streams.RunReader(models.Run.objects.filter(pk=run.pk)).dicts()
    return StreamingHttpResponse(iter_json({"ok": True, "run": data}), content_type="application/json")


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def receipts(request: HttpRequest) -> JsonResponse:
    return _json_page(
        request, listing.receipts_page, listing.receipt_summary, "receipts", project=request.project
    )


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def session_timeline(request: HttpRequest, session_id: str) -> JsonResponse:
    """The session page's timeline, paged like it (``_next``): each row a run with its
    number, depth, parent, first member interactions and steps, or an idle gap. The whole
    session's counts come with the first page (``null`` on later ones, which read only
    their runs)."""
    first_page = not request.GET.get("_next")
    try:
        data = timeline.session_timeline(
            project=request.project,
            session_id=session_id,
            with_counts=first_page,
            after=request.GET.get("_next"),
            limit=settings.HISTORY_PAGE_SIZE,
            idle_gap_ms=settings.HISTORY_IDLE_GAP_SECONDS * 1000,
            nested=settings.HISTORY_SESSION_PAGE_NESTED,
        )
    except Http404:
        return error_response(f"no session {session_id!r}", 404)
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    notes = data["notes"]
    rows = []
    for row in data["rows"]:
        summary = timeline.row_summary(row)
        if summary["type"] == "run":
            summary["annotations"] = [annotation_store.summary(a) for a in notes.get(row.run.pk, [])]
        rows.append(summary)
    return JsonResponse(
        {
            "ok": True,
            "session": listing.session_summary(data["session"]),
            "counts": data["counts"],
            "rows": rows,
            "next": data["next_cursor"],
        }
    )


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def project_stats(request: HttpRequest) -> JsonResponse:
    """The stats page's numbers for the last ``days`` days (1-365, default 30), read from
    the same daily rollups."""
    try:
        days = StatsForm.read(request.GET)["days"]
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    return JsonResponse({"ok": True, **stats.summary(stats.stats(project=request.project, days=days))})


# Injected contexts are numbered by a 32-bit position: a larger number names none (and
# would overflow the databases' integer), so it is a 404 before any query.
_MAX_CONTEXT_NUMBER = 2**31


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def context_detail(request: HttpRequest, run_id: str, number: int) -> JsonResponse:
    """The context inspector's data for the run's ``number``-th injected context (from 1,
    as on the page): the exact text, the runs and entries it came from, whether our
    renderer rebuilds it, the re-render under ``runs``/``items``/``timestamps`` and the
    delta from the step before."""
    missing = error_response(f"run {run_id!r} has no injected context {number}", 404)
    if not 1 <= number <= _MAX_CONTEXT_NUMBER:
        return missing
    # The source runs' links name the project: known, they need no query each.
    drawing = models.set_current_project(request.project)
    try:
        inspection = inspector.inspect(request.project, run_id, number - 1, request.GET)
    except Http404:
        return missing
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    finally:
        models.reset_current_project(drawing)
    return JsonResponse({"ok": True, **_inspection_summary(inspection)})


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def model_call_detail(request: HttpRequest, run_id: str, number: int) -> JsonResponse:
    """The model call page's data: the messages as sent (parts, tool-call requests,
    ``tool_call_id``, ``name``), the answer as a message, whose roles they are, and the
    call's composition."""
    try:
        run = transcripts.get_run(request.project, run_id)
        call = transcripts.get_model_call(run, number)
    except Http404:
        return error_response(f"run {run_id!r} has no model call {number}", 404)
    return JsonResponse({"ok": True, "model_call": model_calls.call_data(call)})


def _diff(diff: LineDiff | None) -> list[str] | None:
    return [line.text for line in diff] if diff is not None else None


def _fallback(diff: LineDiff | None) -> str | None:
    """Why a diff that differs has no lines (too large, too different): None otherwise."""
    return diff.fallback or None if diff is not None else None


def _inspection_summary(i: inspector.Inspection) -> dict[str, Any]:
    context = i.context
    entries, offset = [], 0
    for segment in i.linked_text:
        if segment.source is not None:
            entries.append(
                {
                    "header": segment.text,
                    "start": offset,
                    "end": offset + len(segment.text),
                    "run_id": segment.source,
                }
            )
        offset += len(segment.text)
    previous = i.previous
    return {
        "run_id": i.run.run_id,
        "session_id": i.run.session.session_id,
        "context": {
            "number": context.number,
            "step": context.step,
            "target": context.target,
            "kind": context.kind,
            "reported": context.reported,
            "settings": context.settings,
            "source_run_ids": context.source_run_ids,
            "text": context.text,
        },
        "sources": [
            {"run_id": source_id, "stored": run is not None, "run": _source_run(run)}
            for source_id, run in i.sources
        ],
        "entries": entries,
        "rebuild": {
            "matches": None if i.rebuilt is None else i.rebuilt == context.text,
            "verdict": i.verdict,
            "text": i.rebuilt,
            "diff": _diff(i.rebuilt_diff),
            "diff_fallback": _fallback(i.rebuilt_diff),
        },
        "rerender": None
        if not i.rerenderable
        else {
            "defaults": _settings(i.defaults),
            "settings": _settings(i.settings),
            "text": i.rerendered,
            "diff": _diff(i.rerendered_diff),
            "diff_fallback": _fallback(i.rerendered_diff),
        },
        "previous": None
        if previous is None
        else {
            "run_id": previous.run.run_id,
            "number": previous.number,
            "diff": _diff(i.previous_diff),
            "diff_fallback": _fallback(i.previous_diff),
        },
        "notes": i.notes,
    }


def _source_run(run: models.Run | None) -> dict[str, Any] | None:
    if run is None:
        return None
    started = run.started_at.isoformat() if run.started_at else None
    return {"kind": run.kind, "status": run.status, "agent_name": run.agent_name, "started_at": started}


def _settings(chosen: inspector.Settings) -> dict[str, Any]:
    return {"runs": chosen.history_runs, "items": chosen.detail_items, "timestamps": chosen.timestamps}


@require_GET
@token_required(allow_session=True, scope=models.IngestToken.READ)
def compare_runs(request: HttpRequest) -> JsonResponse:
    """The comparison page's twin: ``?a=<run>&b=<run>``."""
    try:
        a, b = compare.read_pair(request.GET)
    except paging.BadParameter as exc:
        return error_response(str(exc), 400, parameter=exc.field)
    comparison = compare.compare(request.project, a, b)
    if comparison is None:
        return error_response(f"no run {a!r} or no run {b!r} in this project", 404)
    return JsonResponse({"ok": True, **compare.summary(comparison)})


@csrf_exempt
def run_annotations(request: HttpRequest, run_id: str) -> JsonResponse:
    """``GET``: the run's annotations (a ``read`` token or a login). ``POST``: add some
    (a token with the ``annotate`` scope: an evaluator), one object or a list, all or
    none: ``{"kind": "score", "name": "correct", "value": 1}``,
    ``{"kind": "score", "name": "tone", "text": "formal"}``,
    ``{"kind": "label", "name": "needs-review", "iteration": 2}``,
    ``{"kind": "comment", "text": "…"}``."""
    if request.method == "POST":
        return _add_annotations(request, run_id)
    if request.method in ("GET", "HEAD"):
        return _list_annotations(request, run_id)
    response = error_response("this address answers GET and POST", 405)
    response["Allow"] = "GET, POST"
    return response


@csrf_exempt
def run_annotation(request: HttpRequest, run_id: str, pk: int) -> JsonResponse:
    """``DELETE``: take back an annotation that this token wrote (a token with the
    ``annotate`` scope; an editor deletes any on the run page). Audited."""
    if request.method != "DELETE":
        response = error_response("this address answers DELETE", 405)
        response["Allow"] = "DELETE"
        return response
    return _delete_annotation(request, run_id, pk)


@token_required(allow_session=False, scope=models.IngestToken.ANNOTATE)
def _delete_annotation(request: HttpRequest, run_id: str, pk: int) -> JsonResponse:
    try:
        run = transcripts.get_run(request.project, run_id)
    except Http404:
        return error_response(f"no run {run_id!r}", 404)
    token = request.ingest_token
    found = run.annotations.filter(pk=pk).values_list("author", "token_id").first()
    if found is None:
        return error_response(f"no annotation {pk} on run {run_id!r}", 404)
    if found[1] != token.pk:
        return error_response(
            f"annotation {pk} was written by {found[0]}, not this token: a token takes back only its own "
            "(editors, any)",
            403,
        )
    if not annotation_store.delete(run.annotations.filter(pk=pk, token=token), actor=f"token:{token.name}"):
        return error_response(f"no annotation {pk} on run {run_id!r}", 404)  # taken back meanwhile
    return JsonResponse({"ok": True, "deleted": pk})


@token_required(allow_session=True, scope=models.IngestToken.READ)
def _list_annotations(request: HttpRequest, run_id: str) -> JsonResponse:
    try:
        run = transcripts.get_run(request.project, run_id)
    except Http404:
        return error_response(f"no run {run_id!r}", 404)
    rows = run.annotations.order_by("created_at", "id")[: annotation_store.MAX_LISTED]
    return JsonResponse(
        {"ok": True, "run_id": run.run_id, "annotations": [annotation_store.summary(a) for a in rows]}
    )


@token_required(allow_session=False, scope=models.IngestToken.ANNOTATE)
def _add_annotations(request: HttpRequest, run_id: str) -> JsonResponse:
    body = guards.read_body(request)
    if body is None:
        return error_response("the body is too large", 413)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return error_response(f"invalid JSON: {exc}", 400, errors=[{"path": "$", "message": "invalid JSON"}])
    try:
        run = transcripts.get_run(request.project, run_id)
    except Http404:
        return error_response(f"no run {run_id!r}", 404)
    token = request.ingest_token
    try:
        created = annotation_store.add(
            run, annotation_store.parse(data), author=f"token:{token.name}", token=token
        )
    except annotation_store.Invalid as exc:
        return error_response(exc.message, 400, errors=[{"path": exc.path, "message": exc.message}])
    except annotation_store.Gone:
        return error_response(f"no run {run_id!r}", 404)
    return JsonResponse(
        {"ok": True, "annotations": [annotation_store.summary(a) for a in created]}, status=201
    )
