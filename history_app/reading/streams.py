"""Runs written out as they are read: the exports and the run's JSON twin stream, so a run
of any size costs the server a chunk of rows at a time, never the whole run at once.

Every table is read once, in order, with ``iterator()`` (chunks of ``CHUNK_ROWS`` rows):
five queries for one run or a whole session, whatever they hold (four for one run
without model calls). Children come in their
parents' order and are handed out parent by parent (``_Children``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from history_app import models
from history_app.agent_history import records
from history_app.agent_history.formats.autourgos import iter_autourgos_markdown
from history_app.agent_history.jsonstream import Lazy
from history_app.store import mapper

CHUNK_ROWS = 500
# The order runs are written in: the session's order, as on its page.
RUN_ORDER = ("started_at", "received_at", "id")


class _Children:
    """The rows of one child table, in their parents' order, handed out parent by parent.

    Rows of an earlier parent that were not read (nobody asked for them) are skipped, so
    a parent never receives another's rows."""

    def __init__(self, queryset: QuerySet, parent: str) -> None:
        self.rows = queryset.iterator(chunk_size=CHUNK_ROWS)
        self.parent = parent
        self.started: set[int] = set()
        self.head = next(self.rows, None)

    def of(self, pk: int) -> Iterator[Any]:
        self.started.add(pk)
        return self._rows_of(pk)

    def _rows_of(self, pk: int) -> Iterator[Any]:
        while self.head is not None:
            owner = getattr(self.head, self.parent)
            if owner != pk and owner not in self.started:
                return
            row, self.head = self.head, next(self.rows, None)
            if owner == pk:
                yield row


def _as_dict(record: Any, **raw: Any) -> dict[str, Any]:
    """``record.to_dict()`` with the values in ``raw`` put in as they are: the record's
    serialiser recurses, and a JSON value stored before the ingest depth limit can be
    deeper than recursion allows (``jsonstream`` writes any depth)."""
    data = dataclasses.replace(record, **dict.fromkeys(raw)).to_dict()
    data.update(raw)
    return data


def _tool_call_dict(call: models.ToolCall) -> dict[str, Any]:
    record = mapper.tool_call_record(call)
    return _as_dict(record, params=record.params)


def _model_call_dict(call: models.ModelCall) -> dict[str, Any]:
    return _as_dict(mapper.model_call_record(call), metadata=call.metadata)


class RunReader:
    """The runs of a queryset, in ``RUN_ORDER``, with all their children; or one run
    already read (``select_related("session")``), with its children."""

    def __init__(self, runs: QuerySet | models.Run) -> None:
        if isinstance(runs, models.Run):
            # One run already read (with its session): its children by its key, in their
            # own order (the runs' order is one value), and no second read of its row.
            run = runs
            self.runs: QuerySet | list[models.Run] = [run]

            def children(model: type, *order: str) -> QuerySet:
                if model is models.ModelCall and not run.model_call_count:
                    return model.objects.none()  # it counts its model calls: none, and no query
                return model.objects.filter(run_id=run.pk).order_by(*order)

        else:
            self.runs = runs.select_related("session").order_by(*RUN_ORDER)
            chosen = runs.values("pk")
            by_run = [f"run__{field}" for field in RUN_ORDER]

            def children(model: type, *order: str) -> QuerySet:
                return model.objects.filter(run__in=chosen).order_by(*by_run, *order)

        self.iterations = _Children(children(models.Iteration, "position"), "run_id")
        self.calls = _Children(children(models.ToolCall, "iteration__position", "position"), "iteration_id")
        self.interactions = _Children(children(models.MemberInteraction, "position"), "run_id")
        self.contexts = _Children(children(models.InjectedContext, "position"), "run_id")
        self.model_calls = _Children(children(models.ModelCall, "position"), "run_id")
        # The model calls of the run being read, by iteration key (None: the run's own).
        self._calls_of: dict[int | None, list[models.ModelCall]] = {}

    def shells(self) -> Iterator[tuple[models.Run, records.Run]]:
        """Each run with its member interactions and contexts; iterations come from
        ``iterations`` (read each run's before asking for the next run)."""
        runs = self.runs if isinstance(self.runs, list) else self.runs.iterator(chunk_size=CHUNK_ROWS)
        for run in runs:
            record = mapper.run_record(run, children=False)
            record.member_interactions = [mapper.interaction_record(m) for m in self.interactions.of(run.pk)]
            record.injected_contexts = [mapper.context_record(c) for c in self.contexts.of(run.pk)]
            self._calls_of = {}
            for call in self.model_calls.of(run.pk):
                self._calls_of.setdefault(call.iteration_id, []).append(call)
            record.model_calls = [mapper.model_call_record(c) for c in self._calls_of.get(None, [])]
            yield run, record

    def iterations_of(self, run: models.Run) -> Iterator[tuple[models.Iteration, Iterator[models.ToolCall]]]:
        for iteration in self.iterations.of(run.pk):
            yield iteration, self.calls.of(iteration.pk)

    def records(self) -> Iterator[records.Run]:
        """Whole records, one run at a time (a run's children are in memory together)."""
        for run, record in self.shells():
            record.iterations = list(self.iteration_records(run))
            yield record

    def dicts(self) -> Iterator[dict[str, Any]]:
        """Each run as ``records.Run.to_dict()`` gives it, its iterations and their tool
        calls as ``Lazy`` arrays read while they are written."""
        for run, record in self.shells():
            yield _as_dict(
                record,
                iterations=Lazy(self._iteration_dicts(run)),
                model_calls=[_model_call_dict(c) for c in self._calls_of.get(None, [])],
                injected_contexts=[_as_dict(c, settings=c.settings) for c in record.injected_contexts],
                metrics=record.metrics,
                metadata=record.metadata,
            )

    def _iteration_dicts(self, run: models.Run) -> Iterator[dict[str, Any]]:
        for iteration, calls in self.iterations_of(run):
            yield _as_dict(
                mapper.iteration_record(iteration, []),
                metadata=iteration.metadata,
                tool_calls=Lazy(map(_tool_call_dict, calls)),
                model_calls=[_model_call_dict(c) for c in self._calls_of.get(iteration.pk, [])],
            )

    def iteration_records(self, run: models.Run) -> Iterator[records.Iteration]:
        """A run's iterations as records, one at a time."""
        for it, calls in self.iterations_of(run):
            yield mapper.iteration_record(
                it,
                [mapper.tool_call_record(c) for c in calls],
                [mapper.model_call_record(c) for c in self._calls_of.get(it.pk, [])],
            )


def run_markdown(reader: RunReader) -> Iterator[str]:
    """The reader's run as an autourgos Markdown log, an iteration at a time."""
    for run, record in reader.shells():
        yield from iter_autourgos_markdown(record, iterations=reader.iteration_records(run))
