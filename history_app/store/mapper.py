"""Stored rows <-> canonical records: the one mapping in both directions.

Ingestion writes rows from a ``records.Run`` with these builders; the JSON API, exports,
the inspector, redaction and reindexing read records back with them. Timestamps are made
aware here and only here.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time
from typing import Any

from django.db.models import Prefetch
from django.utils import timezone

from history_app import models
from history_app.agent_history import records


def aware(value: datetime | None) -> datetime | None:
    """A record's time as the database stores it: a naive time (autourgos writes local
    times without a zone) is read in the server's ``TIME_ZONE``."""
    if value is None or value.tzinfo is not None:
        return value
    return timezone.make_aware(value, timezone.get_default_timezone())


def without_nul(value: Any) -> Any:
    """``value`` as the databases can store it: PostgreSQL text and jsonb cannot hold NUL
    characters, so U+FFFD stands in for each."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


def day_start(day: date) -> datetime:
    """Midnight of ``day`` in the server's ``TIME_ZONE`` (date filters, stats)."""
    return aware(datetime.combine(day, time.min))


def make_times_aware(run: records.Run) -> None:
    """Every time of a record as it will be stored, in place: done once, before the content
    hash, so a re-sent run (one exported from ``GET /api/v1/runs/<id>``, say) hashes the
    same as the stored one, and the row builders below copy times as they are."""
    run.started_at, run.ended_at = aware(run.started_at), aware(run.ended_at)
    for iteration in run.iterations:
        iteration.started_at, iteration.ended_at = aware(iteration.started_at), aware(iteration.ended_at)
        for call in iteration.tool_calls:
            call.started_at, call.ended_at = aware(call.started_at), aware(call.ended_at)
    for call in run.all_model_calls():
        call.started_at, call.ended_at = aware(call.started_at), aware(call.ended_at)


# -- record -> rows (times already aware: see make_times_aware) -------------------------


def fill_run(row: models.Run, run: records.Run) -> None:
    """The run's own columns from its record (not its session, hash or source format)."""
    row.parent_run_id = run.parent_run_id
    row.kind, row.status = run.kind, run.status
    row.agent_name = (run.agent_name or run.team_id or run.workflow_id)[:255]
    row.team_id, row.workflow_id, row.user_id = run.team_id[:255], run.workflow_id[:255], run.user_id[:255]
    row.framework = run.framework[:32]
    row.input, row.output, row.error = run.input, run.output, run.error
    row.started_at, row.ended_at = run.started_at, run.ended_at
    row.duration_ms = run.duration_ms
    row.iteration_count = len(run.iterations)
    row.tool_call_count = sum(len(it.tool_calls) for it in run.iterations)
    row.tool_error_count = sum(1 for it in run.iterations for call in it.tool_calls if call.error)
    row.metrics, row.metadata, row.redactions = run.metrics, run.metadata, run.redactions
    for name, value in call_sums(run.all_model_calls()).items():
        setattr(row, name, value)


def call_sums(calls: list[records.ModelCall]) -> dict[str, Any]:
    """A run's columns that sum its model calls (ingestion, and migration 0011)."""
    costs = [call.cost for call in calls if call.cost is not None]
    return {
        "model_call_count": len(calls),
        "input_tokens": sum(call.input_tokens or 0 for call in calls),
        "output_tokens": sum(call.output_tokens or 0 for call in calls),
        "cost": sum(costs) if costs else None,
        "unpriced_calls": sum(1 for call in calls if call.cost is None and call.total_tokens is not None),
    }


def iteration_values(position: int, it: records.Iteration) -> dict[str, Any]:
    return {
        "position": position,
        "index": it.index,
        "name": it.name[:255],
        "thought": it.thought,
        "started_at": it.started_at,
        "ended_at": it.ended_at,
        "metadata": it.metadata,
    }


def iteration_row(row: models.Run, position: int, it: records.Iteration) -> models.Iteration:
    return models.Iteration(run=row, **iteration_values(position, it))


def tool_call_values(position: int, call: records.ToolCall) -> dict[str, Any]:
    return {
        "position": position,
        "tool": call.tool[:255],
        "call_id": (call.call_id or "")[:255],
        "params_json": json.dumps(call.params, ensure_ascii=False),
        "result": call.result,
        "error": call.error,
        "started_at": call.started_at,
        "ended_at": call.ended_at,
    }


def tool_call_row(
    row: models.Run, iteration: models.Iteration, position: int, call: records.ToolCall
) -> models.ToolCall:
    return models.ToolCall(run=row, iteration=iteration, **tool_call_values(position, call))


def model_call_values(position: int, call: records.ModelCall) -> dict[str, Any]:
    return {
        "position": position,
        "model": call.model[:255],
        "provider": call.provider[:255],
        "messages_json": json.dumps([m.to_dict() for m in call.messages], ensure_ascii=False),
        "message_count": len(call.messages),
        "output": call.output,
        "finish_reason": call.finish_reason[:64],
        "answer_json": ("" if call.answer is None else json.dumps(call.answer.to_dict(), ensure_ascii=False)),
        "api": call.api[:32],
        "messages_source": call.messages_source[:64],
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "cached_tokens": call.cached_tokens,
        "reasoning_tokens": call.reasoning_tokens,
        "cost": call.cost,
        "cost_source": call.cost_source,
        "price_source": call.price_source[:255],
        "started_at": call.started_at,
        "ended_at": call.ended_at,
        "duration_ms": call.duration_ms,
        "metadata": call.metadata,
    }


