"""New runs written in bulk (issue #13): their rows are built before the write
transaction opens (``NewRun``), and inserted inside it with one statement per table for a
whole batch, through Django's connection, each value adapted as Django adapts it.

This is the ORM's ``bulk_create`` without its per-object cost: building model objects
and compiling each value took more time than SQLite took to write them, and on SQLite
all of it happened while every other writer waited. The values come from the row mapper
(``mapper.*_values``), the one record → row mapping.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db import connection
from django.db import models as db_models

from . import mapper, models, search
from .agent_history.records import Run


@dataclass
class NewRun:
    """A run's rows, built outside any transaction; keys are filled in when inserted."""

    run: dict[str, Any]
    iterations: list[dict[str, Any]] = field(default_factory=list)
    # (position of the iteration, the call's values)
    tool_calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    interactions: list[dict[str, Any]] = field(default_factory=list)
    contexts: list[dict[str, Any]] = field(default_factory=list)
    # (position of the iteration, None for the run's own, the call's values)
    model_calls: list[tuple[int | None, dict[str, Any]]] = field(default_factory=list)
    document: str = ""


def new_run(run: Run, digest: str, source_format: str) -> NewRun:
    row = SimpleNamespace()
    mapper.fill_run(row, run)
    values = vars(row)
    values.update(run_id=run.run_id, source_format=source_format[:32], content_hash=digest, output_html=None)
    return NewRun(
        run=values,
        iterations=[mapper.iteration_values(position, it) for position, it in enumerate(run.iterations)],
        tool_calls=[
            (n, mapper.tool_call_values(position, call))
            for n, it in enumerate(run.iterations)
            for position, call in enumerate(it.tool_calls)
        ],
        interactions=[
            mapper.interaction_values(position, mi) for position, mi in enumerate(run.member_interactions)
        ],
        contexts=[
            mapper.context_values(position, context) for position, context in enumerate(run.injected_contexts)
        ],
        model_calls=[
            (place, mapper.model_call_values(position, call))
            for position, (place, call) in enumerate(mapper.model_call_places(run))
        ],
        document=search.document_for(run),
    )


def _adapter(f: db_models.Field) -> Any:
    """How a field's value goes to this database as Django sends it (times and JSON), or
    None when it goes as it is."""
    ops = connection.ops
    if isinstance(f, db_models.DateTimeField):
        return ops.adapt_datetimefield_value
    if isinstance(f, db_models.JSONField):
        return lambda value: ops.adapt_json_value(value, f.encoder)
    return None


def _adapted(adapters: list[Any], values: list[Any]) -> list[Any]:
    return [
        value if adapt is None or value is None else adapt(value)
        for adapt, value in zip(adapters, values, strict=True)
    ]


class _Table:
    """A model's table for raw inserts: its columns (not the primary key)."""

    def __init__(self, model: type[db_models.Model]) -> None:
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if not f.primary_key]

    def insert(self, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows`` (attname -> value; a missing value takes the field's default)
        with one statement executed for each row (``executemany``: sqlite3 runs it in C,
        psycopg prepares it once and pipelines it; a statement of many VALUES would be
        parsed again on the client for every batch)."""
        if not rows:
            return
        qn = connection.ops.quote_name
        adapters = [_adapter(f) for f in self.fields]
        params = [
            _adapted(adapters, [row[f.attname] if f.attname in row else f.get_default() for f in self.fields])
            for row in rows
        ]
        sql = (
            f"INSERT INTO {qn(self.model._meta.db_table)} ({', '.join(qn(f.column) for f in self.fields)}) "
            f"VALUES ({', '.join(['%s'] * len(self.fields))})"
        )
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)


@functools.cache
def _table(model: type[db_models.Model]) -> _Table:
    return _Table(model)


def insert_runs(runs: list[NewRun], session_pks: list[int], now: datetime, project_id: int) -> list[int]:
    """Insert new runs (each in the session given) and all their children; returns the
    runs' primary keys, in order. The runs' ids must not be stored yet (the caller looked
    them up under its locks): a clash raises ``IntegrityError``."""
    run_rows = []
    for new, session_pk in zip(runs, session_pks, strict=True):
        row = dict(new.run, project_id=project_id, session_id=session_pk, received_at=now, updated_at=now)
        run_rows.append(row)
    _table(models.Run).insert(run_rows)
    run_ids = [new.run["run_id"] for new in runs]
    keys = dict(
        models.Run.objects.filter(project_id=project_id, run_id__in=run_ids).values_list("run_id", "id")
    )
    pks = [keys[run_id] for run_id in run_ids]
    iterations = [
        dict(values, run_id=pk) for new, pk in zip(runs, pks, strict=True) for values in new.iterations
    ]
    _table(models.Iteration).insert(iterations)
    iteration_keys = {
        (run_pk, position): pk
        for run_pk, position, pk in models.Iteration.objects.filter(run_id__in=pks).values_list(
            "run_id", "position", "id"
        )
    }
    _table(models.ToolCall).insert(
        [
            dict(values, run_id=pk, iteration_id=iteration_keys[pk, n])
            for new, pk in zip(runs, pks, strict=True)
            for n, values in new.tool_calls
        ]
    )
    _table(models.ModelCall).insert(
        [
            dict(values, run_id=pk, iteration_id=None if n is None else iteration_keys[pk, n])
            for new, pk in zip(runs, pks, strict=True)
            for n, values in new.model_calls
        ]
    )
    _table(models.MemberInteraction).insert(
        [dict(values, run_id=pk) for new, pk in zip(runs, pks, strict=True) for values in new.interactions]
    )
    _table(models.InjectedContext).insert(
        [dict(values, run_id=pk) for new, pk in zip(runs, pks, strict=True) for values in new.contexts]
    )
    search.index_runs((pk, new.document) for new, pk in zip(runs, pks, strict=True))
    return pks


def update_sessions(sessions: list[models.Session], fields: list[str]) -> None:
    """Write ``fields`` of each session: one UPDATE statement, executed once per session."""
    if not sessions:
        return
    qn = connection.ops.quote_name
    meta = models.Session._meta
    chosen = [meta.get_field(name) for name in fields]
    adapters = [_adapter(f) for f in chosen]
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(f'{qn(f.column)} = %s' for f in chosen)} "
        f"WHERE {qn(meta.pk.column)} = %s"
    )
    params = [(*_adapted(adapters, [getattr(s, f.attname) for f in chosen]), s.pk) for s in sessions]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
