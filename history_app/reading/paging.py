"""Query-string numbers and keyset pages: what every list reads its position with.

A cursor (``_next``) holds the last row's sort value and id; anything this server could
not have handed out is a 400, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q


class BadParameter(ValueError):
    """A query-string value a page cannot use; ``field`` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotFound(LookupError):
    """What a read asked for is not in the project (no such session, run, call…): the
    view answers 404, as a page or in the API's JSON shape, with this message."""


class BadCursor(BadParameter):
    """A ``_next`` token that this server did not hand out."""

    def __init__(self, message: str) -> None:
        super().__init__("_next", message)


def encode_cursor(value: datetime | float, pk: int) -> str:
    raw = json.dumps([value.isoformat() if isinstance(value, datetime) else value, pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_MAX_BIGINT = 2**63 - 1


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def decode_cursor(token: str, *, is_datetime: bool = True, is_float: bool = False) -> tuple[Any, int]:
    """The (value, id) a ``_next`` token holds. Anything this server could not have handed
    out is a ``BadCursor``: a float (unless ``is_float``: a score's mean), NaN or a number
    past 64 bits (the databases would refuse it), or a time without a zone or one that
    falls outside the years 1–9999 in UTC (the databases compare in UTC)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value, pk = json.loads(raw, parse_constant=_reject_constant)
        if type(pk) is not int or not 0 <= pk <= _MAX_BIGINT:
            raise ValueError("bad id")
        if is_float:
            if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > 1e308:
                raise ValueError("bad number")
            return float(value), pk
        if not is_datetime:
            if type(value) is not int or not -_MAX_BIGINT <= value <= _MAX_BIGINT:
                raise ValueError("bad number")
            return value, pk
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError("no time zone")
        return moment.astimezone(UTC), pk
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, OverflowError, RecursionError):
        raise BadCursor("not a token this server handed out; start again from the first page") from None


@dataclass
class Page:
    items: list[Any]
    next_cursor: str | None
    # The rows the page was taken from (its filters applied, no cursor), for a count.
    matching: Any = None


def keyset_page(queryset: Any, *, field: str, after: str | None, limit: int, descending: bool = True) -> Page:
    """Rows ordered by (``field``, id), ``limit`` at a time after a cursor.

    Important: order by (field, id) — both in an index for the default orders — so the
    database walks the index instead of sorting the table, and a cursor stays valid while
    rows arrive.
    """
    sign, beyond = ("-", "lt") if descending else ("", "gt")
    matching = queryset
    queryset = queryset.order_by(f"{sign}{field}", f"{sign}id")
    if after:
        try:
            kind = queryset.model._meta.get_field(field).get_internal_type()
        except FieldDoesNotExist:  # an annotation: a score's mean
            kind = "FloatField"
        value, pk = decode_cursor(after, is_datetime=kind == "DateTimeField", is_float=kind == "FloatField")
        queryset = queryset.filter(
            Q(**{f"{field}__{beyond}": value}) | Q(**{field: value, f"id__{beyond}": pk})
        )
    rows = list(queryset[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(getattr(rows[-1], field), rows[-1].pk)
    return Page(rows, next_cursor, matching)
