"""Reads: every page and JSON twin gets its data here, in a bounded number of queries.

The number of queries a selector makes never grows with the number of runs, iterations
or tool calls (tests pin it with ``assertNumQueries``): lists use keyset pagination on
indexed columns, and a run's children come in one query per table.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, Exists, F, Max, OuterRef, Prefetch, Q, Window
from django.db.models.functions import Coalesce, RowNumber, TruncDate
from django.http import Http404
from django.utils import timezone

from . import models, search
from .agent_history import records


class BadParameter(ValueError):
    """A query-string value a page cannot use; ``field`` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class BadCursor(BadParameter):
    """A ``_next`` token that this server did not hand out."""

    def __init__(self, message: str) -> None:
        super().__init__("_next", message)


def encode_cursor(value: datetime | int, pk: int) -> str:
    raw = json.dumps([value.isoformat() if isinstance(value, datetime) else value, pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_MAX_BIGINT = 2**63 - 1


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def decode_cursor(token: str, *, is_datetime: bool = True) -> tuple[datetime | int, int]:
    """The (value, id) a ``_next`` token holds. Anything this server could not have handed
    out is a ``BadCursor``: a float, NaN or a number past 64 bits (the databases would
    refuse it), or a time without a zone or one that falls outside the years 1–9999 in UTC
    (the databases compare in UTC)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value, pk = json.loads(raw, parse_constant=_reject_constant)
        if type(pk) is not int or not 0 <= pk <= _MAX_BIGINT:
            raise ValueError("bad id")
        if not is_datetime:
            if type(value) is not int or not -_MAX_BIGINT <= value <= _MAX_BIGINT:
                raise ValueError("bad number")
            return value, pk
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError("no time zone")
        return moment.astimezone(UTC), pk
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, OverflowError, RecursionError):
        raise BadCursor("not a token this server handed out; start again from the first page") from None


def whole_number(value: str, field: str, *, low: int, high: int) -> int:
    """A query-string number from ``low`` to ``high``, written in ASCII digits; anything
    else (a sign, a decimal point, "²", "٣", thousands of digits) is a ``BadParameter``."""
    if not (value.isascii() and value.isdigit() and len(value) <= 12) or not (low <= int(value) <= high):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise BadParameter(field, f"{shown!r} is not a whole number from {low} to {high}")
    return int(value)


@dataclass
class Page:
    items: list[Any]
    next_cursor: str | None


def keyset_page(queryset: Any, *, field: str, after: str | None, limit: int, descending: bool = True) -> Page:
    """Rows ordered by (``field``, id), ``limit`` at a time after a cursor.

    Important: order by (field, id) — both in an index for the default orders — so the
    database walks the index instead of sorting the table, and a cursor stays valid while
    rows arrive.
    """
    sign, beyond = ("-", "lt") if descending else ("", "gt")
    queryset = queryset.order_by(f"{sign}{field}", f"{sign}id")
    if after:
        is_datetime = queryset.model._meta.get_field(field).get_internal_type() == "DateTimeField"
        value, pk = decode_cursor(after, is_datetime=is_datetime)
        queryset = queryset.filter(
            Q(**{f"{field}__{beyond}": value}) | Q(**{field: value, f"id__{beyond}": pk})
        )
    rows = list(queryset[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(getattr(rows[-1], field), rows[-1].pk)
    return Page(rows, next_cursor)


FIRST_DAY, LAST_DAY = date(1, 1, 2), date(9999, 12, 30)

# Sort name -> (field, descending).
SESSION_SORTS = {
    "recent": ("last_activity_at", True),
    "oldest": ("last_activity_at", False),
    "runs": ("run_count", True),
    "failures": ("failed_count", True),
}


@dataclass
class SessionFilters:
    q: str = ""
    framework: str = ""
    agent: str = ""
    status: str = ""
    user: str = ""
    tool: str = ""
    date_from: date | None = None
    date_to: date | None = None
    errors: bool = False
    sort: str = "recent"

    @classmethod
    def from_query(cls, params: Any) -> SessionFilters:
        """Read the list's query string; a bad value raises ``BadParameter`` naming it."""

        def text(name: str) -> str:
            value = params.get(name, "").strip()
            if len(value) > 255 and name != "q":
                raise BadParameter(name, "at most 255 characters")
            if "\x00" in value:  # PostgreSQL refuses NUL in any text
                raise BadParameter(name, "contains a NUL character")
            return value

        def day(name: str) -> date | None:
            value = text(name)
            if not value:
                return None
            try:
                parsed = date.fromisoformat(value)
            except ValueError:
                raise BadParameter(name, f"{value!r} is not a date (YYYY-MM-DD)") from None
            # A day away from both ends of the calendar: the filters use the day after
            # "to", and a day's start moved to UTC must still be a date.
            if not FIRST_DAY <= parsed <= LAST_DAY:
                raise BadParameter(name, f"must be between {FIRST_DAY} and {LAST_DAY}")
            return parsed

        status = text("status")
        if status and status not in records.RUN_STATUSES:
            raise BadParameter("status", f"must be one of {', '.join(records.RUN_STATUSES)}")
        sort = text("sort") or "recent"
        if sort not in SESSION_SORTS:
            raise BadParameter("sort", f"must be one of {', '.join(SESSION_SORTS)}")
        filters = cls(
            q=text("q")[:500],
            framework=text("framework"),
            agent=text("agent"),
            status=status,
            user=text("user"),
            tool=text("tool"),
            date_from=day("from"),
            date_to=day("to"),
            errors=params.get("errors", "") in {"1", "on", "true"},
            sort=sort,
        )
        if filters.date_from and filters.date_to and filters.date_from > filters.date_to:
            raise BadParameter("to", "the end of the date range is before its start")
        return filters

    @property
    def search_notice(self) -> str:
        """Why the search filters nothing (a query without words), or ""."""
        return search.unsearchable(self.q)

    @property
    def active(self) -> bool:
        searching = self.q and not self.search_notice
        texts = (searching, self.framework, self.agent, self.status, self.user, self.tool)
        return any(texts) or bool(self.date_from or self.date_to or self.errors)

    @property
    def panel_open(self) -> bool:
        """Whether anything beyond the search box is set (the filter panel shows open)."""
        texts = (self.framework, self.agent, self.status, self.user, self.tool)
        return any(texts) or bool(self.date_from or self.date_to or self.errors) or self.sort != "recent"

    def apply(self, queryset: Any) -> Any:
        runs = models.Run.objects.filter(session=OuterRef("pk"))
        if self.q:
            matched = search.matching_sessions(self.q)
            if matched is not None:
                queryset = queryset.filter(pk__in=matched)
        if self.framework:
            queryset = queryset.filter(framework=self.framework)
        if self.agent:
            named = Q(agent_name=self.agent) | Q(team_id=self.agent) | Q(workflow_id=self.agent)
            queryset = queryset.filter(Q(agent_name=self.agent) | Exists(runs.filter(named)))
        if self.status:
            queryset = queryset.filter(Exists(runs.filter(status=self.status)))
        if self.user:
            queryset = queryset.filter(user_id=self.user)
        if self.tool:
            calls = models.ToolCall.objects.filter(run__session=OuterRef("pk"), tool=self.tool)
            queryset = queryset.filter(Exists(calls))
        if self.date_from:
            queryset = queryset.filter(last_activity_at__gte=_day_start(self.date_from))
        if self.date_to:
            queryset = queryset.filter(last_activity_at__lt=_day_start(self.date_to + timedelta(days=1)))
        if self.errors:
            queryset = queryset.filter(Q(failed_count__gt=0) | Exists(runs.filter(tool_error_count__gt=0)))
        return queryset


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def sessions_page(
    *, after: str | None = None, limit: int = 50, filters: SessionFilters | None = None
) -> Page:
    """Sessions matching ``filters``, newest activity first unless sorted otherwise."""
    filters = filters or SessionFilters()
    field, descending = SESSION_SORTS[filters.sort]
    queryset = filters.apply(models.Session.objects.all())
    return keyset_page(queryset, field=field, after=after, limit=limit, descending=descending)


def search_hits(sessions: list[models.Session], query: str, *, per_session: int = 3) -> dict[int, list]:
    """Up to ``per_session`` matching runs of each listed session, newest first, in one query."""
    matching = search.matching_run_pks(query)
    if matching is None or not sessions:
        return {}
    newest_first = [F("started_at").desc(nulls_last=True), F("id").desc()]
    rows = (
        models.Run.objects.filter(session__in=sessions, pk__in=matching)
        .only("run_id", "session_id", "input", "status", "agent_name", "started_at")
        .annotate(rank=Window(RowNumber(), partition_by=[F("session_id")], order_by=newest_first))
        .filter(rank__lte=per_session)
        .order_by("session_id", "rank")
    )
    hits: dict[int, list] = {}
    for run in rows:
        hits.setdefault(run.session_id, []).append(run)
    return hits


def filter_choices() -> dict[str, list[str]]:
    """Values for the filter menus: the frameworks present (one query) and the statuses."""
    frameworks = models.Session.objects.exclude(framework="").values_list("framework", flat=True)
    return {
        "frameworks": list(frameworks.order_by("framework").distinct()),
        "statuses": list(records.RUN_STATUSES),
    }


def anything_running() -> bool:
    return models.Run.objects.filter(status__in=("running", "pending")).exists()


def get_session(session_id: str) -> models.Session:
    try:
        return models.Session.objects.get(session_id=session_id)
    except models.Session.DoesNotExist:
        raise Http404("No such session") from None


def session_runs(*, session: models.Session) -> list[models.Run]:
    """The session's runs in the order they started (one query)."""
    return list(
        models.Run.objects.filter(session=session)
        .defer("output_html", "metadata")
        .order_by("started_at", "received_at", "id")
    )


TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")


@dataclass
class TimelineRow:
    """One line of a session timeline: a run (nested by depth) or an idle gap."""

    run: models.Run | None = None
    depth: int = 0
    number: str = ""
    steps: list[models.Iteration] | None = None
    steps_total: int = 0
    interactions: list[models.MemberInteraction] | None = None
    interactions_total: int = 0
    idle_ms: int | None = None
    tokens: dict[str, int] | None = None


def first_of_each_run(queryset: Any, limit: int) -> dict[int, tuple[list, int]]:
    """Run pk -> (its first ``limit`` rows by position, how many it has), in one query that
    returns at most ``limit`` rows a run, however many each run has."""
    by_position = [F("position").asc(), F("id").asc()]
    rows = (
        queryset.annotate(
            rank=Window(RowNumber(), partition_by=[F("run_id")], order_by=by_position),
            run_total=Window(Count("id"), partition_by=[F("run_id")]),
        )
        .filter(rank__lte=limit)
        .order_by("run_id", "rank")
    )
    found: dict[int, tuple[list, int]] = {}
    for row in rows:
        found.setdefault(row.run_id, ([], row.run_total))[0].append(row)
    return found


def session_timeline(*, session: models.Session, idle_gap_ms: int, nested: int = 20) -> dict[str, Any]:
    """A session's runs as a nested timeline: one query, plus one for member interactions
    when the session has team runs and one for steps when it has workflow runs, whatever
    the number of runs. Each run carries at most ``nested`` interactions or steps, with
    their total (the run page and its JSON export hold the rest).

    Member runs sit under the team run that spawned them and a workflow's step runs under
    the workflow run (by ``parent_run_id``; a child whose parent is not in the session is
    shown at the top). Team runs carry their member interactions, workflow runs their
    steps (iterations). Between two top-level runs, a pause longer than ``idle_gap_ms`` is
    a row of its own. The counts follow the seeds' ``WorkflowSession``: all runs,
    completed (finished: completed, failed or cancelled), successful, failed.
    """
    runs = session_runs(session=session)
    by_id = {run.run_id: run for run in runs}
    children: dict[str, list[models.Run]] = {}
    top: list[models.Run] = []
    for run in runs:
        if run.parent_run_id and run.parent_run_id in by_id and run.parent_run_id != run.run_id:
            children.setdefault(run.parent_run_id, []).append(run)
        else:
            top.append(run)
    kinds = {run.kind for run in runs}
    interactions: dict[int, tuple[list, int]] = {}
    if "team" in kinds:
        team_interactions = models.MemberInteraction.objects.filter(run__session=session, run__kind="team")
        interactions = first_of_each_run(team_interactions, nested)
    steps: dict[int, tuple[list, int]] = {}
    if "workflow" in kinds:
        workflow_steps = models.Iteration.objects.filter(run__session=session, run__kind="workflow")
        steps = first_of_each_run(workflow_steps.only("run_id", "position", "index", "name"), nested)

    rows: list[TimelineRow] = []
    seen: set[str] = set()

    def add(run: models.Run, depth: int, number: str) -> None:
        if run.run_id in seen:  # a cycle in parent ids: show each run once
            return
        seen.add(run.run_id)
        tokens = {k: v for k in TOKEN_KEYS if isinstance(v := (run.metrics or {}).get(k), int)}
        run_steps, steps_total = steps.get(run.pk, (None, 0))
        run_interactions, interactions_total = interactions.get(run.pk, (None, 0))
        rows.append(
            TimelineRow(
                run=run,
                depth=min(depth, 4),
                number=number,
                steps=run_steps,
                steps_total=steps_total,
                interactions=run_interactions,
                interactions_total=interactions_total,
                tokens=tokens or None,
            )
        )
        for n, child in enumerate(children.get(run.run_id, []), start=1):
            add(child, depth + 1, f"{number}.{n}")

    previous_end = None
    for n, run in enumerate(top, start=1):
        if previous_end is not None and run.started_at is not None:
            idle = (run.started_at - previous_end).total_seconds() * 1000
            if idle >= idle_gap_ms:
                rows.append(TimelineRow(idle_ms=int(idle)))
        add(run, 0, str(n))
        end = run.ended_at or run.started_at
        if end is not None:
            previous_end = max(previous_end, end) if previous_end else end
    # Runs whose parents form a cycle (A under B, B under A) reach no top-level run: they
    # are listed last, at the top level, rather than lost.
    for run in runs:
        if run.run_id not in seen:
            add(run, 0, str(len(top) + 1))
            top.append(run)
    finished = ("completed", "failed", "cancelled")
    totals = dict.fromkeys(TOKEN_KEYS, 0)
    for row in rows:
        for key, value in (row.tokens or {}).items():
            totals[key] += value
    return {
        "rows": rows,
        "counts": {
            "all": len(runs),
            "completed": sum(1 for run in runs if run.status in finished),
            "successful": sum(1 for run in runs if run.status == "completed"),
            "failed": sum(1 for run in runs if run.status == "failed"),
        },
        "tokens": {k: v for k, v in totals.items() if v},
    }


def _transcript_queryset() -> Any:
    """Runs with their iterations and tool calls, interactions and contexts: one query
    per table, whatever their number."""
    return models.Run.objects.select_related("session").prefetch_related(
        Prefetch(
            "iterations",
            queryset=models.Iteration.objects.prefetch_related(
                Prefetch("tool_calls", queryset=models.ToolCall.objects.order_by("position"))
            ),
        ),
        "member_interactions",
        "injected_contexts",
    )


def tool_call_record(call: models.ToolCall) -> records.ToolCall:
    return records.ToolCall(
        tool=call.tool,
        params=call.params,
        result=call.result,
        error=call.error,
        started_at=call.started_at,
        ended_at=call.ended_at,
        call_id=call.call_id or None,
    )


def iteration_record(it: models.Iteration, tool_calls: list[records.ToolCall]) -> records.Iteration:
    return records.Iteration(
        index=it.index,
        name=it.name,
        thought=it.thought,
        started_at=it.started_at,
        ended_at=it.ended_at,
        metadata=it.metadata,
        tool_calls=tool_calls,
    )


def interaction_record(mi: models.MemberInteraction) -> records.MemberInteraction:
    return records.MemberInteraction(
        member=mi.member, task=mi.task, response=mi.response, member_run_id=mi.member_run_id
    )


def context_record(ctx: models.InjectedContext) -> records.InjectedContext:
    return records.InjectedContext(
        text=ctx.text,
        kind=ctx.kind,
        target=ctx.target,
        step=ctx.step,
        source_run_ids=ctx.source_run_ids,
        settings=ctx.settings,
        reported=ctx.reported,
    )


def run_record(run: models.Run, *, children: bool = True) -> records.Run:
    """The stored (redacted) run as a canonical record; with ``children``, from
    ``_transcript_queryset``'s prefetches, else with none (the caller adds them)."""
    return records.Run(
        run_id=run.run_id,
        session_id=run.session.session_id,
        kind=run.kind,
        status=run.status,
        parent_run_id=run.parent_run_id,
        agent_name=run.agent_name,
        team_id=run.team_id,
        workflow_id=run.workflow_id,
        user_id=run.user_id,
        framework=run.framework,
        input=run.input,
        output=run.output,
        error=run.error,
        started_at=run.started_at,
        ended_at=run.ended_at,
        iterations=[
            iteration_record(it, [tool_call_record(call) for call in it.tool_calls.all()])
            for it in (run.iterations.all() if children else ())
        ],
        member_interactions=[
            interaction_record(mi) for mi in (run.member_interactions.all() if children else ())
        ],
        injected_contexts=[context_record(ctx) for ctx in (run.injected_contexts.all() if children else ())],
        metrics=run.metrics,
        metadata=run.metadata,
        redactions=run.redactions,
    )


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
        "redactions": run.redactions,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def receipts_page(*, after: str | None = None, limit: int = 50) -> Page:
    """Ingestion receipts, newest first."""
    return keyset_page(
        models.IngestReceipt.objects.select_related("token"), field="created_at", after=after, limit=limit
    )


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


def _percentile_at(queryset: Any, count: int, fraction: float) -> int | None:
    """The value at ``fraction`` of an ordered queryset, by offset (one small query)."""
    if not count:
        return None
    index = min(count - 1, max(0, round(fraction * (count - 1))))
    return queryset[index]


def stats(*, days: int) -> dict[str, Any]:
    """The stats page's numbers for the last ``days`` days, in six queries whatever the volume."""
    today = timezone.now().date()
    since = _day_start(today - timedelta(days=days - 1))
    when = Coalesce("started_at", "received_at")
    runs = models.Run.objects.annotate(when=when).filter(when__gte=since)
    per_day = {
        row["day"]: row
        for row in runs.annotate(day=TruncDate("when"))
        .values("day")
        .annotate(total=Count("id"), failed=Count("id", filter=Q(status="failed")))
        .order_by("day")
    }
    series = []
    for n in range(days):
        day = today - timedelta(days=days - 1 - n)
        row = per_day.get(day, {"total": 0, "failed": 0})
        series.append({"day": day, "total": row["total"], "failed": row["failed"]})
    total = sum(p["total"] for p in series)
    failed = sum(p["failed"] for p in series)
    durations = (
        runs.filter(duration_ms__isnull=False).order_by("duration_ms").values_list("duration_ms", flat=True)
    )
    timed = durations.count()
    tools = (
        models.ToolCall.objects.filter(run__in=runs.values("pk"))
        .values("tool")
        .annotate(calls=Count("id"), errors=Count("id", filter=Q(error__isnull=False)))
        .order_by("-calls", "tool")[:10]
    )
    errors = (
        runs.filter(status="failed")
        .exclude(error__isnull=True)
        .exclude(error="")
        .values("error")
        .annotate(count=Count("id"), latest=Max("run_id"))
        .order_by("-count", "error")[:10]
    )
    return {
        "days": days,
        "since": since.date(),
        "series": series,
        "total": total,
        "failed": failed,
        "failure_rate": (failed / total) if total else None,
        "p50": _percentile_at(durations, timed, 0.5),
        "p95": _percentile_at(durations, timed, 0.95),
        "timed": timed,
        "tools": list(tools),
        "errors": list(errors),
    }
