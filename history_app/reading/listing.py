"""The session list (filters, sorts, search hits) and the receipts list, with the
summaries their JSON twins return. Keyset pages on indexed columns: the number of queries
never grows with the number of sessions or runs.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Exists, F, OuterRef, Q, Subquery, Window
from django.db.models.functions import RowNumber, Substr

from history_app import models
from history_app.agent_history import records
from history_app.reading import snippets
from history_app.reading.forms import SCORE_SORTS, SESSION_SORTS, SessionFilterForm
from history_app.reading.paging import NotFound, Page, keyset_page
from history_app.store import rollups, search
from history_app.store.mapper import day_start


@dataclass
class SessionFilters:
    q: str = ""
    framework: str = ""
    agent: str = ""
    status: str = ""
    user: str = ""
    tool: str = ""
    # A score or label name some run of the session carries ("comment": any comment).
    annotated: str = ""
    date_from: date | None = None
    date_to: date | None = None
    errors: bool = False
    sort: str = "recent"
    # The matching runs a broad search found (run key -> session key), for its hits.
    found_runs: dict[int, int] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_query(cls, params: Any) -> SessionFilters:
        """The list's query string, read by its form; a bad value raises ``BadParameter``."""
        data = SessionFilterForm.read(params)
        return cls(
            q=data["q"],
            framework=data["framework"],
            agent=data["agent"],
            status=data["status"],
            user=data["user"],
            tool=data["tool"],
            annotated=data["annotated"],
            date_from=data["from"],
            date_to=data["to"],
            errors=data["errors"],
            sort=data["sort"],
        )

    @property
    def search_notice(self) -> str:
        """Why the search filters nothing (a query without words), or ""."""
        return search.unsearchable(self.q)

    @property
    def active(self) -> bool:
        searching = self.q and not self.search_notice
        texts = (searching, self.framework, self.agent, self.status, self.user, self.tool, self.annotated)
        return any(texts) or bool(self.date_from or self.date_to or self.errors)

    @property
    def panel_open(self) -> bool:
        """Whether anything beyond the search box is set (the filter panel shows open)."""
        texts = (self.framework, self.agent, self.status, self.user, self.tool, self.annotated)
        return any(texts) or bool(self.date_from or self.date_to or self.errors) or self.sort != "recent"

    def facets(self) -> list[tuple[str, str]]:
        """The (facet, value) pairs the filters ask the sessions' facets for: the agent,
        status, tool, errors, and the label or score name unless the list is sorted by
        that score (its sessions are then read from their scores)."""
        annotation = ""
        if self.annotated and self.sort not in SCORE_SORTS:
            kind = "comment" if self.annotated == "comment" else "score"
            annotation = rollups.annotation_facet(kind, self.annotated)
        pairs = [
            (models.SessionFacet.AGENT, self.agent),
            (models.SessionFacet.STATUS, self.status),
            (models.SessionFacet.TOOL, self.tool),
            (models.SessionFacet.ANNOTATION, annotation),
            (models.SessionFacet.ERRORS, "1" if self.errors else ""),
        ]
        return [(facet, value) for facet, value in pairs if value]

    def apply(self, queryset: Any, *, searching: bool = True) -> Any:
        """``queryset`` (one project's sessions) narrowed to what the filters match."""
        sessions = queryset
        if self.q and searching:
            matched = search.matching_sessions(self.q)
            if matched is not None:
                queryset = queryset.filter(pk__in=matched)
        if self.framework:
            if _common(sessions.filter(framework=self.framework)):
                # Probed session by session in list order (a filter the planner could
                # answer from the framework index would sort every match first).
                same = models.Session.objects.filter(pk=OuterRef("pk"), framework=self.framework)
                queryset = queryset.filter(Exists(same))
            else:
                queryset = queryset.filter(framework=self.framework)
        # The filters on what a session's runs hold read the sessions' facets as ingestion
        # noted them (rollups.py): an indexed list whether the value is in every session
        # or in none, never a walk over the sessions' runs and tool calls.
        for facet, value in self.facets():
            queryset = queryset.filter(_having(facet, value))
        if self.user:
            queryset = queryset.filter(user_id=self.user)
        if self.sort in SCORE_SORTS:
            # Sorted by a score: the sessions that have it, each with its mean, read from
            # the (name, mean) index of the sessions' scores.
            queryset = queryset.filter(scores__name=self.annotated).annotate(
                score_mean=F("scores__mean"), score_count=F("scores__count")
            )
        if self.date_from:
            queryset = queryset.filter(last_activity_at__gte=day_start(self.date_from))
        if self.date_to:
            queryset = queryset.filter(last_activity_at__lt=day_start(self.date_to + timedelta(days=1)))
        if self.errors:
            queryset = queryset.filter(_having(models.SessionFacet.ERRORS, "1"))
        return queryset


