"""A run page in slices: the first iterations of a run, the first tool calls of each and
the first injected contexts, the rest a slice at a time, so a page stays the same size
whatever the run holds.

Each slice is one query per table, whatever the run's size (contexts: one more, their
count). Positions are the ones ingest gave (0, 1, 2… in each run and each iteration), so a
slice is a range of positions read through the (run, position) and (iteration, position)
order.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count, F, Q, QuerySet, Window
from django.db.models.fields.json import KT
from django.db.models.functions import Length, RowNumber, Substr

from history_app import models
from history_app.agent_history.records import DELEGATION_TOOLS, is_delegation
from history_app.reading import compiled
from history_app.reading.paging import NotFound
from history_app.reading.rendering import plain_text, render, render_markdown

logger = logging.getLogger(__name__)

MAX_START = 2**31 - 1


@dataclass
class CallSlice:
    iteration: models.Iteration
    calls: list[models.ToolCall]
    more_from: int | None  # position of the first call not shown, if any


@dataclass
class StepContexts:
    """The contexts sent at one step (an iteration's name): the first few, and how many."""

    contexts: list[models.InjectedContext]
    total: int

    @property
    def hidden(self) -> int:
        return self.total - len(self.contexts)


@dataclass
class IterationSlice:
    parts: list[CallSlice]
    more_from: int | None  # position of the first iteration not shown, if any
    # Iteration name -> the contexts sent at that step (only names in this slice).
    step_contexts: dict[str, StepContexts] = field(default_factory=dict)
    # Iteration key -> its model calls (without their messages), the first few of each.
    model_calls: dict[int, list[models.ModelCall]] = field(default_factory=dict)


@dataclass
class ModelCallSlice:
    calls: list[models.ModelCall]  # without their messages, output and metadata
    more_from: int | None
    total: int


@dataclass
class ContextSlice:
    contexts: list[models.InjectedContext]  # without their text: ``text_length`` instead
    more_from: int | None  # position of the first context not shown, if any
    total: int  # the run's injected contexts


@dataclass
class ChildRuns:
    """The runs a run started, as its page lists them: the first few and how many there
    are (counted up to ``CHILD_RUNS_COUNTED``; ``counted_all`` is False past it)."""

    runs: list[models.Run]
    total: int
    counted_all: bool = True

    @property
    def more(self) -> int:
        return self.total - len(self.runs)


# How many of the runs a run started its page lists (the session timeline has them all).
CHILD_RUNS_SHOWN = 50
# Past this many child runs the page says "10,000 or more" rather than count them all.
CHILD_RUNS_COUNTED = 10_000
# The characters of a child run's input its row shows (the rest is on its own page).
CHILD_INPUT_CHARS = 200  # more than the row shows, so a cut input always ends in "…"
_CHILD_FIELDS = (
    "run_id",
    "parent_run_id",
    "kind",
    "status",
    "agent_name",
    "framework",
    "started_at",
    "ended_at",
    "duration_ms",
    "iteration_count",
    "tool_call_count",
    "tool_error_count",
    "model_call_count",
    "input_tokens",
    "output_tokens",
    "cost",
    "unpriced_calls",
)


def child_runs(run: models.Run) -> ChildRuns:
    """The runs ``run`` started (a team's members, an OpenAI Agents SDK handoff's target, a
    workflow's step runs, a LangGraph subgraph, a smolagents managed agent): those of its
    session whose ``parent_run_id`` is its id, in the order they started (untimed ones
    last, on either database), the first ``CHILD_RUNS_SHOWN`` of them with
    only the head of their input. One query, and one more (a capped count) only when
    there are more than that. A run naming itself as its parent is not its own child."""
    limit = CHILD_RUNS_SHOWN
    found = list(
        compiled.rows(
            "child-runs",
            _child_runs,
            project=run.project_id,
            session=run.session_id,
            parent=run.run_id,
            pk=run.pk,
        )
    )
    if len(found) <= limit:
        return ChildRuns(found, len(found))
    children = models.Run.objects.filter(
        project_id=run.project_id, session_id=run.session_id, parent_run_id=run.run_id
    ).exclude(pk=run.pk)
    total = children.order_by()[:CHILD_RUNS_COUNTED].count()
    return ChildRuns(found[:limit], total, counted_all=total < CHILD_RUNS_COUNTED)


def _child_runs(*, project: int, session: int, parent: str, pk: int) -> QuerySet:
    """The first child runs of run ``pk`` (``parent`` its id), as its page lists them."""
    return (
        models.Run.objects.filter(project_id=project, session_id=session, parent_run_id=parent)
        .exclude(pk=pk)
        .only(*_CHILD_FIELDS)
        .annotate(input_head=Substr("input", 1, CHILD_INPUT_CHARS), input_length=Length("input"))
        .order_by(F("started_at").asc(nulls_last=True), "id")[: CHILD_RUNS_SHOWN + 1]
    )


def child_summary(child: models.Run) -> dict[str, Any]:
    """A child run as the run's JSON twin lists it: what its row on the page shows."""
    return {
        "run_id": child.run_id,
        "kind": child.kind,
        "status": child.status,
        "agent_name": child.agent_name,
        "framework": child.framework,
        "started_at": child.started_at.isoformat() if child.started_at else None,
        "ended_at": child.ended_at.isoformat() if child.ended_at else None,
        "duration_ms": child.duration_ms,
        "iteration_count": child.iteration_count,
        "tool_call_count": child.tool_call_count,
        "model_call_count": child.model_call_count,
        "input_tokens": child.input_tokens,
        "output_tokens": child.output_tokens,
        "cost": child.cost,
        "input": child.input_head,
        "input_truncated": child.input_length > len(child.input_head),
    }


def get_run(project: models.Project, run_id: str) -> models.Run:
    """The run with its session; ``NotFound`` when the project has none of that id. Its
    project is the one it was found in, so its links need no query."""
    try:
        run = models.Run.objects.select_related("session").get(project=project, run_id=run_id)
    except models.Run.DoesNotExist:
        raise NotFound(f"no run {run_id!r}") from None
    run.project = project
    return run


def answer_html(run: models.Run) -> str:
    """The run's answer as sanitised HTML: rendered (within the renderer's bounds) the
    first time the run is shown, then kept, so ingestion never pays for Markdown."""
    if run.output_html is None:
        run.output_html = render_markdown(run.output)
        try:
            models.Run.objects.filter(pk=run.pk, output_html__isnull=True).update(output_html=run.output_html)
        except DatabaseError:  # a busy database only costs the next view a render
            logger.warning("the answer of run %s was rendered but not kept", run.run_id)
    return run.output_html


def answer_html_within(run: models.Run, budget_ms: int) -> tuple[str, bool]:
    """The run's answer as HTML for a caller rendering many (an export), which has
    ``budget_ms`` left, and whether the HTML is new and to be kept (``keep_answers``).

    The HTML kept is used whatever the time. Below the renderer's own budget, an answer
    it cuts short is shown as plain text and not kept, so that the run's page later
    renders it whole."""
    if run.output_html is not None:
        return run.output_html, False
    if not run.output:
        return "", False
    if budget_ms <= 0:
        return plain_text(run.output, "the time this export may spend rendering answers is spent").html, False
    if budget_ms >= settings.HISTORY_MARKDOWN_BUDGET_MS:
        run.output_html = render_markdown(run.output)
        return run.output_html, True
    rendering = render(run.output, budget_ms=budget_ms)
    if rendering.fallback:
        return rendering.html, False
    run.output_html = rendering.html
    return run.output_html, True


def keep_answers(runs: list[models.Run]) -> None:
    """Keep the answers ``answer_html_within`` rendered (one query a hundred runs)."""
    try:
        models.Run.objects.bulk_update(runs, ["output_html"], batch_size=100)
    except DatabaseError:  # a busy database only costs the next view a render
        logger.warning("%s rendered answers were not kept", len(runs))


def get_context_text(project: models.Project, run_id: str, number: int) -> models.InjectedContext:
    """The run's ``number``-th injected context (from 1) with its text and, of its run and
    session, what the page's links need (one query); ``NotFound`` when there is none."""
    found = (
        models.InjectedContext.objects.select_related("run__session")
        .only(
            "position",
            "kind",
            "target",
            "step",
            "text",
            "reported",
            "run__run_id",
            "run__project_id",
            "run__agent_name",
            "run__session__session_id",
            "run__session__project_id",
        )
        .filter(run__project=project, run__run_id=run_id, position=number - 1)
        .first()
        if 1 <= number <= MAX_START
        else None
    )
    if found is None:
        raise NotFound(f"run {run_id!r} has no injected context {number}")
    found.run.project = project
    return found


def get_iteration(project: models.Project, run_id: str, position: int) -> models.Iteration:
    try:
        return models.Iteration.objects.select_related("run__session").get(
            run__project=project, run__run_id=run_id, position=position
        )
    except models.Iteration.DoesNotExist:
        raise NotFound(f"run {run_id!r} has no iteration at {position}") from None


def _split(rows: list, limit: int) -> tuple[list, int | None]:
    """The first ``limit`` rows, and the position of the next one when there is one."""
    return (rows[:limit], rows[limit].position) if len(rows) > limit else (rows, None)


def iteration_slice(*, run: models.Run, start: int = 0) -> IterationSlice:
    """Iterations from position ``start``, each with its first tool calls (two queries)."""
    limit, call_limit = settings.HISTORY_RUN_PAGE_ITERATIONS, settings.HISTORY_RUN_PAGE_TOOL_CALLS
    rows = models.Iteration.objects.filter(run=run, position__gte=start).order_by("position")
    iterations, more_from = _split(list(rows[: limit + 1]), limit)
    calls: dict[int, list[models.ToolCall]] = {}
    # One more call than shown per iteration says whether a "show more" link is due.
    first_calls = models.ToolCall.objects.filter(iteration__in=iterations, position__lte=call_limit)
    for call in first_calls.order_by("iteration_id", "position"):
        calls.setdefault(call.iteration_id, []).append(call)
    parts = [CallSlice(it, *_split(calls.get(it.pk, []), call_limit)) for it in iterations]
    link_delegations(run, [call for part in parts for call in part.calls])
    names = {it.name for it in iterations if it.name}
    model_calls: dict[int, list[models.ModelCall]] = {}
    if run.model_call_count:
        rows = _listed_calls(models.ModelCall.objects.filter(iteration__in=iterations))
        for call in rows.order_by("position")[: call_limit * len(iterations)]:
            model_calls.setdefault(call.iteration_id, []).append(call)
    return IterationSlice(parts, more_from, _step_contexts(run, names), model_calls)


def _listed_calls(queryset: QuerySet) -> QuerySet:
    """Model calls as lists show them: not their messages, answer or metadata (only
    whether the call holds a run's totals, and whether its times were placed)."""
    return queryset.defer("messages_json", "answer_json", "output", "metadata").annotate(
        is_total=KT("metadata__aggregate"), time_estimated=KT("metadata__time_estimated")
    )


def model_call_slice(*, run: models.Run, start: int = 0) -> ModelCallSlice:
    """The run's model calls from position ``start`` (one query; none when it has none)."""
    if not run.model_call_count:
        return ModelCallSlice([], None, 0)
    limit = settings.HISTORY_RUN_PAGE_MODEL_CALLS
    rows = _listed_calls(models.ModelCall.objects.filter(run=run, position__gte=start))
    rows = rows.select_related("iteration").defer("iteration__thought", "iteration__metadata")
    rows = rows.order_by("position")
    calls, more_from = _split(list(rows[: limit + 1]), limit)
    return ModelCallSlice(calls, more_from, run.model_call_count)


def get_model_call(run: models.Run, number: int) -> models.ModelCall:
    """The run's ``number``-th model call (counted from 1), with its iteration."""
    call = (
        models.ModelCall.objects.select_related("iteration").filter(run=run, position=number - 1).first()
        if 1 <= number <= MAX_START
        else None
    )
    if call is None:
        raise NotFound(f"run {run.run_id!r} has no model call {number}")
    return call


def _step_contexts(run: models.Run, names: set[str]) -> dict[str, StepContexts]:
    """The first contexts sent at each of these steps, with each step's total (one query,
    none without names): a step may have been sent thousands."""
    if not names:
        return {}
    limit = settings.HISTORY_RUN_PAGE_CONTEXTS
    rows = (
        models.InjectedContext.objects.filter(run=run, step__in=names)
        .only("run_id", "position", "step", "kind", "reported")
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("step")], order_by=[F("position").asc()]),
            step_total=Window(Count("id"), partition_by=[F("step")]),
        )
        .filter(rank__lte=limit)
        .order_by("step", "rank")
    )
    steps: dict[str, StepContexts] = {}
    for context in rows:
        steps.setdefault(context.step, StepContexts([], context.step_total)).contexts.append(context)
    return steps


