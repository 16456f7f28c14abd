"""Annotations (issue #18): scores, labels and comments on a run or one of its iterations.

One reader of what is sent (``parse``: a JSON body of the API or the run page's form),
one writer (``add``: redacted like every stored text, its author and time recorded), one
summary for JSON. Editors write on the run page; tokens with the
``annotate`` scope through ``POST /api/v1/runs/<run_id>/annotations``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.models import F

from history_app import models
from history_app.agent_history.records import without_lone_surrogates
from history_app.intake.ingestion import server_redactor
from history_app.store import rollups
from history_app.store.mapper import without_nul

MAX_PER_REQUEST = 100
MAX_NAME = 64
MAX_CATEGORY = 64
MAX_COMMENT = 10_000
# A run page and the timeline show at most this many annotations of a run.
SHOWN_PER_RUN = 50
# The JSON API lists at most this many of a run's annotations, oldest first.
MAX_LISTED = 1000
# A numeric score's size at most (judgements, not measurements): their sums stay exact
# enough and far from overflowing either database's floats (PostgreSQL's AVG also sums
# squares).
MAX_SCORE = 1e9
# A score's or label's name: letters, digits and . _ - : / and spaces, from 1 to 64.
NAME = re.compile(r"[\w][\w .:/-]{0,63}")


class Invalid(ValueError):
    """A bad annotation: ``path`` names the field ("$[2].value")."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def parse(data: Any, *, path: str = "$") -> list[dict[str, Any]]:
    """What was sent, one annotation or a list of them, as checked fields; ``Invalid``
    naming the first bad field. Nothing is written unless every item is good. Texts are
    cleaned as ingestion cleans a payload: a lone surrogate or a NUL, which neither
    database stores, becomes U+FFFD."""
    data = without_nul(without_lone_surrogates(data)[0])
    items = data if isinstance(data, list) else [data]
    if not items:
        raise Invalid(path, "send one annotation or a list of them")
    if len(items) > MAX_PER_REQUEST:
        raise Invalid(path, f"at most {MAX_PER_REQUEST} annotations a request")
    return [_item(item, f"{path}[{n}]" if isinstance(data, list) else path) for n, item in enumerate(items)]


