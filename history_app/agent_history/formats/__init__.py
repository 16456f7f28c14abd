"""Parsers: every supported input format becomes canonical ``records.Run`` objects.

This is the one normalisation path: the library's tools, the ingestion endpoint and the
import commands all call :func:`parse`.
"""

from __future__ import annotations

from typing import Any

from ..records import MAX_DEPTH, RecordError, Run, checked_payload, count_lone_surrogates, structure_errors
from . import agno, agno_go, autourgos, cot, native

# name -> (detector, parser); detection tries them in this order.
FORMATS = {
    "native": (native.detect, native.parse),
    "autourgos": (autourgos.detect, autourgos.parse),
    # agno-go before agno: both have run_id and workflow_id; agno-go's RFC 3339 times and
    # lower-case statuses tell them apart.
    "agno-go": (agno_go.detect, agno_go.parse),
    "agno": (agno.detect, agno.parse),
    "cot": (cot.detect, cot.parse),
}


def accepted_formats() -> list[str]:
    return list(FORMATS)


def detect(payload: Any) -> str | None:
    """The name of the format ``payload`` is in, judged by its shape, or None."""
    if not isinstance(payload, dict):
        return None
    named = payload.get("format")
    if isinstance(named, str) and named in FORMATS:
        return named
    for name, (detector, _) in FORMATS.items():
        if detector(payload):
            return name
    return None


def parse(payload: Any, format: str | None = None, *, max_depth: int = MAX_DEPTH) -> list[Run]:
    """Parse one payload (one item of a request) into runs; raises ``RecordError``."""
    return parse_detected(payload, format, max_depth=max_depth)[1]


def parse_detected(
    payload: Any, format: str | None = None, *, max_depth: int = MAX_DEPTH
) -> tuple[str, list[Run]]:
    """Like ``parse``, and also the name of the format the payload was read as.

    Whatever the format, the payload is first checked for values nested deeper than
    ``max_depth`` and for numbers that are not finite (reported with their path in the
    payload), and its lone surrogates become U+FFFD (counted as ``lone_surrogate`` in the
    first run's redactions). Every run a parser builds then passes the same validation as
    a native record, so a format cannot produce a run that the store would refuse.
    """
    if not isinstance(payload, dict):
        raise RecordError([("$", f"must be an object, not {type(payload).__name__}")])
    if format is not None and format not in FORMATS:
        raise RecordError([("format", f"unknown format {format!r}; accepted: {', '.join(FORMATS)}")])
    payload, replaced = checked_payload(payload, max_depth=max_depth)
    name = format or detect(payload)
    if name is None:
        raise RecordError([("$", f"matches no accepted format; accepted formats: {', '.join(FORMATS)}")])
    runs = [validated(run, max_depth=max_depth) for run in FORMATS[name][1](payload)]
    return name, count_lone_surrogates(runs, replaced)


def validated(run: Run, *, max_depth: int = MAX_DEPTH) -> Run:
    """``run`` as the record validation reads it back; ``RecordError`` names what is wrong,
    with its path in the canonical record."""
    errors = structure_errors(run, "$", max_depth=max_depth)
    if errors:
        raise RecordError(errors)
    return Run.from_dict(run.to_dict(), max_depth=max_depth)


__all__ = [
    "FORMATS",
    "accepted_formats",
    "agno",
    "agno_go",
    "autourgos",
    "cot",
    "detect",
    "native",
    "parse",
    "parse_detected",
]