def _listed(queryset: QuerySet) -> QuerySet:
    """Contexts as the run page lists them: the text's length, not the text (up to
    ``HISTORY_MAX_FIELD_CHARS`` each), and of their settings only how sure the block's
    boundary is."""
    return queryset.defer("text", "settings").annotate(
        text_length=Length("text"), boundary=KT("settings__boundary")
    )


def context_slice(*, run: models.Run, start: int = 0) -> ContextSlice:
    """The run's injected contexts from position ``start``, and how many it has (two
    queries; one when it has none)."""
    limit = settings.HISTORY_RUN_PAGE_CONTEXTS
    contexts = models.InjectedContext.objects.filter(run=run)
    total = contexts.count()
    if not total:
        return ContextSlice([], None, 0)
    rows = _listed(contexts.filter(position__gte=start)).order_by("position")
    return ContextSlice(*_split(list(rows[: limit + 1]), limit), total)


def call_slice(*, iteration: models.Iteration, start: int) -> CallSlice:
    """An iteration's tool calls from position ``start`` (one query)."""
    limit = settings.HISTORY_RUN_PAGE_TOOL_CALLS
    rows = models.ToolCall.objects.filter(iteration=iteration, position__gte=start).order_by("position")
    part = CallSlice(iteration, *_split(list(rows[: limit + 1]), limit))
    link_delegations(iteration.run, part.calls, skip=_delegations_before(iteration, start))
    return part


