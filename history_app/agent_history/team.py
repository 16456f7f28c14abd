"""Team history: team runs and member interactions per session, as agno keeps them.

``TeamHistory`` answers the two questions a team leader asks before delegating: what
happened in earlier team runs of this session (``team_history``), and what the members
have done so far in this run (``interactions``). ``member_task`` assembles the member's
message in agno's exact layout and records the injected blocks on the current run.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .context import compose_member_task, render_member_interactions, render_team_history
from .recorder import record_injection
from .records import MemberInteraction, Run


class TeamHistory:
    def __init__(self, *, num_team_history_runs: int = 3):
        self.num_team_history_runs = num_team_history_runs
        self._runs: dict[str, list[Run]] = defaultdict(list)
        self._interactions: dict[tuple[str, str], list[MemberInteraction]] = defaultdict(list)
        self._lock = threading.Lock()

    def add_run(self, session_id: str, run: Run | Mapping[str, Any]) -> Run:
        """Keep a team run (any status; only completed ones become history)."""
        record = run if isinstance(run, Run) else Run.from_dict({"session_id": session_id, **run})
        with self._lock:
            self._runs[session_id].append(record)
        return record

    def add_interaction(
        self,
        session_id: str,
        run_id: str,
        *,
        member: str,
        task: str,
        response: str,
        member_run_id: str | None = None,
    ) -> MemberInteraction:
        interaction = MemberInteraction(
            member=member or "Unknown", task=task, response=response, member_run_id=member_run_id
        )
        with self._lock:
            self._interactions[(session_id, run_id)].append(interaction)
        return interaction

    def interactions(self, session_id: str, run_id: str) -> list[MemberInteraction]:
        """Interactions so far in this run, in order."""
        with self._lock:
            return list(self._interactions.get((session_id, run_id), []))

    def team_history(
        self, session_id: str, num_runs: int | None = None, *, team_id: str | None = None
    ) -> list[Run]:
        """The last completed team runs: top-level ones, or with ``team_id`` that team's (a
        nested sub-team has its own history). ``num_runs <= 0`` gives nothing, as in agno."""
        num_runs = self.num_team_history_runs if num_runs is None else num_runs
        if num_runs <= 0:
            return []
        with self._lock:
            runs = [
                r
                for r in self._runs.get(session_id, [])
                if r.status == "completed"
                and (r.team_id == team_id if team_id is not None else r.parent_run_id is None)
            ]
        return runs[-num_runs:]

    def history_for_member(self, session_id: str, member: str) -> list[MemberInteraction]:
        """Every interaction of ``member`` in this session, oldest first."""
        with self._lock:
            return [
                i
                for (sid, _), items in self._interactions.items()
                if sid == session_id
                for i in items
                if i.member == member
            ]

    def member_task(
        self,
        session_id: str,
        run_id: str,
        task: str,
        *,
        member: str = "",
        share_member_interactions: bool = True,
        add_team_history_to_members: bool = True,
        num_team_history_runs: int | None = None,
        team_id: str | None = None,
    ) -> str:
        """The member's user message, with the blocks agno would add, each recorded."""
        interactions = self.interactions(session_id, run_id) if share_member_interactions else []
        history = (
            self.team_history(session_id, num_team_history_runs, team_id=team_id)
            if add_team_history_to_members
            else []
        )
        interactions_text = render_member_interactions(interactions)
        history_text = render_team_history(history)
        record_injection(
            interactions_text,
            kind="member_interactions",
            target="user",
            step=member,
            source_run_ids=[i.member_run_id for i in interactions if i.member_run_id],
        )
        record_injection(
            history_text,
            kind="team_history",
            target="user",
            step=member,
            source_run_ids=[r.run_id for r in history],
            settings={"num_team_history_runs": num_team_history_runs or self.num_team_history_runs},
        )
        return compose_member_task(task, interactions=interactions_text, team_history=history_text)
