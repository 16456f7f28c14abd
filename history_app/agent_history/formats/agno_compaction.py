"""agno 3.1 compaction (``agno.compaction``): once a session's context passes
``compact_at_tokens``, agno folds the older history into a summary its compaction model
writes, stores the fold as a row of ``agno_compactions`` (``summary``, the folded messages
rendered as ``archived_messages``, ``first_kept_message_id``, the ``run_id`` that made it),
and from then on replays the summary and the messages from that anchor on.

Rebuilt here, from the stored runs and those rows: the replay a run was sent
(``Compaction.apply_record`` / ``compaction._view.build_view``) and each compaction
model call (``Compaction._summary_messages``: agno's prompt, the folded transcript, the
previous summary folded in; its answer the stored summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import messages as wire
from .. import usage
from ..records import ModelCall
from ..text import value_text
from .agno import roles_mapped, wire_role

LENGTH_RULE_COMPACT = "- Keep the summary compact: compress prose before dropping facts, and do not pad a section to\n  make it look complete. An empty section is one line."
SUMMARY_PREFIX = "Summary of earlier conversation (compacted):\n\n"
DEFAULT_COMPACTION_PROMPT = 'You maintain the running summary of a long conversation between a user and an AI agent. The\nconversation exceeds the model\'s context window, so everything older than a recent tail is folded into\nthe summary you produce. Your summary is the ONLY memory of the folded conversation: anything you omit\nis lost to the agent.\n\nYou are given the previous summary (if one exists) and a transcript segment to fold into it. Produce an\nupdated summary with exactly these sections, in this order:\n\n## Goal\n## In progress / next steps\n## Critical context\n## Constraints & preferences\n## Key decisions & facts\n## Errors & fixes\n## Completed\n\nThe order is by importance, most important first. A summary that runs too long may be cut from the\nend, so what the agent needs to carry on comes first and finished history last.\n\nSection guidance:\n- Goal: what the user is ultimately trying to achieve. Rarely changes.\n- In progress / next steps: what is underway and what comes next.\n- Critical context: exact file paths, identifiers, result_ids, URLs, error messages, and numbers -\n  verbatim. Never paraphrase these.\n- Constraints & preferences: standing user constraints and instructions that remain in force - coding\n  rules, limits, style and process preferences. These are easy to lose; keep every one that has not been\n  explicitly lifted.\n- Key decisions & facts: decisions made and why, plus durable facts established in conversation.\n- Errors & fixes: errors encountered and how they were resolved (or that they remain open).\n- Completed: finished work, stated compactly.\n\nRules:\n- Preserve everything from the previous summary unless the new segment supersedes it.\n- Move items that the new segment shows are finished into Completed.\n- Do not continue the conversation, answer questions, or add commentary.\n- Output only the summary, starting at "## Goal".\n{length_rule}\n\nDurable state (offloaded tool results, defined variables, files on disk) outlives this summary and is\nlisted separately for the agent; you do not need to reproduce its contents, only reference identifiers\nin Critical context when they matter.'
ARCHIVE_AWARE_PROMPT = '\n\nThe full transcript of the folded segment remains available to the agent.\nDirectly under the Goal section, add one line beginning "Not covered here:" naming the kinds of detail\na reader would have to look up - for example bulk tabular data, long tool output, or full error text.\nOmit the line only if the summary genuinely preserves every specific in the segment.'
ARCHIVE_LOOKUP_INSTRUCTION = "\n\nThe full text of the folded conversation is stored and searchable.\nBefore answering any question about it that calls for an exact value - an identifier, figure,\nname, quote, command, or error message - search it rather than relying on this\nsummary. Say you do not know only after looking."

# How many earlier runs agno reads once compaction is on (``_PLANNER_WINDOW_MAX_RUNS``):
# with a ``compact_at_tokens`` threshold the fold, not ``num_history_runs``, bounds the replay.
PLANNER_WINDOW_RUNS = 500
# What the summarizer is given at most, oldest messages dropped first
# (``DEFAULT_SUMMARIZE_CHAR_BUDGET``).
SUMMARIZE_CHAR_BUDGET = 400_000
MAX_ARCHIVED_TOOL_RESULT_CHARS = 20_000
_MAX_SURVIVING_IDS = 100


def record_from(row: dict[str, Any]) -> dict[str, Any] | None:
    """A fold as this module reads it, from an ``agno_compactions`` row or a run's own
    ``compaction`` (``CompactionRecord.to_dict()``); None without a summary."""
    if not isinstance(row, dict) or not isinstance(row.get("summary"), str) or not row["summary"]:
        return None
    archived_text = row.get("archived_messages")
    return {
        "id": value_text(row.get("compaction_id") or row.get("id")),
        "run_id": value_text(row.get("run_id")),
        "summary": row["summary"],
        "first_kept_message_id": value_text(row.get("first_kept_message_id")),
        "archived": bool(row.get("archived") or archived_text),
        "archived_messages": archived_text if isinstance(archived_text, str) else None,
        "messages_compacted": row.get("messages_compacted"),
        "created_at": row.get("created_at"),
    }


def _anchor(messages: Sequence[dict[str, Any]], record: dict[str, Any] | None) -> int | None:
    if record is None or not record.get("first_kept_message_id"):
        return None
    return next((n for n, m in enumerate(messages) if m.get("id") == record["first_kept_message_id"]), None)


def _is_injected(message: dict[str, Any]) -> bool:
    return bool(message.get("from_history")) and str(message.get("content") or "").startswith(SUMMARY_PREFIX)


def _leading_system(messages: Sequence[dict[str, Any]]) -> int:
    count = 0
    for m in messages:
        if m.get("role") not in ("system", "developer"):
            break
        count += 1
    return count


def _surviving_result_ids(folded: Sequence[dict[str, Any]]) -> list[str]:
    """``compaction._view.surviving_result_ids``: the ids of the offloaded tool results
    (``<result id="…"``) the fold removes, named in the summary message."""
    ids: list[str] = []
    for m in folded:
        content = m.get("content")
        if m.get("role") != "tool" or not isinstance(content, str) or not content.startswith('<result id="'):
            continue
        found = content[len('<result id="') :].split('"', 1)
        if len(found) == 2 and found[0] not in ids:
            ids.append(found[0])
        if len(ids) >= _MAX_SURVIVING_IDS:
            break
    return ids


def summary_message(record: dict[str, Any], folded: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The user message agno sends in place of what a fold replaced
    (``compaction._view.summary_message``), flagged ``from_history`` as agno flags it."""
    content = SUMMARY_PREFIX + record["summary"]
    ids = _surviving_result_ids(folded)
    if ids:
        content += (
            "\n\nStored tool results from the folded conversation remain readable with "
            f"read_result(id): {', '.join(ids)}"
        )
    # Compaction._archive_instruction: search_compacted_messages follows
    # store_compacted_messages (agno's default), so an archived fold promises the search.
    if record.get("archived"):
        content += ARCHIVE_LOOKUP_INSTRUCTION
    return {"role": "user", "content": content, "from_history": True}


