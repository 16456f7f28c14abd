"""The run writer: the one place a run's rows, and the data derived from them, are written.

Every path that stores runs comes here: the native endpoint and the importers
(``ingestion.ingest_items``), the OTLP endpoint (``spans.intake_spans``), a team run
settling its members' blocks, and re-redaction (``rewrite_runs``). The writer owns the
rows (built by ``mapper``), the batching (``BATCH_ITEMS`` items a transaction), the
retries (a deadlock or serialization failure is retried at once; any other transient
failure makes the batch "retry") and the locks (``locks``, then sessions and runs in
primary key order).

Everything kept *from* the rows (session counters, daily rollups, session facets, the
search index, provenance) is a ``Derived`` class registered in ``DERIVED``: each implements
one contract, ``remove`` (for stored rows about to be replaced) and ``add`` (for rows just
written), and the writer calls every registered one on every path. A new derived table is
one class and one registration.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, Max, Min, OuterRef, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from history_app import models
from history_app.access import audit
from history_app.agent_history import blocks
from history_app.agent_history import context as renderers
from history_app.agent_history.records import Run
from history_app.intake import bulk
from history_app.store import locks, mapper, provenance, rollups, search

logger = logging.getLogger(__name__)

# A transient database failure (deadlock, serialization failure, "database is locked", a
# lost connection) is never the client's fault: the item is reported "retry", never
# "rejected", and the message names no database internals.
RETRY_MESSAGE = "temporary database failure; send it again"
# A deadlock or a serialization failure is retried at once, this many attempts in all.
STORE_ATTEMPTS = 3
# Items stored in one transaction: a request's array of 100 is one, a large import is
# several (on SQLite every other writer waits while a write transaction is open).
BATCH_ITEMS = 100


# -- the contract every derived table implements -----------------------------------------


@dataclass
class Change:
    """One run the writer writes: its record, its row, and the stored row it replaces.

    ``row`` is the run's ``models.Run`` (or, for a run written in bulk, its values by name
    with ``pk`` set); ``replaced`` is the stored row being replaced (None for a new run:
    its key and session; its rows are still stored when ``Derived.remove`` reads them);
    ``contexts`` are the run's injected contexts as written (with keys). ``rewrite``: the
    same run rewritten in place (re-redaction): its session's counters cannot change, and
    the contexts whose sources the server had found are linked again from their new text."""

    run: Run
    row: Any
    session: models.Session
    replaced: models.Run | None = None
    contexts: list[models.InjectedContext] = field(default_factory=list)
    # Its search document, when built already (before the transaction).
    document: str | None = None
    rewrite: bool = False
    # The session the stored run leaves (locked), when it moves to another.
    old_session: models.Session | None = None


class Derived:
    """Data kept from runs' rows. The writer makes one instance for each unit it writes
    (a batch of new runs, one run, a re-redaction batch) and calls ``remove`` with the
    changes that replace stored rows (before they are replaced: what they gave can still
    be read), ``add`` with every change once its rows are written, and ``close`` at the
    end of the unit (to write, in one go, what ``remove`` and ``add`` gathered)."""

    def __init__(self, project_id: int) -> None:
        self.project_id = project_id

    def remove(self, changes: list[Change]) -> None:
        """Take the stored rows of ``changes`` (``change.replaced``) off."""

    def add(self, changes: list[Change]) -> None:
        """Count the written rows of ``changes`` in."""

    def close(self) -> None:
        """Write what was gathered."""


DERIVED: list[type[Derived]] = []


def register(cls: type[Derived]) -> type[Derived]:
    """Have the writer keep ``cls`` on every path that writes runs."""
    DERIVED.append(cls)
    return cls


def _derived(project_id: int, removed: list[Change]) -> list[Derived]:
    """A unit's derived tables, the stored rows of ``removed`` already taken off (call
    before those rows are replaced)."""
    kept = [cls(project_id) for cls in DERIVED]
    if removed:
        for derived in kept:
            derived.remove(removed)
    return kept


def _added(kept: list[Derived], changes: list[Change]) -> None:
    """``changes`` written: each derived table counts them in and writes."""
    for derived in kept:
        derived.add(changes)
    for derived in kept:
        derived.close()


# -- the derived tables ------------------------------------------------------------------


# The session columns ``SessionCounters`` keeps.
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


@register
class SessionCounters(Derived):
    """A session's counts, sums, times and latest run's agent and status.

    New runs of a session whose counts are current are added to them (``add_runs``: no
    read of the session's other runs); a session a stored run left or changed in is
    counted again from its runs (``recount``: the first time, the latest run cannot be
    taken off a minimum or a maximum). A test holds the two to the same result."""

    def __init__(self, project_id: int) -> None:
        super().__init__(project_id)
        self.recounted: dict[int, models.Session] = {}
        self.added: dict[int, tuple[models.Session, list[Any]]] = {}

    def remove(self, changes: list[Change]) -> None:
        for change in changes:
            if change.rewrite:
                continue  # the same counts: re-redaction redacts the session's own texts
            self.recounted[change.session.pk] = change.session
            if change.old_session is not None:
                self.recounted[change.old_session.pk] = change.old_session

    def add(self, changes: list[Change]) -> None:
        for change in changes:
            if change.replaced is None and change.session.pk not in self.recounted:
                self.added.setdefault(change.session.pk, (change.session, []))[1].append(change.row)

    def close(self) -> None:
        for session, rows in self.added.values():
            add_runs(session, rows)
        bulk.update_sessions([session for session, _ in self.added.values()], SESSION_COUNTERS)
        for session in self.recounted.values():
            recount(session)


def recount(session: models.Session) -> None:
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


def add_runs(session: models.Session, rows: list[Any]) -> None:
    """``recount`` for new runs of a locked session whose counts were current: the same
    results, without reading the others (the caller saves the session)."""
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


@register
class DailyRollups(Derived):
    """The project's daily counts (``rollups``): stored rows taken off as they were stored,
    written ones added, in one upsert a row for the unit."""

    def __init__(self, project_id: int) -> None:
        super().__init__(project_id)
        self.deltas: list[rollups.Deltas] = []

    def remove(self, changes: list[Change]) -> None:
        self.deltas.append(rollups.stored_contributions([change.replaced.pk for change in changes]))

    def add(self, changes: list[Change]) -> None:
        by_time: dict[datetime, list[Run]] = defaultdict(list)
        for change in changes:
            by_time[change.row.received_at].append(change.run)
        self.deltas += [rollups.record_contributions(runs, when) for when, runs in by_time.items()]

    def close(self) -> None:
        if self.deltas:
            rollups.apply(rollups.merge(*self.deltas), self.project_id)


@register
class SessionFacets(Derived):
    """What the session list filters on (status, agents, tools, errors): a new run's facets
    are added; a session whose stored runs changed or left is computed again."""

    def __init__(self, project_id: int) -> None:
        super().__init__(project_id)
        self.triples: list[tuple[int, str, str]] = []
        self.refreshed: set[int] = set()

    def remove(self, changes: list[Change]) -> None:
        self.refreshed.update(change.replaced.session_id for change in changes)

    def add(self, changes: list[Change]) -> None:
        for change in changes:
            if change.replaced is None:
                self.triples += [(change.session.pk, *facet) for facet in rollups.facets_of(change.run)]
            else:
                self.refreshed.add(change.session.pk)

    def close(self) -> None:
        rollups.add_facets(self.triples)
        if self.refreshed:
            rollups.refresh_facets(self.refreshed)


@register
class SearchIndex(Derived):
    """The full-text index: a stored run's document taken out, the written one put in."""

    def remove(self, changes: list[Change]) -> None:
        search.unindex_runs(search.stored_documents(change.replaced.pk for change in changes))

    def add(self, changes: list[Change]) -> None:
        search.index_runs(
            (
                change.row.pk,
                change.document if change.document is not None else search.document_for(change.run),
            )
            for change in changes
        )


@register
class Provenance(Derived):
    """Fingerprints and the sources of history blocks (``provenance``): what a stored run
    gave is read before its rows go, and a written run linked to its session's runs."""

    def __init__(self, project_id: int) -> None:
        super().__init__(project_id)
        self.previous: dict[int, provenance.Previous] = {}

    def remove(self, changes: list[Change]) -> None:
        for change in changes:
            previous = provenance.before_rewrite(change.replaced, positions=change.rewrite)
            self.previous[id(change)] = previous
            if change.rewrite:
                # Contexts whose sources the server found are linked again from their
                # (new) text; sources the agent reported are kept.
                for position, context in enumerate(change.run.injected_contexts):
                    if position in previous.linked_positions:
                        context.source_run_ids = []

    def add(self, changes: list[Change]) -> None:
        for change in changes:
            previous = self.previous.get(id(change))
            if previous is None and not _links(change.run):
                continue  # nothing links to it or from it: nothing to write
            provenance.link_run(change.row, change.contexts, previous=previous)


def _links(run: Run) -> bool:
    """Whether provenance has anything to keep of a new run: fingerprints others quote, or
    contexts whose sources the server finds."""
    return bool(provenance.run_fingerprints(run)) or any(
        provenance.is_linked_here(context) for context in run.injected_contexts
    )


# -- items: what the endpoints hand the writer ---------------------------------------------


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


@dataclass
class PreparedItem:
    """An item parsed, redacted and hashed, waiting to be stored: its runs are written
    together or not at all, and its ``result`` says how."""

    result: ItemResult
    runs: list[Run]
    digests: list[str]
    source_format: str
    # The rows of plain runs, built before the transaction (None: the item is not plain).
    new_runs: list[bulk.NewRun] | None = None

    def __post_init__(self) -> None:
        if all(is_plain(run) for run in self.runs):
            self.new_runs = [
                bulk.new_run(run, digest, self.source_format)
                for run, digest in zip(self.runs, self.digests, strict=True)
            ]


def is_plain(run: Run) -> bool:
    """A run nothing links to or from: not a team or workflow run (the sources of history
    blocks), without a parent (a member, whose blocks a team run settles), without member
    interactions or delegations (a team that settles members), with no context whose
    sources the server finds."""
    return not run.parent_run_id and not _links(run) and not _hands_out_tasks(run)


def _hands_out_tasks(run: Run) -> bool:
    """Whether ``run`` hands members their tasks (interactions or delegations): a team run
    whose arrival can settle its members' blocks (``_settle_members``)."""
    return bool(run.member_interactions) or any(
        call.tool.startswith("delegate") for it in run.iterations for call in it.tool_calls
    )


def content_hash(run: Run) -> str:
    """The hash a run's content is stored under: the same run sent again is a duplicate."""
    canonical = json.dumps(run.to_dict(), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def project_key(project_id: int | None) -> int:
    """The project runs are written into: the one given, else the default project."""
    return project_id if project_id is not None else models.Project.default().pk


# -- transactions, retries --------------------------------------------------------------


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


def retry_result(result: ItemResult) -> None:
    """``result`` marked "retry": nothing of its item was kept, and sending it again is safe."""
    result.status, result.errors = "retry", [{"path": "$", "message": RETRY_MESSAGE}]


def write_runs(
    items: list[PreparedItem],
    *,
    project_id: int,
    counts: Counter[str] | None = None,
    receipt: models.IngestReceipt | None = None,
) -> None:
    """Store prepared items, ``BATCH_ITEMS`` a transaction (with the receipt's progress:
    ``counts`` are the statuses of the request's items before these), and set each item's
    status; an item of several runs reports the strongest outcome of them. A transient
    failure rolls its batch back: every item of it, and every item after it, is "retry"."""
    counts = Counter() if counts is None else counts
    for start in range(0, len(items), BATCH_ITEMS):
        batch = items[start : start + BATCH_ITEMS]
        if counts["retry"]:
            for item in batch:
                retry_result(item.result)
        else:
            _store_batch(batch, receipt=receipt, counts=counts, project_id=project_id)
        counts.update(item.result.status for item in batch)


def _store_batch(
    pending: list[PreparedItem],
    *,
    counts: Counter[str],
    project_id: int,
    receipt: models.IngestReceipt | None = None,
) -> None:
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
                # The batch's transaction rolled back, so nothing of it was kept.
                logger.warning("%d runs not stored, to be sent again: %s", len(pending), exc)
                for item in pending:
                    retry_result(item.result)
                return
            raise  # sent again it would fail again: not "retry" (503) but a server error
    for item, (status, errors) in zip(pending, outcomes, strict=True):
        item.result.status, item.result.errors = status, errors


RECEIPT_COUNT_KEYS = ("created", "updated", "duplicate", "rejected")


def _write_batch(pending: list[PreparedItem], project_id: int) -> list[tuple[str, list[dict[str, str]]]]:
    """Every item of a batch, in the open transaction: (status, errors) of each.

    The runs and sessions the batch touches are looked up and locked once. Items whose
    runs are all new plain agent runs (``is_plain``) are written in bulk, a statement per
    table for the whole batch, and their sessions' counters brought forward once per
    session. The others (updates, team, workflow and member runs, runs whose contexts the
    server links) go one by one through ``write_run``, each in its own savepoint, after
    the bulk write and in their order. Items whose runs are all stored already with the
    same content are duplicates and write nothing."""
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
    in_bulk: list[int] = []
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
                in_bulk.append(n)
        seen.update(ids)
    if in_bulk:
        try:
            with transaction.atomic():
                _write_new_runs([pending[n] for n in in_bulk], sessions, project_id)
            for n in in_bulk:
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


def _write_one(item: PreparedItem, project_id: int) -> tuple[str, list[dict[str, str]]]:
    """One item in its own savepoint: its runs stored, or none of them."""
    try:
        with transaction.atomic():
            statuses = [
                write_run(run=run, source_format=item.source_format, digest=digest, project_id=project_id)
                for run, digest in zip(item.runs, item.digests, strict=True)
            ]
    except (DatabaseError, OverflowError) as exc:
        if isinstance(exc, DatabaseError) and is_transient(exc):
            raise  # the batch is rolled back and sent again
        logger.exception("run %s could not be stored", item.result.run_id)
        return "rejected", [{"path": "$", "message": "the database refused this run"}]
    return next(s for s in ("created", "updated", "duplicate") if s in statuses), []


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


# What ``add_runs`` reads of a run.
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


def _write_new_runs(items: list[PreparedItem], sessions: dict[str, models.Session], project_id: int) -> None:
    """New plain runs in bulk (``bulk.insert_runs``: one INSERT per table for all of them,
    rows built before the transaction), and the derived tables brought forward once."""
    now = timezone.now()
    runs = [run for item in items for run in item.runs]
    new = [rows for item in items for rows in item.new_runs]
    pks = bulk.insert_runs(new, [sessions[run.session_id].pk for run in runs], now, project_id)
    changes = [
        Change(
            run=run,
            row=SimpleNamespace(pk=pk, received_at=now, **{key: rows.run[key] for key in _COUNTED}),
            session=sessions[run.session_id],
            document=rows.document,
        )
        for run, rows, pk in zip(runs, new, pks, strict=True)
    ]
    _added(_derived(project_id, []), changes)


def write_run(
    *, run: Run, source_format: str = "", digest: str | None = None, project_id: int | None = None
) -> str:
    """Store one already-redacted run in the project ``project_id`` (the default project
    when none is given); returns "created", "updated" or "duplicate". Its answer's HTML is
    rendered when the run is first shown (``transcripts.answer_html``)."""
    digest = digest or content_hash(run)
    project_id = project_key(project_id)
    try:
        return _write_run(run, digest, source_format, project_id)
    except IntegrityError:
        # Another writer stored the same run_id between our read and our insert; the
        # second attempt sees it and reports duplicate/updated instead of failing.
        return _write_run(run, digest, source_format, project_id)


@transaction.atomic
def _write_run(
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
    session, old_session = _session_for(
        run, project_id=project_id, old_session_id=existing.session_id if existing is not None else None
    )
    # After the session lock: a team run of the session being written now has committed
    # by the time the lock is ours (PostgreSQL's read committed then sees it).
    run = _settled_by_team_run(run, project_id)
    if existing is None:
        row = models.Run(run_id=run.run_id, project_id=project_id)
    else:
        # Read before ``fill_run`` changes the row: what the stored run gave.
        row = existing
        existing = models.Run(pk=row.pk, session_id=row.session_id)
    change = Change(run=run, row=row, session=session, replaced=existing, old_session=old_session)
    kept = _derived(project_id, [change] if existing is not None else [])
    if existing is not None:
        delete_children(row)
    fill_run(row, run, session, digest, source_format)
    row.output_html = output_html
    with transaction.atomic():
        row.save()
    ((_, change.contexts),) = write_children([(row, run)])
    _added(kept, [change])
    if old_session is not None:
        _drop_if_left_empty(old_session, moved_to=session)
    _settle_members(run, project_id)
    return "created" if existing is None else "updated"


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
    known = _team_histories(project_id, run)
    settled = blocks.settle_member_contexts(run.injected_contexts, run.input or "", tasks, known)
    return run if settled is None else replace(run, injected_contexts=settled)


# The most earlier runs a rebuilt team history block is tried with (agno's default is 3).
TEAM_HISTORY_RUNS_TRIED = 20
# The most runs of a member run's own second taken as possibly before it.
SAME_SECOND_TRIED = 5
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _team_histories(project_id: int, run: Run) -> list[str]:
    """The team history blocks agno may have sent a member run, rebuilt verbatim from the
    stored runs of its session before it (``get_team_history_context``): for a sub-team,
    its own completed runs; for an agent, the session's completed top-level team runs;
    never the run it ran under. One block for each number of runs up to
    ``TEAM_HISTORY_RUNS_TRIED``, with each number of the runs of its own second before it
    (up to ``SAME_SECOND_TRIED``). One query."""
    runs = models.Run.objects.filter(
        project_id=project_id, session__session_id=run.session_id, kind="team", status="completed"
    ).exclude(run_id__in=[run.run_id, run.parent_run_id or ""])
    if run.kind == "team":
        runs = runs.filter(team_id=run.team_id) if run.team_id else runs.filter(agent_name=run.agent_name)
    else:
        runs = runs.filter(Q(parent_run_id__isnull=True) | Q(parent_run_id=""))
    second = run.started_at.replace(microsecond=0) if run.started_at is not None else None
    if second is not None:
        runs = runs.filter(started_at__lt=second + timedelta(seconds=1))
    found = list(
        runs.order_by("-started_at", "-id").values_list("input", "output", "started_at", "id")[
            : TEAM_HISTORY_RUNS_TRIED + SAME_SECOND_TRIED
        ]
    )
    # agno keeps whole seconds (the fractions are estimates placed inside each parent, not
    # comparable across parents): the runs of its own second are ordered as they arrived,
    # and any number of them may have come before it.
    found.sort(key=lambda row: (row[2].replace(microsecond=0) if row[2] else EPOCH, row[3]))
    earlier = [row for row in found if second is None or row[2] is None or row[2] < second]
    same = [row for row in found if row not in earlier][:SAME_SECOND_TRIED]
    known: list[str] = []
    for taken in range(len(same) + 1):
        rows = (earlier + same[:taken])[-TEAM_HISTORY_RUNS_TRIED:]
        entries = [{"input": text or "", "output": output or ""} for text, output, _, _ in rows]
        for n in range(1, len(entries) + 1):
            block = renderers.render_team_history(entries[-n:], verbatim=True)
            if block not in known:
                known.append(block)
    return known


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
        known = _team_histories(project_id, record)
        settled = blocks.settle_member_contexts(record.injected_contexts, record.input or "", tasks, known)
        if settled is not None:
            record.injected_contexts = settled
            _write_run(
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


def _session_for(
    run: Run, *, project_id: int, old_session_id: int | None
) -> tuple[models.Session, models.Session | None]:
    """The run's session and the session it leaves (None when it stays), locked so concurrent
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
    return locked[session.pk], locked.get(old_session_id) if old_session_id != session.pk else None


def fill_run(row: models.Run, run: Run, session: models.Session, digest: str, source_format: str) -> None:
    """A run's row filled from its record (``mapper``), in its session."""
    row.session = session
    row.project_id = session.project_id
    mapper.fill_run(row, run)
    row.source_format = source_format[:32]
    row.content_hash = digest


def write_children(
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


def _drop_if_left_empty(session: models.Session, *, moved_to: models.Session) -> None:
    """A session (locked, counted again) that a run moved out of: left with no run, it
    goes, unless it is pinned; its spans follow the run. Its receipts and audit events
    name it by id, and stay."""
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


# -- rewriting stored runs in place ------------------------------------------------------


@dataclass
class Rewrite:
    """A stored run to write again with new content (the same run id and session)."""

    # The row as read, already filled with the new content (``fill_run``) and its answer's
    # HTML: the slow part, done before the transaction.
    row: models.Run
    # Its content hash when it was read: a run re-sent or deleted since is left alone.
    read_hash: str
    run: Run
    document: str | None = None


def rewrite_runs(rewrites: list[Rewrite]) -> int:
    """Rewrite stored runs in place, in one transaction (re-redaction): their rows and
    children written again, and every derived table brought forward. A run whose content
    hash changed since it was read (re-sent, so stored under the current rules) or that
    is gone is skipped. Returns how many were rewritten."""
    with transaction.atomic():
        current = dict(
            models.Run.objects.select_for_update()
            .filter(pk__in=[rewrite.row.pk for rewrite in rewrites])
            .order_by("pk")
            .values_list("pk", "content_hash")
        )
        by_project: dict[int, list[Change]] = defaultdict(list)
        for rewrite in rewrites:
            row = rewrite.row
            if current.get(row.pk) != rewrite.read_hash:
                continue
            by_project[row.project_id].append(
                Change(
                    run=rewrite.run,
                    row=row,
                    session=row.session,
                    replaced=models.Run(pk=row.pk, session_id=row.session_id),
                    document=rewrite.document,
                    rewrite=True,
                )
            )
        for project_id, changes in sorted(by_project.items()):
            kept = _derived(project_id, changes)
            for change in changes:
                change.row.save()
                delete_children(change.row)
            written = write_children([(change.row, change.run) for change in changes])
            for change, (_, contexts) in zip(changes, written, strict=True):
                change.contexts = contexts
            _added(kept, changes)
    return sum(len(changes) for changes in by_project.values())
