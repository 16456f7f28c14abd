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
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.db import models as db_models

from history_app import models
from history_app.agent_history.records import Run
from history_app.store import mapper, pg_copy, search


@dataclass
class NewRun:
    """A run's rows, built outside any transaction; keys are filled in when inserted.

    ``run`` holds the run row's values by name (what the session's counters read);
    ``run_params`` and the children's lists hold each row's values already adapted for the
    database, in column order, with the keys left for ``insert_runs`` to set: on SQLite every other writer
    waits while a write transaction is open, so nothing that can be done before it is
    done in it."""

    run: dict[str, Any]
    run_params: list[Any] = field(default_factory=list)
    iterations: list[list[Any]] = field(default_factory=list)
    # (position of the iteration, the call's row)
    tool_calls: list[tuple[int, list[Any]]] = field(default_factory=list)
    interactions: list[list[Any]] = field(default_factory=list)
    contexts: list[list[Any]] = field(default_factory=list)
    # (position of the iteration, None for the run's own, the call's row)
    model_calls: list[tuple[int | None, list[Any]]] = field(default_factory=list)
    document: str = ""


def new_run(run: Run, digest: str, source_format: str) -> NewRun:
    row = SimpleNamespace()
    mapper.fill_run(row, run)
    values = vars(row)
    values.update(run_id=run.run_id, source_format=source_format[:32], content_hash=digest, output_html=None)
    adapt = _Adapt()
    iteration, tool_call = _table(models.Iteration), _table(models.ToolCall)
    interaction, context = _table(models.MemberInteraction), _table(models.InjectedContext)
    model_call = _table(models.ModelCall)
    return NewRun(
        run=values,
        run_params=_table(models.Run).params(values, adapt),
        iterations=[
            iteration.params(mapper.iteration_values(position, it), adapt)
            for position, it in enumerate(run.iterations)
        ],
        tool_calls=[
            (n, tool_call.params(mapper.tool_call_values(position, call), adapt))
            for n, it in enumerate(run.iterations)
            for position, call in enumerate(it.tool_calls)
        ],
        interactions=[
            interaction.params(mapper.interaction_values(position, mi), adapt)
            for position, mi in enumerate(run.member_interactions)
        ],
        contexts=[
            context.params(mapper.context_values(position, c), adapt)
            for position, c in enumerate(run.injected_contexts)
        ],
        model_calls=[
            (place, model_call.params(mapper.model_call_values(position, call), adapt))
            for position, (place, call) in enumerate(mapper.model_call_places(run))
        ],
        document=search.document_for(run),
    )


class _Adapt:
    """Values as Django sends them to this connection's database: times and JSON adapted,
    the rest as they are. On SQLite a time is written as Django writes it (naive, in the
    connection's time zone, ``str``), without its per-value settings lookups."""

    def __init__(self) -> None:
        ops = connection.ops
        self.json = ops.adapt_json_value
        self.time = ops.adapt_datetimefield_value
        if connection.vendor == "sqlite" and settings.USE_TZ:
            zone = connection.timezone
            self.time = lambda value: str(
                value.astimezone(zone).replace(tzinfo=None) if value.tzinfo else value
            )

    def value(self, f: db_models.Field, value: Any, kind: int | None = None) -> Any:
        """``value`` of field ``f`` as sent (``kind``: ``_kind(f)``, when known)."""
        kind = _kind(f) if kind is None else kind
        if not kind or value is None:
            return value
        return self.time(value) if kind == 1 else self.json(value, f.encoder)


def _kind(f: db_models.Field) -> int:
    """How a field's value is adapted: 0 as it is, 1 a time, 2 JSON."""
    return 1 if isinstance(f, db_models.DateTimeField) else 2 if isinstance(f, db_models.JSONField) else 0