def cost_sources(run: models.Run) -> list[dict[str, str]]:
    """Where the run's costs came from: each (provider, reported or estimated, price list)
    once, at most five (one query; none without a cost)."""
    if run.cost is None:
        return []
    rows = (
        models.ModelCall.objects.filter(run=run, cost__isnull=False)
        .order_by()
        .values("provider", "cost_source", "price_source")
        .distinct()
    )
    return list(rows[:5])


# A run page links at most this many of a team run's member interactions to its calls.
MAX_DELEGATIONS = 500


def _is_delegation(call: models.ToolCall) -> bool:
    """``records.is_delegation`` of a stored call. Its parameters are parsed only when their
    text names the key: the page shows up to 400 calls, and their parameters are parsed
    once already, to be drawn."""
    if call.tool in DELEGATION_TOOLS:
        return True
    return '"member_id"' in call.params_json and is_delegation(call.tool, call.params)


def _delegations_before(iteration: models.Iteration, start: int) -> int:
    """How many delegation calls come before tool call ``start`` of ``iteration`` (in
    earlier iterations or earlier in this one): where a "show more" slice picks up the
    order-wise matching. Counted in Python over at most ``MAX_DELEGATIONS`` calls; no
    query when the run is no team's."""
    if not models.MemberInteraction.objects.filter(run_id=iteration.run_id).exists():
        return 0
    earlier = models.ToolCall.objects.filter(iteration__run_id=iteration.run_id).filter(
        Q(iteration__position__lt=iteration.position) | Q(iteration=iteration, position__lt=start)
    )
    rows = earlier.only("tool", "params_json").order_by("iteration__position", "position")[:MAX_DELEGATIONS]
    return sum(1 for call in rows if _is_delegation(call))


