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
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, Max, Min, OuterRef, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from history_app import models
from history_app.access import audit
from history_app.agent_history import blocks, formats, usage
from history_app.agent_history import messages as wire
from history_app.agent_history.records import (
    LONE_SURROGATE,
    SCHEMA,
    RecordError,
    Run,
    structure_errors,
    without_lone_surrogates,
)
from history_app.agent_history.redact import Redactor
from history_app.intake import bulk, pricing
from history_app.store import locks, mapper, provenance, rollups, search

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
    # The record's structure was checked when it was parsed; redaction replaces strings
    # only, so it cannot nest anything deeper.
    prepared = Run.from_dict(cleaned, max_depth=settings.HISTORY_MAX_DEPTH, structure_checked=True)
    # Stored times are aware; normalising here keeps the content hash of a re-sent run
    # (for example one exported from GET /api/v1/runs/<id>) equal to the stored one.
    mapper.make_times_aware(prepared)
    return prepared


def prepare_native(
    payload: dict[str, Any], *, redactor: Redactor, report: list[dict[str, Any]], escape_free: bool = False
) -> Run:
    """``prepare_run(formats.parse(payload))`` for a native record, in one pass instead of
    three: the payload, already the canonical record's dict form, is checked (depth, finite
    numbers, lone surrogates), redacted, and read once. ``RecordError`` as the parser
    raises it. A test holds the two paths to the same result. ``escape_free``: the payload
    was read from a body that ``formats.escape_free`` passed, so it holds no NUL and no
    lone surrogate, and is not searched for them again."""
    payload, replaced, nul = _checked_native(payload, escape_free=escape_free)
    data = {key: value for key, value in payload.items() if key != "format"}
    kept = {key: data.pop(key) for key in _ID_KEYS if key in data}
    client_counts = kept.get("redactions", {})
    cleaned, counts, fields = redactor.redact_with_report(data)
    report.extend(fields)
    if nul:
        cleaned = _without_nul(cleaned)
    cleaned.update(kept)
    total = redactor.known_counts(client_counts)
    if replaced:
        total[LONE_SURROGATE] += replaced
    total.update(counts)
    cleaned["redactions"] = dict(total)
    prepared = Run.from_dict(cleaned, max_depth=settings.HISTORY_MAX_DEPTH, structure_checked=True)
    mapper.make_times_aware(prepared)
    return prepared


def complete_model_calls(run: Run) -> list[dict[str, Any]]:
    """A prepared run's model calls as they are stored, in place: those its older fields
    describe (run-level metrics), at most ``HISTORY_MAX_CALL_MESSAGES`` messages a call,
    each message linked to the injected context it carries, and a price estimated where
    the client reported none. Returns the receipt's note of messages left out, if any."""
    usage.derive_model_calls(run)
    omitted = usage.cap_messages(run, settings.HISTORY_MAX_CALL_MESSAGES)
    # The history blocks the messages carry, on every path (OTLP reports none itself).
    wire.find_contexts(run)
    usage.link_messages(run)
    pricing.price_run(run)
    if not omitted:
        return []
    return [
        {"run_id": run.run_id, "path": "$.model_calls[*].messages", "rules": {"omitted_messages": omitted}}
    ]


def _checked_native(
    payload: dict[str, Any], *, escape_free: bool = False
) -> tuple[dict[str, Any], int, bool]:
    """The payload without lone surrogates, how many there were, and whether it holds a
    NUL character anywhere (keys included)."""
    errors = structure_errors(payload, "$", max_depth=settings.HISTORY_MAX_DEPTH)
    if errors:
        raise RecordError(errors)
    schema = payload.get("schema")
    if schema is not None and schema != SCHEMA:
        raise RecordError([("$.schema", f"must be {SCHEMA!r}")])
    if escape_free:
        return payload, 0, False
    # The common case, in C: no lone surrogate anywhere (UTF-8 cannot encode one), and no
    # NUL (JSON writes it as \u0000; a backslash before it would be written doubled).
    try:
        text = json.dumps(payload, ensure_ascii=False)
    except (TypeError, ValueError):  # a caller's dict with values JSON cannot hold: the walks
        cleaned, replaced = without_lone_surrogates(payload)
        return cleaned, replaced, True
    nul = "\\u0000" in text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        cleaned, replaced = without_lone_surrogates(payload)
        return cleaned, replaced, nul
    return payload, 0, nul


