"""The annotations API of a run (``/api/v1/runs/<id>/annotations``): its list, the twin
of the run page's annotations, and what an evaluator adds or takes back with a token."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from history_app import models
from history_app.access.auth import error_response, token_required
from history_app.intake import guards
from history_app.reading import transcripts, twins
from history_app.reading.paging import NotFound
from history_app.upkeep import annotations as annotation_store


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


def _run(request: HttpRequest, run_id: str) -> models.Run | None:
    try:
        return transcripts.get_run(request.project, run_id)
    except NotFound:
        return None


@token_required(allow_session=False, scope=models.IngestToken.ANNOTATE)
def _delete_annotation(request: HttpRequest, run_id: str, pk: int) -> JsonResponse:
    run = _run(request, run_id)
    if run is None:
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
    run = _run(request, run_id)
    if run is None:
        return error_response(f"no run {run_id!r}", 404)
    rows = list(run.annotations.order_by("created_at", "id")[: annotation_store.MAX_LISTED])
    return JsonResponse(twins.annotations(run, rows))


@token_required(allow_session=False, scope=models.IngestToken.ANNOTATE)
def _add_annotations(request: HttpRequest, run_id: str) -> JsonResponse:
    body = guards.read_body(request)  # the ingest endpoint's reader: chunked bodies too
    if body is None:
        return error_response("the body is too large", 413)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return error_response(f"invalid JSON: {exc}", 400, errors=[{"path": "$", "message": "invalid JSON"}])
    run = _run(request, run_id)
    if run is None:
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
