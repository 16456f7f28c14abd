"""Chat-history tools an agent can be given, over a history store (agno's formats).

* ``get_chat_history(store, session_id, num_chats=None)`` — JSON list of the last messages.
* ``search_past_sessions(store, current_session_id, …)`` — JSON previews of other sessions,
  newest first, at most 20 sessions and 3 runs each, texts cut at 200 characters + ``...``.
* ``read_past_session(store, session_id, num_runs=None)`` — one session as plain text.
"""

from __future__ import annotations

import json
from typing import Any

PREVIEW_CHARS = 200


def _cut(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + "..."


def _messages(session: Any) -> list[dict[str, str]]:
    messages = []
    for run in session.runs:
        if run.input:
            messages.append({"role": "user", "content": run.input})
        if run.output:
            messages.append({"role": "assistant", "content": run.output})
    return messages


def get_chat_history(store: Any, session_id: str, num_chats: int | None = None) -> str:
    if store is None:
        return "No database configured."
    session = store.get_session(session_id)
    messages = _messages(session) if session is not None else []
    if num_chats is not None and num_chats > 0:
        messages = messages[-num_chats:]
    return json.dumps(messages, ensure_ascii=False)


def search_past_sessions(
    store: Any,
    current_session_id: str | None = None,
    *,
    num_past_sessions_to_search: int = 20,
    num_past_session_runs_in_search: int = 3,
) -> str:
    if store is None:
        return "No database configured."
    previews = []
    for session in store.list_sessions():
        if session.session_id == current_session_id:
            continue
        runs = session.runs[-num_past_session_runs_in_search:] if num_past_session_runs_in_search > 0 else []
        previews.append(
            {
                "session_id": session.session_id,
                "created_at": session.created_at.isoformat(),
                "runs": [{"user": _cut(r.input), "assistant": _cut(r.output)} for r in runs],
            }
        )
    previews.sort(key=lambda p: p["created_at"], reverse=True)
    return json.dumps(previews[:num_past_sessions_to_search], ensure_ascii=False)


def read_past_session(store: Any, session_id: str, num_runs: int | None = None) -> str:
    if store is None:
        return "No database configured."
    session = store.get_session(session_id)
    if session is None:
        return "Session not found."
    runs = session.runs[-num_runs:] if num_runs else session.runs
    parts = [f"Session: {session.session_id}\nCreated: {session.created_at:%Y-%m-%d %H:%M:%S}\n"]
    for run in runs:
        parts.append(f"\nUser: {run.input or ''}\n\nAssistant: {run.output or ''}\n")
    return "".join(parts)