def _is_native(item: Any, format: str | None) -> bool:
    """Whether ``prepare_native`` reads ``item``: a native record whose own redaction map
    is well formed (anything else takes the general path, which reports it)."""
    if not isinstance(item, dict) or format not in (None, "native"):
        return False
    if (format or formats.detect(item)) != "native":
        return False
    counts = item.get("redactions", {})
    return isinstance(counts, dict) and all(type(n) is int for n in counts.values())


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


# Items stored in one transaction: a request's array of 100 is one, a large import is
# several (on SQLite every other writer waits while a write transaction is open).
BATCH_ITEMS = 100


@dataclass
class _Pending:
    """An item parsed, redacted and hashed, waiting to be stored."""

    result: ItemResult
    runs: list[Run]
    digests: list[str]
    source_format: str
    # The rows of plain runs, built before the transaction (None: the item is not plain).
    new_runs: list[bulk.NewRun] | None = None

    def __post_init__(self) -> None:
        if all(_is_plain(run) for run in self.runs):
            self.new_runs = [
                bulk.new_run(run, digest, self.source_format)
                for run, digest in zip(self.runs, self.digests, strict=True)
            ]


def project_key(project_id: int | None) -> int:
    """The project runs are written into: the one given, else the default project."""
    return project_id if project_id is not None else models.Project.default().pk


def ingest_items(
    *,
    items: list[Any],
    format: str | None = None,
    redactor: Redactor | None = None,
    source_format: str | None = None,
    receipt: models.IngestReceipt | None = None,
    project_id: int | None = None,
    escape_free: bool = False,
) -> list[ItemResult]:
    """Parse, redact and store each item; one result per item, in order.

    Up to ``BATCH_ITEMS`` items are stored in one transaction (``store_batch``), each
    item in a savepoint of its own, so an item the database refuses never takes the
    others down. ``source_format`` names where the items came from when they were
    converted first (an importer that enriched agno runs and sends them as native
    records). With an open ``receipt``, each batch's transaction also writes the counts
    so far to it, so a request killed partway leaves a receipt saying exactly what was
    stored. After a transient database failure the remaining items are not tried: they
    are "retry" too. Everything goes into the project ``project_id`` (the request's token's;
    the default project when none is given): no payload names another. ``escape_free``:
    the items were read from a body ``formats.escape_free`` passed."""
    redactor = redactor or server_redactor()
    project_id = project_key(project_id)
    results: list[ItemResult] = []
    counts: Counter[str] = Counter()
    for start in range(0, len(items), BATCH_ITEMS):
        pending: list[_Pending] = []
        for offset, item in enumerate(items[start : start + BATCH_ITEMS]):
            result = ItemResult(index=start + offset)
            results.append(result)
            if counts["retry"]:
                result.status, result.errors = "retry", [{"path": "$", "message": RETRY_MESSAGE}]
                counts["retry"] += 1
                continue
            ready = prepare_item(
                item,
                result,
                format=format,
                redactor=redactor,
                source_format=source_format,
                escape_free=escape_free,
            )
            if ready is None:
                counts[result.status] += 1
            else:
                pending.append(ready)
        if pending:
            store_batch(pending, receipt=receipt, counts=counts, project_id=project_id)
            counts.update(p.result.status for p in pending)
    return results


