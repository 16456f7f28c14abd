"""The canonical format itself (``Run.to_dict()``, schema "agent-history/v1")."""

from __future__ import annotations

from typing import Any

from ..records import SCHEMA, RecordError, Run


def detect(payload: dict[str, Any]) -> bool:
    return payload.get("schema") == SCHEMA


def parse(payload: dict[str, Any]) -> list[Run]:
    schema = payload.get("schema")
    if schema is not None and schema != SCHEMA:
        raise RecordError([("$.schema", f"must be {SCHEMA!r}")])
    data = {k: v for k, v in payload.items() if k != "format"}
    return [Run.from_dict(data)]