def view(history: list[dict[str, Any]], record: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """``compaction._view.build_view``: the leading system messages, the summary, and the
    messages from the fold's anchor on; None when the anchor is not in ``history`` (agno
    then sends the history as it is)."""
    boundary = _anchor(history, record)
    if record is None or boundary is None:
        return None
    lead = _leading_system(history)
    if boundary < lead:
        return None
    kept = [m for m in history[boundary:] if not _is_injected(m)]
    return [*history[:lead], summary_message(record, history[lead:boundary]), *kept]


def _clip(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[:limit] + f"\n... [clipped, {len(text) - limit} more characters]"
    )


def render_message(message: dict[str, Any]) -> str:
    """``compaction.archive.render_message``: a message as the summarizer reads it."""
    heading = message.get("role") or ""
    if message.get("tool_name"):
        heading = f"{heading} ({message['tool_name']})"
    parts = [f"## {heading}"]
    content = message.get("content")
    text = content if isinstance(content, str) else (value_text(content) or "" if content is not None else "")
    if text:
        parts.append(_clip(text, MAX_ARCHIVED_TOOL_RESULT_CHARS) if message.get("role") == "tool" else text)
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"**calls** `{function.get('name')}`: {function.get('arguments')}")
    return "\n\n".join(parts)


def transcript(folded: Sequence[dict[str, Any]]) -> str:
    """``Compaction._trim_for_summary`` then ``render_messages``: what the summarizer read
    of the folded messages."""
    kept: list[str] = []
    budget = SUMMARIZE_CHAR_BUDGET
    for message in reversed(folded):
        text = render_message(message)
        if budget - (len(text) + 2) < 0 and kept:
            break
        budget -= len(text) + 2
        kept.append(text)
    return "\n\n".join(reversed(kept))