def prepare_item(
    item: Any,
    result: ItemResult,
    *,
    redactor: Redactor,
    format: str | None = None,
    source_format: str | None = None,
    escape_free: bool = False,
) -> _Pending | None:
    """Parse, redact and hash an item (outside any transaction); None when it is refused
    (``result`` then says why)."""
    if isinstance(item, formats.BodyError):  # an unreadable NDJSON line, at its own index
        result.errors = [{"path": item.path, "message": str(item)}]
        return None
    if _is_native(item, format):
        report: list[dict[str, Any]] = []
        try:
            run = prepare_native(item, redactor=redactor, report=report, escape_free=escape_free)
        except RecordError as exc:
            result.errors = [{"path": path, "message": message} for path, message in exc.errors]
            return None
        result.run_id, result.session_id = run.run_id, run.session_id
        result.changed_fields.extend({"run_id": run.run_id, **entry} for entry in report)
        result.changed_fields.extend(complete_model_calls(run))
        return _Pending(result, [run], [content_hash(run)], source_format or "native")
    try:
        detected, runs = formats.parse_detected(item, format=format, max_depth=settings.HISTORY_MAX_DEPTH)
    except RecordError as exc:
        result.errors = [{"path": path, "message": message} for path, message in exc.errors]
        return None
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
        result.changed_fields.extend(complete_model_calls(prepared[-1]))
    if result.errors or not prepared:
        return None
    return _Pending(result, prepared, [content_hash(run) for run in prepared], source_format or detected)


# PostgreSQL's error classes a later try can get past: connection exceptions, transaction
# rollbacks (serialization failure, deadlock), insufficient resources (too many
# connections, out of shared memory, disk full), lock not available, operator
# intervention (shutdown, cannot connect now, statement cancelled) and system errors.
# Not, say, class 54 (a value past a program limit): the same request would fail again.
TRANSIENT_SQLSTATES = ("08", "40", "53", "55P03", "57", "58")


def is_transient(exc: DatabaseError) -> bool:
    """Deadlocks, serialization failures, "database is locked", refused or lost
    connections, a pool with no connection free: the same request sent again later can
    succeed. Errors without a SQLSTATE (refused before connecting, SQLite's) count by
    their class alone."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    sqlstate = str(getattr(exc.__cause__, "sqlstate", "") or "")
    return not sqlstate or sqlstate.startswith(TRANSIENT_SQLSTATES)


def _must_roll_back(exc: DatabaseError) -> bool:
    """PostgreSQL's class 40 (deadlock, serialization failure): retrying at once is the cure."""
    return str(getattr(exc.__cause__, "sqlstate", "") or "").startswith("40")


def store_batch(
    pending: list[_Pending],
    *,
    counts: Counter[str],
    project_id: int,
    receipt: models.IngestReceipt | None = None,
) -> None:
    """Store a batch of items in one transaction (with the receipt's progress) and set
    each item's status; a payload of several runs reports the strongest outcome of them.
    A transient failure rolls the whole batch back: every item of it is "retry"."""
    attempt = 1
    while True:
        try:
            with transaction.atomic():
                outcomes = _write_batch(pending, project_id)
                if receipt is not None:
                    so_far = counts + Counter(status for status, _ in outcomes)
                    models.IngestReceipt.objects.filter(pk=receipt.pk).update(
                        counts=dict.fromkeys(RECEIPT_COUNT_KEYS, 0) | so_far, updated_at=timezone.now()
                    )
            break
        except DatabaseError as exc:
            if isinstance(exc, OperationalError) and attempt < STORE_ATTEMPTS and _must_roll_back(exc):
                attempt += 1
                time.sleep(random.uniform(0.01, 0.05) * attempt)
                continue
            if is_transient(exc):
                _all_retry(pending, exc)
                return
            raise  # sent again it would fail again: not "retry" (503) but a server error
    for item, (status, errors) in zip(pending, outcomes, strict=True):
        item.result.status, item.result.errors = status, errors


def _all_retry(pending: list[_Pending], exc: DatabaseError) -> None:
    # The batch's transaction rolled back, so nothing of it was kept.
    logger.warning("%d runs not stored, to be sent again: %s", len(pending), exc)
    for item in pending:
        item.result.status, item.result.errors = "retry", [{"path": "$", "message": RETRY_MESSAGE}]


