"""Queries a page makes on every view, compiled by the ORM once a process.

Building a query (filters, annotations, ordering) and compiling it to SQL costs Django
more CPU than running it on an indexed table: on a run page, more than the database's
own work. For a query whose shape never changes, only its values, ``rows`` builds it
once per database with a stand-in (a sentinel) for each value, keeps the SQL and its
parameters, and afterwards runs that SQL with the real values put in place of the
sentinels (a raw query of the same model, whose rows are the same model instances, with
the same fields deferred and the same annotations).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.query import RawQuerySet

# Sentinels no constant of a query can equal: integers far below any key, strings
# starting with NUL (which no stored text holds: ingestion replaces it).
_numbers = itertools.count(-7_100_000_001, -1)
_compiled: dict[tuple[str, str], tuple[Any, str, tuple, dict]] = {}


def rows(key: str, build: Callable[..., QuerySet], **values: int | str) -> RawQuerySet:
    """The rows of ``build(**values)``, compiled once per database under ``key``: the
    first call builds it with sentinels of the values' types (an integer for an integer,
    a string for a string), so ``build`` must use each value only as a query parameter."""
    found = _compiled.get((key, connection.vendor))
    if found is None:
        sentinels = {
            name: next(_numbers) if isinstance(value, int) else f"\x00{key}:{name}"
            for name, value in values.items()
        }
        queryset = build(**sentinels)
        sql, params = queryset.query.sql_with_params()
        by_sentinel = {sentinel: name for name, sentinel in sentinels.items()}
        missing = set(sentinels) - {by_sentinel[p] for p in params if _hashable(p) and p in by_sentinel}
        if missing:
            raise ValueError(f"{key}: the query does not use {sorted(missing)} as parameters")
        found = _compiled[(key, connection.vendor)] = (queryset.model, sql, tuple(params), by_sentinel)
    model, sql, params, by_sentinel = found
    return model.objects.raw(
        sql, [values[by_sentinel[p]] if _hashable(p) and p in by_sentinel else p for p in params]
    )


def _hashable(value: object) -> bool:
    return isinstance(value, int | str)
