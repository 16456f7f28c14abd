"""A session's runs and its timeline, a page of runs at a time (``_next``).

Every read is bounded: a page reads at most a page of runs (each with its parent found
through the (project, run_id) index), the member interactions and steps of those runs
only, and the session row; the whole-session counts come with the session row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core import signing
from django.db import connection
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery, Value, Window
from django.db.models.functions import Coalesce, RowNumber

from history_app import models
from history_app.agent_history.records import FINISHED_STATUSES
from history_app.reading import compiled, listing
from history_app.reading.paging import BadCursor, NotFound
from history_app.upkeep import annotations


def session_runs(*, session: models.Session) -> list[models.Run]:
    """The session's runs in the order they started (one query)."""
    return list(
        models.Run.objects.filter(session=session)
        .defer("output_html", "metadata")
        .order_by("started_at", "received_at", "id")
    )


TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")

# The runs shown last whose numbering a ``_next`` cursor carries to the next page, so a
# member run on page 2 is numbered on from its team run on page 1 ("3.4" after "3.3").
CARRIED_PARENTS = 16
_CURSOR_SALT = "history_app.reading.timeline"


@dataclass
class TimelineRow:
    """One line of a session timeline: a run (nested by depth) or an idle gap.

    ``parent_elsewhere``: the run's parent is on another page (the row links to it).
    ``number`` is then None when that page is too far back for the cursor to remember
    it, or comes later (the run started before its parent): the run is shown one level in."""

    run: models.Run | None = None
    depth: int = 0
    number: str | None = ""
    parent_run_id: str | None = None
    parent_elsewhere: bool = False
    steps: list[models.Iteration] | None = None
    steps_total: int = 0
    interactions: list[models.MemberInteraction] | None = None
    interactions_total: int = 0
    idle_ms: int | None = None
    tokens: dict[str, int] | None = None

    @property
    def indent(self) -> int:
        """The depth drawn: deeper runs line up at the fourth level."""
        return min(self.depth, 4)


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


def _count_of(queryset: Any) -> Coalesce:
    counted = queryset.order_by().values("session").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def _with_counts(*, project: int, session_id: str) -> QuerySet:
    """The session (at most one: its id is unique in its project) with its finished and
    successful runs counted."""
    runs = models.Run.objects.filter(session=OuterRef("pk"))
    return (
        models.Session.objects.filter(project_id=project, session_id=session_id)
        .annotate(
            finished_runs=_count_of(runs.filter(status__in=FINISHED_STATUSES)),
            successful_runs=_count_of(runs.filter(status="completed")),
        )
        .order_by("pk")[:1]
    )


def get_session(project: models.Project, session_id: str, *, with_counts: bool) -> models.Session:
    """The session (``NotFound`` when the project has none of that id); ``with_counts`` adds its
    finished and successful runs, counted in the same query (the session row keeps all
    and failed ones)."""
    if with_counts:
        # Built and compiled once a process: the two counting subqueries cost more to build
        # than to run.
        found = compiled.rows("session-with-counts", _with_counts, project=project.pk, session_id=session_id)
        session = next(iter(found), None)
    else:
        session = models.Session.objects.filter(project=project, session_id=session_id).first()
    if session is None:
        raise NotFound(f"no session {session_id!r}")
    session.project = project  # found in it: its links need no query
    return session


@dataclass
class _Carried:
    """A run shown on this page or an earlier one, as the next page needs it."""

    number: str | None
    depth: int
    children: int
    parent: int | None


@dataclass
class TimelineCursor:
    """Where a timeline page ends (the last run's start and id, in the order the runs are
    read) and what the next page needs to go on: how many top-level runs came before,
    when the latest of them ended (for an idle gap) and the last runs shown."""

    started_at: datetime | None
    pk: int
    top: int = 0
    previous_end: datetime | None = None
    carried: dict[int, _Carried] = field(default_factory=dict)

    def encode(self) -> str:
        carried = [[pk, c.number, c.depth, c.children, c.parent] for pk, c in self.carried.items()]
        data = [_iso(self.started_at), self.pk, self.top, _iso(self.previous_end), carried]
        return signing.dumps(data, salt=_CURSOR_SALT, compress=True)

    @classmethod
    def decode(cls, token: str) -> TimelineCursor:
        """A signed token, so anything this server did not hand out is refused (a 400)."""
        try:
            started_at, pk, top, previous_end, carried = signing.loads(token, salt=_CURSOR_SALT)
            return cls(
                started_at=_moment(started_at),
                pk=int(pk),
                top=int(top),
                previous_end=_moment(previous_end),
                carried={int(p): _Carried(n, int(d), int(c), parent) for p, n, d, c, parent in carried},
            )
        except (signing.BadSignature, ValueError, TypeError):
            raise BadCursor("not a token this server handed out; start again from the first page") from None


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text is not None else None


