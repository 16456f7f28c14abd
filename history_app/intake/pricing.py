"""What a model call cost, estimated on the server from its tokens (issue #14).

Prices come from ``genai-prices`` (the Pydantic team's price list, released often), read
from the data the package ships: no network at run time. A cost the client reported is
kept as it is. A model the list does not know keeps its tokens and no cost: never a
made-up figure. Which list priced a call is stored with it (``price_source``).
"""

from __future__ import annotations

import functools
import logging
import warnings
from importlib import metadata
from typing import Any

from history_app.agent_history.records import ModelCall, Run

logger = logging.getLogger(__name__)


@functools.cache
def price_source() -> str:
    return f"genai-prices {metadata.version('genai-prices')}"


@functools.cache
def _calculator() -> Any:
    # Imported on first use: the package and its price data take a quarter of a second.
    from genai_prices import calc_price

    return calc_price


@functools.lru_cache(maxsize=4096)
def _price(model: str, provider: str, input_tokens: int, cached: int, output_tokens: int) -> float | None:
    calc = _calculator()
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cached:
        # genai-prices counts cached tokens inside input_tokens, as OpenAI and agno report them.
        usage["cache_read_tokens"] = min(cached, input_tokens)
    # A provider the list does not know (a local server, a gateway) has no price, even when
    # another provider sells a model of that name: a figure from elsewhere would be made up.
    extra = {"provider_id": provider.lower()} if provider else {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(calc(usage, model, **extra).total_price)
    except LookupError:
        return None
    except Exception:  # noqa: BLE001 — a price list problem must never refuse a run
        logger.exception("genai-prices failed on model %r", model)
        return None


def price_call(call: ModelCall) -> None:
    """Estimate ``call``'s cost in place when it reported none and its model has a price."""
    if call.cost is not None or not call.model or (call.input_tokens is None and call.output_tokens is None):
        return
    cost = _price(
        call.model[:255],
        call.provider[:255],
        call.input_tokens or 0,
        call.cached_tokens or 0,
        call.output_tokens or 0,
    )
    if cost is not None:
        call.cost, call.cost_source, call.price_source = cost, "estimated", price_source()


def price_run(run: Run) -> Run:
    for call in run.all_model_calls():
        price_call(call)
    return run
