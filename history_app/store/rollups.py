"""Counts kept at ingestion so that pages never walk every run or tool call (issue #13):

- ``SessionFacet``: the tools, statuses and agents of each session's runs, and whether any
  failed or had a tool error (the sessions list's filters);
- ``DailyStat``: runs, failed runs, tool calls and failed calls per day and tool (the stats
  page);
- ``DailyUsage``: model calls, tokens and cost per day, model and agent; ``DailyLatency``:
  how many runs and model calls took how long, per day, in buckets (issue #14);
- ``DailyScore``: scores per day, agent, name and category (issue #18), kept as
  annotations are written, deleted, redacted or pruned with their runs.

Ingestion adds what it writes; a run rewritten takes off what it held first; pruning takes
off what it deletes. Every change is an upsert of sums, rows in a fixed order (two writers
on PostgreSQL then lock them in the same order), inside the writer's transaction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from history_app import models


class Deltas(dict):
    """(day, tool) -> [runs, failed, calls, errors], with, beside it, ``usage``: (day,
    model, agent) -> [calls, input tokens, output tokens, cost, unpriced calls], and
    ``latency``: (day, "run" or "model", bucket) -> count."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.usage: dict[tuple[date, str, str], list[float]] = defaultdict(_usage_row)
        self.latency: dict[tuple[date, str, int], int] = defaultdict(int)


def _usage_row() -> list[float]:
    # A module-level function, not a lambda: deltas cross processes (the pages benchmark).
    return [0, 0, 0, 0.0, 0]


# Latency buckets: each an eighth of an octave wide (about 9 %), so a percentile read from
# them is within 4.5 % of the exact one.
_RATIO = 2 ** (1 / 8)


def latency_bucket(ms: int) -> int:
    """The bucket of a duration in milliseconds: 0 for none, else 1 + log base 2^(1/8)."""
    return 0 if ms <= 0 else 1 + math.floor(math.log(ms) / math.log(_RATIO) + 1e-9)


def bucket_value(bucket: int) -> int:
    """A bucket's duration: the geometric middle of what it holds."""
    return 0 if bucket <= 0 else round(_RATIO ** (bucket - 1 + 0.5))


def bucket_percentile(counts: dict[int, int], fraction: float) -> int | None:
    """The duration at ``fraction`` of what ``counts`` (bucket -> count) holds."""
    total = sum(counts.values())
    if not total:
        return None
    rank = min(total - 1, max(0, round(fraction * (total - 1))))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen > rank:
            return bucket_value(bucket)
    return None


def _add_usage(deltas: Deltas, day: date, agent: str, calls: Iterable[Any], sign: int) -> None:
    """Model calls' usage (each with model, input_tokens, output_tokens, cost, duration_ms)."""
    for call in calls:
        row = deltas.usage[day, (call.model or "")[:255], agent[:255]]
        row[0] += sign
        row[1] += sign * (call.input_tokens or 0)
        row[2] += sign * (call.output_tokens or 0)
        row[3] += sign * (call.cost or 0.0)
        row[4] += sign * (
            call.cost is None and (call.input_tokens is not None or call.output_tokens is not None)
        )
        if call.duration_ms is not None:
            deltas.latency[day, "model", latency_bucket(call.duration_ms)] += sign


def day_of(when: datetime) -> date:
    """The day a run is counted on: its time in the server's ``TIME_ZONE``."""
    return timezone.localtime(when).date() if timezone.is_aware(when) else when.date()


def contributions(runs: Iterable[tuple[datetime, str, Iterable[tuple[str, bool]]]], sign: int = 1) -> Deltas:
    """What runs add to the daily counts: each given as (when, status, [(tool, failed)]).
    A call failed when its error is not empty (as ``Run.tool_error_count`` counts it):
    records and stored rows must say the same, or a rewrite takes off what was never added."""
    deltas = Deltas()
    for when, status, calls in runs:
        day = day_of(when)
        row = deltas.setdefault((day, ""), [0, 0, 0, 0])
        row[0] += sign
        row[1] += sign * (status == "failed")
        for tool, failed in calls:
            row = deltas.setdefault((day, tool), [0, 0, 0, 0])
            row[2] += sign
            row[3] += sign * bool(failed)
    return deltas