def _write_batch(pending: list[_Pending], project_id: int) -> list[tuple[str, list[dict[str, str]]]]:
    """Every item of a batch, in the open transaction: (status, errors) of each.

    The runs and sessions the batch touches are looked up and locked once. Items whose
    runs are all new plain agent runs (no history they could be the source of, no member
    blocks to settle, no parent: nothing links to them or from them) are written in
    bulk, a statement per table for the whole batch, and their sessions' counters brought
    forward once per session. The others (updates, team, workflow and member runs, runs
    whose contexts the server links) go one by one through ``ingest_run``, each in its
    own savepoint, after the bulk write and in their order. Items whose runs are all
    stored already with the same content are duplicates and write nothing."""
    runs = [run for item in pending for run in item.runs]
    wanted, missing = _claim_new_sessions(runs, project_id)
    existing = {
        row.run_id: row
        for row in models.Run.objects.select_for_update()
        .filter(project_id=project_id, run_id__in={run.run_id for run in runs})
        .only("id", "run_id", "content_hash", "session_id")
        .order_by("pk")
    }
    sessions = _lock_sessions(wanted, missing, {row.session_id for row in existing.values()}, project_id)
    outcomes: list[tuple[str, list[dict[str, str]]] | None] = [None] * len(pending)
    bulk: list[int] = []
    seen: set[str] = set()
    for n, item in enumerate(pending):
        ids = [run.run_id for run in item.runs]
        stored = [existing.get(run_id) for run_id in ids]
        if not seen.intersection(ids) and len(set(ids)) == len(ids):
            if all(
                row is not None and row.content_hash == digest
                for row, digest in zip(stored, item.digests, strict=True)
            ):
                outcomes[n] = ("duplicate", [])
            elif item.new_runs is not None and all(row is None for row in stored):
                bulk.append(n)
        seen.update(ids)
    if bulk:
        try:
            with transaction.atomic():
                _write_new_runs([pending[n] for n in bulk], sessions, project_id)
            for n in bulk:
                outcomes[n] = ("created", [])
        except (DatabaseError, OverflowError) as exc:
            if isinstance(exc, DatabaseError) and is_transient(exc):
                raise
            # Another writer stored one of these run ids since the lookup (PostgreSQL), or
            # the database refused one of the runs (or its driver a value, as SQLite's a
            # number past 64 bits): the items go one by one below, each in its own
            # savepoint, so only the one refused is.
            pass
    for n, item in enumerate(pending):
        if outcomes[n] is None:
            outcomes[n] = _write_one(item, project_id)
    # A session this batch created for items the database then refused holds no run:
    # it goes too (nothing half-written stays).
    if any(status == "rejected" for status, _ in outcomes):  # type: ignore[misc]
        models.Session.objects.filter(
            pk__in=[s.pk for s in sessions.values() if s.created_here], run_count=0
        ).exclude(Exists(models.Run.objects.filter(session=OuterRef("pk")))).delete()
    return outcomes  # type: ignore[return-value]


def _write_one(item: _Pending, project_id: int) -> tuple[str, list[dict[str, str]]]:
    """One item in its own savepoint: its runs stored, or none of them."""
    try:
        with transaction.atomic():
            statuses = [
                ingest_run(run=run, source_format=item.source_format, digest=digest, project_id=project_id)
                for run, digest in zip(item.runs, item.digests, strict=True)
            ]
    except (DatabaseError, OverflowError) as exc:
        if isinstance(exc, DatabaseError) and is_transient(exc):
            raise  # the batch is rolled back and sent again
        logger.exception("run %s could not be stored", item.result.run_id)
        return "rejected", [{"path": "$", "message": "the database refused this run"}]
    return next(s for s in ("created", "updated", "duplicate") if s in statuses), []


def _is_plain(run: Run) -> bool:
    """A run nothing links to or from: not a team or workflow run (the sources of history
    blocks), without a parent (a member, whose blocks a team run settles), without member
    interactions or delegations (a team that settles members), with no context whose
    sources the server finds."""
    return (
        not run.parent_run_id
        and not provenance.run_fingerprints(run)
        and not _hands_out_tasks(run)
        and not any(provenance.is_linked_here(context) for context in run.injected_contexts)
    )


def _hands_out_tasks(run: Run) -> bool:
    """Whether ``run`` hands members their tasks (interactions or delegations): a team run
    whose arrival can settle its members' blocks (``_settle_members``)."""
    return bool(run.member_interactions) or any(
        call.tool.startswith("delegate") for it in run.iterations for call in it.tool_calls
    )