def link_delegations(run: models.Run, calls: list[models.ToolCall], skip: int = 0) -> None:
    """Give each delegation call among ``calls`` the member run it started
    (``call.member_run``: the interaction, with the member's name and run id), from the
    run's member interactions: first each call whose task is an interaction's task takes
    that interaction; then the others take the interactions left, in order (``skip``
    delegations came before these calls, on earlier slices). A call is linked only when
    its interaction's run is stored in the project: an interaction whose run is not
    stored still takes its place in the order. Two queries when any call delegates, none
    otherwise (one for a team's calls when none names a member)."""
    delegations = [call for call in calls if _is_delegation(call)]
    # A team whose members are tools of their own name (a smolagents manager calls its
    # managed agent ``weather_agent(task=...)``): its calls of a member's name delegate.
    by_member = not delegations and bool(calls) and run.kind == "team"
    if not delegations and not by_member:
        return
    interactions = list(
        models.MemberInteraction.objects.filter(run=run)
        .only("position", "member", "task", "member_run_id")
        .order_by("position")[:MAX_DELEGATIONS]
    )
    if by_member:
        members = {i.member for i in interactions}
        delegations = [call for call in calls if call.tool in members]
        if not delegations:
            return
    ids = [i.member_run_id for i in interactions if i.member_run_id]
    stored = set(
        models.Run.objects.filter(project_id=run.project_id, run_id__in=ids).values_list("run_id", flat=True)
    )
    matched: dict[int, models.MemberInteraction] = {}
    taken: set[int] = set()
    for call in delegations:
        params = call.params if isinstance(call.params, dict) else {}
        task = params.get("task")
        found = next((i for i in interactions if task and i.task == task and i.pk not in taken), None)
        if found is not None:
            matched[call.pk] = found
            taken.add(found.pk)
    rest = [i for i in interactions if i.pk not in taken][skip:]
    for call in delegations:
        if call.pk not in matched and rest:
            matched[call.pk] = rest.pop(0)
    for call in delegations:
        found = matched.get(call.pk)
        if found is not None and found.member_run_id in stored:
            call.member_run = found