# A filter value held by at least this many sessions is "common": the list walks the
# sessions in its order and probes each (it meets a page of matches soon); a rarer one
# gathers its sessions first (a short list) and sorts them.
COMMON_SESSIONS = 2000


def _common(queryset: Any) -> bool:
    """Whether ``queryset`` has at least ``COMMON_SESSIONS`` rows (an index read of at most
    that many)."""
    return queryset.values("pk")[COMMON_SESSIONS - 1 : COMMON_SESSIONS].exists()


def _having(facet: str, value: str) -> Any:
    """A condition on sessions: some run of theirs has ``facet`` = ``value``."""
    rows = models.SessionFacet.objects.filter(facet=facet, value=value)
    if _common(rows):
        return Exists(rows.filter(session=OuterRef("pk")))
    return Q(pk__in=rows.values("session_id"))


def sessions_page(
    *,
    project: models.Project,
    after: str | None = None,
    limit: int = 50,
    filters: SessionFilters | None = None,
) -> Page:
    """The project's sessions matching ``filters``, newest activity first unless sorted
    otherwise."""
    filters = filters or SessionFilters()
    field, descending = SESSION_SORTS[filters.sort]
    sessions = models.Session.objects.filter(project=project)
    if (
        filters.q
        and connection.vendor == "sqlite"
        and search.terms(filters.q)
        and filters.sort not in SCORE_SORTS
    ):
        page = _broad_search_page(
            sessions, filters, field=field, after=after, limit=limit, descending=descending
        )
        if page is not None:
            return page
    queryset = filters.apply(sessions)
    return keyset_page(queryset, field=field, after=after, limit=limit, descending=descending)


# The sessions list counts its matches up to this many ("10,000+ sessions" beyond): an
# index read of at most that many rows, whatever the project holds.
TOTAL_CAP = 10_000


def session_total(*, project: models.Project, filters: SessionFilters, page: Page) -> tuple[int, bool] | None:
    """How many sessions the list holds, as ``(count, more)``, for its first ``page``:
    ``more`` when there are more than ``count`` (the count stopped at ``TOTAL_CAP``). A
    search is counted only when its first page holds all its matches (counting every
    match of a common word is what the search itself avoids); None then."""
    if filters.q and not filters.search_notice:
        if page.next_cursor is None:
            return len(page.items), False
        return None
    rows = _single_condition_rows(project, filters)
    if rows is None:
        # The rows the page was read from: the filters' probes (which plan each facet
        # filter takes) are not made again.
        rows = page.matching
        if rows is None:
            rows = filters.apply(models.Session.objects.filter(project=project))
        rows = rows.values("pk")
    count = rows[: TOTAL_CAP + 1].count()
    return min(count, TOTAL_CAP), count > TOTAL_CAP


def _single_condition_rows(project: models.Project, filters: SessionFilters) -> Any:
    """When the list's one condition is a facet (agent, status, tool, label, errors) or a
    score it is sorted by: that condition's rows (one a session, by their unique
    constraints) in the project, which count the list's sessions from the condition's own
    index. Counting through the sessions instead probes each in list order until it has
    ``TOTAL_CAP`` matches: at a million runs, 48-98 ms for a value a tenth to a third of the
    sessions hold. None when the list has any other condition."""
    others = (filters.framework, filters.user, filters.date_from, filters.date_to)
    if any(others) or (filters.q and not filters.search_notice):
        return None
    facets = filters.facets()
    if filters.sort in SCORE_SORTS:
        if facets:
            return None
        return models.SessionScore.objects.filter(name=filters.annotated, session__project=project)
    if len(facets) != 1:
        return None
    [(facet, value)] = facets
    return models.SessionFacet.objects.filter(facet=facet, value=value, session__project=project)


# A session's title is the first input of its first top-level run, cut to this length,
# from at most ``TITLE_READ`` characters of it (whitespace and invisible format characters
# before its words are skipped, not counted).
TITLE_CHARS = 120
TITLE_READ = 2000


