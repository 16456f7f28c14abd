"""Why a search hit matched: a short passage of the first field of the run that holds a
searched word, the words marked.

The same on both databases, in Python, over the hit runs only: SQLite's search index is
contentless (FTS5's ``snippet()`` needs the text), and the run's fields say more than the
index's one document would (which field matched). Every field is read cut to
``search.MAX_FIELD_CHARS`` (what the index holds of it), in at most two queries (thoughts, tool calls)
for all the hits of a page beyond the hits' own, whatever their number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Substr

from history_app import models
from history_app.store import search

# Characters of context on each side of the first marked word.
CONTEXT = 70
# The heads of the fields a passage is first looked for in, read with the hits themselves
# (``listing.search_hits`` annotates them): no query of their own.
HEADS = {
    "answer_head": Substr("output", 1, search.MAX_FIELD_CHARS),
    "error_head": Substr("error", 1, search.MAX_FIELD_CHARS),
}
# Characters of the input a hit's link shows.
SHOWN_INPUT = 100
# Rows of iterations and tool calls read for the hits whose input, answer and error hold
# no searched word (the page's hits together).
DEEP_ROWS = 2000


def _pattern(query: str) -> re.Pattern[str] | None:
    """The searched words as the index matches them: a Latin word as a word's beginning,
    a CJK phrase as those characters side by side."""
    words = []
    for kind, tokens in search.terms(query):
        if kind == "prefix":
            words.append(
                rf"(?<!\w){re.escape(tokens[0])}\w*" if tokens[0].isascii() else re.escape(tokens[0])
            )
        else:
            words.append(re.escape(tokens[0] + "".join(token[1:] for token in tokens[1:])))
    if not words:
        return None
    return re.compile("|".join(words), re.IGNORECASE)


@dataclass(frozen=True)
class Passage:
    """A passage of a field: its ``pieces`` in order, each (text, marked), the marked ones
    a searched word (the sessions list writes them in ``<mark>``)."""

    pieces: tuple[tuple[str, bool], ...]


def passage(text: str, pattern: re.Pattern[str]) -> Passage | None:
    """The passage around the first match in ``text``, its matches marked; None when
    nothing matches."""
    text = text[: search.MAX_FIELD_CHARS]
    first = pattern.search(text)
    if first is None:
        return None
    start = max(0, first.start() - CONTEXT)
    end = min(len(text), first.end() + CONTEXT)
    # Whole words at the edges where there is room.
    if start > 0:
        space = text.find(" ", start, first.start())
        start = space + 1 if space != -1 else start
    if end < len(text):
        space = text.rfind(" ", first.end(), end)
        end = space if space != -1 else end
    window = " ".join(text[start:end].split())
    pieces, at = [("…" if start > 0 else "", False)], 0
    for match in pattern.finditer(window):
        pieces += [(window[at : match.start()], False), (match.group(), True)]
        at = match.end()
    pieces += [(window[at:], False), ("…" if end < len(text) else "", False)]
    return Passage(tuple((text, marked) for text, marked in pieces if text))


def attach(runs: list[Any], query: str) -> None:
    """Give each hit run a ``snippet`` (``Passage``) and ``snippet_field`` (where it is),
    or None and "" when no field shows a searched word (the index's bigrams or a cut
    field may match where the words are not side by side here)."""
    pattern = _pattern(query)
    for run in runs:
        run.snippet, run.snippet_field = None, ""
    if pattern is None or not runs:
        return
    by_pk = {run.pk: run for run in runs}
    if all(hasattr(run, "answer_head") for run in runs):  # read with the hits (``HEADS``)
        heads = [(run.pk, run.input, run.answer_head, run.error_head, run.agent_name) for run in runs]
    else:
        heads = models.Run.objects.filter(pk__in=list(by_pk)).values_list(
            "pk", "input", *HEADS.values(), "agent_name"
        )
    missing = set()
    for pk, input_head, *fields in heads:
        # The hit's link shows the input's first 100 characters: a passage of it is worth
        # showing only when the word is past them; the other fields first.
        labelled = [*zip(("answer", "error", "agent"), fields, strict=True), ("input", input_head)]
        for label, text in labelled:
            if label == "input" and pattern.search((text or "")[:SHOWN_INPUT]):
                break
            found = passage(text or "", pattern)
            if found is not None:
                by_pk[pk].snippet, by_pk[pk].snippet_field = found, label
                break
        else:
            missing.add(pk)
    if not missing:
        return
    thoughts = (
        models.Iteration.objects.filter(run_id__in=missing)
        .exclude(thought=None)
        .order_by("run_id", "position")
        .values_list("run_id", Substr("thought", 1, search.MAX_FIELD_CHARS))[:DEEP_ROWS]
    )
    for run_id, text in thoughts:
        if run_id in missing and (found := passage(text or "", pattern)) is not None:
            by_pk[run_id].snippet, by_pk[run_id].snippet_field = found, "thought"
            missing.discard(run_id)
    if not missing:
        return
    calls = (
        models.ToolCall.objects.filter(run_id__in=missing)
        .order_by("run_id", "position")
        .values_list(
            "run_id",
            "tool",
            Substr("params_json", 1, search.MAX_FIELD_CHARS),
            Substr("result", 1, search.MAX_FIELD_CHARS),
            Substr("error", 1, search.MAX_FIELD_CHARS),
        )[:DEEP_ROWS]
    )
    for run_id, tool, *fields in calls:
        if run_id not in missing:
            continue
        for label, text in zip(("parameters", "result", "error"), [tool, *fields][1:], strict=True):
            found = passage(text or "", pattern)
            if found is None and label == "parameters":
                found = passage(tool, pattern)
            if found is not None:
                by_pk[run_id].snippet, by_pk[run_id].snippet_field = found, f"tool {tool[:40]} {label}"
                missing.discard(run_id)
                break
