"""A run page in slices: the first iterations of a run and the first tool calls of each,
the rest a slice at a time, so a page stays the same size whatever the run holds.

Each slice is one query per table, whatever the run's size. Positions are the ones ingest
gave (0, 1, 2… in each run and each iteration), so a slice is a range of positions read
through the (run, position) and (iteration, position) order.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import Http404

from . import models

MAX_START = 2**31 - 1


@dataclass
class CallSlice:
    iteration: models.Iteration
    calls: list[models.ToolCall]
    more_from: int | None  # position of the first call not shown, if any


@dataclass
class IterationSlice:
    parts: list[CallSlice]
    more_from: int | None  # position of the first iteration not shown, if any


def get_run(run_id: str) -> models.Run:
    try:
        return models.Run.objects.select_related("session").get(run_id=run_id)
    except models.Run.DoesNotExist:
        raise Http404("No such run") from None


def get_iteration(run_id: str, position: int) -> models.Iteration:
    try:
        return models.Iteration.objects.select_related("run__session").get(
            run__run_id=run_id, position=position
        )
    except models.Iteration.DoesNotExist:
        raise Http404("No such iteration") from None


def _split(rows: list, limit: int) -> tuple[list, int | None]:
    """The first ``limit`` rows, and the position of the next one when there is one."""
    return (rows[:limit], rows[limit].position) if len(rows) > limit else (rows, None)


def iteration_slice(*, run: models.Run, start: int = 0) -> IterationSlice:
    """Iterations from position ``start``, each with its first tool calls (two queries)."""
    limit, call_limit = settings.HISTORY_RUN_PAGE_ITERATIONS, settings.HISTORY_RUN_PAGE_TOOL_CALLS
    rows = models.Iteration.objects.filter(run=run, position__gte=start).order_by("position")
    iterations, more_from = _split(list(rows[: limit + 1]), limit)
    calls: dict[int, list[models.ToolCall]] = {}
    # One more call than shown per iteration says whether a "show more" link is due.
    first_calls = models.ToolCall.objects.filter(iteration__in=iterations, position__lte=call_limit)
    for call in first_calls.order_by("iteration_id", "position"):
        calls.setdefault(call.iteration_id, []).append(call)
    parts = [CallSlice(it, *_split(calls.get(it.pk, []), call_limit)) for it in iterations]
    return IterationSlice(parts, more_from)


def call_slice(*, iteration: models.Iteration, start: int) -> CallSlice:
    """An iteration's tool calls from position ``start`` (one query)."""
    limit = settings.HISTORY_RUN_PAGE_TOOL_CALLS
    rows = models.ToolCall.objects.filter(iteration=iteration, position__gte=start).order_by("position")
    return CallSlice(iteration, *_split(list(rows[: limit + 1]), limit))
