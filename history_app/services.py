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
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Count, Max, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from . import models, provenance, search
from .agent_history import formats
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
    prepared.started_at, prepared.ended_at = _aware(prepared.started_at), _aware(prepared.ended_at)
    for iteration in prepared.iterations:
        iteration.started_at, iteration.ended_at = _aware(iteration.started_at), _aware(iteration.ended_at)
        for call in iteration.tool_calls:
            call.started_at, call.ended_at = _aware(call.started_at), _aware(call.ended_at)
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


def _aware(value: datetime | None) -> datetime | None:
    if value is None or timezone.is_aware(value):
        return value
    # Naive times (autourgos writes local time without an offset) are taken as TIME_ZONE.
    return timezone.make_aware(value, timezone.get_default_timezone())


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
def _ingest_run(run: Run, digest: str, source_format: str, output_html: str) -> str:
    existing = models.Run.objects.select_for_update().filter(run_id=run.run_id).first()
    if existing is not None and existing.content_hash == digest:
        return "duplicate"
    session = _session_for(run, old_session_id=existing.session_id if existing is not None else None)
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
    return status


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
    row.parent_run_id = run.parent_run_id
    row.kind, row.status = run.kind, run.status
    row.agent_name = (run.agent_name or run.team_id or run.workflow_id)[:255]
    row.team_id, row.workflow_id, row.user_id = run.team_id[:255], run.workflow_id[:255], run.user_id[:255]
    row.framework = run.framework[:32]
    row.input, row.output, row.error = run.input, run.output, run.error
    row.started_at, row.ended_at = _aware(run.started_at), _aware(run.ended_at)
    row.duration_ms = run.duration_ms
    row.iteration_count = len(run.iterations)
    row.tool_call_count = sum(len(it.tool_calls) for it in run.iterations)
    row.tool_error_count = sum(1 for it in run.iterations for call in it.tool_calls if call.error)
    row.metrics, row.metadata, row.redactions = run.metrics, run.metadata, run.redactions
    row.source_format = source_format[:32]
    row.content_hash = digest


def _write_children(row: models.Run, run: Run) -> list[models.InjectedContext]:
    """Write a run's children; returns its injected contexts (with their keys)."""
    iterations = models.Iteration.objects.bulk_create(
        models.Iteration(
            run=row,
            position=position,
            index=it.index,
            name=it.name[:255],
            thought=it.thought,
            started_at=_aware(it.started_at),
            ended_at=_aware(it.ended_at),
            metadata=it.metadata,
        )
        for position, it in enumerate(run.iterations)
    )
    models.ToolCall.objects.bulk_create(
        models.ToolCall(
            run=row,
            iteration=stored,
            position=position,
            tool=call.tool[:255],
            call_id=(call.call_id or "")[:255],
            params_json=json.dumps(call.params, ensure_ascii=False),
            result=call.result,
            error=call.error,
            started_at=_aware(call.started_at),
            ended_at=_aware(call.ended_at),
        )
        for stored, it in zip(iterations, run.iterations, strict=True)
        for position, call in enumerate(it.tool_calls)
    )
    models.MemberInteraction.objects.bulk_create(
        models.MemberInteraction(
            run=row,
            position=position,
            member=interaction.member[:255],
            task=interaction.task,
            response=interaction.response,
            member_run_id=interaction.member_run_id,
        )
        for position, interaction in enumerate(run.member_interactions)
    )
    return models.InjectedContext.objects.bulk_create(
        models.InjectedContext(
            run=row,
            position=position,
            step=context.step[:255],
            target=context.target,
            kind=context.kind,
            text=context.text,
            source_run_ids=context.source_run_ids,
            settings=context.settings,
            reported=context.reported,
        )
        for position, context in enumerate(run.injected_contexts)
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

PRUNE_COUNT_KEYS = (
    "sessions",
    "runs",
    "iterations",
    "tool_calls",
    "member_interactions",
    "injected_contexts",
    "search_documents",
    "context_entries",
    "run_fingerprints",
)
PROVENANCE_COUNT_KEYS = ("context_entries", "run_fingerprints")


@dataclass
class PruneResult:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PRUNE_COUNT_KEYS, 0))
    batches: int = 0
    longest_transaction_s: float = 0.0
    dry_run: bool = False
    skipped_pinned: int = 0
    log_id: int | None = None

    @property
    def total_rows(self) -> int:
        return sum(self.counts.values())


def prune_candidates(
    *,
    cutoff: datetime | None = None,
    session_ids: list[int] | None = None,
    statuses: list[str] | tuple[str, ...] = (),
    agents: list[str] | tuple[str, ...] = (),
) -> Any:
    """Sessions a prune may remove. Pinned sessions are never among them, by any path.

    Selection is by ``last_activity_at`` (indexed): the latest time the agent reported for
    any run of the session, falling back to when we received it.
    """
    queryset = models.Session.objects.filter(pinned=False)
    if cutoff is not None:
        queryset = queryset.filter(last_activity_at__lt=cutoff)
    if session_ids is not None:
        queryset = queryset.filter(pk__in=session_ids)
    if statuses:
        queryset = queryset.filter(last_status__in=statuses)
    if agents:
        queryset = queryset.filter(agent_name__in=agents)
    return queryset