def _runs_after(runs: Any, cursor: TimelineCursor | None, limit: int) -> list[models.Run]:
    """Up to ``limit`` + 1 runs after the cursor, by (start, id), each read walking the
    (session, started_at, id) index.

    Runs without a start time come where the database sorts nulls (first on SQLite, last
    on PostgreSQL), as in the index, so a first page is one range of it. A later page is
    one range too, unless it reaches from the timed runs to the untimed ones or the
    other way round: then it reads a second range (one more query)."""
    ordered = runs.order_by("started_at", "id")
    if cursor is None:
        return list(ordered[: limit + 1])
    nulls_last = connection.features.nulls_order_largest
    timed, untimed = ordered.filter(started_at__isnull=False), ordered.filter(started_at__isnull=True)
    if cursor.started_at is None:
        found = list(untimed.filter(id__gt=cursor.pk)[: limit + 1])
        rest = None if nulls_last else timed
    else:
        after = timed.filter(started_at__gte=cursor.started_at).exclude(
            started_at=cursor.started_at, id__lte=cursor.pk
        )
        found = list(after[: limit + 1])
        rest = untimed if nulls_last else None
    if len(found) <= limit and rest is not None:
        found += list(rest[: limit + 1 - len(found)])
    return found


def _nested_lists(runs: list[models.Run], nested: int) -> tuple[dict, dict]:
    """The first ``nested`` member interactions of the page's team runs and steps of its
    workflow runs: one query each, only when the page has such runs."""
    teams = [run.pk for run in runs if run.kind == "team"]
    workflows = [run.pk for run in runs if run.kind == "workflow"]
    interactions = (
        first_of_each_run(models.MemberInteraction.objects.filter(run_id__in=teams), nested) if teams else {}
    )
    steps = (
        first_of_each_run(
            models.Iteration.objects.filter(run_id__in=workflows).only("run_id", "position", "index", "name"),
            nested,
        )
        if workflows
        else {}
    )
    return interactions, steps


class _PageBuilder:
    """Nests and numbers one page of runs, going on from the cursor of the page before."""

    def __init__(self, cursor: TimelineCursor | None, *, idle_gap_ms: int, interactions: dict, steps: dict):
        self.top = cursor.top if cursor else 0
        self.previous_end = cursor.previous_end if cursor else None
        self.carried: dict[int, _Carried] = dict(cursor.carried) if cursor else {}
        self.idle_gap_ms = idle_gap_ms
        self.interactions = interactions
        self.steps = steps
        self.rows: list[TimelineRow] = []
        self.seen: set[int] = set()
        self.children: dict[int, list[models.Run]] = {}
        self.last: int | None = None

    def build(self, runs: list[models.Run]) -> list[TimelineRow]:
        on_page = {run.pk for run in runs}
        continued, roots = [], []
        for run in runs:
            parent = run.parent_pk if run.parent_pk != run.pk else None
            if parent in on_page:
                self.children.setdefault(parent, []).append(run)
            elif parent in self.carried:
                continued.append(run)
            else:
                roots.append(run)
        # Runs whose parents were on the page before come first: they close the subtrees
        # that page left open.
        for run in continued:
            parent = self.carried[run.parent_pk]
            parent.children += 1
            number = f"{parent.number}.{parent.children}" if parent.number else None
            self._add(run, parent.depth + 1, number, parent=run.parent_pk, elsewhere=True)
        for run in roots:
            if run.parent_pk not in (None, run.pk):
                # Its parent is on another page, too far back to be carried, or later
                # (it started before its parent).
                self._add(run, 1, None, parent=run.parent_pk, elsewhere=True)
                continue
            self._add_top_level(run, idle_gaps=True)
        # Runs whose parents form a cycle (A under B, B under A) reach no top-level run:
        # they are listed last, at the top level, rather than lost.
        for run in runs:
            if run.pk not in self.seen:
                self._add_top_level(run, idle_gaps=False)
        return self.rows

    def _add_top_level(self, run: models.Run, *, idle_gaps: bool) -> None:
        if idle_gaps and self.previous_end is not None and run.started_at is not None:
            idle = (run.started_at - self.previous_end).total_seconds() * 1000
            if idle >= self.idle_gap_ms:
                self.rows.append(TimelineRow(idle_ms=int(idle)))
        self.top += 1
        self._add(run, 0, str(self.top), parent=None, elsewhere=False)
        end = run.ended_at or run.started_at
        if idle_gaps and end is not None:
            self.previous_end = max(self.previous_end, end) if self.previous_end else end

    def _add(
        self, run: models.Run, depth: int, number: str | None, *, parent: int | None, elsewhere: bool
    ) -> None:
        if run.pk in self.seen:  # a cycle in parent ids: show each run once
            return
        self.seen.add(run.pk)
        # From its model calls (issue #14); a run without them shows none.
        tokens = (
            {
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
                "total_tokens": run.input_tokens + run.output_tokens,
            }
            if run.model_call_count
            else None
        )
        run_steps, steps_total = self.steps.get(run.pk, (None, 0))
        run_interactions, interactions_total = self.interactions.get(run.pk, (None, 0))
        self.rows.append(
            TimelineRow(
                run=run,
                depth=depth,
                number=number,
                parent_run_id=run.parent_run_id if parent is not None else None,
                parent_elsewhere=elsewhere,
                steps=run_steps,
                steps_total=steps_total,
                interactions=run_interactions,
                interactions_total=interactions_total,
                tokens=tokens,
            )
        )
        kids = self.children.get(run.pk, [])
        self.carried.pop(run.pk, None)
        self.carried[run.pk] = _Carried(number, depth, len(kids), parent)
        self.last = run.pk
        for n, child in enumerate(kids, start=1):
            self._add(child, depth + 1, f"{number}.{n}" if number else None, parent=run.pk, elsewhere=False)

    def cursor(self, last: models.Run) -> TimelineCursor:
        """The next page's cursor: the runs shown last, always with the line of parents of
        the very last one (a team run whose members run on past the page)."""
        chain: list[int] = []
        pk = self.last
        while pk is not None and pk in self.carried and pk not in chain and len(chain) < CARRIED_PARENTS:
            chain.append(pk)
            pk = self.carried[pk].parent
        recent = [pk for pk in reversed(self.carried) if pk not in chain]
        keep = set(chain + recent[: max(0, CARRIED_PARENTS - len(chain))])
        carried = {pk: c for pk, c in self.carried.items() if pk in keep}
        return TimelineCursor(last.started_at, last.pk, self.top, self.previous_end, carried)


