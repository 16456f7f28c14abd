"""agent_history: record, redact, store, render and inject agent run history.

Standard library only: agent code imports this package without Django.
"""

from __future__ import annotations

from .formats import accepted_formats, detect, parse
from .records import (
    SCHEMA,
    InjectedContext,
    Iteration,
    MemberInteraction,
    RecordError,
    Run,
    ToolCall,
)
from .redact import Redactor, is_secret_key, redact

__all__ = [
    "SCHEMA",
    "InjectedContext",
    "Iteration",
    "MemberInteraction",
    "RecordError",
    "Redactor",
    "Run",
    "ToolCall",
    "accepted_formats",
    "detect",
    "is_secret_key",
    "parse",
    "redact",
]
