"""Renderers of history context blocks, byte-for-byte as the seed frameworks write them.

Entries may be ``Run`` records, any object with the attributes, or plain dicts.

Content is not escaped by agno or agno-go, so an answer containing
``</team_history_context>`` closes the block early and whatever follows reads as
instructions. Our renderers neutralise that: a closing tag of the block's own kind
inside content is written ``<\\/tag>`` (a backslash before the slash). Nothing else in the
content changes, so ordinary text renders byte-for-byte as the originals.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .text import value_text

WORKFLOW_HEADER = "<workflow_history_context>"
WORKFLOW_FOOTER = "</workflow_history_context>"
TEAM_HEADER = "<team_history_context>"
TEAM_FOOTER = "</team_history_context>"
INTERACTIONS_HEADER = "<member_interaction_context>"
INTERACTIONS_FOOTER = "</member_interaction_context>"
INTERACTIONS_INTRO = "See below interactions with other team members."


def field(entry: Any, *names: str, default: Any = None) -> Any:
    """The first present, non-None value of ``names`` on a dict or an object."""
    for name in names:
        value = entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)
        if value is not None:
            return value
    return default


def as_text(value: Any) -> str:
    """A value as prompt text: ``None`` empty, strings as they are, anything else as JSON."""
    return value_text(value) or ""


_closers: dict[str, re.Pattern[str]] = {}


def neutralise(text: str, footer: str) -> str:
    """Write a closing ``footer`` tag inside content as ``<\\/tag>`` so it cannot end the block."""
    if "</" not in text:
        return text
    tag = footer.strip()[2:-1]
    pattern = _closers.get(tag)
    if pattern is None:
        pattern = _closers[tag] = re.compile(r"</(\s*" + re.escape(tag) + r"\s*)>", re.IGNORECASE)
    return pattern.sub(r"<\\/\1>", text)


_get_input = operator.attrgetter("input")
_get_output = operator.attrgetter("output")


def _fast_body(entries: Sequence[Any]) -> str | None:
    """The common case at close to the cost of a plain ``str.join``: records whose inputs
    and outputs are all non-empty, default labels.

    The checks run as C-level passes (``map``/``all``/``set``) instead of per-entry Python
    code; anything unusual (a missing output, a closing tag in the content) sends the
    caller the long way, which is exact in every case.
    """
    try:
        if not (all(map(_get_input, entries)) and all(map(_get_output, entries))):
            return None
    except AttributeError:  # dicts, and objects without the two attributes
        return None
    # Values are strings in a Run (``from_dict`` turns structures into JSON text); a
    # hand-made record holding another type is rendered with ``str`` on this path.
    body = "".join([f"[run-{n}]\ninput: {e.input}\noutput: {e.output}\n\n" for n, e in enumerate(entries, 1)])
    # "<" is found by memchr; the exact "</" test runs only when one is there.
    if "<" in body and "</" in body:
        return None
    return body


def _clean(value: Any, footer: str) -> str:
    if type(value) is not str:
        value = as_text(value)
    return neutralise(value, footer) if "</" in value else value


def _stamp(entry: Any) -> str:
    when = field(entry, "started_at", "created_at", "timestamp")
    if isinstance(when, datetime):
        return f" ({when:%Y-%m-%d %H:%M:%S})"
    return f" ({when})" if when else ""


def _workflow_values(entry: Any) -> tuple[Any, Any]:
    """An entry's input and output as the workflow renderers read them (the output falls
    back to ``content``, then ``response``)."""
    if type(entry) is dict:
        value_in = entry.get("input")
        value_out = entry.get("output")
    else:
        try:
            value_in, value_out = entry.input, entry.output
        except AttributeError:
            value_in = getattr(entry, "input", None)
            value_out = getattr(entry, "output", None)
    if value_out is None:
        value_out = field(entry, "content", "response")
    return value_in, value_out


def _workflow_body(
    value_in: Any, value_out: Any, input_prefix: str, output_prefix: str, footer: str | None
) -> str:
    """A workflow entry's lines after its header: ``input:``/``output:`` when present, each
    value neutralised against ``footer`` (``None``: verbatim, as agno and agno-go write)."""
    if not value_in:
        value_in = ""
    elif type(value_in) is not str or "</" in value_in:
        value_in = as_text(value_in) if footer is None else _clean(value_in, footer)
    if not value_out:
        value_out = ""
    elif type(value_out) is not str or "</" in value_out:
        value_out = as_text(value_out) if footer is None else _clean(value_out, footer)
    if value_in and value_out:
        return f"{input_prefix}{value_in}\n{output_prefix}{value_out}\n"
    if value_in:
        return f"{input_prefix}{value_in}\n"
    if value_out:
        return f"{output_prefix}{value_out}\n"
    return ""


def render_workflow_history(
    entries: Sequence[Any],
    *,
    header: str = WORKFLOW_HEADER,
    footer: str = WORKFLOW_FOOTER,
    include_input: bool = True,
    include_output: bool = True,
    include_timestamp: bool = False,
    input_label: str = "input",
    output_label: str = "output",
    run_label: str = "run-{n}",
    verbatim: bool = False,
) -> str:
    """agno-go's ``FormatHistoryForAgent``: runs numbered from 1, oldest first, no trailing newline.

    With ``run_label="Workflow Run-{n}"``, ``input_label="User input"`` and
    ``output_label="Workflow output"`` it writes agno's (Python) workflow history block.
    ``verbatim`` leaves a closing tag in content as it is, as agno does (to rebuild exactly
    what agno sent); by default it is neutralised.
    """
    if not entries:
        return ""
    defaults = run_label == "run-{n}" and input_label == "input" and output_label == "output"
    if defaults and include_input and include_output and not include_timestamp:
        fast = _fast_body(entries)
        if fast is not None:
            return f"{header}\n{fast}{footer}"
    label_prefix, _, label_suffix = run_label.partition("{n}")
    input_prefix, output_prefix = f"{input_label}: ", f"{output_label}: "
    parts = [header, "\n"]
    append = parts.append
    for n, entry in enumerate(entries, start=1):
        # The general loop of history injection: one string per entry, helpers only when
        # a value needs converting or neutralising (``_workflow_body``, shared with
        # ``entry_body``, so an entry reads the same in a block and in provenance).
        value_in, value_out = _workflow_values(entry)
        stamp = _stamp(entry) if include_timestamp else ""
        body = _workflow_body(
            value_in if include_input else None,
            value_out if include_output else None,
            input_prefix,
            output_prefix,
            None if verbatim else footer,
        )
        append(f"[{label_prefix}{n}{label_suffix}]{stamp}\n{body}\n")
    append(footer)
    return "".join(parts)


def render_agno_workflow_history(entries: Sequence[Any], *, verbatim: bool = False) -> str:
    """agno's own workflow history block (``[Workflow Run-N]``, ``User input:``), ending
    with ``"\n"`` as agno 3.1 writes it: the step's message follows with nothing between
    (``agno/session/workflow.py``, ``get_workflow_history_context``; ``agno/workflow/step.py``)."""
    block = render_workflow_history(
        entries,
        run_label="Workflow Run-{n}",
        input_label="User input",
        output_label="Workflow output",
        verbatim=verbatim,
    )
    return block + "\n" if block else ""


def _keep(value: str, footer: str | None) -> str:
    return value if footer is None else neutralise(value, footer)


def _team_body(run: Any, footer: str | None) -> str:
    """A team history entry's lines after ``[run-N]``: ``input:`` and ``response:`` when present."""
    parts = []
    value = as_text(field(run, "input"))
    if value:
        parts.append(f"input: {_keep(value, footer)}\n")
    value = as_text(field(run, "response", "output", "content"))
    if value:
        parts.append(f"response: {_keep(value, footer)}\n")
    return "".join(parts)


