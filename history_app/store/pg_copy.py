"""Rows written to PostgreSQL by ``COPY``: the bulk paths of the run writer.

Django's psycopg cursors bind on the client: ``executemany`` of an INSERT sends each row
as its own statement, its values quoted in Python, and the server parses and plans every
one. ``COPY`` sends the rows as data (written by psycopg's C code) and the server parses
nothing per row; triggers, defaults, generated columns (the search index's ``tsv``) and
constraints apply as for an INSERT. Django's query log does not see it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection


def copy_rows(table: str, columns: list[str], rows: Iterable[Sequence[Any]]) -> None:
    """PostgreSQL: ``rows`` (values in ``columns`` order, as Django adapts them) into
    ``table`` by one ``COPY ... FROM STDIN``; ``table`` and ``columns`` are quoted names."""
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)