@functools.cache
def _format_characters() -> re.Pattern[str]:
    """Every format character (Unicode category Cf), as one character class: removed in C
    (a test of each character in Python was a fifth of a sessions page's rendering)."""
    found = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    return re.compile("[" + "".join(re.escape(c) for c in found) + "]")


def _title(text: str | None) -> str:
    """``text`` as a one-line title: invisible format characters (zero-width spaces,
    direction marks) dropped, whitespace runs folded to one space, cut at
    ``TITLE_CHARS`` with "…" when anything was left out (whitespace included)."""
    more = len(text or "") >= TITLE_READ  # the input goes on past what was read
    words = _format_characters().sub("", text or "").split()
    folded = " ".join(words)
    if len(folded) <= TITLE_CHARS and not (more and words):
        return folded
    return folded[: TITLE_CHARS - 1].rstrip() + "…"


def session_titles(sessions: list[models.Session]) -> dict[int, str]:
    """Each session's title (its first top-level run's input, see ``_title``), in one
    query for the page: a session id such as ``session-<uuid>`` is no name."""
    first = (
        models.Run.objects.filter(session=OuterRef("pk"), parent_run_id__isnull=True)
        .order_by("started_at", "id")  # run_session_order_idx
        .annotate(head=Substr("input", 1, TITLE_READ))
        .values("head")[:1]
    )
    rows = models.Session.objects.filter(pk__in=[s.pk for s in sessions]).annotate(title=Subquery(first))
    titles = {pk: _title(head) for pk, head in rows.values_list("pk", "title")}
    return {pk: title for pk, title in titles.items() if title}


# A search (SQLite) looks for matches among this many sessions in list order first, then
# four times as many, and so on up to ``BROAD_CANDIDATES_MAX``. When fewer than one
# candidate in ``NARROW_RATIO`` matches, the search is narrow: its matches are gathered
# from the whole index instead (they are few).
BROAD_CANDIDATES = 200
BROAD_CANDIDATES_MAX = 20_000
NARROW_RATIO = 20


def _broad_search_page(
    sessions: Any, filters: SessionFilters, *, field: str, after: str | None, limit: int, descending: bool
) -> Page | None:
    """The sessions list for a broad search (SQLite): found among the next sessions in
    list order (``search.matching_runs_in``) rather than by reading every match in the
    index (half a million for a common word at a million runs). When the first ``n``
    candidates hold more than ``limit`` matching sessions, the page is exactly the first
    ``limit`` of them, as the whole list would give it. None for a narrow search (few
    candidates match): the caller gathers its matches. No sample decides first: on
    SQLite each read of a common prefix term costs tens of milliseconds at a million runs,
    and the first round is the sample."""
    base = filters.apply(sessions, searching=False)
    wanted = BROAD_CANDIDATES
    while wanted <= BROAD_CANDIDATES_MAX:
        candidates = keyset_page(
            base.only("id", field), field=field, after=after, limit=wanted, descending=descending
        )
        found = search.matching_runs_in(filters.q, [session.pk for session in candidates.items])
        if found is None:
            break
        matched = set(found.values())
        if len(matched) > limit or candidates.next_cursor is None:
            filters.found_runs = found
            return keyset_page(
                base.filter(pk__in=sorted(matched)),
                field=field,
                after=after,
                limit=limit,
                descending=descending,
            )
        if len(matched) * NARROW_RATIO < len(candidates.items):
            return None
        wanted *= 4
    return None


def search_hits(
    sessions: list[models.Session], query: str, *, per_session: int = 3, found: dict[int, int] | None = None
) -> dict[int, list]:
    """Up to ``per_session`` matching runs of each listed session, newest first, in one
    query; ``found`` (a broad search's matching runs, ``SessionFilters.found_runs``) spares
    looking them up again."""
    matching = search.matching_run_pks(query)
    if matching is None or not sessions:
        return {}
    listed = {session.pk for session in sessions}
    if found is not None and listed <= set(found.values()):
        matching = [pk for pk, session in found.items() if session in listed]
    elif connection.vendor == "postgresql":
        # The listed sessions' runs, each checked against the query: not every match of
        # the index (for a common word, half the runs) joined to them.
        matching = search.matching_runs_of_sessions(query, sorted(listed))
    newest_first = [F("started_at").desc(nulls_last=True), F("id").desc()]
    rows = (
        models.Run.objects.filter(session__in=sessions, pk__in=matching)
        .only("project_id", "run_id", "session_id", "input", "status", "agent_name", "started_at")
        .annotate(rank=Window(RowNumber(), partition_by=[F("session_id")], order_by=newest_first))
        .annotate(**snippets.HEADS)
        .filter(rank__lte=per_session)
        .order_by("session_id", "rank")
    )
    hits: dict[int, list] = {}
    for run in rows:
        hits.setdefault(run.session_id, []).append(run)
    # Why each matched: a marked passage (a bounded number of queries for them all).
    snippets.attach([run for runs in hits.values() for run in runs], query)
    return hits


