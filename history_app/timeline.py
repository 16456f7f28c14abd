"""A session's runs and its timeline: one query per table, nested lists capped per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber

from . import models


def session_runs(*, session: models.Session) -> list[models.Run]:
    """The session's runs in the order they started (one query)."""
    return list(
        models.Run.objects.filter(session=session)
        .defer("output_html", "metadata")
        .order_by("started_at", "received_at", "id")
    )


TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")


@dataclass
class TimelineRow:
    """One line of a session timeline: a run (nested by depth) or an idle gap."""

    run: models.Run | None = None
    depth: int = 0
    number: str = ""
    steps: list[models.Iteration] | None = None
    steps_total: int = 0
    interactions: list[models.MemberInteraction] | None = None
    interactions_total: int = 0
    idle_ms: int | None = None
    tokens: dict[str, int] | None = None


def first_of_each_run(queryset: Any, limit: int) -> dict[int, tuple[list, int]]:
    """Run pk -> (its first ``limit`` rows by position, how many it has), in one query that
    returns at most ``limit`` rows a run, however many each run has."""
    by_position = [F("position").asc(), F("id").asc()]
    rows = (
        queryset.annotate(
            rank=Window(RowNumber(), partition_by=[F("run_id")], order_by=by_position),
            run_total=Window(Count("id"), partition_by=[F("run_id")]),
        )
        .filter(rank__lte=limit)
        .order_by("run_id", "rank")
    )
    found: dict[int, tuple[list, int]] = {}
    for row in rows:
        found.setdefault(row.run_id, ([], row.run_total))[0].append(row)
    return found


def session_timeline(*, session: models.Session, idle_gap_ms: int, nested: int = 20) -> dict[str, Any]:
    """A session's runs as a nested timeline: one query, plus one for member interactions
    when the session has team runs and one for steps when it has workflow runs, whatever
    the number of runs. Each run carries at most ``nested`` interactions or steps, with
    their total (the run page and its JSON export hold the rest).

    Member runs sit under the team run that spawned them and a workflow's step runs under
    the workflow run (by ``parent_run_id``; a child whose parent is not in the session is
    shown at the top). Team runs carry their member interactions, workflow runs their
    steps (iterations). Between two top-level runs, a pause longer than ``idle_gap_ms`` is
    a row of its own. The counts follow the seeds' ``WorkflowSession``: all runs,
    completed (finished: completed, failed or cancelled), successful, failed.
    """
    runs = session_runs(session=session)
    by_id = {run.run_id: run for run in runs}
    children: dict[str, list[models.Run]] = {}
    top: list[models.Run] = []
    for run in runs:
        if run.parent_run_id and run.parent_run_id in by_id and run.parent_run_id != run.run_id:
            children.setdefault(run.parent_run_id, []).append(run)
        else:
            top.append(run)
    kinds = {run.kind for run in runs}
    interactions: dict[int, tuple[list, int]] = {}
    if "team" in kinds:
        team_interactions = models.MemberInteraction.objects.filter(run__session=session, run__kind="team")
        interactions = first_of_each_run(team_interactions, nested)
    steps: dict[int, tuple[list, int]] = {}
    if "workflow" in kinds:
        workflow_steps = models.Iteration.objects.filter(run__session=session, run__kind="workflow")
        steps = first_of_each_run(workflow_steps.only("run_id", "position", "index", "name"), nested)

    rows: list[TimelineRow] = []
    seen: set[str] = set()

    def add(run: models.Run, depth: int, number: str) -> None:
        if run.run_id in seen:  # a cycle in parent ids: show each run once
            return
        seen.add(run.run_id)
        # From its model calls (issue #14); a run without them shows none.
        tokens = (
            {
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
                "total_tokens": run.input_tokens + run.output_tokens,
            }
            if run.model_call_count
            else {}
        )
        run_steps, steps_total = steps.get(run.pk, (None, 0))
        run_interactions, interactions_total = interactions.get(run.pk, (None, 0))
        rows.append(
            TimelineRow(
                run=run,
                depth=min(depth, 4),
                number=number,
                steps=run_steps,
                steps_total=steps_total,
                interactions=run_interactions,
                interactions_total=interactions_total,
                tokens=tokens or None,
            )
        )
        for n, child in enumerate(children.get(run.run_id, []), start=1):
            add(child, depth + 1, f"{number}.{n}")

    previous_end = None
    for n, run in enumerate(top, start=1):
        if previous_end is not None and run.started_at is not None:
            idle = (run.started_at - previous_end).total_seconds() * 1000
            if idle >= idle_gap_ms:
                rows.append(TimelineRow(idle_ms=int(idle)))
        add(run, 0, str(n))
        end = run.ended_at or run.started_at
        if end is not None:
            previous_end = max(previous_end, end) if previous_end else end
    # Runs whose parents form a cycle (A under B, B under A) reach no top-level run: they
    # are listed last, at the top level, rather than lost.
    for run in runs:
        if run.run_id not in seen:
            add(run, 0, str(len(top) + 1))
            top.append(run)
    finished = ("completed", "failed", "cancelled")
    totals = dict.fromkeys(TOKEN_KEYS, 0)
    for row in rows:
        for key, value in (row.tokens or {}).items():
            totals[key] += value
    return {
        "rows": rows,
        "counts": {
            "all": len(runs),
            "completed": sum(1 for run in runs if run.status in finished),
            "successful": sum(1 for run in runs if run.status == "completed"),
            "failed": sum(1 for run in runs if run.status == "failed"),
        },
        "tokens": {k: v for k, v in totals.items() if v},
        "cost": session.cost,
    }
