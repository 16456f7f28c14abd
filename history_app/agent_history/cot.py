"""SmartClient-style CoT process history: an append-only action log rendered in two zones.

Defaults (SmartClient documents none): ``history_detail_items=5`` entries in full,
``history_result_max_chars=160`` for the one-line summaries, ``history_max_items=500`` as
the runaway guard on the stored list, ``state_history_max_items`` = ``history_max_items``
for the mirrored copy kept in ``state["history"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import DEFAULT_DETAIL_ITEMS, DEFAULT_RESULT_MAX_CHARS, render_cot_history
from .recorder import record_injection


class CoTHistory:
    def __init__(
        self,
        *,
        history_max_items: int = 500,
        state_history_max_items: int | None = None,
        history_detail_items: int = DEFAULT_DETAIL_ITEMS,
        history_result_max_chars: int = DEFAULT_RESULT_MAX_CHARS,
        no_history: bool = False,
        history_primer: str = "Actions taken so far in this process (oldest first):",
        process_id: str = "",
    ):
        self.history_max_items = history_max_items
        self.state_history_max_items = (
            state_history_max_items if state_history_max_items is not None else history_max_items
        )
        self.history_detail_items = history_detail_items
        self.history_result_max_chars = history_result_max_chars
        self.no_history = no_history
        self.history_primer = history_primer
        self.process_id = process_id
        self.history: list[Any] = []
        self.state: dict[str, Any] = {"history": []}
        self.dropped = 0

    def add(self, entry: Mapping[str, Any] | Any) -> None:
        """Append an entry; past ``history_max_items`` the oldest is dropped (and counted)."""
        self.history.append(entry)
        if self.history_max_items > 0 and len(self.history) > self.history_max_items:
            excess = len(self.history) - self.history_max_items
            del self.history[:excess]
            self.dropped += excess
        mirror = self.state.setdefault("history", [])
        mirror.append(entry)
        if self.state_history_max_items > 0 and len(mirror) > self.state_history_max_items:
            del mirror[: len(mirror) - self.state_history_max_items]

    add_history = add

    def render(self, *, truncate_history: int | None = None) -> str:
        """The history block (without the primer); ``""`` with ``no_history`` or no entries."""
        if self.no_history:
            return ""
        return render_cot_history(
            self.history,
            detail_items=self.history_detail_items,
            result_max_chars=self.history_result_max_chars,
            truncate=truncate_history,
        )

    def prompt_part(self, *, truncate_history: int | None = None, step: str = "") -> str:
        """The primer plus the history, as a prompt's ``history`` part; recorded as injected."""
        body = self.render(truncate_history=truncate_history)
        if not body:
            return ""
        text = f"{self.history_primer}\n{body}" if self.history_primer else body
        record_injection(
            text,
            kind="cot_history",
            target="user",
            step=step or self.process_id,
            settings={
                "history_detail_items": self.history_detail_items,
                "history_result_max_chars": self.history_result_max_chars,
                "truncate_history": truncate_history,
                "entries": len(self.history),
            },
        )
        return text
