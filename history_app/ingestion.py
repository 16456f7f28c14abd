"""Writes: ingesting runs. Keyword-only, transactional service functions.

Every input goes through ``agent_history.formats.parse`` (the one normalisation path),
is redacted again here whatever the client did (the server never trusts client-side
redaction), and is written in one transaction per run: a run is stored whole or not at
all. Ingestion is idempotent on ``run_id``: the same content again is a "duplicate",
changed content under the same id is an "updated" run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Count, Max, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from . import mapper, models, provenance, search
from .agent_history import blocks, formats
from .agent_history.records import RecordError, Run
from .agent_history.redact import Redactor
from .rendering import render_markdown

logger = logging.getLogger(__name__)

# A transient database failure (deadlock, serialization failure, "database is locked", a
# lost connection) is never the client's fault: the item is reported "retry", never
# "rejected", and the message names no database internals.
RETRY_MESSAGE = "temporary database failure; send it again"
# A deadlock or a serialization failure is retried at once, this many attempts in all.
STORE_ATTEMPTS = 3

# Identifiers are not redacted (they are how a run is found again); everything else is.
_ID_KEYS = ("run_id", "session_id", "parent_run_id", "schema", "redactions")


@dataclass
class ItemResult:
    index: int
    run_id: str | None = None
    session_id: str | None = None
    status: str = "rejected"
    errors: list[dict[str, str]] = field(default_factory=list)
    # Fields the server redacted or cut: paths and rule names, never the values.
    changed_fields: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "status": self.status,
            "errors": self.errors,
        }


def server_redactor() -> Redactor:
    return Redactor(max_length=settings.HISTORY_MAX_FIELD_CHARS)


def prepare_run(
    run: Run, *, redactor: Redactor | None = None, report: list[dict[str, Any]] | None = None
) -> Run:
    """Redact (and cap) every content field of ``run``; counts go into ``run.redactions``,
    and, with ``report``, each changed field's path and rules are appended to it."""
    redactor = redactor or server_redactor()
    data = run.to_dict()
    kept = {key: data.pop(key) for key in _ID_KEYS if key in data}
    cleaned, counts, fields = redactor.redact_with_report(data)
    if report is not None:
        report.extend(fields)
    cleaned = _without_nul(cleaned)
    cleaned.update(kept)
    # A client's map keeps only rule names: a value used as a key there is dropped.
    total = redactor.known_counts(run.redactions or {})
    total.update(counts)
    cleaned["redactions"] = dict(total)
    prepared = Run.from_dict(cleaned, max_depth=settings.HISTORY_MAX_DEPTH)
    # Stored times are aware; normalising here keeps the content hash of a re-sent run
    # (for example one exported from GET /api/v1/runs/<id>) equal to the stored one.
    mapper.make_times_aware(prepared)
    return prepared