class _Table:
    """A model's table for raw inserts: its columns (not the primary key)."""

    def __init__(self, model: type[db_models.Model]) -> None:
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if not f.primary_key]
        self.column = {f.attname: n for n, f in enumerate(self.fields)}
        self.columns = [(f.attname, _kind(f), f) for f in self.fields]

    def params(self, values: dict[str, Any], adapt: _Adapt) -> list[Any]:
        """``values`` (attname -> value; a missing value takes the field's default) as one
        row's parameters, adapted, in column order."""
        row = []
        for name, kind, f in self.columns:
            row.append(adapt.value(f, values[name] if name in values else f.get_default(), kind))
        return row

    def insert(self, rows: list[list[Any]]) -> None:
        """Insert ``rows`` (from ``params``): on SQLite one statement executed for each row
        (``executemany``, which sqlite3 runs in C); on PostgreSQL one ``COPY`` (``pg_copy``)."""
        if not rows:
            return
        qn = connection.ops.quote_name
        table, columns = qn(self.model._meta.db_table), [qn(f.column) for f in self.fields]
        if connection.vendor == "postgresql":
            pg_copy.copy_rows(table, columns, rows)
            return
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)

    def keyed(self, rows: Iterable[tuple[list[Any], dict[str, Any]]]) -> list[list[Any]]:
        """Each row with the columns named in its dict set (the keys known only now)."""
        out = []
        for params, keys in rows:
            row = params.copy()
            for name, value in keys.items():
                row[self.column[name]] = value
            out.append(row)
        return out


@functools.cache
def _table(model: type[db_models.Model]) -> _Table:
    return _Table(model)


def insert_runs(runs: list[NewRun], session_pks: list[int], now: datetime, project_id: int) -> list[int]:
    """Insert new runs (each in the session given) and all their children; returns the
    runs' primary keys, in order (the writer then brings the derived tables forward). The runs' ids must not be stored yet (the caller looked
    them up under its locks): a clash raises ``IntegrityError``."""
    stamp = _Adapt().time(now)
    table = _table(models.Run)
    table.insert(
        table.keyed(
            (
                new.run_params,
                {"project_id": project_id, "session_id": pk, "received_at": stamp, "updated_at": stamp},
            )
            for new, pk in zip(runs, session_pks, strict=True)
        )
    )
    run_ids = [new.run["run_id"] for new in runs]
    keys = dict(
        models.Run.objects.filter(project_id=project_id, run_id__in=run_ids).values_list("run_id", "id")
    )
    pks = [keys[run_id] for run_id in run_ids]
    table = _table(models.Iteration)
    table.insert(
        table.keyed(
            (params, {"run_id": pk}) for new, pk in zip(runs, pks, strict=True) for params in new.iterations
        )
    )
    iteration_keys = {
        (run_pk, position): pk
        for run_pk, position, pk in models.Iteration.objects.filter(run_id__in=pks).values_list(
            "run_id", "position", "id"
        )
    }
    table = _table(models.ToolCall)
    table.insert(
        table.keyed(
            (params, {"run_id": pk, "iteration_id": iteration_keys[pk, n]})
            for new, pk in zip(runs, pks, strict=True)
            for n, params in new.tool_calls
        )
    )
    table = _table(models.ModelCall)
    table.insert(
        table.keyed(
            (params, {"run_id": pk, "iteration_id": None if n is None else iteration_keys[pk, n]})
            for new, pk in zip(runs, pks, strict=True)
            for n, params in new.model_calls
        )
    )
    for model, attribute in (
        (models.MemberInteraction, "interactions"),
        (models.InjectedContext, "contexts"),
    ):
        table = _table(model)
        table.insert(
            table.keyed(
                (params, {"run_id": pk})
                for new, pk in zip(runs, pks, strict=True)
                for params in getattr(new, attribute)
            )
        )
    return pks


def update_sessions(sessions: list[models.Session], fields: list[str]) -> None:
    """Write ``fields`` of each session: one UPDATE statement, executed once per session."""
    if not sessions:
        return
    qn = connection.ops.quote_name
    meta = models.Session._meta
    chosen = [meta.get_field(name) for name in fields]
    adapt = _Adapt()
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(f'{qn(f.column)} = %s' for f in chosen)} "
        f"WHERE {qn(meta.pk.column)} = %s"
    )
    params = [(*(adapt.value(f, getattr(s, f.attname)) for f in chosen), s.pk) for s in sessions]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