def record_contributions(records: Iterable[Any], received_at: datetime, sign: int = 1) -> Deltas:
    """``contributions`` of canonical records (times already aware), with their usage."""
    records = list(records)
    deltas = contributions(
        (
            (
                run.started_at or received_at,
                run.status,
                [(c.tool[:255], bool(c.error)) for it in run.iterations for c in it.tool_calls],
            )
            for run in records
        ),
        sign,
    )
    for run in records:
        day = day_of(run.started_at or received_at)
        _add_usage(deltas, day, run.agent_name or run.team_id or run.workflow_id, run.all_model_calls(), sign)
        if run.duration_ms is not None:
            deltas.latency[day, "run", latency_bucket(run.duration_ms)] += sign
    return deltas


def stored_contributions(run_pks: list[int], sign: int = -1) -> Deltas:
    """``contributions`` of stored runs (by primary key), read in two grouped queries."""
    if not run_pks:
        return {}
    calls: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    for run_id, tool, failed in models.ToolCall.objects.filter(run_id__in=run_pks).values_list(
        "run_id", "tool", "error"
    ):
        calls[run_id].append((tool, bool(failed)))
    rows = list(
        models.Run.objects.filter(pk__in=run_pks).values_list(
            "pk", "started_at", "received_at", "status", "agent_name", "duration_ms"
        )
    )
    deltas = contributions(
        ((started or received, status, calls[pk]) for pk, started, received, status, _, _ in rows), sign
    )
    model_calls: dict[int, list[Any]] = defaultdict(list)
    for call in models.ModelCall.objects.filter(run_id__in=run_pks).only(
        "run_id", "model", "input_tokens", "output_tokens", "cost", "duration_ms"
    ):
        model_calls[call.run_id].append(call)
    for pk, started, received, _, agent, duration in rows:
        day = day_of(started or received)
        _add_usage(deltas, day, agent, model_calls[pk], sign)
        if duration is not None:
            deltas.latency[day, "run", latency_bucket(duration)] += sign
    return deltas


def merge(*all_deltas: Deltas) -> Deltas:
    total = Deltas()
    for deltas in all_deltas:
        for key, values in deltas.items():
            row = total.setdefault(key, [0, 0, 0, 0])
            for n, value in enumerate(values):
                row[n] += value
        for key, values in getattr(deltas, "usage", {}).items():
            row = total.usage[key]
            for n, value in enumerate(values):
                row[n] += value
        for key, count in getattr(deltas, "latency", {}).items():
            total.latency[key] += count
    return total


def apply(deltas: Deltas, project_id: int | None) -> None:
    """Add ``deltas`` to the project's ``DailyStat``, ``DailyUsage`` and ``DailyLatency``
    rows (one upsert per row, in key order). ``None`` is for migrations 0009 and 0011,
    which run on these tables as they were before projects (no project column)."""
    _upsert(
        models.DailyStat, project_id, ("day", "tool"), ("runs", "failed", "calls", "errors"), deltas.items()
    )
    _upsert(
        models.DailyUsage,
        project_id,
        ("day", "model", "agent"),
        ("calls", "input_tokens", "output_tokens", "cost", "unpriced"),
        getattr(deltas, "usage", {}).items(),
        # A float sum taken back down may keep a residue: a row is empty when its counts are.
        counts=("calls", "input_tokens", "output_tokens", "unpriced"),
    )
    _upsert(
        models.DailyLatency,
        project_id,
        ("day", "kind", "bucket"),
        ("count",),
        ((key, [count]) for key, count in getattr(deltas, "latency", {}).items()),
    )


