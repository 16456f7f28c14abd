"""New runs written in bulk (issue #13): their rows are built before the write
transaction opens (``NewRun``), and inserted inside it with one statement per table for a
whole batch, through Django's connection, each value adapted as Django adapts it.

This is the ORM's ``bulk_create`` without its per-object cost: building model objects
and compiling each value took more time than SQLite took to write them, and on SQLite
all of it happened while every other writer waited. The values come from the row mapper
(``mapper.*_values``), the one record → row mapping.
"""

from __future__ import annotations

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
        document=search.document_for(run),
    )


class _Table:
    """A model's table for raw inserts: its columns (not the primary key) and how each
    value is adapted (times and JSON as Django adapts them for this database)."""

    def __init__(self, model: type[db_models.Model]) -> None:
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if not f.primary_key]

    def _adapter(self, f: db_models.Field) -> Any:
        ops = connection.ops
        if isinstance(f, db_models.DateTimeField):
            return ops.adapt_datetimefield_value
        if isinstance(f, db_models.JSONField):
            return lambda value: ops.adapt_json_value(value, f.encoder)
        return None

    def insert(self, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows`` (attname -> value; a missing value takes the field's default)
        with one statement executed for each row (``executemany``: sqlite3 runs it in C,
        psycopg prepares it once and pipelines it; a statement of many VALUES would be
        parsed again on the client for every batch)."""
        if not rows:
            return
        qn = connection.ops.quote_name
        adapters = [self._adapter(f) for f in self.fields]
        attnames = [f.attname for f in self.fields]
        params = []
        for row in rows:
            values = []
            for f, attname, adapt in zip(self.fields, attnames, adapters, strict=True):
                value = row[attname] if attname in row else f.get_default()
                values.append(adapt(value) if adapt is not None and value is not None else value)
            params.append(values)
        sql = (
            f"INSERT INTO {qn(self.model._meta.db_table)} ({', '.join(qn(f.column) for f in self.fields)}) "
            f"VALUES ({', '.join(['%s'] * len(self.fields))})"
        )
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)


_tables: dict[type, _Table] = {}


def _table(model: type[db_models.Model]) -> _Table:
    if model not in _tables:
        _tables[model] = _Table(model)
    return _tables[model]


def insert_runs(runs: list[NewRun], session_pks: list[int], now: datetime) -> list[int]:
    """Insert new runs (each in the session given) and all their children; returns the
    runs' primary keys, in order. The runs' ids must not be stored yet (the caller looked
    them up under its locks): a clash raises ``IntegrityError``."""
    run_rows = []
    for new, session_pk in zip(runs, session_pks, strict=True):
        row = dict(new.run, session_id=session_pk, received_at=now, updated_at=now)
        run_rows.append(row)
    _table(models.Run).insert(run_rows)
    run_ids = [new.run["run_id"] for new in runs]
    keys = dict(models.Run.objects.filter(run_id__in=run_ids).values_list("run_id", "id"))
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
    table = _table(models.Session)
    adapters = [table._adapter(f) for f in chosen]
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(f'{qn(f.column)} = %s' for f in chosen)} "
        f"WHERE {qn(meta.pk.column)} = %s"
    )
    params = []
    for session in sessions:
        values = []
        for f, adapt in zip(chosen, adapters, strict=True):
            value = getattr(session, f.attname)
            values.append(adapt(value) if adapt is not None and value is not None else value)
        params.append((*values, session.pk))
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
