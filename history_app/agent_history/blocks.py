"""Where the history blocks of a prompt begin and end, read from the renderers' layout.

agno writes content into its blocks verbatim: a member's answer, a tool result or a
workflow output may hold ``</team_history_context>`` (prompt injection is ordinary in tool
results), so the first closing tag is not the end of a block. What settles a boundary is
the layout the renderers write (``context.py`` holds the same constants):

- a member's message is ``[interactions + "\\n\\n"] + [team history + "\\n\\n"] + task``,
  each block ending with its closing tag and ``"\\n"``, and every entry ending with a
  blank line, so a real end is ``"\\n\\n" + closing tag + "\\n"`` followed by ``"\\n\\n"``;
- a workflow step's message is ``workflow history + message``, the block ending with its
  closing tag and ``"\\n"``; agno-go's block ends with the closing tag alone and ends the
  system message it is appended to.

Where the text after the blocks is known (the member's task from the leader's delegation,
the step's message from the workflow input or the previous step), only one split can be
right and the boundary is exact. Where it is not known and several closing tags could end
a block, the longest reading is kept (nothing the model saw is ever cut off) and the
result says the boundary is ambiguous and which text could have moved it.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from .context import (
    ENTRY_LAYOUTS,
    INTERACTIONS_FOOTER,
    INTERACTIONS_HEADER,
    INTERACTIONS_INTRO,
    TEAM_FOOTER,
    TEAM_HEADER,
    WORKFLOW_FOOTER,
    WORKFLOW_HEADER,
    entry_body,
)

# kind -> (what opens the block, what closes it); both include the block's own newlines.
OPENERS = {
    "member_interactions": f"{INTERACTIONS_HEADER}\n{INTERACTIONS_INTRO}\n",
    "team_history": f"{TEAM_HEADER}\n",
    "workflow_history": f"{WORKFLOW_HEADER}\n",
}
CLOSERS = {
    "member_interactions": f"\n\n{INTERACTIONS_FOOTER}\n",
    "team_history": f"\n\n{TEAM_FOOTER}\n",
    "workflow_history": f"\n\n{WORKFLOW_FOOTER}\n",
}
MEMBER_ORDER = ("member_interactions", "team_history")
JOIN = "\n\n"  # between a member message's parts


@dataclass(frozen=True)
class Located:
    """One block of a message: its exact text and place, and how sure the boundary is."""

    kind: str
    text: str
    start: int
    end: int
    exact: bool
    # How many readings of the message the layout allows (1 when exact).
    readings: int = 1
    # Where else, inside this block's text, another reading ends it: offsets in ``text`` of
    # the closing tag (``"\n\n</tag>\n"``) that content forged or that really ends it; the
    # first ``MAX_PLACES``, and how many more there are.
    could_end_at: tuple[int, ...] = ()
    more_places: int = 0

    @property
    def settings(self) -> dict[str, object]:
        """What the stored context records about its boundary: for an ambiguous one, the
        number of readings and the entry and field of the block holding each closing tag
        where it could also end (the first ``MAX_PLACES`` of them)."""
        if self.exact:
            return {"boundary": "exact"}
        places = describe_places(self.text, self.kind, self.could_end_at)
        note = (
            "the content holds the block's closing tag where the block could end; the "
            "longest reading is kept, so nothing the model saw is cut off"
        )
        if places:
            more = f" (and {self.more_places} more)" if self.more_places else ""
            note = (
                f"the block could also end at the closing tag in {'; in '.join(places)}{more}; the "
                "longest reading is kept, so nothing the model saw is cut off"
            )
        settings: dict[str, object] = {
            "boundary": "ambiguous",
            "boundary_readings": self.readings,
            "boundary_places": places,
            "boundary_note": note,
        }
        if self.more_places:
            settings["boundary_more_places"] = self.more_places
        return settings


MAX_PLACES = 10


def _ends(message: str, kind: str, start: int, stop: int) -> Iterator[int]:
    """Every place a block of ``kind`` opened at ``start`` could end, up to ``stop``."""
    closer = CLOSERS[kind]
    at = message.find(closer, start)
    while at != -1 and at + len(closer) <= stop:
        yield at + len(closer)
        at = message.find(closer, at + 1)


def _joined(message: str, end: int) -> bool:
    """A block ending at ``end`` is followed by the join, or ends the message (an empty task
    leaves the join out)."""
    return end == len(message) or message.startswith(JOIN, end)


def _member_candidates(message: str) -> tuple[list[int], list[int], list[int]]:
    """Where the interactions block could end, where a team history block could start,
    and where it could end: every place the layout allows, each followed by the join."""
    inter, team = "member_interactions", "team_history"
    inter_ends: list[int] = []
    if message.startswith(OPENERS[inter]):
        inter_ends = [e for e in _ends(message, inter, 0, len(message)) if _joined(message, e)]
    team_starts = [0] if message.startswith(OPENERS[team]) else []
    team_starts += [e + len(JOIN) for e in inter_ends if message.startswith(OPENERS[team], e + len(JOIN))]
    team_ends: list[int] = []
    if team_starts:
        first = team_starts[0]
        team_ends = [e for e in _ends(message, team, first, len(message)) if _joined(message, e)]
    return inter_ends, team_starts, team_ends


def locate_member_blocks(message: str, tasks: Iterable[str] = (), known: Iterable[str] = ()) -> list[Located]:
    """The interactions and team history blocks at the head of a team member's message.

    ``tasks`` are the texts that may follow the blocks (the tasks the leader delegated to
    this member): a reading whose rest is one of them is the one agno sent, and when only
    one reading fits, the boundary is exact. Readings are counted, never listed: linear in
    the message (and in the tasks), whatever the content forges.

    ``known`` are texts a block of the message may be, rebuilt from its sources (the team
    history blocks agno renders from the member's earlier runs): where the tasks leave
    more than one reading (a sub-team's history quotes its earlier messages, blocks and
    all), the one reading whose team history block is one of them is the one agno sent.
    """
    inter_ends, team_starts, team_ends = _member_candidates(message)
    ends = sorted(set(inter_ends) | {e for e in team_ends if team_starts and e > team_starts[0]})
    if not ends:
        return []
    inter_set, team_set = set(inter_ends), set(team_ends)
    opener = len(OPENERS["team_history"])

    def count_at(end: int) -> int:
        """Readings whose last block ends at ``end``: interactions alone, or a team history
        block from each start early enough."""
        team = bisect.bisect_left(team_starts, end - opener) if end in team_set else 0
        return (1 if end in inter_set else 0) + team

    def longest_at(end: int) -> list[tuple[str, int, int]]:
        """The reading ending at ``end`` that keeps the most in the blocks: a team history
        block from its latest start (after the interactions block when it has one)."""
        team = bisect.bisect_left(team_starts, end - opener) if end in team_set else 0
        if team:
            start = team_starts[team - 1]
            head = [("member_interactions", 0, start - len(JOIN))] if start else []
            return [*head, ("team_history", start, end)]
        return [("member_interactions", 0, end)]

    fitting = set()
    for task in set(tasks):
        # An empty task may leave the join out or keep it: both readings are counted (a
        # forged boundary that another task explains is then ambiguous, not exact).
        for end in (
            [len(message) - len(task) - len(JOIN)] if task else [len(message), len(message) - len(JOIN)]
        ):
            if end > 0 and message.endswith(task) and _joined(message, end) and count_at(end):
                fitting.add(end)
    if fitting:
        readings = sum(count_at(end) for end in fitting)
        chosen = longest_at(max(fitting))
        if readings > 1:
            settled = _settled_by_known(message, fitting, team_starts, inter_set, team_set, set(known))
            if settled is not None:
                chosen, readings = settled, 1
    else:
        # No known task settles it: the longest reading, the most text kept in the blocks.
        chosen = longest_at(ends[-1])
        readings = len(inter_set) + sum(
            bisect.bisect_left(team_starts, end - opener) for end in team_set if end in ends
        )
    candidates = [(end, "member_interactions") for end in inter_ends]
    candidates += [(end, "team_history") for end in team_ends]
    located = []
    for kind, s, e in chosen:
        inside = _inside(candidates, s, e)
        more = max(0, len(inside) - MAX_PLACES)
        located.append(Located(kind, message[s:e], s, e, readings == 1, readings, inside[:MAX_PLACES], more))
    return located


def _settled_by_known(
    message: str,
    ends: set[int],
    team_starts: list[int],
    inter_set: set[int],
    team_set: set[int],
    known: set[str],
) -> list[tuple[str, int, int]] | None:
    """The one reading among those ending at ``ends`` whose team history block is one of
    the ``known`` texts (its interactions block, if any, is then what precedes it), or
    None when none or more than one is."""
    if not known:
        return None
    found = []
    for end in ends:
        if end not in team_set:
            continue
        for start in team_starts:
            if start + len(OPENERS["team_history"]) <= end and message[start:end] in known:
                head = [("member_interactions", 0, start - len(JOIN))] if start else []
                if not start or start - len(JOIN) in inter_set:
                    found.append([*head, ("team_history", start, end)])
    return found[0] if len(found) == 1 else None


def _inside(candidates: Iterable[tuple[int, str]], start: int, end: int) -> tuple[int, ...]:
    """The closing tags (offsets from ``start``) of the candidate ends strictly inside the
    block ``[start, end)``: where another reading ends a block."""
    return tuple(
        sorted(
            {
                at - len(CLOSERS[kind]) - start
                for at, kind in candidates
                if at != end and start < at - len(CLOSERS[kind]) and at <= end
            }
        )
    )


def locate_workflow_block(message: str, step_messages: Iterable[str] = ()) -> Located | None:
    """The workflow history block at the head of a step's message (agno writes the block,
    then the step's message with nothing between). ``step_messages`` are the texts that may
    follow it (the workflow's input, the previous step's output)."""
    kind = "workflow_history"
    if not message.startswith(OPENERS[kind]):
        return None
    ends = list(_ends(message, kind, 0, len(message)))
    if message.endswith(CLOSERS[kind][:-1]):
        # agno-go appends its block (no newline after the closing tag) to the system
        # message, which it then ends: the end of the message is the end of the block.
        ends.append(len(message))
    if not ends:
        return None
    known = set(step_messages)
    matching = [end for end in ends if message[end:] in known]
    if len(matching) == 1:
        end, exact, count = matching[0], True, 1
    else:
        pool = matching or ends
        end, exact, count = max(pool), len(pool) == 1, len(pool)
    inside = () if exact else _inside([(other, kind) for other in matching or ends], 0, end)
    more = max(0, len(inside) - MAX_PLACES)
    return Located(kind, message[:end], 0, end, exact, count, inside[:MAX_PLACES], more)


# -- settling a member's blocks once the team run is known ------------------------------

MEMBER_KINDS = frozenset(MEMBER_ORDER)
SETTLED_BY = "the task the team run delegated"


def handed_tasks(team_run: Any, member_run: Any) -> list[str]:
    """The tasks a team run (a ``Run`` record) handed to one member run: its member
    interactions naming that run, and the ``task`` of its ``delegate…`` tool calls whose
    ``member_id`` is the member's ``agent_id`` (``metadata``). Another member's task may
    fit a forged boundary of this one, so only the member's own settle its blocks."""
    tasks = [
        item.task
        for item in getattr(team_run, "member_interactions", ())
        if item.task and item.member_run_id == member_run.run_id
    ]
    metadata = getattr(member_run, "metadata", None) or {}
    agent_id = metadata.get("agent_id") if isinstance(metadata, dict) else None
    if isinstance(agent_id, str) and agent_id:
        for iteration in getattr(team_run, "iterations", ()):
            for call in iteration.tool_calls:
                params = call.params
                if (
                    call.tool.startswith("delegate")
                    and isinstance(params, dict)
                    and params.get("member_id") in (agent_id, None)  # None: to every member
                ) and isinstance(params.get("task"), str):
                    tasks.append(params["task"])
    return tasks


def is_ambiguous(contexts: Iterable[Any]) -> bool:
    """Whether a member block among ``contexts`` (``InjectedContext`` records) was stored
    with an ambiguous boundary."""
    return any(c.kind in MEMBER_KINDS and (c.settings or {}).get("boundary") == "ambiguous" for c in contexts)


def settle_member_contexts(
    contexts: list[Any], message: str, tasks: Iterable[str], known: Iterable[str] = ()
) -> list[Any] | None:
    """A member run's contexts with their ambiguous blocks located again in ``message``
    (the member's whole message: its ``input``) now that ``tasks`` are known; None when
    they stay as they are: nothing ambiguous, ``message`` is not the one the blocks were
    read from, or no task settles them.

    A member run that arrives before its team run keeps the longest reading; when the team
    run's tasks are known (it arrived first, or later), only one reading can be right.
    ``known``: the team history blocks it may have been sent, rebuilt from its earlier
    runs (``locate_member_blocks``), for a sub-team's history that quotes its messages."""
    member = [c for c in contexts if c.kind in MEMBER_KINDS]
    if not is_ambiguous(member) or not isinstance(message, str):
        return None
    if [b.text for b in locate_member_blocks(message)] != [c.text for c in member]:
        return None  # not the message these blocks came from (or it was redacted differently)
    located = locate_member_blocks(message, tasks, known)
    if not located or not all(block.exact for block in located):
        return None
    template = member[0]
    settled = []
    for block in located:
        kept = {k: v for k, v in (template.settings or {}).items() if not k.startswith("boundary")}
        settled.append(
            replace(
                template,
                text=block.text,
                kind=block.kind,
                settings={**kept, **block.settings, "settled_by": SETTLED_BY},
                # The sources found for the ambiguous block were those of its longest
                # reading: a block of another kind is linked afresh.
                source_run_ids=list(template.source_run_ids) if block.kind == template.kind else [],
            )
        )
    first = contexts.index(template)
    rest = [c for c in contexts if c.kind not in MEMBER_KINDS]
    return rest[:first] + settled + rest[first:]


# -- the entries of a block -------------------------------------------------------------
#
# A block is its opener, its entries, and its closing tag. A numbered entry is a header line
# (``[run-N]``, ``[Workflow Run-N]``, possibly a timestamp), the lines ``entry_body`` writes,
# and a blank line; entries are numbered 1, 2, 3… and each header after the first follows a
# blank line. A member interaction entry is ``Member: …\nTask: …\nResponse: …\n`` and a
# blank line, with no number. Content is arbitrary (agno escapes nothing), so a header line
# inside content reads like a real one: the split below takes every header that can be the
# next in the numbering, and calls an entry certain only when no other reading of the
# numbering moves its start or its end. One reading no layout can rule out: content that
# continues the numbering after the real last entry (``\n\n[run-3]\n…`` inside entry 2 of
# two). The split then reads the forged entries as entries; what it calls certain is still
# never text of two sources (``tests/test_blocks.py`` proves it for every kind and layout),
# and provenance links an entry only where its text is byte-identical to a stored run's.

FOOTERS = {
    "member_interactions": INTERACTIONS_FOOTER,
    "team_history": TEAM_FOOTER,
    "workflow_history": WORKFLOW_FOOTER,
}
LINKABLE_KINDS = ("team_history", "workflow_history", "member_interactions")
# A header line of entry N: its label, at most 9 digits without a leading zero, an optional
# timestamp (" (…)"), the newline. Only at the start of the entries or after a blank line.
_HEADERS = {
    (kind, layout): re.compile(
        r"(?:^|(?<=\n\n))\["
        + re.escape(label.partition("{n}")[0])
        + r"([1-9][0-9]{0,8})"
        + re.escape(label.partition("{n}")[2])
        + r"\](?: \([^\n]*\))?\n"
    )
    for kind, layouts in ENTRY_LAYOUTS.items()
    if kind != "member_interactions"
    for layout, (label, _, _) in layouts.items()
}
_MEMBER_START = re.compile(r"(?:^|(?<=\n\n))Member: [^\n]*\nTask: ")
_RESPONSE = "\nResponse: "


@dataclass(frozen=True)
class Entry:
    """One entry of a block: where it is in the text, the text a source run left in it
    (``body``: what ``entry_body`` writes), and whether the layout settles it."""

    position: int  # 0-based, in block order (entry N of a numbered block is position N - 1)
    start: int  # offsets in the text given to ``split_entries``
    end: int
    header_end: int  # end of the header line (``[run-N]…``, or the ``Member:`` line)
    body: str
    layout: str
    certain: bool

    @property
    def key(self) -> str | None:
        """What identifies the entry's source (``entry_key``); None when not certain."""
        return entry_key(self.layout, self.body) if self.certain else None


def block_region(text: str, kind: str) -> tuple[int, int] | None:
    """Where the entries of the ``kind`` block in ``text`` lie: after its opener, up to the
    blank line before its last closing tag (the text around a block is not part of it)."""
    opener = OPENERS[kind]
    start = text.find(opener)
    if start == -1:
        return None
    start += len(opener)
    end = text.rfind("\n" + FOOTERS[kind])
    if end < start or not text.endswith("\n\n", start, end + 1):
        return None
    return start, end + 1


def split_entries(text: str, kind: str) -> list[Entry]:
    """The entries of the ``kind`` block in ``text``, in order, each marked certain or not.

    Numbered blocks: every header of number N+1 after a possible start of entry N is a
    possible start of entry N+1 (a forged ``[run-2]`` inside entry 1, before the real one,
    gives two). An entry is certain when it has one possible start and one possible end and
    every reading reaches it; a header whose number is not the next (``[run-99]`` inside
    entry 1) is content. Member interaction blocks have no numbers: each ``Member: …`` line
    followed by a ``Task:`` line after a blank line starts an entry, and an entry is certain
    when its ``Response:`` line is the only one (otherwise the task or the response forged
    one and the split inside it is unknown). Linear in the text.
    """
    if kind not in LINKABLE_KINDS:
        return []
    region = block_region(text, kind)
    if region is None:
        return []
    start, end = region
    if kind == "member_interactions":
        return _member_entries(text, start, end)
    for layout in ENTRY_LAYOUTS[kind]:
        found = _numbered_entries(text, start, end, kind, layout)
        if found:
            return found
    return []


def _numbered_entries(text: str, start: int, end: int, kind: str, layout: str) -> list[Entry]:
    pattern = _HEADERS[(kind, layout)]
    region = text[start:end]
    headers: dict[int, list[tuple[int, int]]] = {}
    for match in pattern.finditer(region):
        headers.setdefault(int(match.group(1)), []).append((match.start(), match.end()))
    first = headers.get(1, [])
    if not first or first[0][0] != 0:
        return []
    # possible[n]: the possible (start, header end) of entry n, in every reading so far.
    possible = [[first[0]]]
    every_reading_goes_on = [True]
    while True:
        earliest = min(h_end for _, h_end in possible[-1])
        following = [h for h in headers.get(len(possible) + 1, []) if h[0] > earliest]
        if not following:
            break
        # A reading whose entry n starts after the last of these ends the block there.
        latest = max(s for s, _ in possible[-1])
        every_reading_goes_on.append(every_reading_goes_on[-1] and following[-1][0] > latest)
        possible.append(following)
    entries = []
    for index, starts in enumerate(possible):
        (entry_start, header_end), *others = starts
        if index + 1 < len(possible):
            ends = [s for s, _ in possible[index + 1] if s > header_end]
            entry_end = ends[0] if ends else len(region)
        else:
            ends, entry_end = [], len(region)
        certain = (
            not others
            and len(ends) <= 1
            and every_reading_goes_on[index]
            and (index + 1 == len(possible) or every_reading_goes_on[index + 1])
        )
        body = region[header_end : entry_end - 1]
        entries.append(
            Entry(index, start + entry_start, start + entry_end, start + header_end, body, layout, certain)
        )
    return entries


def _member_entries(text: str, start: int, end: int) -> list[Entry]:
    region = text[start:end]
    starts = [m.start() for m in _MEMBER_START.finditer(region)]
    if not starts or starts[0] != 0:
        return []
    entries = []
    for index, entry_start in enumerate(starts):
        entry_end = starts[index + 1] if index + 1 < len(starts) else len(region)
        header_end = region.index("\n", entry_start) + 1
        body = region[entry_start : entry_end - 1]
        certain = entry_key("member", body) is not None
        entries.append(
            Entry(index, start + entry_start, start + entry_end, start + header_end, body, "member", certain)
        )
    return entries


def describe_places(text: str, kind: str, offsets: Iterable[int]) -> list[str]:
    """Where each of ``offsets`` lies in the ``kind`` block ``text``, for a person: the
    field and the entry (``the Response of entry 2 (Member: Writer)``, ``the output of
    entry 1 ([run-1])``), or ``the block's text`` when no entry holds it. The block is split
    once, whatever the number of offsets."""
    entries = split_entries(text, kind)
    starts = [entry.start for entry in entries]
    places = []
    for offset in offsets:
        at = bisect.bisect_right(starts, offset) - 1
        entry = entries[at] if at >= 0 else None
        if entry is None or not entry.start <= offset < entry.end:
            places.append("the block's text")
            continue
        if entry.layout == "member":
            name = text[entry.start + len("Member: ") : entry.header_end - 1]
            label = f"entry {entry.position + 1} (Member: {name[:60]})"
            fields: tuple[str, ...] = ("Task", "Response")
        else:
            label = f"entry {entry.position + 1} ({text[entry.start : entry.header_end - 1][:60]})"
            fields = ENTRY_LAYOUTS[kind][entry.layout][1:]
        field_at = {name: text.rfind(f"\n{name}: ", entry.header_end - 1, offset + 1) for name in fields}
        name, found = max(field_at.items(), key=lambda item: item[1])
        places.append(f"the {name} of {label}" if found != -1 else label)
    return places


def entry_key(layout: str, body: str) -> str | None:
    """What identifies an entry's source run, from the entry's ``body``: the body itself,
    except for member interactions: the ``Member:`` and ``Response:`` lines without the
    task (the member run holds the answer, not the task it was handed). None when the
    ``Response:`` line cannot be told from the content."""
    if layout != "member":
        return body if body else None
    if not body.startswith("Member: ") or not body.endswith("\n"):
        return None
    line_end = body.find("\n")
    if not body.startswith("Task: ", line_end + 1):
        return None
    rest = body[line_end + 1 + len("Task: ") :]  # the task, then "\nResponse: …"
    at = rest.find(_RESPONSE)
    if at == -1 or rest.find(_RESPONSE, at + 1) != -1:
        return None
    return f"{body[: line_end + 1]}Response: {rest[at + len(_RESPONSE) :]}"


def source_keys(kind: str, entry: Any) -> set[str]:
    """Every key ``entry`` (a run, or a dict with the renderers' fields) can leave in a
    block of ``kind``: each layout, in our neutralised form and in agno's verbatim form."""
    keys = set()
    for layout in ENTRY_LAYOUTS[kind]:
        for verbatim in (False, True):
            key = entry_key(layout, entry_body(kind, entry, layout=layout, verbatim=verbatim))
            if key is not None:
                keys.add(key)
    return keys


def fingerprint(kind: str, key: str, scope: str = "") -> str:
    """The SHA-256 (hex) of an entry's key, within its kind and scope (for member
    interactions: the team run the members ran under)."""
    return hashlib.sha256(f"{kind}\x00{scope}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()


__all__ = [
    "CLOSERS",
    "LINKABLE_KINDS",
    "OPENERS",
    "Entry",
    "Located",
    "block_region",
    "describe_places",
    "entry_key",
    "fingerprint",
    "handed_tasks",
    "is_ambiguous",
    "locate_member_blocks",
    "locate_workflow_block",
    "settle_member_contexts",
    "source_keys",
    "split_entries",
]
