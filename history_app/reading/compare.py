"""Two runs side by side (issue #18): their facts, inputs, iterations aligned by position
with their thoughts and tool calls, model calls, injected contexts and answers, each
marked where the two differ, with a line diff of the texts.

Bounded whatever the runs hold: the first ``HISTORY_COMPARE_ITERATIONS`` iterations, the
first ``HISTORY_COMPARE_CALLS`` tool calls of each, model calls and contexts, and texts
diffed on their first ``DIFF_CHARS`` characters (said so on the page). Five queries for
the two runs together, whatever their size.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from django.conf import settings
from django.db.models.functions import Length

from history_app import models
from history_app.agent_history import jsonstream
from history_app.reading import paging
from history_app.reading.diffs import Budget, LineDiff, line_diff

# Texts are compared whole but diffed on this many characters at most; the diffs of a
# page share one budget of steps (``diffs``), past which a pair shows both sides only.
DIFF_CHARS = 20_000


@dataclass(frozen=True)
class Fact:
    key: str
    label: str
    a: Any
    b: Any

    @property
    def same(self) -> bool:
        return self.a == self.b


@dataclass
class TextPair:
    """One text of each run (None when a run has none), and their diff when they differ."""

    a: str | None
    b: str | None
    diff: LineDiff | None = None
    cut: bool = False  # the diff reads only the first DIFF_CHARS characters

    @property
    def same(self) -> bool:
        return self.a == self.b


def text_pair(a: str | None, b: str | None, name: str, budget: Budget | None = None) -> TextPair:
    pair = TextPair(a, b)
    if a != b and a is not None and b is not None:
        pair.cut = len(a) > DIFF_CHARS or len(b) > DIFF_CHARS
        pair.diff = line_diff(a[:DIFF_CHARS], b[:DIFF_CHARS], f"a/{name}", f"b/{name}", budget)
    return pair


@dataclass
class CallPair:
    a: models.ToolCall | None
    b: models.ToolCall | None

    @property
    def same_tool(self) -> bool:
        return bool(self.a and self.b and self.a.tool == self.b.tool)

    @property
    def same_params(self) -> bool:
        return bool(self.a and self.b and self.a.params_json == self.b.params_json)

    @property
    def same_result(self) -> bool:
        return bool(self.a and self.b and (self.a.result, self.a.error) == (self.b.result, self.b.error))

    @property
    def same(self) -> bool:
        return self.same_tool and self.same_params and self.same_result


@dataclass
class IterationPair:
    position: int
    a: models.Iteration | None
    b: models.Iteration | None
    thought: TextPair
    calls: list[CallPair]
    more_calls: bool  # either iteration has more tool calls than compared

    @property
    def same(self) -> bool:
        names = (self.a.name if self.a else None) == (self.b.name if self.b else None)
        return bool(self.a and self.b) and names and self.thought.same and all(c.same for c in self.calls)


@dataclass
class ModelCallPair:
    a: models.ModelCall | None
    b: models.ModelCall | None

    def _values(self, call: models.ModelCall | None) -> tuple:
        if call is None:
            return ()
        return (call.model, call.input_tokens, call.output_tokens, call.finish_reason)

    @property
    def same(self) -> bool:
        return self._values(self.a) == self._values(self.b)


@dataclass
class ContextPair:
    a: models.InjectedContext | None
    b: models.InjectedContext | None
    text: TextPair

    @property
    def same(self) -> bool:
        kinds = [(c.kind, c.target, c.step) if c else None for c in (self.a, self.b)]
        return kinds[0] == kinds[1] and self.text.same


@dataclass
class Comparison:
    a: models.Run
    b: models.Run
    facts: list[Fact]
    input: TextPair
    settings: TextPair  # the run's metadata (model settings, tags…), as JSON
    output: TextPair
    error: TextPair
    iterations: list[IterationPair]
    model_calls: list[ModelCallPair]
    contexts: list[ContextPair]
    more: dict[str, bool]  # what was cut: "iterations", "model_calls", "contexts"
    limits: dict[str, int]

    @property
    def differences(self) -> int:
        parts = [
            *self.facts,
            self.input,
            self.settings,
            self.output,
            self.error,
            *self.iterations,
            *self.model_calls,
            *self.contexts,
        ]
        return sum(1 for part in parts if not part.same)


def read_pair(params: Any) -> tuple[str, str]:
    """The two run ids of a comparison: ``a`` and ``b``, or two ``run`` values (the
    session timeline's checkboxes). A bad request names the parameter."""
    picked = [value for value in params.getlist("run") if value]
    if picked:
        if len(picked) != 2:
            raise paging.BadParameter("run", f"pick exactly two runs to compare, not {len(picked)}")
        return picked[0], picked[1]
    a, b = params.get("a", ""), params.get("b", "")
    for name, value in (("a", a), ("b", b)):
        if not value:
            raise paging.BadParameter(name, "name a run id to compare")
        if len(value) > 255 or "\x00" in value:
            raise paging.BadParameter(name, "is no run id")
    return a, b


def compare(project: models.Project, a_id: str, b_id: str) -> Comparison | None:
    """The comparison of runs ``a_id`` and ``b_id`` of ``project``; None when either is
    not one of its runs."""
    runs = {
        r.run_id: r
        for r in models.Run.objects.select_related("session").filter(project=project, run_id__in=[a_id, b_id])
    }
    a, b = runs.get(a_id), runs.get(b_id)
    if a is None or b is None:
        return None
    limits = {
        "iterations": settings.HISTORY_COMPARE_ITERATIONS,
        "calls": settings.HISTORY_COMPARE_CALLS,
        "model_calls": settings.HISTORY_COMPARE_CALLS,
        "contexts": settings.HISTORY_COMPARE_CALLS,
    }
    keys = [a.pk, b.pk]
    # One query each for the two runs' iterations, tool calls, model calls and contexts,
    # one more row than compared for each run saying whether there are more.
    iterations = _by_run(
        models.Iteration.objects.filter(run_id__in=keys, position__lte=limits["iterations"]).order_by(
            "run_id", "position"
        )
    )
    shown = [it.pk for run_key in keys for it in iterations.get(run_key, [])[: limits["iterations"]]]
    calls: dict[int, list[models.ToolCall]] = {}
    for call in models.ToolCall.objects.filter(
        iteration_id__in=shown, position__lte=limits["calls"]
    ).order_by("iteration_id", "position"):
        calls.setdefault(call.iteration_id, []).append(call)
    model_calls = _by_run(
        models.ModelCall.objects.filter(run_id__in=keys, position__lte=limits["model_calls"])
        .defer("messages_json", "output", "metadata")
        .order_by("run_id", "position")
    )
    contexts = _by_run(
        models.InjectedContext.objects.filter(run_id__in=keys, position__lte=limits["contexts"])
        .annotate(text_length=Length("text"))
        .order_by("run_id", "position")
    )

    def first(rows: dict[int, list], run: models.Run, limit: int) -> tuple[list, bool]:
        items = rows.get(run.pk, [])
        return items[:limit], len(items) > limit

    budget = Budget()  # every diff of the page draws on it
    its_a, more_its_a = first(iterations, a, limits["iterations"])
    its_b, more_its_b = first(iterations, b, limits["iterations"])
    iteration_pairs = []
    for n, (it_a, it_b) in enumerate(zip_longest(its_a, its_b)):
        calls_a = calls.get(it_a.pk, []) if it_a else []
        calls_b = calls.get(it_b.pk, []) if it_b else []
        more = len(calls_a) > limits["calls"] or len(calls_b) > limits["calls"]
        pairs = [
            CallPair(x, y) for x, y in zip_longest(calls_a[: limits["calls"]], calls_b[: limits["calls"]])
        ]
        thought = text_pair(
            it_a.thought if it_a else None, it_b.thought if it_b else None, f"iteration-{n + 1}", budget
        )
        iteration_pairs.append(IterationPair(n + 1, it_a, it_b, thought, pairs, more))
    mc_a, more_mc_a = first(model_calls, a, limits["model_calls"])
    mc_b, more_mc_b = first(model_calls, b, limits["model_calls"])
    ctx_a, more_ctx_a = first(contexts, a, limits["contexts"])
    ctx_b, more_ctx_b = first(contexts, b, limits["contexts"])
    context_pairs = [
        ContextPair(x, y, text_pair(x.text if x else None, y.text if y else None, f"context-{n + 1}", budget))
        for n, (x, y) in enumerate(zip_longest(ctx_a, ctx_b))
    ]
    return Comparison(
        a=a,
        b=b,
        facts=_facts(a, b, _models_used(model_calls)),
        input=text_pair(a.input, b.input, "input", budget),
        settings=text_pair(_settings(a), _settings(b), "settings", budget),
        output=text_pair(a.output, b.output, "output", budget),
        error=text_pair(a.error, b.error, "error", budget),
        iterations=iteration_pairs,
        model_calls=[ModelCallPair(x, y) for x, y in zip_longest(mc_a, mc_b)],
        contexts=context_pairs,
        more={
            "iterations": more_its_a or more_its_b,
            "model_calls": more_mc_a or more_mc_b,
            "contexts": more_ctx_a or more_ctx_b,
        },
        limits=limits,
    )


def _settings(run: models.Run) -> str:
    return jsonstream.dumps(run.metadata or {}, indent=2, ensure_ascii=False, default=str)


def _models_used(model_calls: dict[int, list[models.ModelCall]]) -> dict[int, list[str]]:
    """Each run's models, in the order its compared calls first used them."""
    return {key: list(dict.fromkeys(c.model for c in calls if c.model)) for key, calls in model_calls.items()}


def _by_run(queryset: Any) -> dict[int, list]:
    rows: dict[int, list] = {}
    for row in queryset:
        rows.setdefault(row.run_id, []).append(row)
    return rows


# (JSON key, label) of each fact compared.
FACTS = (
    ("agent_name", "Agent"),
    ("kind", "Kind"),
    ("framework", "Framework"),
    ("status", "Status"),
    ("session_id", "Session"),
    ("duration_ms", "Duration"),
    ("iteration_count", "Iterations"),
    ("tool_call_count", "Tool calls"),
    ("tool_error_count", "Tool errors"),
    ("model_call_count", "Model calls"),
    ("input_tokens", "Tokens in"),
    ("output_tokens", "Tokens out"),
    ("cost", "Cost"),
    ("models", "Models"),
)


def _facts(a: models.Run, b: models.Run, models_of: dict[int, list[str]]) -> list[Fact]:
    def of(run: models.Run, key: str) -> Any:
        if key == "session_id":
            return run.session.session_id
        if key == "models":
            return ", ".join(models_of.get(run.pk, [])) or None
        value = getattr(run, key)
        return value if value != "" else None

    return [Fact(key, label, of(a, key), of(b, key)) for key, label in FACTS]


def summary(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON: each part with both sides, ``same``, and the diff lines of
    texts that differ."""

    def text(pair: TextPair) -> dict[str, Any]:
        return {
            "a": pair.a,
            "b": pair.b,
            "same": pair.same,
            "diff": [line.text for line in pair.diff] if pair.diff is not None else [],
            "diff_cut": pair.cut,
            "diff_fallback": pair.diff.fallback or None if pair.diff is not None else None,
        }

    def call(tool_call: models.ToolCall | None) -> dict[str, Any] | None:
        if tool_call is None:
            return None
        return {
            "tool": tool_call.tool,
            "params": tool_call.params,
            "result": tool_call.result,
            "error": tool_call.error,
        }

    def model_call(m: models.ModelCall | None) -> dict[str, Any] | None:
        if m is None:
            return None
        return {
            "number": m.number,
            "model": m.model,
            "provider": m.provider,
            "input_tokens": m.input_tokens,
            "output_tokens": m.output_tokens,
            "cost": m.cost,
            "duration_ms": m.duration_ms,
            "finish_reason": m.finish_reason,
        }

    def context(x: models.InjectedContext | None) -> dict[str, Any] | None:
        if x is None:
            return None
        return {
            "number": x.number,
            "kind": x.kind,
            "target": x.target,
            "step": x.step,
            "characters": x.text_length,
        }

    return {
        "a": c.a.run_id,
        "b": c.b.run_id,
        "differences": c.differences,
        "facts": [{"key": f.key, "label": f.label, "a": f.a, "b": f.b, "same": f.same} for f in c.facts],
        "input": text(c.input),
        "settings": text(c.settings),
        "iterations": [
            {
                "position": pair.position,
                "a": None if pair.a is None else {"index": pair.a.index, "name": pair.a.name},
                "b": None if pair.b is None else {"index": pair.b.index, "name": pair.b.name},
                "same": pair.same,
                "thought": text(pair.thought),
                "tool_calls": [{"a": call(x.a), "b": call(x.b), "same": x.same} for x in pair.calls],
                "more_tool_calls": pair.more_calls,
            }
            for pair in c.iterations
        ],
        "model_calls": [{"a": model_call(x.a), "b": model_call(x.b), "same": x.same} for x in c.model_calls],
        "contexts": [
            {"a": context(x.a), "b": context(x.b), "same": x.same, "text": text(x.text)} for x in c.contexts
        ],
        "output": text(c.output),
        "error": text(c.error),
        "more": c.more,
        "limits": c.limits,
    }
