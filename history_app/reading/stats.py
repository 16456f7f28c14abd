"""The stats page's numbers: four queries whatever the volume, none of them a walk over
every run or tool call of the window (daily counts from ``DailyStat``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from history_app import models
from history_app.store import rollups
from history_app.store.mapper import day_start

# Timed runs in the window up to which duration percentiles are exact (see ``stats``).
EXACT_DURATIONS = 10_000


def _percentile_at(values: list[int], fraction: float) -> int | None:
    """The value at ``fraction`` of sorted ``values`` (the same index as before: by offset)."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(fraction * (len(values) - 1))))]


def stats(*, project: models.Project, days: int) -> dict[str, Any]:
    """The project's stats page numbers for the last ``days`` days, in eight queries
    whatever the volume (the window's durations, when it holds few enough to be exact)."""
    today = timezone.now().date()
    since = day_start(today - timedelta(days=days - 1))
    when = Coalesce("started_at", "received_at")
    runs = models.Run.objects.filter(project=project).annotate(when=when).filter(when__gte=since)
    # Counts per day and per tool are kept at ingestion (rollups.py): the page reads at
    # most a row per day and tool, whatever the number of runs.
    daily = models.DailyStat.objects.filter(project=project, day__gte=since.date())
    per_day = {
        row["day"]: {"total": row["runs"], "failed": row["failed"]}
        for row in daily.filter(tool="").values("day", "runs", "failed")
    }
    series = []
    for n in range(days):
        day = today - timedelta(days=days - 1 - n)
        row = per_day.get(day, {"total": 0, "failed": 0})
        series.append({"day": day, "total": row["total"], "failed": row["failed"]})
    total = sum(p["total"] for p in series)
    failed = sum(p["failed"] for p in series)
    usage = _usage(project=project, days=days, today=today, since=since)
    # How many timed runs the window holds, from the latency rollup. Up to
    # EXACT_DURATIONS of them, their durations are read once from the (when, duration)
    # index and sorted here: exact percentiles. Beyond, the percentiles are read from the
    # rollup's buckets (within 5 %): reading 43,000 durations took 100 ms on PostgreSQL,
    # whose expression index cannot answer alone.
    buckets = usage.pop("run_buckets")
    timed = sum(buckets.values())
    if timed <= EXACT_DURATIONS:
        durations = sorted(runs.filter(duration_ms__isnull=False).values_list("duration_ms", flat=True))
        timed = len(durations)
        p50, p95 = _percentile_at(durations, 0.5), _percentile_at(durations, 0.95)
    else:
        p50, p95 = rollups.bucket_percentile(buckets, 0.5), rollups.bucket_percentile(buckets, 0.95)
    tools = (
        daily.exclude(tool="")
        .values("tool")
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
        .filter(calls__gt=0)
        .order_by("-calls", "tool")[:10]
    )
    errors = (
        runs.filter(status="failed")
        .exclude(error__isnull=True)
        .exclude(error="")
        .values("error")
        .annotate(count=Count("id"), latest=Max("run_id"))
        .order_by("-count", "error")[:10]
    )
    return {
        **usage,
        "scores": scores(project=project, since=since),
        "days": days,
        "since": since.date(),
        "series": series,
        "total": total,
        "failed": failed,
        "failure_rate": (failed / total) if total else None,
        "p50": p50,
        "p95": p95,
        "timed": timed,
        "exact_percentiles": timed <= EXACT_DURATIONS,
        "tools": list(tools),
        "errors": list(errors),
    }


def _usage(*, project: models.Project, days: int, today: Any, since: Any) -> dict[str, Any]:
    """Model calls, tokens and cost per day, per model and per agent, and the p50 and p95
    latency of runs and model calls per day (issue #14): four reads of the daily rollups
    (a row per day, model and agent; a row per day, kind and latency bucket)."""
    usage = models.DailyUsage.objects.filter(project=project, day__gte=since.date())
    sums = {
        "calls": Sum("calls"),
        "input_tokens": Sum("input_tokens"),
        "output_tokens": Sum("output_tokens"),
        "cost": Sum("cost"),
        "unpriced": Sum("unpriced"),
    }
    by_day = {row["day"]: row for row in usage.values("day").annotate(**sums).order_by()}
    latency: dict[tuple[Any, str], dict[int, int]] = {}
    for day, kind, bucket, count in (
        models.DailyLatency.objects.filter(project=project, day__gte=since.date())
        .values_list("day", "kind", "bucket", "count")
        .order_by()
    ):
        if count > 0:
            latency.setdefault((day, kind), {})[bucket] = count
    series = []
    window: dict[str, dict[int, int]] = {"run": {}, "model": {}}
    for n in range(days):
        day = today - timedelta(days=days - 1 - n)
        row = by_day.get(day) or {}
        point = {
            "day": day,
            "calls": row.get("calls") or 0,
            "input_tokens": row.get("input_tokens") or 0,
            "output_tokens": row.get("output_tokens") or 0,
            "cost": row.get("cost") or 0.0,
        }
        for kind in ("run", "model"):
            counts = latency.get((day, kind), {})
            point[f"{kind}_p50"] = rollups.bucket_percentile(counts, 0.5)
            point[f"{kind}_p95"] = rollups.bucket_percentile(counts, 0.95)
            for bucket, count in counts.items():
                window[kind][bucket] = window[kind].get(bucket, 0) + count
        series.append(point)

    def top(field: str) -> list[dict[str, Any]]:
        rows = usage.values(field).annotate(**sums).order_by("-cost", "-input_tokens", field)[:10]
        return [{**row, "name": row[field]} for row in rows]

    return {
        "usage_series": series,
        "usage_total": {
            key: sum(p[key] for p in series) for key in ("calls", "input_tokens", "output_tokens", "cost")
        },
        "unpriced": sum((row.get("unpriced") or 0) for row in by_day.values()),
        "per_model": top("model"),
        "per_agent": top("agent"),
        "run_buckets": window["run"],
        "model_p50": rollups.bucket_percentile(window["model"], 0.5),
        "model_p95": rollups.bucket_percentile(window["model"], 0.95),
    }


