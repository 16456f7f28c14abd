"""Where the history blocks of a prompt begin and end, read from the renderers' layout.

agno writes content into its blocks verbatim: a member's answer, a tool result or a
workflow output may hold ``</team_history_context>`` (prompt injection is ordinary in tool
results), so the first closing tag is not the end of a block. What settles a boundary is
the layout the renderers write (``context.py`` holds the same constants):

- a member's message is ``[interactions + "\\n\\n"] + [team history + "\\n\\n"] + task``,
  each block ending with its closing tag and ``"\\n"``, and every entry ending with a
  blank line, so a real end is ``"\\n\\n" + closing tag + "\\n"`` followed by ``"\\n\\n"``;
- a workflow step's message is ``workflow history + message``, the block ending with its
  closing tag and ``"\\n"``.

Where the text after the blocks is known (the member's task from the leader's delegation,
the step's message from the workflow input or the previous step), only one split can be
right and the boundary is exact. Where it is not known and several closing tags could end
a block, the longest reading is kept (nothing the model saw is ever cut off) and the
result says the boundary is ambiguous and which text could have moved it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .context import (
    INTERACTIONS_FOOTER,
    INTERACTIONS_HEADER,
    INTERACTIONS_INTRO,
    TEAM_FOOTER,
    TEAM_HEADER,
    WORKFLOW_FOOTER,
    WORKFLOW_HEADER,
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

    @property
    def settings(self) -> dict[str, object]:
        """What the stored context records about its boundary."""
        if self.exact:
            return {"boundary": "exact"}
        return {
            "boundary": "ambiguous",
            "boundary_readings": self.readings,
            "boundary_note": (
                "the content holds the block's closing tag where the block could end; the "
                "longest reading is kept, so nothing the model saw is cut off"
            ),
        }


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


def _readings_ending_at(
    end: int, inter_ends: list[int], team_starts: list[int], team_ends: set[int]
) -> list[list[tuple[str, int, int]]]:
    """The readings whose last block ends at ``end``: interactions alone, or a team
    history block (alone or after interactions) that starts early enough."""
    readings: list[list[tuple[str, int, int]]] = []
    if end in team_ends:
        for start in team_starts:
            if start + len(OPENERS["team_history"]) < end:
                head = [("member_interactions", 0, start - len(JOIN))] if start else []
                readings.append([*head, ("team_history", start, end)])
    if end in inter_ends:
        readings.append([("member_interactions", 0, end)])
    return readings


def locate_member_blocks(message: str, tasks: Iterable[str] = ()) -> list[Located]:
    """The interactions and team history blocks at the head of a team member's message.

    ``tasks`` are the texts that may follow the blocks (the tasks the leader delegated):
    a reading whose rest is one of them is the one agno sent. Linear in the message.
    """
    inter_ends, team_starts, team_ends = _member_candidates(message)
    ends = sorted(set(inter_ends) | {e for e in team_ends if team_starts and e > team_starts[0]})
    if not ends:
        return []
    team_set = set(team_ends)
    matching: list[list[tuple[str, int, int]]] = []
    for task in set(tasks):
        end = len(message) - len(task) - len(JOIN) if task else len(message)
        if end > 0 and message.endswith(task) and _joined(message, end):
            matching += _readings_ending_at(end, inter_ends, team_starts, team_set)
    if len(matching) == 1:
        chosen, readings = matching[0], 1
    elif matching:
        chosen, readings = max(matching, key=lambda r: (r[-1][2], len(r), r[0][2])), len(matching)
    else:
        # No known task settles it: the longest reading, the most text kept in the blocks.
        options = _readings_ending_at(ends[-1], inter_ends, team_starts, team_set)
        chosen = max(options, key=lambda r: (len(r), r[0][2]))
        # Counted without listing them: each interactions end is one reading, each team
        # history end one per start before it.
        opener = len(OPENERS["team_history"])
        readings = len(set(inter_ends)) + sum(
            bisect.bisect_left(team_starts, end - opener) for end in set(team_ends) if end in ends
        )
    return [Located(kind, message[s:e], s, e, readings == 1, readings) for kind, s, e in chosen]


def locate_workflow_block(message: str, step_messages: Iterable[str] = ()) -> Located | None:
    """The workflow history block at the head of a step's message (agno writes the block,
    then the step's message with nothing between). ``step_messages`` are the texts that may
    follow it (the workflow's input, the previous step's output)."""
    kind = "workflow_history"
    if not message.startswith(OPENERS[kind]):
        return None
    ends = list(_ends(message, kind, 0, len(message)))
    if not ends:
        return None
    known = set(step_messages)
    matching = [end for end in ends if message[end:] in known]
    if len(matching) == 1:
        end, exact, count = matching[0], True, 1
    else:
        pool = matching or ends
        end, exact, count = max(pool), len(pool) == 1, len(pool)
    return Located(kind, message[:end], 0, end, exact, count)


__all__ = ["CLOSERS", "OPENERS", "Located", "locate_member_blocks", "locate_workflow_block"]
