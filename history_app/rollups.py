"""Counts kept at ingestion so that pages never walk every run or tool call (issue #13):

- ``SessionFacet``: the tools, statuses and agents of each session's runs, and whether any
  failed or had a tool error (the sessions list's filters);
- ``DailyStat``: runs, failed runs, tool calls and failed calls per day and tool (the stats
  page).

Ingestion adds what it writes; a run rewritten takes off what it held first; pruning takes
off what it deletes. Every change is an upsert of sums, rows in a fixed order (two writers
on PostgreSQL then lock them in the same order), inside the writer's transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from . import models

# (day, tool) -> [runs, failed, calls, errors]
Deltas = dict[tuple[date, str], list[int]]


def day_of(when: datetime) -> date:
    """The day a run is counted on: its time in the server's ``TIME_ZONE``."""
    return timezone.localtime(when).date() if timezone.is_aware(when) else when.date()


def contributions(runs: Iterable[tuple[datetime, str, Iterable[tuple[str, bool]]]], sign: int = 1) -> Deltas:
    """What runs add to the daily counts: each given as (when, status, [(tool, failed)]).
    A call failed when its error is not empty (as ``Run.tool_error_count`` counts it):
    records and stored rows must say the same, or a rewrite takes off what was never added."""
    deltas: Deltas = defaultdict(lambda: [0, 0, 0, 0])
    for when, status, calls in runs:
        day = day_of(when)
        row = deltas[day, ""]
        row[0] += sign
        row[1] += sign * (status == "failed")
        for tool, failed in calls:
            row = deltas[day, tool]
            row[2] += sign
            row[3] += sign * bool(failed)
    return deltas


def record_contributions(records: Iterable[Any], received_at: datetime, sign: int = 1) -> Deltas:
    """``contributions`` of canonical records (times already aware)."""
    return contributions(
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


def stored_contributions(run_pks: list[int], sign: int = -1) -> Deltas:
    """``contributions`` of stored runs (by primary key), read in two grouped queries."""
    if not run_pks:
        return {}
    calls: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    for run_id, tool, failed in models.ToolCall.objects.filter(run_id__in=run_pks).values_list(
        "run_id", "tool", "error"
    ):
        calls[run_id].append((tool, bool(failed)))
    rows = models.Run.objects.filter(pk__in=run_pks).values_list("pk", "started_at", "received_at", "status")
    return contributions(
        ((started or received, status, calls[pk]) for pk, started, received, status in rows), sign
    )


def merge(*all_deltas: Deltas) -> Deltas:
    total: Deltas = defaultdict(lambda: [0, 0, 0, 0])
    for deltas in all_deltas:
        for key, values in deltas.items():
            row = total[key]
            for n, value in enumerate(values):
                row[n] += value
    return total


def apply(deltas: Deltas) -> None:
    """Add ``deltas`` to ``DailyStat`` (one upsert per row, in key order)."""
    rows = [(day, tool, *values) for (day, tool), values in sorted(deltas.items()) if any(values)]
    if not rows:
        return
    table = models.DailyStat._meta.db_table
    adapt = connection.ops.adapt_datefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (day, tool, runs, failed, calls, errors) VALUES (%s, %s, %s, %s, %s, %s) "
            f"ON CONFLICT (day, tool) DO UPDATE SET runs = {table}.runs + excluded.runs, "
            f"failed = {table}.failed + excluded.failed, calls = {table}.calls + excluded.calls, "
            f"errors = {table}.errors + excluded.errors",
            [(adapt(day), tool, *values) for day, tool, *values in rows],
        )
        # A row brought down to nothing goes: it would keep a name no run has any more
        # (a tool name redact_history has since redacted, a pruned tool).
        taken = [(adapt(day), tool) for day, tool, *values in rows if min(values) < 0]
        if taken:
            cursor.executemany(
                f"DELETE FROM {table} WHERE day = %s AND tool = %s AND runs = 0 AND failed = 0 "
                "AND calls = 0 AND errors = 0",
                taken,
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


def refresh_facets(session_pks: Iterable[int]) -> None:
    """Recompute the facets of sessions whose runs were rewritten, moved or deleted."""
    table = models.SessionFacet._meta.db_table
    with connection.cursor() as cursor:
        for pk in sorted(set(session_pks)):
            cursor.execute(f"DELETE FROM {table} WHERE session_id = %s", [pk])
            for select in FACETS_SQL:
                sql = select.format(where="r.session_id = %s")
                cursor.execute(
                    f"INSERT INTO {table} (session_id, facet, value) " + sql, [pk] * sql.count("%s")
                )
