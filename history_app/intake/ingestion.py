"""Ingesting runs: items read, redacted and prepared for the run writer, and receipts.

Every input goes through ``agent_history.formats.parse`` (the one normalisation path),
is redacted again here whatever the client did (the server never trusts client-side
redaction), and is handed to the run writer (``writer.write_runs``), which stores a run
whole or not at all. Ingestion is idempotent on ``run_id``: the same content again is a
"duplicate", changed content under the same id is an "updated" run.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from history_app import models
from history_app.agent_history import formats, usage
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
from history_app.intake import pricing, writer
from history_app.intake.writer import ItemResult
from history_app.store import mapper

logger = logging.getLogger(__name__)

# Identifiers are not redacted (they are how a run is found again); everything else is.
_ID_KEYS = ("run_id", "session_id", "parent_run_id", "schema", "redactions")


def server_redactor() -> Redactor:
    """The server's redactor: one a field cap, kept for the process. Building one costs
    about 1.7 ms of CPU (its rule tables), and every request, span batch and re-redaction
    asked for a new one; an instance keeps no state between calls and is safe to share
    between threads (``Redactor``'s contract; ``remembering()`` gives a private copy)."""
    return _redactor_capped_at(settings.HISTORY_MAX_FIELD_CHARS)


@functools.lru_cache(maxsize=8)
def _redactor_capped_at(max_length: int | None) -> Redactor:
    return Redactor(max_length=max_length)


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
    cleaned = mapper.without_nul(cleaned)
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
        cleaned = mapper.without_nul(cleaned)
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

    Up to ``writer.BATCH_ITEMS`` items are prepared, then stored in one transaction
    (``writer.write_runs``), each item in a savepoint of its own, so an item the database
    refuses never takes the others down. ``source_format`` names where the items came from
    when they were converted first (an importer that enriched agno runs and sends them as
    native records). With an open ``receipt``, each batch's transaction also writes the
    counts so far to it, so a request killed partway leaves a receipt saying exactly what
    was stored. After a transient database failure the remaining items are not tried:
    they are "retry" too. Everything goes into the project ``project_id`` (the request's
    token's; the default project when none is given): no payload names another.
    ``escape_free``: the items were read from a body ``formats.escape_free`` passed."""
    redactor = redactor or server_redactor()
    project_id = writer.project_key(project_id)
    results: list[ItemResult] = []
    counts: Counter[str] = Counter()
    size = writer.BATCH_ITEMS
    for start in range(0, len(items), size):
        pending: list[writer.PreparedItem] = []
        for offset, item in enumerate(items[start : start + size]):
            result = ItemResult(index=start + offset)
            results.append(result)
            if counts["retry"]:
                writer.retry_result(result)
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
        writer.write_runs(pending, receipt=receipt, counts=counts, project_id=project_id)
    return results


def prepare_item(
    item: Any,
    result: ItemResult,
    *,
    redactor: Redactor,
    format: str | None = None,
    source_format: str | None = None,
    escape_free: bool = False,
) -> writer.PreparedItem | None:
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
        return writer.PreparedItem(result, [run], [writer.content_hash(run)], source_format or "native")
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
    return writer.PreparedItem(
        result, prepared, [writer.content_hash(run) for run in prepared], source_format or detected
    )


RECEIPT_COUNT_KEYS = writer.RECEIPT_COUNT_KEYS


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
        project_id=writer.project_key(project_id),
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
        project_id=writer.project_key(project_id),
        source=source,
        token=token,
        item_count=item_count,
        state=models.IngestReceipt.OPEN,
    )


@contextmanager
def receipt_kept(
    *, source: str, token: models.IngestToken | None, item_count: int, project_id: int | None
) -> Iterator[models.IngestReceipt]:
    """A receipt opened (and committed) before anything is written; whatever stops the
    request (a bug, a worker timeout's ``SystemExit``) marks it interrupted, with the
    counts of what was stored. The caller closes it with the results."""
    receipt = open_receipt(source=source, token=token, item_count=item_count, project_id=project_id)
    try:
        yield receipt
    except BaseException:
        interrupt_receipt(receipt=receipt)
        raise


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