def _member_body(item: Any, footer: str | None) -> str:
    """A member interaction entry: ``Member:``, ``Task:`` and ``Response:`` lines; the name
    falls back to the id, then ``Unknown``."""
    name = as_text(field(item, "member", "member_name", "name", "member_id", default="Unknown")) or "Unknown"
    task = as_text(field(item, "task"))
    response = as_text(field(item, "response", "output", "content"))
    return (
        f"Member: {_keep(name, footer)}\nTask: {_keep(task, footer)}\nResponse: {_keep(response, footer)}\n"
    )


# kind -> layout -> the labels of its entries: (header label, input label, output label).
ENTRY_LAYOUTS: dict[str, dict[str, tuple[str, str, str]]] = {
    "team_history": {"run": ("run-{n}", "input", "response")},
    "workflow_history": {
        "run": ("run-{n}", "input", "output"),  # agno-go, and our default
        "agno": ("Workflow Run-{n}", "User input", "Workflow output"),  # agno (Python)
    },
    "member_interactions": {"member": ("", "", "")},  # no numbers: Member / Task / Response
}
_FOOTERS = {
    "team_history": TEAM_FOOTER,
    "workflow_history": WORKFLOW_FOOTER,
    "member_interactions": INTERACTIONS_FOOTER,
}


def entry_body(kind: str, entry: Any, *, layout: str | None = None, verbatim: bool = False) -> str:
    """The exact text ``entry`` leaves in a history block of ``kind``: the lines after its
    header (``[run-N]``, ``[Workflow Run-N]``; a member entry has none), before the blank
    line that ends it. The renderers write every entry with this function's pieces, so
    ``render_team_history(runs)`` is the header, ``f"[run-{n}]\n{entry_body(...)}\n"`` for
    each run, and the footer.

    ``verbatim=False`` gives our renderers' form (a closing tag of the block's own kind in
    the content neutralised); ``verbatim=True`` gives agno's and agno-go's, which escape
    nothing. ``layout`` picks one of ``ENTRY_LAYOUTS[kind]`` (the first by default).
    """
    layouts = ENTRY_LAYOUTS[kind]
    layout = layout or next(iter(layouts))
    if layout not in layouts:
        raise ValueError(f"{kind} has no layout {layout!r} (known: {', '.join(layouts)})")
    footer = None if verbatim else _FOOTERS[kind]
    if kind == "team_history":
        return _team_body(entry, footer)
    if kind == "member_interactions":
        return _member_body(entry, footer)
    _, input_label, output_label = layouts[layout]
    value_in, value_out = _workflow_values(entry)
    return _workflow_body(value_in, value_out, f"{input_label}: ", f"{output_label}: ", footer)


