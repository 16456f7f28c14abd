"""Values as text: the one place that decides how a structured value becomes prompt or
log text, how a thought of any shape reads, and what a withheld value looks like.

Every format, renderer and writer of the library uses these, so a value reads the same in
a parsed run, a rendered history block and a written log.
"""

from __future__ import annotations

import json
from typing import Any

# What autourgos-history writes in place of a value its privacy flags withhold.
SOURCE_REDACTED = "[REDACTED]"


def value_text(value: Any, *, indent: int | None = None) -> str | None:
    """``None`` stays ``None``, a string is itself, anything else is JSON (non-ASCII kept,
    values JSON cannot write through ``str``). ``indent`` where a layout asks for it (a
    structured answer shown to a reader); prompts and logs use the compact form."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=indent, default=str)


def thought_text(thought: Any) -> str | None:
    """A thought as text: models and parsers give strings, lists of parts, or objects."""
    if thought is None or isinstance(thought, str):
        return thought
    if isinstance(thought, list):
        return "\n".join(part if isinstance(part, str) else value_text(part) or "" for part in thought)
    return value_text(thought, indent=2)
