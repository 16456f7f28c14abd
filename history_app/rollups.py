"""Counts kept at ingestion so that pages never walk every run or tool call (issue #13):

- ``SessionTool``: which tools each session's runs called (the sessions list's tool filter);
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
    """What runs add to the daily counts: each given as (when, status, [(tool, failed)])."""
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
        calls[run_id].append((tool, failed is not None))
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
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (day, tool, runs, failed, calls, errors) VALUES (%s, %s, %s, %s, %s, %s) "
            f"ON CONFLICT (day, tool) DO UPDATE SET runs = {table}.runs + excluded.runs, "
            f"failed = {table}.failed + excluded.failed, calls = {table}.calls + excluded.calls, "
            f"errors = {table}.errors + excluded.errors",
            [(connection.ops.adapt_datefield_value(day), tool, *values) for day, tool, *values in rows],
        )


def add_session_tools(pairs: Iterable[tuple[int, str]]) -> None:
    """Note that these (session key, tool) pairs occur (already noted ones are kept)."""
    pairs = sorted(set(pairs))
    if not pairs:
        return
    table = models.SessionTool._meta.db_table
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (session_id, tool) VALUES (%s, %s) ON CONFLICT (session_id, tool) DO NOTHING",
            pairs,
        )


def refresh_session_tools(session_pks: Iterable[int]) -> None:
    """Recompute the tools of sessions whose runs were rewritten, moved or deleted."""
    table = models.SessionTool._meta.db_table
    for pk in sorted(set(session_pks)):
        runs = models.Run.objects.filter(session_id=pk).values("pk")
        tools = set(models.ToolCall.objects.filter(run_id__in=runs).values_list("tool", flat=True).distinct())
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE session_id = %s", [pk])
        add_session_tools((pk, tool) for tool in tools)