def _parent_pk() -> Subquery:
    """The pk of a run's parent when it is a run of the same session (the unique
    (project, run_id) index finds it)."""
    parents = models.Run.objects.filter(
        project_id=OuterRef("project_id"), run_id=OuterRef("parent_run_id"), session_id=OuterRef("session_id")
    )
    return Subquery(parents.values("pk")[:1])


def session_timeline(
    *,
    project: models.Project,
    session_id: str,
    with_counts: bool = True,
    after: str | None = None,
    limit: int = 50,
    idle_gap_ms: int,
    nested: int = 20,
) -> dict[str, Any]:
    """The session (``NotFound`` when the project has none of that id) and one page of its nested
    timeline: ``limit`` runs in the order they started after the ``_next`` cursor
    ``after``. One query for the session (with its counts), one for the runs (two when
    the page reaches from timed to untimed runs), plus one for member interactions when
    the page has team runs and one for steps when it has workflow runs. Each run carries at most ``nested``
    interactions or steps, with their total (the run page and its JSON export hold the
    rest).

    Member runs sit under the team run that spawned them and a workflow's step runs under
    the workflow run (by ``parent_run_id``; a child whose parent is not in the session is
    shown at the top). Team runs carry their member interactions, workflow runs their
    steps (iterations). Between two top-level runs, a pause longer than ``idle_gap_ms`` is
    a row of its own. Numbers, nesting and idle gaps go on across pages: the cursor
    carries the count of top-level runs, the latest end and the last runs shown (see
    ``TimelineCursor``). The counts (``with_counts``, else None) follow the
    seeds' ``WorkflowSession``: all runs, completed (finished: completed, failed or
    cancelled), successful, failed, and like the tokens and cost they are the whole
    session's.
    """
    session = get_session(project, session_id, with_counts=with_counts)
    cursor = TimelineCursor.decode(after) if after else None
    runs = (
        models.Run.objects.filter(session=session)
        .defer("output_html", "metadata")
        .annotate(parent_pk=_parent_pk())
    )
    found = _runs_after(runs, cursor, limit)
    page = found[:limit]
    interactions, steps = _nested_lists(page, nested)
    builder = _PageBuilder(cursor, idle_gap_ms=idle_gap_ms, interactions=interactions, steps=steps)
    rows = builder.build(page)
    tokens = {
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "total_tokens": session.input_tokens + session.output_tokens,
    }
    counts = None
    if with_counts:
        counts = {
            "all": session.run_count,
            "completed": session.finished_runs,
            "successful": session.successful_runs,
            "failed": session.failed_count,
        }
    return {
        "session": session,
        "rows": rows,
        # Each shown run's latest annotations, by run key (one query for the page).
        "notes": annotations.of_runs([row.run for row in rows if row.run is not None]),
        "next_cursor": builder.cursor(page[-1]).encode() if len(found) > limit else None,
        "counts": counts,
        "tokens": {k: v for k, v in tokens.items() if v},
        "cost": session.cost,
    }


def row_summary(row: TimelineRow) -> dict[str, Any]:
    """A timeline row in the JSON twin: an idle gap, or a run with its place in the tree
    and the first of its member interactions or steps."""
    if row.idle_ms is not None:
        return {"type": "idle", "idle_ms": row.idle_ms}
    return {
        "type": "run",
        "number": row.number,
        "depth": row.depth,
        "parent_run_id": row.parent_run_id,
        "parent_on_this_page": row.parent_run_id is not None and not row.parent_elsewhere,
        "run": listing.run_summary(row.run),
        "tokens": row.tokens,
        "member_interactions": [
            {
                "position": mi.position,
                "member": mi.member,
                "member_run_id": mi.member_run_id,
                "task": mi.task,
                "response": mi.response,
            }
            for mi in row.interactions or []
        ],
        "member_interactions_total": row.interactions_total,
        "steps": [
            {"position": step.position, "index": step.index, "name": step.name} for step in row.steps or []
        ],
        "steps_total": row.steps_total,
    }