def take_off_stored(run_pks: list[int]) -> None:
    """Take stored runs (of any projects), and the scores given to them, off their
    projects' daily counts (the runs are being deleted)."""
    by_project: dict[int, list[int]] = defaultdict(list)
    for pk, project_id in models.Run.objects.filter(pk__in=run_pks).values_list("pk", "project_id"):
        by_project[project_id].append(pk)
    for project_id, pks in sorted(by_project.items()):
        apply(stored_contributions(pks), project_id)
    count_scores(models.Annotation.objects.filter(run_id__in=run_pks), -1)


def count_scores(annotations: Iterable[Any], sign: int) -> None:
    """Add (``sign`` 1) or take off (-1) annotations' scores in their projects'
    ``DailyScore`` rows, at the day and agent each one noted when it was written. Given
    a queryset, only the scores are read."""
    if hasattr(annotations, "filter"):
        annotations = annotations.filter(kind=models.Annotation.SCORE).only(
            "project_id", "kind", "day", "agent", "name", "text", "value"
        )
    by_project: dict[int, dict[tuple[Any, ...], list[float]]] = defaultdict(lambda: defaultdict(_score_row))
    for a in annotations:
        if a.kind != models.Annotation.SCORE or a.day is None:
            continue
        row = by_project[a.project_id][a.day, a.agent, a.name, "" if a.value is not None else a.text[:64]]
        row[0] += sign
        row[1] += sign * (a.value or 0.0)
    for project_id, rows in sorted(by_project.items()):
        _upsert(
            models.DailyScore,
            project_id,
            ("day", "agent", "name", "category"),
            ("count", "total"),
            rows.items(),
            counts=("count",),
        )


def _score_row() -> list[float]:
    return [0, 0.0]