def _claim_new_sessions(
    runs: list[Run], project_id: int
) -> tuple[dict[str, models.Session], list[models.Session]]:
    """The sessions ``runs`` name (unsaved rows, by session id) and those of them not
    stored yet, whose lock slots are now ours: taken before any row lock, as every
    writer takes them (``locks``). Two batches creating the same new sessions in
    different orders would otherwise each hold an uncommitted one the other waits for (a
    deadlock); a batch of any number of new sessions takes at most ``locks.SLOTS``."""
    wanted = {}
    now = timezone.now()
    for run in runs:
        wanted.setdefault(
            run.session_id,
            models.Session(
                project_id=project_id,
                session_id=run.session_id,
                last_activity_at=now,
                user_id=run.user_id[:255],
                framework=run.framework[:32],
            ),
        )
    in_project = models.Session.objects.filter(project_id=project_id)
    known = set(in_project.filter(session_id__in=wanted).values_list("session_id", flat=True))
    missing = [session for session_id, session in wanted.items() if session_id not in known]
    locks.lock_slots(locks.SESSIONS, [session.session_id for session in missing], project_id)
    return wanted, missing


def _lock_sessions(
    wanted: dict[str, models.Session], missing: list[models.Session], old_pks: set[int], project_id: int
) -> dict[str, models.Session]:
    """The sessions ``wanted`` (``missing`` created, in the order they arrived) and the
    sessions existing runs leave, locked in primary key order (two batches locking in
    different orders would deadlock); by session id."""
    if missing:
        models.Session.objects.bulk_create(missing, ignore_conflicts=True)
    locked = (
        models.Session.objects.select_for_update()
        .filter(Q(project_id=project_id, session_id__in=wanted) | Q(pk__in=old_pks))
        .order_by("pk")
    )
    found = {}
    created = {session.session_id for session in missing}
    for session in locked:
        session.created_here = session.session_id in created
        found[session.session_id] = session
    return found


def _write_new_runs(items: list[_Pending], sessions: dict[str, models.Session], project_id: int) -> None:
    """New plain runs in bulk (``bulk.insert_runs``: one INSERT per table for all of them,
    rows built before the transaction), and each session's counters brought forward once."""
    now = timezone.now()
    runs = [run for item in items for run in item.runs]
    new = [rows for item in items for rows in item.new_runs]
    pks = bulk.insert_runs(new, [sessions[run.session_id].pk for run in runs], now, project_id)
    by_session: dict[str, list[SimpleNamespace]] = {}
    for run, rows, pk in zip(runs, new, pks, strict=True):
        by_session.setdefault(run.session_id, []).append(
            SimpleNamespace(pk=pk, received_at=now, **{key: rows.run[key] for key in _COUNTED})
        )
    touched = []
    for session_id, added in by_session.items():
        _add_to_session(sessions[session_id], added, save=False)
        touched.append(sessions[session_id])
    bulk.update_sessions(touched, SESSION_COUNTERS)
    rollups.apply(rollups.record_contributions(runs, now), project_id)
    rollups.add_facets(
        (sessions[run.session_id].pk, facet, value) for run in runs for facet, value in rollups.facets_of(run)
    )


# What ``_add_to_session`` reads of a run.
_COUNTED = (
    "status",
    "started_at",
    "ended_at",
    "agent_name",
    "framework",
    "user_id",
    "input_tokens",
    "output_tokens",
    "cost",
    "duration_ms",
)


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
        "stored_runs": [
            {"run_id": r.run_id, "status": r.status}
            for r in results
            if r.run_id and r.status in {"created", "updated", "duplicate"}
        ][: models.IngestReceipt.RUNS_KEPT],
    }


def record_receipt(
    *,
    source: str,
    results: list[ItemResult],
    token: models.IngestToken | None = None,
    label: str = "",
    project_id: int | None = None,
) -> models.IngestReceipt:
    """What a request or an import did, so a person can answer "why is my run missing?"."""
    return models.IngestReceipt.objects.create(
        project_id=project_key(project_id),
        source=source,
        token=token,
        label=server_redactor().redact(label)[:255],
        **_receipt_fields(results),
    )


