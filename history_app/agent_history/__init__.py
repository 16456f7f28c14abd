"""agent_history: record, redact, store, render and inject agent run history.

Standard library only: agent code imports this package without Django. It is also its
own distribution, ``agent-history-lib`` (build configuration: ``pyproject.toml`` next to
this file), whose version is this ``__version__``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .context import (
    compose_member_task,
    render_agno_workflow_history,
    render_cot_history,
    render_member_interactions,
    render_team_history,
    render_workflow_history,
)
from .cot import CoTHistory
from .formats import accepted_formats, detect, parse
from .recorder import AgentHistoryMiddleware, current_run, record_injection, recording
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
from .sinks import FlushResult, HttpSink
from .stores import MemoryStore, SQLiteStore, WorkflowSession
from .team import TeamHistory
from .tools import get_chat_history, read_past_session, search_past_sessions
from .workflow import Step, Workflow, WorkflowResult

__all__ = [
    "SCHEMA",
    "AgentHistoryMiddleware",
    "CoTHistory",
    "FlushResult",
    "HttpSink",
    "InjectedContext",
    "Iteration",
    "MemberInteraction",
    "MemoryStore",
    "RecordError",
    "Redactor",
    "Run",
    "SQLiteStore",
    "Step",
    "TeamHistory",
    "ToolCall",
    "Workflow",
    "WorkflowResult",
    "WorkflowSession",
    "accepted_formats",
    "compose_member_task",
    "current_run",
    "detect",
    "get_chat_history",
    "is_secret_key",
    "parse",
    "read_past_session",
    "record_injection",
    "recording",
    "redact",
    "render_agno_workflow_history",
    "render_cot_history",
    "render_member_interactions",
    "render_team_history",
    "render_workflow_history",
    "search_past_sessions",
]