def render_team_history(runs: Sequence[Any], *, verbatim: bool = False) -> str:
    """agno's team history for members: like the workflow block, ``response:``, ends with ``\\n``.
    ``verbatim`` leaves a closing tag in content as agno does (to rebuild what it sent)."""
    if not runs:
        return ""
    footer = None if verbatim else TEAM_FOOTER
    parts = [TEAM_HEADER, "\n"]
    for n, run in enumerate(runs, start=1):
        parts.append(f"[run-{n}]\n{_team_body(run, footer)}\n")
    parts.append(TEAM_FOOTER + "\n")
    return "".join(parts)


def render_member_interactions(interactions: Sequence[Any], *, verbatim: bool = False) -> str:
    """agno's shared member interactions; the name falls back to the id, then ``Unknown``.
    ``verbatim`` leaves a closing tag in content as agno does (to rebuild what it sent)."""
    if not interactions:
        return ""
    footer = None if verbatim else INTERACTIONS_FOOTER
    parts = [INTERACTIONS_HEADER, "\n", INTERACTIONS_INTRO, "\n"]
    for item in interactions:
        parts.append(f"{_member_body(item, footer)}\n")
    parts.append(INTERACTIONS_FOOTER + "\n")
    return "".join(parts)


def compose_member_task(
    task: str,
    *,
    interactions: Sequence[Any] | str | None = None,
    team_history: Sequence[Any] | str | None = None,
) -> str:
    """The member's user message as agno assembles it: blocks joined by ``"\\n\\n"``, empty ones left out.

    Each block ends with ``\\n``, so three newlines stand between parts, exactly as agno sends.
    """
    blocks = [
        interactions if isinstance(interactions, str) else render_member_interactions(interactions or []),
        team_history if isinstance(team_history, str) else render_team_history(team_history or []),
        task,
    ]
    return "\n\n".join(block for block in blocks if block)


# -- CoT process history (SmartClient) ---------------------------------------------

DEFAULT_DETAIL_ITEMS = 5
DEFAULT_RESULT_MAX_CHARS = 160
_ACTION_KEYS = ("goTo", "taskID", "action", "step", "task")
_RESULT_KEYS = ("summary", "result", "intent")


def _action_and_result(entry: Any) -> tuple[str, str]:
    action = as_text(field(entry, *_ACTION_KEYS, default="(entry)"))
    result = as_text(field(entry, *_RESULT_KEYS, default=""))
    if not result and isinstance(entry, Mapping):
        rest = {k: v for k, v in entry.items() if k not in _ACTION_KEYS and k != "ts"}
        result = json.dumps(rest, ensure_ascii=False, default=str) if rest else ""
    return action, result


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_cot_history(
    entries: Iterable[Any],
    *,
    detail_items: int = DEFAULT_DETAIL_ITEMS,
    result_max_chars: int = DEFAULT_RESULT_MAX_CHARS,
    truncate: int | None = None,
) -> str:
    """A CoT process's history in two zones; nothing is omitted unless ``truncate`` asks.

    Earlier entries: one ``N. action | result`` line each, the result cut at
    ``result_max_chars`` (with ``…``). The last ``detail_items`` entries: every field in
    full, with ``intent`` and ``stepAfter``. ``truncate=N`` (partial prompts) keeps only
    the last N entries and says how many earlier ones were left out.
    """
    items = list(entries)
    if not items:
        return ""
    lines = []
    start = 0
    if truncate is not None and 0 <= truncate < len(items):
        start = len(items) - truncate
        lines.append(f"[{start} earlier entries omitted]")
    detail_from = max(start, len(items) - max(detail_items, 0))
    for n in range(start, detail_from):
        action, result = _action_and_result(items[n])
        result = _one_line(result)
        if len(result) > result_max_chars:
            result = result[:result_max_chars] + "…"
        lines.append(f"{n + 1}. {_one_line(action)} | {result}")
    for n in range(detail_from, len(items)):
        entry = items[n]
        action, _ = _action_and_result(entry)
        lines.append(f"{n + 1}. {action}")
        if isinstance(entry, Mapping):
            for key, value in entry.items():
                if key in _ACTION_KEYS and as_text(value) == action:
                    continue
                lines.append(f"   {key}: {as_text(value)}")
        else:
            lines.append(f"   {as_text(entry)}")
    return "\n".join(lines)