def model_call_places(run: records.Run) -> list[tuple[int | None, records.ModelCall]]:
    """Each model call of ``run`` in position order, with its iteration's position (None
    for the run's own calls)."""
    return [(n, call) for n, it in enumerate(run.iterations) for call in it.model_calls] + [
        (None, call) for call in run.model_calls
    ]


def interaction_values(position: int, mi: records.MemberInteraction) -> dict[str, Any]:
    return {
        "position": position,
        "member": mi.member[:255],
        "task": mi.task,
        "response": mi.response,
        "member_run_id": mi.member_run_id,
    }


def interaction_row(
    row: models.Run, position: int, mi: records.MemberInteraction
) -> models.MemberInteraction:
    return models.MemberInteraction(run=row, **interaction_values(position, mi))


def context_values(position: int, context: records.InjectedContext) -> dict[str, Any]:
    return {
        "position": position,
        "step": context.step[:255],
        "target": context.target,
        "kind": context.kind,
        "text": context.text,
        "source_run_ids": context.source_run_ids,
        "settings": context.settings,
        "reported": context.reported,
    }


def context_row(row: models.Run, position: int, context: records.InjectedContext) -> models.InjectedContext:
    return models.InjectedContext(run=row, **context_values(position, context))


# -- rows -> record ----------------------------------------------------------------------


def transcript_queryset() -> Any:
    """Runs with their iterations and tool calls, interactions and contexts: one query
    per table, whatever their number."""
    return models.Run.objects.select_related("session").prefetch_related(
        Prefetch(
            "iterations",
            queryset=models.Iteration.objects.prefetch_related(
                Prefetch("tool_calls", queryset=models.ToolCall.objects.order_by("position"))
            ),
        ),
        "member_interactions",
        "injected_contexts",
        Prefetch("model_calls", queryset=models.ModelCall.objects.order_by("position")),
    )


def tool_call_record(call: models.ToolCall) -> records.ToolCall:
    return records.ToolCall(
        tool=call.tool,
        params=call.params,
        result=call.result,
        error=call.error,
        started_at=call.started_at,
        ended_at=call.ended_at,
        call_id=call.call_id or None,
    )


def model_call_record(call: models.ModelCall) -> records.ModelCall:
    return records.ModelCall(
        model=call.model,
        provider=call.provider,
        messages=[records.message_from_dict(m) for m in call.messages],
        output=call.output,
        finish_reason=call.finish_reason,
        answer=None if call.answer is None else records.message_from_dict(call.answer),
        api=call.api,
        messages_source=call.messages_source,
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        cached_tokens=call.cached_tokens,
        reasoning_tokens=call.reasoning_tokens,
        cost=call.cost,
        cost_source=call.cost_source,
        price_source=call.price_source,
        started_at=call.started_at,
        ended_at=call.ended_at,
        metadata=call.metadata,
    )


def iteration_record(
    it: models.Iteration,
    tool_calls: list[records.ToolCall],
    model_calls: list[records.ModelCall] | None = None,
) -> records.Iteration:
    return records.Iteration(
        index=it.index,
        name=it.name,
        thought=it.thought,
        started_at=it.started_at,
        ended_at=it.ended_at,
        metadata=it.metadata,
        tool_calls=tool_calls,
        model_calls=model_calls or [],
    )


def interaction_record(mi: models.MemberInteraction) -> records.MemberInteraction:
    return records.MemberInteraction(
        member=mi.member, task=mi.task, response=mi.response, member_run_id=mi.member_run_id
    )


def context_record(ctx: models.InjectedContext) -> records.InjectedContext:
    return records.InjectedContext(
        text=ctx.text,
        kind=ctx.kind,
        target=ctx.target,
        step=ctx.step,
        source_run_ids=ctx.source_run_ids,
        settings=ctx.settings,
        reported=ctx.reported,
    )


def run_record(run: models.Run, *, children: bool = True) -> records.Run:
    """The stored (redacted) run as a canonical record; with ``children``, from
    ``transcript_queryset``'s prefetches, else with none (the caller adds them)."""
    calls: dict[int | None, list[records.ModelCall]] = {}
    for call in run.model_calls.all() if children else ():
        calls.setdefault(call.iteration_id, []).append(model_call_record(call))
    return records.Run(
        run_id=run.run_id,
        session_id=run.session.session_id,
        kind=run.kind,
        status=run.status,
        parent_run_id=run.parent_run_id,
        agent_name=run.agent_name,
        team_id=run.team_id,
        workflow_id=run.workflow_id,
        user_id=run.user_id,
        framework=run.framework,
        input=run.input,
        output=run.output,
        error=run.error,
        started_at=run.started_at,
        ended_at=run.ended_at,
        iterations=[
            iteration_record(it, [tool_call_record(call) for call in it.tool_calls.all()], calls.get(it.pk))
            for it in (run.iterations.all() if children else ())
        ],
        member_interactions=[
            interaction_record(mi) for mi in (run.member_interactions.all() if children else ())
        ],
        injected_contexts=[context_record(ctx) for ctx in (run.injected_contexts.all() if children else ())],
        model_calls=calls.get(None, []),
        metrics=run.metrics,
        metadata=run.metadata,
        redactions=run.redactions,
    )