def open_receipt(
    *, source: str, item_count: int, token: models.IngestToken | None = None, project_id: int | None = None
) -> models.IngestReceipt:
    """A receipt written (committed) before anything is stored; ``ingest_items`` keeps its
    counts current and ``close_receipt`` completes it."""
    return models.IngestReceipt.objects.create(
        project_id=project_key(project_id),
        source=source,
        token=token,
        item_count=item_count,
        state=models.IngestReceipt.OPEN,
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


def ingest_run(
    *, run: Run, source_format: str = "", digest: str | None = None, project_id: int | None = None
) -> str:
    """Store one already-redacted run in the project ``project_id`` (the default project
    when none is given); returns "created", "updated" or "duplicate". Its answer's HTML is
    rendered when the run is first shown (``transcripts.answer_html``)."""
    digest = digest or content_hash(run)
    project_id = project_key(project_id)
    try:
        return _ingest_run(run, digest, source_format, project_id)
    except IntegrityError:
        # Another writer stored the same run_id between our read and our insert; the
        # second attempt sees it and reports duplicate/updated instead of failing.
        return _ingest_run(run, digest, source_format, project_id)


@transaction.atomic
def _ingest_run(
    run: Run,
    digest: str,
    source_format: str,
    project_id: int,
    *,
    output_html: str | None = None,
    rewrite: bool = False,
) -> str:
    existing = models.Run.objects.select_for_update().filter(project_id=project_id, run_id=run.run_id).first()
    if existing is not None and existing.content_hash == digest and not rewrite:
        return "duplicate"
    session = _session_for(
        run, project_id=project_id, old_session_id=existing.session_id if existing is not None else None
    )
    # After the session lock: a team run of the session being written now has committed
    # by the time the lock is ours (PostgreSQL's read committed then sees it).
    run = _settled_by_team_run(run, project_id)
    old_session_id = None
    previous = None
    counted = rollups.Deltas()
    if existing is None:
        row = models.Run(run_id=run.run_id, project_id=project_id)
        status = "created"
    else:
        row = existing
        old_session_id = existing.session_id if existing.session_id != session.pk else None
        previous = provenance.before_rewrite(existing)
        counted = rollups.stored_contributions([existing.pk])
        search.unindex_runs(search.stored_documents([existing.pk]))
        delete_children(existing)
        status = "updated"
    _fill_run(row, run, session, digest, source_format)
    row.output_html = output_html
    with transaction.atomic():
        row.save()
    ((_, contexts),) = _write_children_of([(row, run)])
    search.index_runs([(row.pk, search.document_for(run))])
    provenance.link_run(row, contexts, previous=previous)
    rollups.apply(rollups.merge(counted, rollups.record_contributions([run], row.received_at)), project_id)
    if status == "created":
        _add_to_session(session, [row])
        rollups.add_facets((session.pk, facet, value) for facet, value in rollups.facets_of(run))
    else:
        _refresh_session(session)
        rollups.refresh_facets({session.pk} | ({old_session_id} if old_session_id else set()))
    if old_session_id is not None:
        _left_by_run(models.Session.objects.get(pk=old_session_id), moved_to=session)
    _settle_members(run, project_id)
    return status


# -- member blocks settled by their team run, whichever arrives first -------------------


def _settled_by_team_run(run: Run, project_id: int) -> Run:
    """A member run whose history blocks could end at more than one closing tag (the
    content forged one) is settled by the tasks its stored team run, in the same session,
    delegated to it: the text after the blocks is its task, so only one reading is right.
    Costs nothing unless a block is ambiguous."""
    if not run.parent_run_id or not blocks.is_ambiguous(run.injected_contexts):
        return run
    team = (
        mapper.transcript_queryset()
        .filter(project_id=project_id, run_id=run.parent_run_id, session__session_id=run.session_id)
        .first()
    )
    if team is None:
        return run
    tasks = blocks.handed_tasks(mapper.run_record(team), run)
    settled = blocks.settle_member_contexts(run.injected_contexts, run.input or "", tasks)
    return run if settled is None else replace(run, injected_contexts=settled)


def _settle_members(team: Run, project_id: int) -> None:
    """A team run arriving after its members settles the ambiguous blocks they were
    stored with (members of its session, under the session lock this transaction holds):
    each such member run is rewritten with the exact blocks (its content hash kept, so the
    same member run sent again is still a duplicate)."""
    if not _hands_out_tasks(team):
        return
    waiting = mapper.transcript_queryset().filter(
        project_id=project_id,
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
            _ingest_run(
                record,
                member.content_hash,
                member.source_format,
                project_id,
                output_html=member.output_html,
                rewrite=True,
            )


def delete_children(row: models.Run) -> None:
    """Delete a run's iterations, tool calls, interactions, contexts and provenance rows
    (before rewriting them)."""
    for queryset in (
        row.model_calls.all(),
        row.tool_calls.all(),
        row.iterations.all(),
        row.member_interactions.all(),
        models.ContextEntry.objects.filter(run=row),
        row.injected_contexts.all(),
        row.fingerprints.all(),
    ):
        queryset._raw_delete(queryset.db)


def _session_for(run: Run, *, project_id: int, old_session_id: int | None) -> models.Session:
    """The run's session, locked (with the session the run leaves, if any) so concurrent
    runs of one session update its counts one at a time. Both rows are locked in primary
    key order: two requests moving runs between two sessions in opposite directions
    would otherwise each hold one and wait for the other (a deadlock)."""
    now = timezone.now()
    session, _ = models.Session.objects.get_or_create(
        project_id=project_id,
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
    row.project_id = session.project_id
    mapper.fill_run(row, run)
    row.source_format = source_format[:32]
    row.content_hash = digest


def _write_children_of(
    pairs: list[tuple[models.Run, Run]],
) -> list[tuple[models.Run, list[models.InjectedContext]]]:
    """Write the children of stored runs (rows with keys, and their records), one INSERT
    per table for all of them; returns each run's injected contexts (with their keys)."""
    iteration_rows = [
        mapper.iteration_row(row, position, it)
        for row, run in pairs
        for position, it in enumerate(run.iterations)
    ]
    models.Iteration.objects.bulk_create(iteration_rows)
    stored = iter(iteration_rows)
    models.ToolCall.objects.bulk_create(
        mapper.tool_call_row(row, iteration, position, call)
        for row, run in pairs
        for it, iteration in zip(run.iterations, stored, strict=False)
        for position, call in enumerate(it.tool_calls)
    )
    models.MemberInteraction.objects.bulk_create(
        mapper.interaction_row(row, position, mi)
        for row, run in pairs
        for position, mi in enumerate(run.member_interactions)
    )
    by_position = {}
    for row, run in pairs:
        for position in range(len(run.iterations)):
            by_position[row.pk, position] = iteration_rows[len(by_position)]
    models.ModelCall.objects.bulk_create(
        models.ModelCall(
            run=row,
            iteration=None if place is None else by_position[row.pk, place],
            **mapper.model_call_values(position, call),
        )
        for row, run in pairs
        for position, (place, call) in enumerate(mapper.model_call_places(run))
    )
    contexts = [
        [mapper.context_row(row, position, context) for position, context in enumerate(run.injected_contexts)]
        for row, run in pairs
    ]
    models.InjectedContext.objects.bulk_create(context for own in contexts for context in own)
    return [(row, own) for (row, _), own in zip(pairs, contexts, strict=True)]


def _refresh_session(session: models.Session) -> None:
    """Recompute the session's denormalised counts from its runs (one aggregate query)."""
    runs = models.Run.objects.filter(session=session)
    stats = runs.aggregate(
        n=Count("id"),
        failed=Count("id", filter=Q(status="failed")),
        first=Min("started_at"),
        last=Max(Coalesce("ended_at", "started_at", "received_at")),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        cost=Sum("cost"),
        timed=Count("duration_ms"),
        duration=Sum("duration_ms"),
    )
    # The session's agent and status are its latest top-level run's (a team's, not the
    # member it delegated to), its latest run's when it has none.
    top_level = ExpressionWrapper(Q(parent_run_id__isnull=True), output_field=BooleanField())
    latest = (
        runs.order_by(top_level.desc(), Coalesce("started_at", "received_at").desc(), "-id")
        .only("status", "agent_name", "framework", "user_id")
        .first()
    )
    session.run_count = stats["n"]
    session.failed_count = stats["failed"]
    session.first_started_at = stats["first"]
    # A session left without runs (they moved) keeps its time: leaving never makes it newer.
    session.last_activity_at = stats["last"] or session.last_activity_at or timezone.now()
    session.input_tokens, session.output_tokens = stats["input_tokens"] or 0, stats["output_tokens"] or 0
    session.cost = stats["cost"]
    session.timed_runs, session.duration_total_ms = stats["timed"], stats["duration"] or 0
    if latest is not None:
        session.last_status = latest.status
        session.agent_name = latest.agent_name
        session.framework = latest.framework or session.framework
        session.user_id = latest.user_id or session.user_id
    else:
        session.last_status = ""  # no run, no status: not the "completed" of a run that left
    session.save()


def _left_by_run(session: models.Session, *, moved_to: models.Session) -> None:
    """A session (locked) that a run moved out of: its counts recomputed from the runs it
    still has. Left with none, it goes, unless it is pinned; its spans follow the run. Its
    receipts and audit events name it by id, and stay."""
    _refresh_session(session)
    if session.run_count or session.pinned:
        return
    models.SpanBatch.objects.filter(session=session).update(session=moved_to)
    session_id = session.session_id
    session.delete()
    audit.record(
        actor="ingestion",
        action=models.AuditEvent.SESSION_DELETED,
        project=moved_to.project,
        target=session_id,
        runs=0,
        reason=f"its last run moved to session {moved_to.session_id}",
    )


# The session columns ``_refresh_session`` and ``_add_to_session`` keep.
SESSION_COUNTERS = [
    "run_count",
    "failed_count",
    "first_started_at",
    "last_activity_at",
    "last_status",
    "agent_name",
    "framework",
    "user_id",
    "input_tokens",
    "output_tokens",
    "cost",
    "timed_runs",
    "duration_total_ms",
    "updated_at",
]


def _add_to_session(session: models.Session, rows: list[models.Run], *, save: bool = True) -> None:
    """``_refresh_session`` for new runs of a locked session whose counts were current:
    the same results, without reading the others."""
    first = session.run_count == 0
    session.run_count += len(rows)
    session.failed_count += sum(row.status == "failed" for row in rows)
    session.input_tokens += sum(row.input_tokens for row in rows)
    session.output_tokens += sum(row.output_tokens for row in rows)
    costs = [row.cost for row in rows if row.cost is not None]
    if costs:
        session.cost = (session.cost or 0) + sum(costs)
    timed = [row.duration_ms for row in rows if row.duration_ms is not None]
    session.timed_runs += len(timed)
    session.duration_total_ms += sum(timed)
    starts = [row.started_at for row in rows if row.started_at is not None]
    if starts and (session.first_started_at is None or min(starts) < session.first_started_at):
        session.first_started_at = min(starts)
    last = max(row.ended_at or row.started_at or row.received_at for row in rows)
    session.last_activity_at = last if first else max(session.last_activity_at, last)
    # The latest run orders by (started_at, else received_at) then id, and the new ids are
    # the highest: the latest new run is the session's latest unless an older one is
    # later. Two range lookups on the (session, started_at, id) index: one query with OR
    # would scan the session. Only top-level runs name the session's agent and status (a
    # team's member runs do not), unless the session has none yet.
    top = [row for row in rows if not getattr(row, "parent_run_id", None)]
    latest = max(top or rows, key=lambda row: (row.started_at or row.received_at, row.pk))
    key = latest.started_at or latest.received_at
    others = models.Run.objects.filter(session=session).exclude(pk__in=[row.pk for row in rows])
    blocked = False
    if top:
        others = others.filter(parent_run_id__isnull=True)
    elif not first:
        blocked = others.filter(parent_run_id__isnull=True).exists()
    if first or not (
        blocked
        or others.filter(started_at__gt=key).exists()
        or others.filter(started_at__isnull=True, received_at__gt=key).exists()
    ):
        session.last_status = latest.status
        session.agent_name = latest.agent_name
        session.framework = latest.framework or session.framework
        session.user_id = latest.user_id or session.user_id
    session.updated_at = timezone.now()
    if save:
        session.save(update_fields=SESSION_COUNTERS)


# -- retention -------------------------------------------------------------------------
