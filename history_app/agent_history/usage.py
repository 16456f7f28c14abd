"""Model calls: where they come from when a format gives only totals, which injected
context a message carries, and how many messages a call keeps.

Standard library only. The server runs these on every record it stores (after parsing
and redaction, before the content hash: ``ingestion.complete_model_calls``), and an agent
may run them on its own records.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .records import MAX_COST, MAX_TOKENS, ModelCall, ModelMessage, Run, check_time_range
from .text import value_text

# How many messages a model call keeps: the first (the instructions, usually) and the
# most recent. Each model call of a loop receives every message before it, so a long run
# would otherwise store its history once per call. How many were left out is recorded
# (``metadata["omitted_messages"]``), never dropped silently.
MAX_CALL_MESSAGES = 100
HEAD_MESSAGES = 10
# How many characters of messages ``link_messages`` may scan (a message's length times the
# contexts it is compared with): a few tens of milliseconds. Beyond, messages stay unlinked.
LINK_BUDGET_CHARS = 50_000_000

# The names token counts and costs go by in run-level metrics (agno, OpenAI-style clients,
# the autourgos middleware before model calls were records).
_INPUT = ("input_tokens", "prompt_tokens")
_OUTPUT = ("output_tokens", "completion_tokens")
_CACHED = ("cache_read_tokens", "cached_tokens", "cache_read_input_tokens")
_REASONING = ("reasoning_tokens",)
_COST = ("total_cost", "cost")


# The longest duration (seconds) a usage figure may give a call: ten years. Anything longer
# (or not a number) is no duration.
MAX_SECONDS = 10 * 365 * 86_400


def number(value: Any, limit: float = MAX_SECONDS) -> int | float | None:
    """``value`` as a number from 0 to ``limit``; a list of them (agno 1 kept one per
    message) summed; else None: usage figures only become a call's fields when they are
    sane, and stay in ``metrics`` as they came whatever they are."""
    if isinstance(value, list):
        parts = [number(v, limit) for v in value[:10_000]]
        kept = [p for p in parts if p is not None]
        total = sum(kept) if kept else None
        return total if total is not None and total <= limit else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value <= limit:  # NaN fails both comparisons
        return None
    return value


def start_before(ended: datetime, seconds: float) -> datetime | None:
    """The start of a call that lasted ``seconds`` and ended at ``ended``, or None when it
    would fall outside the times every store holds."""
    try:
        return check_time_range(ended - timedelta(seconds=seconds))
    except (OverflowError, ValueError):
        return None


def _first(metrics: Mapping[str, Any], names: tuple[str, ...], limit: float) -> int | float | None:
    for name in names:
        value = number(metrics.get(name), limit)
        if value is not None:
            return value
    return None


def _tokens(metrics: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    value = _first(metrics, names, MAX_TOKENS)
    return None if value is None or value != int(value) else int(value)


def call_from_usage(usage: Mapping[str, Any], **fields: Any) -> ModelCall:
    """A model call from a usage mapping (tokens and cost under their usual names)."""
    cost = _first(usage, _COST, MAX_COST)
    model = usage.get("model") if isinstance(usage.get("model"), str) else ""
    provider = next(
        (usage[k] for k in ("provider", "provider_used") if isinstance(usage.get(k), str) and usage[k]), ""
    )
    call = ModelCall(
        model=model,
        provider=provider,
        input_tokens=_tokens(usage, _INPUT),
        output_tokens=_tokens(usage, _OUTPUT),
        cached_tokens=_tokens(usage, _CACHED),
        reasoning_tokens=_tokens(usage, _REASONING),
        cost=None if cost is None else float(cost),
        cost_source="" if cost is None else "reported",
    )
    for name, value in fields.items():
        setattr(call, name, value)
    return call


def has_usage(metrics: Mapping[str, Any]) -> bool:
    return any(
        _first(metrics, names, limit) is not None
        for names, limit in ((_INPUT, MAX_TOKENS), (_OUTPUT, MAX_TOKENS), (_COST, MAX_COST))
    )


def derive_model_calls(run: Run) -> Run:
    """Give a run that holds no model calls the ones its older fields describe, in place:
    per-iteration usage the autourgos middleware kept before model calls were records
    (``iteration.metadata["llm"]``), else the run's ``metrics`` totals as one call marked
    ``aggregate`` (the run reported totals, not calls). A run with calls is left alone."""
    if run.all_model_calls():
        return run
    for iteration in run.iterations:
        kept = iteration.metadata.get("llm")
        if not isinstance(kept, list):
            continue
        for usage in kept:
            if isinstance(usage, Mapping):
                call = call_from_usage(usage)
                latency = number(usage.get("latency_ms"), MAX_SECONDS * 1000)
                if iteration.ended_at is not None:
                    call.ended_at = iteration.ended_at
                    if latency is not None:
                        call.started_at = start_before(iteration.ended_at, latency / 1000)
                iteration.model_calls.append(call)
    if run.all_model_calls() or not isinstance(run.metrics, Mapping) or not has_usage(run.metrics):
        return run
    metrics = run.metrics
    call = call_from_usage(metrics, metadata={"aggregate": True})
    details = metrics.get("details")
    models = details.get("model") if isinstance(details, Mapping) else None
    if not call.model and isinstance(models, list):
        names = {m.get("id") for m in models if isinstance(m, Mapping) and isinstance(m.get("id"), str)}
        providers = {m.get("provider") for m in models if isinstance(m, Mapping)}
        if len(names) == 1:
            call.model = names.pop()
        if len(providers) == 1 and isinstance(next(iter(providers)), str):
            call.provider = providers.pop()
    calls = metrics.get("llm_calls")
    if isinstance(calls, int) and not isinstance(calls, bool) and 0 <= calls < 2**31:
        call.metadata["calls"] = calls
    run.model_calls.append(call)
    return run


def link_messages(run: Run) -> Run:
    """Note, on each message not yet linked, the injected context it carries, in place: a
    message whose text holds a context's text (a history block in a system prompt or a
    user message), or a replayed history message that is part of a history context (or,
    where the run has one history context only, any replayed message: agno replays a
    tool request as the request, which the context's text leaves out)."""
    contexts = [(n, c.text, c.kind) for n, c in enumerate(run.injected_contexts) if c.text.strip()]
    if not contexts:
        return run
    histories = [n for n, _, kind in contexts if kind.endswith("history")]
    only_history = histories[0] if len(histories) == 1 else None
    budget = LINK_BUDGET_CHARS
    for call in run.all_model_calls():
        for message in call.messages:
            if message.context is not None:
                continue
            if not message.content.strip():
                # A replayed tool request has no text: it is part of the only history.
                if message.part == "history" and only_history is not None:
                    message.context = only_history
                continue
            budget -= len(message.content) * len(contexts)
            if budget < 0:  # a hostile run of thousands of calls and contexts: stop here
                return run
            for n, text, kind in contexts:
                if text in message.content or (
                    message.part == "history" and kind.endswith("history") and message.content in text
                ):
                    message.context = n
                    if not message.part:
                        message.part = "history" if kind.endswith("history") else "context"
                    break
            else:
                if message.part == "history" and only_history is not None:
                    message.context = only_history
    return run


def cap_messages(run: Run, limit: int = MAX_CALL_MESSAGES) -> int:
    """Keep at most ``limit`` messages per call (the first ``HEAD_MESSAGES`` and the most
    recent), in place, noting how many each call left out; returns how many in all."""
    head = min(HEAD_MESSAGES, limit // 2)
    omitted = 0
    for call in run.all_model_calls():
        extra = len(call.messages) - limit
        if extra > 0:
            call.messages = call.messages[:head] + call.messages[head + extra :]
            call.metadata["omitted_messages"] = call.metadata.get("omitted_messages", 0) + extra
            omitted += extra
    return omitted


def message(role: Any, content: Any, part: str = "") -> ModelMessage:
    return ModelMessage(role=str(role or ""), content=value_text(content) or "", part=part)