def _without_nul(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold NUL characters; store U+FFFD instead."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def content_hash(run: Run) -> str:
    canonical = json.dumps(run.to_dict(), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def ingest_items(
    *,
    items: list[Any],
    format: str | None = None,
    redactor: Redactor | None = None,
    source_format: str | None = None,
    receipt: models.IngestReceipt | None = None,
) -> list[ItemResult]:
    """Parse, redact and store each item; one result per item, in order.

    ``source_format`` names where the items came from when they were converted first
    (an importer that enriched agno runs and sends them as native records). With an open
    ``receipt``, each item's transaction also writes the counts so far to it, so a request
    killed partway leaves a receipt saying exactly what was stored. After a transient
    database failure the remaining items are not tried: they are "retry" too."""
    redactor = redactor or server_redactor()
    results: list[ItemResult] = []
    counts: Counter[str] = Counter()
    for index, item in enumerate(items):
        result = ItemResult(index=index)
        results.append(result)
        if counts["retry"]:
            result.status, result.errors = "retry", [{"path": "$", "message": RETRY_MESSAGE}]
        else:
            _ingest_item(
                item,
                result,
                format=format,
                redactor=redactor,
                source_format=source_format,
                receipt=receipt,
                counts=counts,
            )
        counts[result.status] += 1
    return results


def _ingest_item(
    item: Any,
    result: ItemResult,
    *,
    format: str | None,
    redactor: Redactor,
    source_format: str | None,
    receipt: models.IngestReceipt | None,
    counts: Counter[str],
) -> None:
    if isinstance(item, formats.BodyError):  # an unreadable NDJSON line, at its own index
        result.errors = [{"path": item.path, "message": str(item)}]
        return
    try:
        detected, runs = formats.parse_detected(item, format=format, max_depth=settings.HISTORY_MAX_DEPTH)
    except RecordError as exc:
        result.errors = [{"path": path, "message": message} for path, message in exc.errors]
        return
    prepared = []
    for run in runs:
        result.run_id, result.session_id = run.run_id, run.session_id
        report: list[dict[str, Any]] = []
        try:
            prepared.append(prepare_run(run, redactor=redactor, report=report))
        except RecordError as exc:
            # Redaction can only shorten or mark values, but a record that no longer
            # validates is refused with its paths rather than half-handled.
            result.errors.extend({"path": path, "message": message} for path, message in exc.errors)
            continue
        result.changed_fields.extend({"run_id": run.run_id, **entry} for entry in report)
    if result.errors or not prepared:
        return
    try:
        result.status = _store_item(prepared, source_format or detected, receipt=receipt, counts=counts)
    except DatabaseError as exc:
        # The item's transaction rolled back, so nothing of it was kept.
        if is_transient(exc):
            logger.warning("run %s not stored, to be sent again: %s", result.run_id, exc)
            result.status, result.errors = "retry", [{"path": "$", "message": RETRY_MESSAGE}]
        else:
            logger.exception("run %s could not be stored", result.run_id)
            result.errors = [{"path": "$", "message": "the database refused this run"}]


def is_transient(exc: DatabaseError) -> bool:
    """Deadlocks, serialization failures, "database is locked", lost connections: the
    same request sent again later can succeed."""
    return isinstance(exc, OperationalError | InterfaceError)


def _must_roll_back(exc: DatabaseError) -> bool:
    """PostgreSQL's class 40 (deadlock, serialization failure): retrying at once is the cure."""
    return str(getattr(exc.__cause__, "sqlstate", "") or "").startswith("40")


def _store_item(
    runs: list[Run], source_format: str, *, receipt: models.IngestReceipt | None, counts: Counter[str]
) -> str:
    """Store an item's runs in one transaction, with the receipt's progress; a payload of
    several runs reports the strongest outcome of them."""
    # Rendered before the transaction opens: rendering is bounded but not free, and on
    # SQLite every other writer waits while a write transaction is open.
    pages = [render_markdown(run.output) for run in runs]
    attempt = 1
    while True:
        try:
            with transaction.atomic():
                statuses = [
                    ingest_run(run=run, source_format=source_format, output_html=html)
                    for run, html in zip(runs, pages, strict=True)
                ]
                status = next(s for s in ("created", "updated", "duplicate") if s in statuses)
                if receipt is not None:
                    so_far = dict.fromkeys(RECEIPT_COUNT_KEYS, 0) | counts + Counter({status: 1})
                    models.IngestReceipt.objects.filter(pk=receipt.pk).update(
                        counts=so_far, updated_at=timezone.now()
                    )
                return status
        except OperationalError as exc:
            if attempt == STORE_ATTEMPTS or not _must_roll_back(exc):
                raise
            attempt += 1
            time.sleep(random.uniform(0.01, 0.05) * attempt)


RECEIPT_COUNT_KEYS = ("created", "updated", "duplicate", "rejected")


def _receipt_fields(results: list[ItemResult]) -> dict[str, Any]:
    counts = dict.fromkeys(RECEIPT_COUNT_KEYS, 0)
    counts.update(Counter(result.status for result in results))
    return {
        "item_count": len(results),
        "counts": counts,
        # A rejection's path or message can quote a secret the client sent (a key in a path).
        "rejections": server_redactor().redact(
            [
                {"index": r.index, "run_id": r.run_id, **error}
                for r in results
                if r.status in {"rejected", "retry"}
                for error in r.errors
            ][:1000]
        ),
        "changed_fields": [item for r in results for item in r.changed_fields][:1000],
    }


def record_receipt(
    *, source: str, results: list[ItemResult], token: models.IngestToken | None = None, label: str = ""
) -> models.IngestReceipt:
    """What a request or an import did, so a person can answer "why is my run missing?"."""
    return models.IngestReceipt.objects.create(
        source=source, token=token, label=server_redactor().redact(label)[:255], **_receipt_fields(results)
    )


def open_receipt(
    *, source: str, item_count: int, token: models.IngestToken | None = None
) -> models.IngestReceipt:
    """A receipt written (committed) before anything is stored; ``ingest_items`` keeps its
    counts current and ``close_receipt`` completes it."""
    return models.IngestReceipt.objects.create(
        source=source, token=token, item_count=item_count, state=models.IngestReceipt.OPEN
    )


def close_receipt(*, receipt: models.IngestReceipt, results: list[ItemResult]) -> None:
    """Complete a receipt. If the database is gone by now, the receipt keeps the counts its
    items wrote and is shown as interrupted; the answer to the client is not lost."""
    _update_receipt(receipt, state=models.IngestReceipt.COMPLETE, **_receipt_fields(results))


def interrupt_receipt(*, receipt: models.IngestReceipt) -> None:
    """Mark a receipt whose request stopped partway (its counts say what was stored)."""
    _update_receipt(receipt, state=models.IngestReceipt.INTERRUPTED)


def _update_receipt(receipt: models.IngestReceipt, **fields: Any) -> None:
    try:
        models.IngestReceipt.objects.filter(pk=receipt.pk).update(updated_at=timezone.now(), **fields)
    except DatabaseError:
        logger.exception("receipt %s could not be updated", receipt.pk)


def ingest_run(*, run: Run, source_format: str = "", output_html: str | None = None) -> str:
    """Store one already-redacted run; returns "created", "updated" or "duplicate".
    ``output_html`` is the answer rendered beforehand, outside any transaction."""
    digest = content_hash(run)
    if output_html is None:
        output_html = render_markdown(run.output)
    try:
        return _ingest_run(run, digest, source_format, output_html)
    except IntegrityError:
        # Another writer stored the same run_id between our read and our insert; the
        # second attempt sees it and reports duplicate/updated instead of failing.
        return _ingest_run(run, digest, source_format, output_html)


@transaction.atomic
def _ingest_run(run: Run, digest: str, source_format: str, output_html: str, *, rewrite: bool = False) -> str:
    existing = models.Run.objects.select_for_update().filter(run_id=run.run_id).first()
    if existing is not None and existing.content_hash == digest and not rewrite:
        return "duplicate"
    session = _session_for(run, old_session_id=existing.session_id if existing is not None else None)
    # After the session lock: a team run of the session being written now has committed
    # by the time the lock is ours (PostgreSQL's read committed then sees it).
    run = _settled_by_team_run(run)
    old_session_id = None
    previous = None
    if existing is None:
        row = models.Run(run_id=run.run_id)
        status = "created"
    else:
        row = existing
        old_session_id = existing.session_id if existing.session_id != session.pk else None
        previous = provenance.before_rewrite(existing)
        delete_children(existing)
        status = "updated"
    _fill_run(row, run, session, digest, source_format)
    row.output_html = output_html
    with transaction.atomic():
        row.save()
    contexts = _write_children(row, run)
    document = search.document_for(run)
    if status == "created":
        models.RunSearch.objects.create(run=row, document=document)
    else:
        models.RunSearch.objects.update_or_create(run=row, defaults={"document": document})
    provenance.link_run(row, contexts, previous=previous)
    _refresh_session(session, added=row if status == "created" else None)
    if old_session_id is not None:
        _refresh_session(models.Session.objects.get(pk=old_session_id))
    _settle_members(run)
    return status


# -- member blocks settled by their team run, whichever arrives first -------------------


def _settled_by_team_run(run: Run) -> Run:
    """A member run whose history blocks could end at more than one closing tag (the
    content forged one) is settled by the tasks its stored team run, in the same session,
    delegated to it: the text after the blocks is its task, so only one reading is right.
    Costs nothing unless a block is ambiguous."""
    if not run.parent_run_id or not blocks.is_ambiguous(run.injected_contexts):
        return run
    team = (
        mapper.transcript_queryset()
        .filter(run_id=run.parent_run_id, session__session_id=run.session_id)
        .first()
    )
    if team is None:
        return run
    tasks = blocks.handed_tasks(mapper.run_record(team), run)
    settled = blocks.settle_member_contexts(run.injected_contexts, run.input or "", tasks)
    return run if settled is None else replace(run, injected_contexts=settled)


def _settle_members(team: Run) -> None:
    """A team run arriving after its members settles the ambiguous blocks they were
    stored with (members of its session, under the session lock this transaction holds):
    each such member run is rewritten with the exact blocks (its content hash kept, so the
    same member run sent again is still a duplicate)."""
    if not team.member_interactions and not any(
        call.tool.startswith("delegate") for it in team.iterations for call in it.tool_calls
    ):
        return
    waiting = mapper.transcript_queryset().filter(
        parent_run_id=team.run_id,
        session__session_id=team.session_id,
        injected_contexts__kind__in=sorted(blocks.MEMBER_KINDS),
        injected_contexts__settings__boundary="ambiguous",
    )
    for member in waiting.distinct():
        record = mapper.run_record(member)
        tasks = blocks.handed_tasks(team, record)
        settled = blocks.settle_member_contexts(record.injected_contexts, record.input or "", tasks)
        if settled is not None:
            record.injected_contexts = settled
            _ingest_run(record, member.content_hash, member.source_format, member.output_html, rewrite=True)


def delete_children(row: models.Run) -> None:
    """Delete a run's iterations, tool calls, interactions, contexts and provenance rows
    (before rewriting them)."""
    for queryset in (
        row.tool_calls.all(),
        row.iterations.all(),
        row.member_interactions.all(),
        models.ContextEntry.objects.filter(run=row),
        row.injected_contexts.all(),
        row.fingerprints.all(),
    ):
        queryset._raw_delete(queryset.db)


def _session_for(run: Run, *, old_session_id: int | None) -> models.Session:
    """The run's session, locked (with the session the run leaves, if any) so concurrent
    runs of one session update its counts one at a time. Both rows are locked in primary
    key order: two requests moving runs between two sessions in opposite directions
    would otherwise each hold one and wait for the other (a deadlock)."""
    now = timezone.now()
    session, _ = models.Session.objects.get_or_create(
        session_id=run.session_id,
        defaults={"last_activity_at": now, "user_id": run.user_id[:255], "framework": run.framework[:32]},
    )
    keys = sorted({session.pk, old_session_id} - {None})
    locked = {
        row.pk: row for row in models.Session.objects.select_for_update().filter(pk__in=keys).order_by("pk")
    }
    return locked[session.pk]


def _fill_run(row: models.Run, run: Run, session: models.Session, digest: str, source_format: str) -> None:
    row.session = session
    mapper.fill_run(row, run)
    row.source_format = source_format[:32]
    row.content_hash = digest


def _write_children(row: models.Run, run: Run) -> list[models.InjectedContext]:
    """Write a run's children; returns its injected contexts (with their keys)."""
    iterations = models.Iteration.objects.bulk_create(
        mapper.iteration_row(row, position, it) for position, it in enumerate(run.iterations)
    )
    models.ToolCall.objects.bulk_create(
        mapper.tool_call_row(row, stored, position, call)
        for stored, it in zip(iterations, run.iterations, strict=True)
        for position, call in enumerate(it.tool_calls)
    )
    models.MemberInteraction.objects.bulk_create(
        mapper.interaction_row(row, position, mi) for position, mi in enumerate(run.member_interactions)
    )
    return models.InjectedContext.objects.bulk_create(
        mapper.context_row(row, position, context) for position, context in enumerate(run.injected_contexts)
    )


def _refresh_session(session: models.Session, *, added: models.Run | None = None) -> None:
    """Recompute the session's denormalised counts from its runs (one aggregate query).

    With ``added`` (a run just created in the locked session, whose counts were current)
    the counts are brought forward instead, so the cost does not grow with the session: one
    indexed query asks whether a run of the session started later than the new one."""
    if added is not None:
        _add_to_session(session, added)
        return
    runs = models.Run.objects.filter(session=session)
    stats = runs.aggregate(
        n=Count("id"),
        failed=Count("id", filter=Q(status="failed")),
        first=Min("started_at"),
        last=Max(Coalesce("ended_at", "started_at", "received_at")),
    )
    latest = (
        runs.order_by(Coalesce("started_at", "received_at").desc(), "-id")
        .only("status", "agent_name", "framework", "user_id")
        .first()
    )
    session.run_count = stats["n"]
    session.failed_count = stats["failed"]
    session.first_started_at = stats["first"]
    session.last_activity_at = stats["last"] or timezone.now()
    if latest is not None:
        session.last_status = latest.status
        session.agent_name = latest.agent_name
        session.framework = latest.framework or session.framework
        session.user_id = latest.user_id or session.user_id
    session.save()


def _add_to_session(session: models.Session, row: models.Run) -> None:
    """``_refresh_session`` for one new run: the same results, without reading the others."""
    first = session.run_count == 0
    session.run_count += 1
    session.failed_count += row.status == "failed"
    if row.started_at is not None and (
        session.first_started_at is None or row.started_at < session.first_started_at
    ):
        session.first_started_at = row.started_at
    last = row.ended_at or row.started_at or row.received_at
    session.last_activity_at = last if first else max(session.last_activity_at, last)
    # The latest run orders by (started_at, else received_at) then id, and the new id is the
    # highest: the new run is the latest unless another one is later. Two range lookups on
    # the (session, started_at, id) index: one query with OR would scan the session.
    key = row.started_at or row.received_at
    others = models.Run.objects.filter(session=session).exclude(pk=row.pk)
    if first or not (
        others.filter(started_at__gt=key).exists()
        or others.filter(started_at__isnull=True, received_at__gt=key).exists()
    ):
        session.last_status = row.status
        session.agent_name = row.agent_name
        session.framework = row.framework or session.framework
        session.user_id = row.user_id or session.user_id
    session.save()


# -- retention -------------------------------------------------------------------------