# The stats page aggregates at most this many score names (the most used first).
MAX_SCORE_NAMES = 20


def scores(*, project: models.Project, since: Any) -> dict[str, Any]:
    """The scores given to the window's runs (by the day each run started, else was
    received, when the score was written): for each name, how many and the mean of the
    numeric ones, the counts of the categorical ones; the mean per day and per agent. Four
    queries of the daily score rollup (``DailyScore``), whatever the number of scores."""
    given = models.DailyScore.objects.filter(project=project, day__gte=since.date())
    numeric = Q(category="")
    names = list(
        given.values("name")
        .annotate(
            scores=Sum("count"),
            numeric_count=Sum("count", filter=numeric),
            numeric_total=Sum("total", filter=numeric),
        )
        .filter(scores__gt=0)
        .order_by("-scores", "name")[:MAX_SCORE_NAMES]
    )
    shown = [row["name"] for row in names]
    categories: dict[str, dict[str, int]] = {}
    for row in (
        given.filter(name__in=shown)
        .exclude(category="")
        .values("name", "category")
        .annotate(scores=Sum("count"))
        .filter(scores__gt=0)
        .order_by("name", "-scores", "category")
    ):
        categories.setdefault(row["name"], {})[row["category"]] = row["scores"]

    def means(rows: Any) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            count, total = row.pop("scores"), row.pop("sum")
            out.append({**row, "count": count, "mean": total / count})
        return out

    numbers = given.filter(name__in=shown, category="")
    per_day = means(
        numbers.values("day", "name")
        .annotate(scores=Sum("count"), sum=Sum("total"))
        .filter(scores__gt=0)
        .order_by("day", "name")
    )
    per_agent = means(
        numbers.values("agent", "name")
        .annotate(scores=Sum("count"), sum=Sum("total"))
        .filter(scores__gt=0)
        .order_by("name", "-scores", "agent")[: MAX_SCORE_NAMES * 10]
    )
    for row in names:
        row["count"] = row.pop("scores")
        numeric_count, numeric_total = row.pop("numeric_count"), row.pop("numeric_total")
        row["mean"] = numeric_total / numeric_count if numeric_count else None
        row["categories"] = categories.get(row["name"], {})
    return {"names": names, "per_day": per_day, "per_agent": per_agent}


def summary(numbers: dict[str, Any]) -> dict[str, Any]:
    """The stats page's numbers as its JSON twin gives them: the same figures, days as
    ISO dates, the per-day counts and usage in one series."""
    per_day = [
        {
            "day": runs["day"].isoformat(),
            "runs": runs["total"],
            "failed": runs["failed"],
            **{key: usage[key] for key in ("calls", "input_tokens", "output_tokens", "cost")},
            **{f"{key}_ms": usage[key] for key in ("run_p50", "run_p95", "model_p50", "model_p95")},
        }
        for runs, usage in zip(numbers["series"], numbers["usage_series"], strict=True)
    ]
    sums = ("calls", "input_tokens", "output_tokens", "cost", "unpriced")

    def top(rows: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
        return [{field: row[field], **{key: row[key] for key in sums}} for row in rows]

    return {
        "days": numbers["days"],
        "since": numbers["since"].isoformat(),
        "totals": {
            "runs": numbers["total"],
            "failed": numbers["failed"],
            "failure_rate": numbers["failure_rate"],
            "model_calls": numbers["usage_total"]["calls"],
            "input_tokens": numbers["usage_total"]["input_tokens"],
            "output_tokens": numbers["usage_total"]["output_tokens"],
            "cost": numbers["usage_total"]["cost"],
            "unpriced_calls": numbers["unpriced"],
        },
        "latency": {
            "run_p50_ms": numbers["p50"],
            "run_p95_ms": numbers["p95"],
            "timed_runs": numbers["timed"],
            "run_percentiles_exact": numbers["exact_percentiles"],
            "model_p50_ms": numbers["model_p50"],
            "model_p95_ms": numbers["model_p95"],
        },
        "per_day": per_day,
        "per_model": top(numbers["per_model"], "model"),
        "per_agent": top(numbers["per_agent"], "agent"),
        "top_tools": [
            {"tool": t["tool"], "calls": t["calls"], "errors": t["errors"]} for t in numbers["tools"]
        ],
        "top_errors": [
            {"error": e["error"], "count": e["count"], "run_id": e["latest"]} for e in numbers["errors"]
        ],
        "scores": {
            "names": numbers["scores"]["names"],
            "per_day": [{**row, "day": row["day"].isoformat()} for row in numbers["scores"]["per_day"]],
            "per_agent": numbers["scores"]["per_agent"],
        },
    }
