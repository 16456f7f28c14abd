"""Retention: which sessions are old enough to go, and pruning them in batches (from the
admin, ``prune_history`` or automatically after ingestion), children and provenance rows
included, without one long lock."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from history_app import models
from history_app.access import audit
from history_app.store import rollups, search

logger = logging.getLogger(__name__)


PRUNE_COUNT_KEYS = (
    "sessions",
    "runs",
    "iterations",
    "tool_calls",
    "model_calls",
    "member_interactions",
    "injected_contexts",
    "search_documents",
    "context_entries",
    "run_fingerprints",
    "span_batches",
    "annotations",
)
PROVENANCE_COUNT_KEYS = ("context_entries", "run_fingerprints")
# Counts a summary names only when there were any: provenance rows, and the spans kept for
# traces received over OpenTelemetry.
OPTIONAL_COUNT_KEYS = (*PROVENANCE_COUNT_KEYS, "span_batches", "annotations")
# How many of the sessions a dry run would remove the previews list by name (the rest are
# counted, and linked to as one filtered list).
PREVIEW_SIZE = 20


@dataclass
class PruneResult:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PRUNE_COUNT_KEYS, 0))
    batches: int = 0
    longest_transaction_s: float = 0.0
    dry_run: bool = False
    # Sessions the criteria match that stay because they are pinned (counted on a dry run,
    # and on a prune of chosen sessions).
    skipped_pinned: int = 0
    log_id: int | None = None
    # Where "idle" starts: the selection is last_activity_at < cutoff (None: chosen sessions).
    cutoff: datetime | None = None
    # A dry run's first sessions to go, oldest first (as many as it was asked to preview),
    # each with its project: ``counts["sessions"]`` says how many there are in all.
    preview: list[models.Session] = field(default_factory=list)

    @property
    def total_rows(self) -> int:
        return sum(self.counts.values())


def prune_candidates(
    *,
    project: models.Project | None = None,
    cutoff: datetime | None = None,
    session_ids: list[int] | None = None,
    statuses: list[str] | tuple[str, ...] = (),
    agents: list[str] | tuple[str, ...] = (),
) -> Any:
    """Sessions a prune may remove. Pinned sessions are never among them, by any path.

    Selection is by ``last_activity_at`` (indexed): the latest time the agent reported for
    any run of the session, falling back to when we received it.
    """
    return _matching(
        project=project, cutoff=cutoff, session_ids=session_ids, statuses=statuses, agents=agents
    ).filter(pinned=False)


def _matching(
    *,
    project: models.Project | None,
    cutoff: datetime | None,
    session_ids: list[int] | None,
    statuses: list[str] | tuple[str, ...],
    agents: list[str] | tuple[str, ...],
) -> Any:
    """Sessions the criteria match, pinned or not (the pinned ones are what a prune keeps)."""
    queryset = models.Session.objects.all()
    if project is not None:
        queryset = queryset.filter(project=project)
    if cutoff is not None:
        queryset = queryset.filter(last_activity_at__lt=cutoff)
    if session_ids is not None:
        queryset = queryset.filter(pk__in=session_ids)
    if statuses:
        queryset = queryset.filter(last_status__in=statuses)
    if agents:
        queryset = queryset.filter(agent_name__in=agents)
    return queryset


def candidates_admin_url(
    *,
    cutoff: datetime,
    project: models.Project | None = None,
    statuses: list[str] | tuple[str, ...] = (),
    agents: list[str] | tuple[str, ...] = (),
) -> str:
    """The admin's sessions list filtered to exactly what ``prune_candidates`` selects with
    these criteria (the dashboard's own list filters by whole days, and shows the pinned
    sessions too): Django's admin takes lookups on a model's own fields in the query string."""
    params: dict[str, Any] = {"last_activity_at__lt": cutoff.isoformat(), "pinned__exact": "0"}
    if project is not None:
        params["project__id__exact"] = project.pk
    if statuses:
        params["last_status__in"] = ",".join(statuses)
    if len(agents) == 1:
        params["agent_name"] = agents[0]  # a name may hold a comma, which "__in" splits on
    elif agents:
        params["agent_name__in"] = ",".join(agents)
    return f"{reverse('admin:history_app_session_changelist')}?{urlencode(params)}"


def _child_querysets(session_ids: Any, run_ids: Any = None) -> list[tuple[str, Any]]:
    """Children first, so no row is ever left pointing at a deleted parent.

    With ``run_ids`` (a batch's run keys, fetched once) every child is deleted through its
    own ``run_id`` index with a plain ``DELETE … WHERE run_id IN (…)``, no join.
    """
    runs = {"run_id__in": run_ids} if run_ids is not None else {"run__session_id__in": session_ids}
    return [
        ("annotations", models.Annotation.objects.filter(**runs)),
        ("model_calls", models.ModelCall.objects.filter(**runs)),
        ("tool_calls", models.ToolCall.objects.filter(**runs)),
        ("iterations", models.Iteration.objects.filter(**runs)),
        ("member_interactions", models.MemberInteraction.objects.filter(**runs)),
        ("context_entries", models.ContextEntry.objects.filter(**runs)),
        ("injected_contexts", models.InjectedContext.objects.filter(**runs)),
        ("run_fingerprints", models.RunFingerprint.objects.filter(**runs)),
        ("runs", models.Run.objects.filter(session_id__in=session_ids)),
        ("span_batches", models.SpanBatch.objects.filter(session_id__in=session_ids)),
        ("sessions", models.Session.objects.filter(pk__in=session_ids)),
    ]


def _raw_delete(queryset: Any) -> int:
    """``DELETE`` the rows of ``queryset`` without loading them; how many went. A filter
    that can match nothing (``run_id IN ()``: a batch of sessions without runs) is never
    sent, and Django then answers None, not 0."""
    return queryset._raw_delete(queryset.db) or 0


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
    project: models.Project | None = None,
    preview: int = 0,
    now: datetime | None = None,
) -> PruneResult:
    """Delete old (or chosen) unpinned sessions of ``project`` (of every project when it is
    None) and every row that belongs to them.

    Each batch of at most ``batch_size`` sessions is deleted in its own short transaction,
    children first, with ``DELETE … WHERE … IN (subquery)`` statements: no row is loaded
    into Python, and no transaction holds the write lock for long, so ingestion goes on.
    Each batch re-checks its sessions inside the transaction (a run that arrived since
    the selection keeps its session). Interrupted, a second run finishes the job.
    With ``dry_run`` it counts exactly what would go and deletes nothing, counts the
    pinned sessions the criteria match, and fetches the first ``preview`` sessions that
    would go (one bounded query: a preview never loads every candidate). ``now`` is when
    the days are counted back from (``prune_each_project`` gives each project the same).
    """
    if older_than_days is None and session_ids is None:
        raise ValueError("give older_than_days or session_ids")
    if older_than_days is not None and not 0 <= older_than_days <= MAX_PRUNE_DAYS:  # NaN fails too
        raise ValueError(f"older_than_days must be a number of days from 0 to {MAX_PRUNE_DAYS}")
    if older_than_days is not None:
        cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    else:
        cutoff = None
    criteria = {
        "older_than_days": older_than_days,
        "cutoff": cutoff.isoformat() if cutoff else None,
        "session_count": len(session_ids) if session_ids is not None else None,
        "statuses": list(statuses),
        "agents": list(agents),
        "batch_size": batch_size,
        "project": project.slug if project is not None else None,
    }
    log = models.PruneLog.objects.create(
        project=project, trigger=trigger, user=user[:150], dry_run=dry_run, criteria=criteria
    )
    result = PruneResult(dry_run=dry_run, log_id=log.pk, cutoff=cutoff)
    criteria_kwargs = {
        "project": project,
        "cutoff": cutoff,
        "session_ids": session_ids,
        "statuses": statuses,
        "agents": agents,
    }
    if dry_run or session_ids is not None:
        result.skipped_pinned = _matching(**criteria_kwargs).filter(pinned=True).count()

    def candidates() -> Any:
        return prune_candidates(**criteria_kwargs)

    if dry_run:
        if preview > 0:
            # In the order a prune takes them; the project is joined for the rows' links.
            rows = candidates().select_related("project").order_by("last_activity_at", "id")
            result.preview = list(rows[:preview])
        selected = candidates().values("pk")
        for key, queryset in _child_querysets(selected):
            result.counts[key] = queryset.count()
        result.counts["search_documents"] = search.indexed_count(
            models.Run.objects.filter(session__in=selected)
        )
    else:
        # Recorded before anything is deleted, its counts brought forward by each batch's
        # own transaction: a prune interrupted after some batches is on the record too.
        event = audit.record(
            actor=user or trigger,
            action="pruned",
            project=project,
            target=f"prune log {log.pk}",
            trigger=trigger,
            sessions=0,
            runs=0,
        )
        while max_batches is None or result.batches < max_batches:
            started = time.perf_counter()
            with transaction.atomic():
                batch = list(
                    candidates().order_by("last_activity_at", "id").values_list("pk", flat=True)[:batch_size]
                )
                if not batch:
                    break
                # Locked, as ingestion and annotations lock a run before its session: an
                # annotation written meanwhile is counted off with its run, not left behind.
                run_ids = list(
                    models.Run.objects.select_for_update()
                    .filter(session_id__in=batch)
                    .order_by("pk")
                    .values_list("pk", flat=True)
                )
                # Before the rows it is rebuilt from go (SQLite's index keeps no copy).
                result.counts["search_documents"] += search.unindex_stored(run_ids)
                rollups.take_off_stored(run_ids)
                for rollup in (models.SessionFacet, models.SessionScore):
                    _raw_delete(rollup.objects.filter(session_id__in=batch))
                for key, queryset in _child_querysets(batch, run_ids):
                    result.counts[key] += _raw_delete(queryset)
                models.AuditEvent.objects.filter(pk=event.pk).update(
                    details={
                        "trigger": trigger,
                        "sessions": result.counts["sessions"],
                        "runs": result.counts["runs"],
                    }
                )
            result.longest_transaction_s = max(result.longest_transaction_s, time.perf_counter() - started)
            result.batches += 1
            if progress is not None:
                progress(result)
        if cutoff is not None and session_ids is None and not statuses and not agents:
            # Spans whose trace never became a stored run (every span of it refused).
            orphans = models.SpanBatch.objects.filter(session__isnull=True, received_at__lt=cutoff)
            if project is not None:
                orphans = orphans.filter(project=project)
            result.counts["span_batches"] += _raw_delete(orphans)
    log.counts = result.counts
    log.batches = result.batches
    log.longest_transaction_ms = round(result.longest_transaction_s * 1000)
    log.finished_at = timezone.now()
    log.save(update_fields=["counts", "batches", "longest_transaction_ms", "finished_at"])

    return result


def delete_session(session: models.Session, *, actor: str) -> int:
    """Delete one session (pinned or not: the caller decides) with everything it holds, in
    one transaction, audited in its project; returns how many runs went."""
    with transaction.atomic():
        pks = list(
            models.Run.objects.select_for_update()
            .filter(session=session)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        # SQLite's search index keeps no copy of the text: the runs leave it first.
        search.unindex_stored(pks)
        rollups.take_off_stored(pks)
        session.delete()
        audit.record(
            actor=actor,
            action="session_deleted",
            project=session.project,
            target=session.session_id,
            runs=len(pks),
        )
    return len(pks)


def set_pinned(sessions: Any, *, pinned: bool, actor: str) -> int:
    """Pin (legal hold: never pruned) or unpin ``sessions`` (a queryset), audited once per
    project they are in; returns how many changed."""
    changed = sessions.exclude(pinned=pinned)
    by_project: dict[int, list[str]] = {}
    for project_id, session_id in changed.values_list("project_id", "session_id")[:10_000]:
        by_project.setdefault(project_id, []).append(session_id)
    count = changed.update(pinned=pinned)
    projects = models.Project.objects.in_bulk(list(by_project))
    for project_id, ids in sorted(by_project.items()):
        audit.record(
            actor=actor,
            action=models.AuditEvent.SESSIONS_PINNED if pinned else models.AuditEvent.SESSIONS_UNPINNED,
            project=projects.get(project_id),
            target=f"{len(ids)} session{'' if len(ids) == 1 else 's'}",
            sessions=ids[:1000],
        )
    return count


def retention_plan() -> list[tuple[models.Project, int]]:
    """Each project with a retention, and its days: its own, else HISTORY_RETENTION_DAYS."""
    return [
        (project, days)
        for project in models.Project.objects.order_by("pk")
        if (days := project.effective_retention_days()) is not None
    ]


def prune_each_project(
    *, session_ids: list[int] | None = None, progress: Any = None, **kwargs: Any
) -> PruneResult:
    """``prune_sessions`` project by project (the projects of ``session_ids`` when given,
    else every project), so that each project's prune log and audit trail hold its own
    prune; the results summed."""
    now = timezone.now()
    total = PruneResult(dry_run=kwargs.get("dry_run", False))
    days = kwargs.get("older_than_days")
    if days is not None and 0 <= days <= MAX_PRUNE_DAYS:  # else prune_sessions says why not
        total.cutoff = now - timedelta(days=days)  # each project's: the same ``now``
    projects = models.Project.objects.order_by("pk")
    if session_ids is not None:
        projects = projects.filter(sessions__pk__in=session_ids).distinct()
    for project in projects:
        result = prune_sessions(
            project=project, session_ids=session_ids, progress=progress, now=now, **kwargs
        )
        for key, count in result.counts.items():
            total.counts[key] += count
        total.batches += result.batches
        total.skipped_pinned += result.skipped_pinned
        total.longest_transaction_s = max(total.longest_transaction_s, result.longest_transaction_s)
        total.log_id = result.log_id
        total.preview.extend(result.preview)
    # The first sessions to go across the projects, each project's first ones merged.
    total.preview.sort(key=lambda s: (s.last_activity_at, s.pk))
    del total.preview[kwargs.get("preview", 0) :]
    return total


def prune_by_retention(**kwargs: Any) -> list[tuple[models.Project, PruneResult]]:
    """``prune_sessions`` in each project that has a retention, with its days."""
    return [
        (project, prune_sessions(project=project, older_than_days=days, **kwargs))
        for project, days in retention_plan()
    ]


_runs_since_prune = 0
_auto_prune_lock = threading.Lock()


def maybe_prune_automatically(*, new_runs: int) -> list[tuple[models.Project, PruneResult]] | None:
    """Where a retention is set (a project's own, or HISTORY_RETENTION_DAYS), run one
    bounded prune batch per project every HISTORY_RETENTION_EVERY_RUNS ingested runs
    (counted per process), so retention happens without anyone remembering a cron job;
    the command remains for cron/systemd."""
    global _runs_since_prune
    if new_runs <= 0:
        return None
    with _auto_prune_lock:
        _runs_since_prune += new_runs
        if _runs_since_prune < settings.HISTORY_RETENTION_EVERY_RUNS:
            return None
        _runs_since_prune = 0
    return (
        prune_by_retention(
            batch_size=settings.HISTORY_RETENTION_BATCH_SIZE, max_batches=1, trigger="automatic"
        )
        or None
    )