def compaction_call(
    payload: dict[str, Any],
    record: dict[str, Any],
    previous: dict[str, Any] | None,
    history: list[dict[str, Any]],
    order: int = 0,
) -> ModelCall:
    """The compaction model's call that wrote ``record`` during the run ``payload``
    (``Compaction._summarize``): agno's default prompt (no ``compacted_token_budget``, no
    ``instructions``), the folded messages as rendered for it (the row's
    ``archived_messages`` when agno kept them, else rendered from ``history``: the span
    from the previous fold's anchor to this one's), the previous summary folded in; the
    answer is the stored summary; its tokens the run's ``metrics.details.compaction_model``
    entry ``order``."""
    start = _anchor(history, previous) or 0
    end = _anchor(history, record)
    folded = history[start:end] if end is not None else []
    text = record.get("archived_messages")
    if text is None or len(text) > SUMMARIZE_CHAR_BUDGET:
        text = transcript(folded)
    if previous is not None:
        text = (
            f"Summary of the conversation before this point:\n{previous['summary']}\n\n"
            f"Conversation since then:\n{text}"
        )
    prompt = DEFAULT_COMPACTION_PROMPT.format(length_rule=LENGTH_RULE_COMPACT)
    if record.get("archived"):
        prompt += ARCHIVE_AWARE_PROMPT
    metrics = payload.get("metrics") if isinstance(payload.get("metrics"), dict) else {}
    details = metrics.get("details") if isinstance(metrics.get("details"), dict) else {}
    entries = details.get("compaction_model")
    entry = entries[order] if isinstance(entries, list) and order < len(entries) else {}
    entry = entry if isinstance(entry, dict) else {}
    provider = value_text(entry.get("provider")) or value_text(payload.get("model_provider")) or ""
    role = wire_role("system", value_text(payload.get("model_provider")) or provider)
    call = usage.call_from_usage(
        entry,
        model=value_text(entry.get("id")) or value_text(payload.get("model")) or "",
        provider=provider,
        messages=[
            wire.chat_message({"role": role, "content": prompt}, "instructions"),
            wire.chat_message({"role": "user", "content": text}, "input"),
        ],
        output=record["summary"],
    )
    mapped = roles_mapped(value_text(payload.get("model_provider")) or provider, call.messages)
    if mapped:
        call.metadata["roles_mapped"] = mapped
    call.answer = wire.chat_message({"role": "assistant", "content": record["summary"]})
    call.api = wire.CHAT
    call.metadata["role"] = "compaction_model"
    call.metadata["compaction_id"] = record.get("id")
    call.metadata["reconstructed"] = {
        "by": "Compaction._summary_messages: its default prompt, the folded messages as agno rendered "
        "them (agno_compactions.archived_messages), the previous summary; the answer is the stored "
        "summary",
        "framework": "agno 3.1",
    }
    return call