def _upsert(
    model: Any,
    project_id: int | None,
    keys: tuple[str, ...],
    columns: tuple[str, ...],
    items: Iterable[tuple[tuple[Any, ...], list[Any]]],
    *,
    counts: tuple[str, ...] | None = None,
) -> None:
    """Add each (key, values) to ``model``'s row of the project and that key (the key's
    first part a day), in key order. A row brought down to nothing goes: it would keep a name no run has any
    more (a tool or agent name redact_history has since redacted, a pruned model)."""
    rows = [(key, values) for key, values in sorted(items) if any(values)]
    if not rows:
        return
    table = model._meta.db_table
    scope = () if project_id is None else (project_id,)
    keys = ("project_id", *keys) if scope else keys
    adapt = connection.ops.adapt_datefield_value
    sums = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns)
    marks = ", ".join(["%s"] * (len(keys) + len(columns)))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({', '.join(keys + columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sums}",
            [(*scope, adapt(key[0]), *key[1:], *values) for key, values in rows],
        )
        taken = [(*scope, adapt(key[0]), *key[1:]) for key, values in rows if min(values) < 0]
        if taken:
            empty = " AND ".join(f"{c} = 0" for c in counts or columns)
            cursor.executemany(
                f"DELETE FROM {table} WHERE {' AND '.join(f'{k} = %s' for k in keys)} AND {empty}", taken
            )


def facets_of(run: Any) -> set[tuple[str, str]]:
    """The facets a canonical record gives its session."""
    found = {(models.SessionFacet.STATUS, run.status)}
    for name in (run.agent_name, run.team_id, run.workflow_id):
        if name:
            found.add((models.SessionFacet.AGENT, name[:255]))
    errors = run.status == "failed"
    for iteration in run.iterations:
        for call in iteration.tool_calls:
            found.add((models.SessionFacet.TOOL, call.tool[:255]))
            errors = errors or bool(call.error)
    if errors:
        found.add((models.SessionFacet.ERRORS, "1"))
    return found


def add_facets(triples: Iterable[tuple[int, str, str]]) -> None:
    """Note that sessions have these (session key, facet, value) (noted ones are kept)."""
    triples = sorted(set(triples))
    if not triples:
        return
    table = models.SessionFacet._meta.db_table
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (session_id, facet, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (session_id, facet, value) DO NOTHING",
            triples,
        )


# The facets of stored runs, in SQL (the refresh below, and migration 0010).
FACETS_SQL = [
    "SELECT DISTINCT r.session_id, 'status', r.status FROM history_app_run r WHERE {where}",
    "SELECT names.session_id, 'agent', names.name FROM ("
    "SELECT r.session_id, r.agent_name AS name FROM history_app_run r WHERE {where} "
    "UNION SELECT r.session_id, r.team_id FROM history_app_run r WHERE {where} "
    "UNION SELECT r.session_id, r.workflow_id FROM history_app_run r WHERE {where}"
    ") names WHERE names.name <> ''",
    "SELECT DISTINCT r.session_id, 'errors', '1' FROM history_app_run r WHERE {where} "
    "AND (r.status = 'failed' OR r.tool_error_count > 0)",
    "SELECT DISTINCT r.session_id, 'tool', t.tool FROM history_app_toolcall t "
    "JOIN history_app_run r ON r.id = t.run_id WHERE {where}",
]


# The annotations' facets: "name:<name>" for a score or a label of that name, "comment"
# for any comment: one value a name, so the ``annotated`` filter probes one index entry a
# session (not in FACETS_SQL, which migration 0009 runs before the annotations' table
# exists).
ANNOTATION_FACETS_SQL = (
    "SELECT DISTINCT r.session_id, 'annotation', "
    "CASE WHEN a.kind = 'comment' THEN 'comment' ELSE 'name:' || a.name END "
    "FROM history_app_annotation a JOIN history_app_run r ON r.id = a.run_id WHERE {where}"
)


def annotation_facet(kind: str, name: str) -> str:
    """The facet value an annotation gives its session (``ANNOTATION_FACETS_SQL``)."""
    return "comment" if kind == "comment" else f"name:{name}"[:255]


def annotation_facets(annotations: Iterable[Any], session_pk: int) -> list[tuple[int, str, str]]:
    """The facets new annotations give their run's session."""
    return [
        (
            session_pk,
            models.SessionFacet.ANNOTATION,
            annotation_facet(a.kind, a.name),
        )
        for a in annotations
    ]


# Each session's numeric scores per name, from its runs' annotations (``SessionScore``).
SESSION_SCORES_SQL = (
    "SELECT r.session_id, a.name, COUNT(*), SUM(a.value), AVG(a.value) "
    "FROM history_app_annotation a JOIN history_app_run r ON r.id = a.run_id "
    "WHERE a.kind = 'score' AND a.value IS NOT NULL AND {where} GROUP BY r.session_id, a.name"
)


def refresh_scores(session_pks: Iterable[int]) -> None:
    """Recount the numeric scores of sessions whose annotations changed."""
    table = models.SessionScore._meta.db_table
    with connection.cursor() as cursor:
        for pk in sorted(set(session_pks)):
            cursor.execute(f"DELETE FROM {table} WHERE session_id = %s", [pk])
            cursor.execute(
                f"INSERT INTO {table} (session_id, name, count, total, mean) "
                + SESSION_SCORES_SQL.format(where="r.session_id = %s"),
                [pk],
            )


def refresh_facets(session_pks: Iterable[int]) -> None:
    """Recompute the facets (and the scores) of sessions whose runs were rewritten, moved
    or deleted, or whose annotations changed."""
    refresh_scores(session_pks)
    table = models.SessionFacet._meta.db_table
    with connection.cursor() as cursor:
        for pk in sorted(set(session_pks)):
            cursor.execute(f"DELETE FROM {table} WHERE session_id = %s", [pk])
            for select in (*FACETS_SQL, ANNOTATION_FACETS_SQL):
                sql = select.format(where="r.session_id = %s")
                cursor.execute(
                    f"INSERT INTO {table} (session_id, facet, value) " + sql, [pk] * sql.count("%s")
                )
            # And its annotations' count (a run that moved took its annotations along).
            cursor.execute(
                f"UPDATE {models.Session._meta.db_table} SET annotation_count = (SELECT COUNT(*) FROM "
                f"{models.Annotation._meta.db_table} a JOIN {models.Run._meta.db_table} r ON r.id = a.run_id "
                "WHERE r.session_id = %s) WHERE id = %s",
                [pk, pk],
            )
