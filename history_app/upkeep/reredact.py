"""Re-applying the current redaction rules to everything already stored.

The server redacts every run it receives, but a database filled before a rule was added
(or widened) still holds what that rule now catches. ``redact_stored`` walks every table
that holds content — runs and their children, sessions, search documents, receipts — in
batches by primary key, each batch in its own short transaction, and rewrites only what
the current rules change. A run is rewritten exactly as ingestion would store it: the
same ``prepare_run``, the same content hash (so a resend of the run, redacted or not, is
still a duplicate), its answer HTML rendered again from the redacted output. Interrupted,
a second pass finds the finished rows unchanged and goes on with the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from history_app import models
from history_app.agent_history.records import RecordError
from history_app.agent_history.redact import Redactor
from history_app.intake import ingestion, writer
from history_app.reading.rendering import render_markdown
from history_app.store import mapper, rollups, search

# Besides the runs, the tables whose stored texts the rules apply to: (what the result counts them
# as, the rows, the fields).
OTHER_TEXTS = (
    ("sessions", models.Session, ("user_id", "agent_name", "framework")),
    ("receipts", models.IngestReceipt, ("label", "rejections", "changed_fields")),
    ("annotations", models.Annotation, ("name", "text", "agent")),
)
CHANGED_KEYS = ("runs", *(key for key, _, _ in OTHER_TEXTS))


@dataclass
class RedactResult:
    dry_run: bool
    # Replacements per rule; "redactions-map" counts names dropped from runs' maps.
    rules: Counter[str] = field(default_factory=Counter)
    # Rows rewritten (or, in a dry run, that would be) per table.
    changed: Counter[str] = field(default_factory=Counter)
    scanned: Counter[str] = field(default_factory=Counter)
    # Runs whose stored record no longer validates (or is too deep to walk): left as
    # they are, and named, so that someone looks at them.
    skipped: list[str] = field(default_factory=list)
    batches: int = 0


def redact_stored(
    *, batch_size: int = 200, dry_run: bool = False, progress: Callable[[RedactResult], None] | None = None
) -> RedactResult:
    """Apply the server's current rules to every stored run, session, receipt and
    annotation."""
    redactor = ingestion.server_redactor()
    result = RedactResult(dry_run=dry_run)
    _redact_runs(redactor, result, batch_size, progress)
    for key, model, names in OTHER_TEXTS:
        _redact_rows(
            redactor, result, batch_size, progress, key=key, queryset=model.objects.all(), names=names
        )
    if result.changed["runs"] and not dry_run and connection.vendor == "sqlite":
        # The FTS index keeps deleted terms in old segments until they are merged.
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO history_run_fts(history_run_fts) VALUES ('optimize')")
    return result


def _batches(queryset: Any, batch_size: int) -> Any:
    """Successive batches of ``queryset`` by primary key (the cursor makes a rerun safe)."""
    last_pk = 0
    while batch := list(queryset.filter(pk__gt=last_pk).order_by("pk")[:batch_size]):
        yield batch
        last_pk = batch[-1].pk


def _redact_runs(redactor: Redactor, result: RedactResult, batch_size: int, progress: Any) -> None:
    for batch in _batches(mapper.transcript_queryset(), batch_size):
        documents = dict(search.stored_documents(row.pk for row in batch))
        planned = []
        for row in batch:
            result.scanned["runs"] += 1
            report: list[dict[str, Any]] = []
            try:
                prepared = ingestion.prepare_run(mapper.run_record(row), redactor=redactor, report=report)
                # As ingestion completes it now (a call stored unpriced is priced, say), so
                # the run sent again is a duplicate.
                ingestion.complete_model_calls(prepared)
            except (RecordError, RecursionError):
                result.skipped.append(row.run_id)
                continue
            digest = writer.content_hash(prepared)
            document = search.document_for(prepared)
            if digest == row.content_hash and document == documents.get(row.pk):
                continue
            for item in report:
                result.rules.update(item["rules"])
            if dropped := len(set(row.redactions) - set(redactor.known_counts(row.redactions))):
                result.rules["redactions-map"] += dropped
            planned.append((row, row.content_hash, prepared, digest, document))
        result.changed["runs"] += len(planned)
        if planned and not result.dry_run:
            _rewrite_runs(planned)
        result.batches += 1
        if progress is not None:
            progress(result)


def _rewrite_runs(planned: list[tuple[models.Run, str, Any, str, str]]) -> None:
    # Fill (and render the answer HTML) before the transaction: it is the slow part.
    rewrites = []
    for row, read_hash, prepared, digest, document in planned:
        writer.fill_run(row, prepared, row.session, digest, row.source_format)
        row.output_html = render_markdown(prepared.output)
        rewrites.append(writer.Rewrite(row=row, read_hash=read_hash, run=prepared, document=document))
    # A run re-sent or deleted meanwhile is left: ingestion applied the current rules.
    writer.rewrite_runs(rewrites)


def _redact_fields(redactor: Redactor, result: RedactResult, row: Any, names: tuple[str, ...]) -> bool:
    """Redact ``names`` of ``row`` in place; True when something changed."""
    before = {name: getattr(row, name) for name in names}
    after, counts = redactor.redact_with_counts(before)
    if after == before:
        return False
    result.rules.update(counts)
    for name in names:
        max_length = row._meta.get_field(name).max_length
        setattr(row, name, after[name][:max_length] if max_length else after[name])
    return True


def _redact_rows(
    redactor: Redactor,
    result: RedactResult,
    batch_size: int,
    progress: Any,
    *,
    key: str,
    queryset: Any,
    names: tuple[str, ...],
) -> None:
    for batch in _batches(queryset.only("pk", *names), batch_size):
        changed = [row for row in batch if _redact_fields(redactor, result, row, names)]
        result.scanned[key] += len(batch)
        result.changed[key] += len(changed)
        if changed and not result.dry_run:
            model = type(changed[0])
            with transaction.atomic():
                # Scores are counted under their names, categories and agents, and
                # sessions are filtered and sorted on their names: taken off as stored
                # and added back as redacted.
                notes = models.Annotation.objects.filter(pk__in=[row.pk for row in changed])
                if model is models.Annotation:
                    rollups.count_scores(notes, -1)
                model.objects.bulk_update(changed, list(names))
                if model is models.Annotation:
                    rollups.count_scores(notes, 1)
                    rollups.refresh_facets(notes.values_list("run__session_id", flat=True))
        result.batches += 1
        if progress is not None:
            progress(result)