def _child_querysets(session_ids: Any, run_ids: Any = None) -> list[tuple[str, Any]]:
    """Children first, so no row is ever left pointing at a deleted parent.

    With ``run_ids`` (a batch's run keys, fetched once) every child is deleted through its
    own ``run_id`` index with a plain ``DELETE … WHERE run_id IN (…)``, no join.
    """
    runs = {"run_id__in": run_ids} if run_ids is not None else {"run__session_id__in": session_ids}
    return [
        ("tool_calls", models.ToolCall.objects.filter(**runs)),
        ("iterations", models.Iteration.objects.filter(**runs)),
        ("member_interactions", models.MemberInteraction.objects.filter(**runs)),
        ("context_entries", models.ContextEntry.objects.filter(**runs)),
        ("injected_contexts", models.InjectedContext.objects.filter(**runs)),
        ("search_documents", models.RunSearch.objects.filter(**runs)),
        ("run_fingerprints", models.RunFingerprint.objects.filter(**runs)),
        ("runs", models.Run.objects.filter(session_id__in=session_ids)),
        ("sessions", models.Session.objects.filter(pk__in=session_ids)),
    ]


# A bound on "older than" (about 270 years): the cutoff, today minus that many days, must
# remain a date the databases can store.
MAX_PRUNE_DAYS = 100_000


def prune_sessions(
    *,
    older_than_days: float | None = None,
    session_ids: list[int] | None = None,
    statuses: list[str] | tuple[str, ...] = (),
    agents: list[str] | tuple[str, ...] = (),
    batch_size: int = 500,
    dry_run: bool = False,
    max_batches: int | None = None,
    trigger: str = "command",
    user: str = "",
    progress: Any = None,
) -> PruneResult:
    """Delete old (or chosen) unpinned sessions and every row that belongs to them.

    Each batch of at most ``batch_size`` sessions is deleted in its own short transaction,
    children first, with ``DELETE … WHERE … IN (subquery)`` statements: no row is loaded
    into Python, and no transaction holds the write lock for long, so ingestion goes on.
    Each batch re-checks its sessions inside the transaction (a run that arrived since
    the selection keeps its session). Interrupted, a second run finishes the job.
    With ``dry_run`` it counts exactly what would go and deletes nothing.
    """
    if older_than_days is None and session_ids is None:
        raise ValueError("give older_than_days or session_ids")
    if older_than_days is not None and not 0 <= older_than_days <= MAX_PRUNE_DAYS:  # NaN fails too
        raise ValueError(f"older_than_days must be a number of days from 0 to {MAX_PRUNE_DAYS}")
    cutoff = timezone.now() - timedelta(days=older_than_days) if older_than_days is not None else None
    criteria = {
        "older_than_days": older_than_days,
        "cutoff": cutoff.isoformat() if cutoff else None,
        "session_count": len(session_ids) if session_ids is not None else None,
        "statuses": list(statuses),
        "agents": list(agents),
        "batch_size": batch_size,
    }
    log = models.PruneLog.objects.create(trigger=trigger, user=user[:150], dry_run=dry_run, criteria=criteria)
    result = PruneResult(dry_run=dry_run, log_id=log.pk)
    if session_ids is not None:
        result.skipped_pinned = models.Session.objects.filter(pk__in=session_ids, pinned=True).count()

    def candidates() -> Any:
        return prune_candidates(cutoff=cutoff, session_ids=session_ids, statuses=statuses, agents=agents)

    if dry_run:
        selected = candidates().values("pk")
        for key, queryset in _child_querysets(selected):
            result.counts[key] = queryset.count()
    else:
        while max_batches is None or result.batches < max_batches:
            started = time.perf_counter()
            with transaction.atomic():
                batch = list(
                    candidates().order_by("last_activity_at", "id").values_list("pk", flat=True)[:batch_size]
                )
                if not batch:
                    break
                run_ids = list(models.Run.objects.filter(session_id__in=batch).values_list("pk", flat=True))
                for key, queryset in _child_querysets(batch, run_ids):
                    result.counts[key] += queryset._raw_delete(queryset.db)
            result.longest_transaction_s = max(result.longest_transaction_s, time.perf_counter() - started)
            result.batches += 1
            if progress is not None:
                progress(result)
    log.counts = result.counts
    log.batches = result.batches
    log.longest_transaction_ms = round(result.longest_transaction_s * 1000)
    log.finished_at = timezone.now()
    log.save(update_fields=["counts", "batches", "longest_transaction_ms", "finished_at"])
    return result


_runs_since_prune = 0
_auto_prune_lock = threading.Lock()


def maybe_prune_automatically(*, new_runs: int) -> PruneResult | None:
    """With HISTORY_RETENTION_DAYS set, run one bounded prune batch every
    HISTORY_RETENTION_EVERY_RUNS ingested runs (counted per process), so retention
    happens without anyone remembering a cron job; the command remains for cron/systemd."""
    global _runs_since_prune
    days = settings.HISTORY_RETENTION_DAYS
    if days is None or new_runs <= 0:
        return None
    with _auto_prune_lock:
        _runs_since_prune += new_runs
        if _runs_since_prune < settings.HISTORY_RETENTION_EVERY_RUNS:
            return None
        _runs_since_prune = 0
    return prune_sessions(
        older_than_days=days,
        batch_size=settings.HISTORY_RETENTION_BATCH_SIZE,
        max_batches=1,
        trigger="automatic",
    )