def _item(item: Any, path: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise Invalid(path, "must be an object")
    unknown = set(item) - {"kind", "name", "value", "text", "iteration"}
    if unknown:
        raise Invalid(
            f"{path}.{sorted(unknown)[0]}", "is not an annotation field (kind, name, value, text, iteration)"
        )
    kind = item.get("kind")
    if kind not in models.Annotation.KINDS:
        raise Invalid(f"{path}.kind", "must be score, label or comment")
    out: dict[str, Any] = {"kind": kind, "name": "", "value": None, "text": "", "iteration_index": None}
    iteration = item.get("iteration")
    if iteration is not None:
        if isinstance(iteration, bool) or not isinstance(iteration, int) or not -(2**31) <= iteration < 2**31:
            raise Invalid(f"{path}.iteration", "must be the iteration's number (as the run numbers it)")
        out["iteration_index"] = iteration
    name, value, text = item.get("name"), item.get("value"), item.get("text")
    if kind in (models.Annotation.SCORE, models.Annotation.LABEL):
        if not isinstance(name, str) or not NAME.fullmatch(name.strip()):
            what = "score" if kind == models.Annotation.SCORE else "label"
            raise Invalid(
                f"{path}.name",
                f"a {what} needs a name of 1 to {MAX_NAME} letters, digits, spaces or . _ - : /",
            )
        out["name"] = name.strip()
    elif name not in (None, ""):
        raise Invalid(f"{path}.name", "a comment has no name")
    if kind == models.Annotation.SCORE:
        if value is None and not text:
            raise Invalid(f"{path}.value", "a score needs a value: a number, or a category as text")
        if value is not None:
            number = _finite(value)
            if number is None:
                raise Invalid(f"{path}.value", "must be a finite number (a category goes in text)")
            if abs(number) > MAX_SCORE:
                raise Invalid(f"{path}.value", f"must be between -{MAX_SCORE:,.0f} and {MAX_SCORE:,.0f}")
            if text:
                raise Invalid(f"{path}.text", "a score is a number or a category, not both")
            out["value"] = number
        else:
            if not isinstance(text, str) or not 1 <= len(text.strip()) <= MAX_CATEGORY:
                raise Invalid(f"{path}.text", f"a category is 1 to {MAX_CATEGORY} characters")
            out["text"] = text.strip()
    elif value is not None:
        raise Invalid(f"{path}.value", f"a {kind} has no value")
    if kind == models.Annotation.LABEL and text:
        raise Invalid(f"{path}.text", "a label is its name")
    if kind == models.Annotation.COMMENT:
        if not isinstance(text, str) or not text.strip():
            raise Invalid(f"{path}.text", "a comment needs text")
        if len(text) > MAX_COMMENT:
            raise Invalid(f"{path}.text", f"a comment is at most {MAX_COMMENT:,} characters")
        out["text"] = text
    return out


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, a boolean, NaN, infinite, or
    an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


class Gone(LookupError):
    """The run was deleted (pruned) before its annotations could be written."""


def add(
    run: models.Run, items: list[dict[str, Any]], *, author: str, token: models.IngestToken | None = None
) -> list[models.Annotation]:
    """Store ``items`` (from ``parse``) on ``run``, redacted, all or none; an iteration
    must be one of the run's (``Invalid`` otherwise). ``token``: the token that wrote them
    (it may take them back). The run is locked and read again first, as ingestion locks
    it (then its session): a run moved to another session meanwhile is counted in its new
    one, a run pruned meanwhile is ``Gone``."""
    wanted = {item["iteration_index"] for item in items if item["iteration_index"] is not None}
    if wanted:
        known = set(run.iterations.filter(index__in=wanted).values_list("index", flat=True))
        for n, item in enumerate(items):
            if item["iteration_index"] is not None and item["iteration_index"] not in known:
                raise Invalid(
                    f"$[{n}].iteration" if len(items) > 1 else "$.iteration", "the run has no such iteration"
                )
    redactor = server_redactor()
    cleaned = []
    for item in items:
        # Redaction may lengthen a name or a category ("[REDACTED:…]"): cut to the column.
        short = item["kind"] == models.Annotation.SCORE or item["kind"] == models.Annotation.LABEL
        text = redactor.redact(item["text"])
        cleaned.append(
            {
                **item,
                "name": redactor.redact(item["name"])[:MAX_NAME],
                "text": text[:MAX_CATEGORY] if short else text,
            }
        )
    with transaction.atomic():
        current = (
            models.Run.objects.select_for_update()
            .filter(pk=run.pk)
            .values_list("session_id", "agent_name", "started_at", "received_at")
            .first()
        )
        if current is None:
            raise Gone(run.run_id)
        session_pk, agent, started, received = current
        # A score is counted on its run's day and under its agent (rollups.count_scores).
        day = rollups.day_of(started or received)
        rows = [
            models.Annotation(
                project_id=run.project_id,
                run_id=run.pk,
                token=token,
                author=author[:255],
                day=day,
                agent=agent,
                **item,
            )
            for item in cleaned
        ]
        # Each annotation is its own record of who wrote it and when (no audit event besides).
        created = models.Annotation.objects.bulk_create(rows)
        models.Session.objects.filter(pk=session_pk).update(
            annotation_count=F("annotation_count") + len(created)
        )
        # The sessions list filters on them (``annotated``), from the session's facets.
        rollups.add_facets(rollups.annotation_facets(created, session_pk))
        rollups.count_scores(created, 1)
        if any(a.kind == models.Annotation.SCORE and a.value is not None for a in created):
            rollups.refresh_scores([session_pk])
    return created


def delete(queryset: Any, *, actor: str) -> int:
    """Delete annotations, in one transaction: their sessions' counts and facets and the
    daily scores follow, and each deletion is audited in its project (a judgement is a
    record: who took it back, and what it said, under the current redaction rules). How
    many went. Their runs are locked first, in key order, as ``add`` and ingestion lock
    them (then the sessions), and the annotations read again: two deletions of the same
    annotation at once take it off once."""
    with transaction.atomic():
        run_pks = sorted(set(queryset.values_list("run_id", flat=True)))
        list(models.Run.objects.select_for_update().filter(pk__in=run_pks).order_by("pk").values_list("pk"))
        rows = list(
            queryset.select_related(None)
            .annotate(session_pk=F("run__session_id"), run_key=F("run__run_id"))
            .only(
                "project_id",
                "kind",
                "day",
                "agent",
                "name",
                "text",
                "value",
                "iteration_index",
                "author",
                "created_at",
            )
            .order_by("pk")
        )
        if not rows:
            return 0
        # Then their sessions, before their facets: ``add`` takes the session's row before
        # the facets' too (the other order deadlocked on PostgreSQL).
        sessions = sorted({a.session_pk for a in rows})
        list(
            models.Session.objects.select_for_update()
            .filter(pk__in=sessions)
            .order_by("pk")
            .values_list("pk")
        )
        models.Annotation.objects.filter(pk__in=[a.pk for a in rows]).delete()
        rollups.count_scores(rows, -1)
        # Recounts each session's annotations and rebuilds its facets.
        rollups.refresh_facets(sessions)
        redactor = server_redactor()
        models.AuditEvent.objects.bulk_create(
            models.AuditEvent(
                project_id=a.project_id,
                actor=(actor or "unknown")[:150],
                action="annotation_deleted",
                target=f"run {a.run_key}"[:255],
                # An annotation stored under older rules: what it said, redacted now.
                details=redactor.redact_with_counts(summary(a) | {"text": a.text[:200] or None})[0],
            )
            for a in rows
        )
    return len(rows)


def of_runs(runs: list[models.Run]) -> dict[int, list[models.Annotation]]:
    """The latest ``SHOWN_PER_RUN`` annotations of each run, oldest first, in one query."""
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    if not runs:
        return {}
    if len(runs) == 1:
        # One run (its page): its latest rows, read newest first and turned round; the
        # same rows as the ranking below, in a query that is cheaper to build.
        (run,) = runs
        latest = models.Annotation.objects.filter(run_id=run.pk).order_by("-created_at", "-id")
        rows = list(latest[:SHOWN_PER_RUN])[::-1]
        return {run.pk: rows} if rows else {}
    ranked = models.Annotation.objects.filter(run_id__in=[r.pk for r in runs]).annotate(
        rank=Window(
            RowNumber(), partition_by=[F("run_id")], order_by=[F("created_at").desc(), F("id").desc()]
        )
    )
    by_run: dict[int, list[models.Annotation]] = {}
    for row in ranked.filter(rank__lte=SHOWN_PER_RUN).order_by("run_id", "created_at", "id"):
        by_run.setdefault(row.run_id, []).append(row)
    return by_run


def summary(a: models.Annotation) -> dict[str, Any]:
    return {
        "id": a.pk,
        "kind": a.kind,
        "name": a.name or None,
        "value": a.value,
        "text": a.text or None,
        "iteration": a.iteration_index,
        "author": a.author,
        "created_at": a.created_at.isoformat(),
    }


def exported(queryset: Any) -> Iterator[dict[str, Any]]:
    """Annotations as exports write them (with their run's id), read a chunk at a time."""
    rows = (
        queryset.select_related(None)
        .annotate(run_key=F("run__run_id"))
        .order_by("run_id", "created_at", "id")
    )
    for row in rows.iterator(chunk_size=500):
        yield {"run_id": row.run_key, **summary(row)}