def neighbours(run: models.Run) -> tuple[models.Run | None, models.Run | None]:
    """The runs before and after ``run`` in its session, in the session timeline's order:
    by start time, then key; runs with no start time by key, before the timed ones on
    SQLite and after them on PostgreSQL, as each database sorts a missing value. One
    query, of the rows three subqueries name, each an index range read
    (``run_session_order_idx``) that stops at its first row: the neighbour on each side
    within the run's own group (timed or not), and the nearest run of the other group,
    which is a neighbour when the run is at its group's edge.

    The query is written out (``_neighbour_sql``) rather than built by the ORM: building
    its three subqueries cost more CPU than anything else a run page reads (about a fifth
    of the page), for SQL that is the same on every page but for its parameters."""
    untimed_first = not connection.features.nulls_order_largest  # SQLite: NULL sorts first
    sql = _neighbour_sql(connection.vendor, timed=run.started_at is not None, untimed_first=untimed_first)
    if run.started_at is None:
        params = [run.session_id, run.pk, run.session_id, run.pk, run.session_id]
    else:
        at = connection.ops.adapt_datetimefield_value(run.started_at)
        params = [run.session_id, at, at, run.pk, run.session_id, at, at, run.pk, run.session_id]
    found = list(models.Run.objects.raw(sql, params))

    def place(row: models.Run) -> tuple:
        """Where a run comes in the session's order."""
        if row.started_at is None:
            return (0 if untimed_first else 2, row.pk)
        return (1, row.started_at, row.pk)

    here = place(run)
    earlier = [row for row in found if place(row) < here]
    later = [row for row in found if place(row) > here]
    return max(earlier, key=place, default=None), min(later, key=place, default=None)


@functools.cache
def _neighbour_sql(vendor: str, *, timed: bool, untimed_first: bool) -> str:
    """The neighbours' query for a run with a start time (``timed``) or without, on a
    database that sorts a missing start time first (``untimed_first``) or last. The
    nearest run of the other group is read always, so the query does not depend on the
    data."""
    meta = models.Run._meta
    column = {name: connection.ops.quote_name(meta.get_field(name).column) for name in _NEIGHBOUR_FIELDS}
    pk, session, started = (column[name] for name in ("id", "session", "started_at"))
    table = connection.ops.quote_name(meta.db_table)
    in_session = f"SELECT {pk} FROM {table} WHERE {session} = %s"
    if timed:
        nearest = [
            # The index range; the parenthesis breaks the tie of equal start times.
            f"{in_session} AND {started} IS NOT NULL AND {started} <= %s AND ({started} < %s OR {pk} < %s)"
            f" ORDER BY {started} DESC, {pk} DESC LIMIT 1",
            f"{in_session} AND {started} IS NOT NULL AND {started} >= %s AND ({started} > %s OR {pk} > %s)"
            f" ORDER BY {started} ASC, {pk} ASC LIMIT 1",
            # The nearest untimed run: before the first timed run on SQLite, after the last
            # on PostgreSQL.
            f"{in_session} AND {started} IS NULL ORDER BY {pk} {'DESC' if untimed_first else 'ASC'} LIMIT 1",
        ]
    else:
        order = "ASC" if untimed_first else "DESC"
        nearest = [
            f"{in_session} AND {started} IS NULL AND {pk} < %s ORDER BY {pk} DESC LIMIT 1",
            f"{in_session} AND {started} IS NULL AND {pk} > %s ORDER BY {pk} ASC LIMIT 1",
            # The nearest timed run: after the last untimed one on SQLite, before the first
            # on PostgreSQL.
            f"{in_session} AND {started} IS NOT NULL ORDER BY {started} {order}, {pk} {order} LIMIT 1",
        ]
    selected = ", ".join(column[name] for name in _NEIGHBOUR_FIELDS if name != "session")
    return f"SELECT {selected} FROM {table} WHERE " + " OR ".join(f"{pk} = ({sql})" for sql in nearest)


# What the previous/next links show of a run (and what its query needs).
_NEIGHBOUR_FIELDS = ("id", "session", "run_id", "agent_name", "status", "started_at", "project")