# The distinct frameworks, one index seek each (a "loose index scan", which neither
# database plans by itself for DISTINCT): a handful of seeks instead of reading every
# session.
_FRAMEWORKS_SQL = (
    "WITH RECURSIVE f(name) AS ("
    "SELECT (SELECT min(framework) FROM history_app_session WHERE project_id = %s AND framework > '') "
    "UNION ALL SELECT (SELECT min(framework) FROM history_app_session "
    "WHERE project_id = %s AND framework > f.name) "
    "FROM f WHERE f.name IS NOT NULL) "
    "SELECT name FROM f WHERE name IS NOT NULL LIMIT 1000"
)


def filter_choices(project: models.Project) -> dict[str, list[str]]:
    """Values for the filter menus: the frameworks present in the project (one query) and
    the statuses."""
    with connection.cursor() as cursor:
        cursor.execute(_FRAMEWORKS_SQL, [project.pk, project.pk])
        frameworks = [name for (name,) in cursor.fetchall()]
    return {"frameworks": frameworks, "statuses": list(records.RUN_STATUSES)}


def anything_running(project: models.Project) -> bool:
    return models.Run.objects.filter(project=project, status__in=("running", "pending")).exists()


def get_session(project: models.Project, session_id: str) -> models.Session:
    """The session; ``NotFound`` when the project has none of that id. Its project is the
    one it was found in, so its links need no query."""
    try:
        session = models.Session.objects.get(project=project, session_id=session_id)
    except models.Session.DoesNotExist:
        raise NotFound(f"no session {session_id!r}") from None
    session.project = project
    return session


def session_summary(session: models.Session) -> dict[str, Any]:
    return {
        "session_id": session.session_id,
        "user_id": session.user_id,
        "framework": session.framework,
        "agent_name": session.agent_name,
        "run_count": session.run_count,
        "failed_count": session.failed_count,
        "last_status": session.last_status,
        "first_started_at": _iso(session.first_started_at),
        "last_activity_at": _iso(session.last_activity_at),
        "pinned": session.pinned,
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "cost": session.cost,
        "mean_duration_ms": session.mean_duration_ms,
        "annotation_count": session.annotation_count,
        # Sorted by a score: the session's mean of it and how many it has.
        **(
            {"score": {"mean": session.score_mean, "count": session.score_count}}
            if hasattr(session, "score_mean")
            else {}
        ),
    }


def run_summary(run: models.Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "parent_run_id": run.parent_run_id,
        "kind": run.kind,
        "status": run.status,
        "agent_name": run.agent_name,
        "framework": run.framework,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "started_at": _iso(run.started_at),
        "ended_at": _iso(run.ended_at),
        "duration_ms": run.duration_ms,
        "iteration_count": run.iteration_count,
        "tool_call_count": run.tool_call_count,
        "tool_error_count": run.tool_error_count,
        "model_call_count": run.model_call_count,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost": run.cost,
        "unpriced_calls": run.unpriced_calls,
        "redactions": run.redactions,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def receipts_page(*, project: models.Project, after: str | None = None, limit: int = 50) -> Page:
    """The project's ingestion receipts, newest first."""
    receipts = models.IngestReceipt.objects.filter(project=project).select_related("token")
    return keyset_page(receipts, field="created_at", after=after, limit=limit)


def receipt_summary(receipt: models.IngestReceipt) -> dict[str, Any]:
    return {
        "id": receipt.pk,
        "created_at": _iso(receipt.created_at),
        "source": receipt.source,
        "token": receipt.token.name if receipt.token else None,
        "label": receipt.label,
        "state": receipt.shown_state,
        "items": receipt.item_count,
        "counts": receipt.counts,
        "rejections": receipt.rejections,
        "changed_fields": receipt.changed_fields,
    }
