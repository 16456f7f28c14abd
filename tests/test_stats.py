"""The stats page: runs per day, failure rate, duration percentiles, top tools and errors."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from history_app import models

pytestmark = pytest.mark.django_db


def run(run_id, days_ago, *, status="completed", duration_s=1, error=None, tools=()):
    start = timezone.now().replace(hour=0, minute=0, second=5, microsecond=0) - timedelta(days=days_ago)
    return {
        "schema": "agent-history/v1",
        "run_id": run_id,
        "session_id": f"s-{days_ago}",
        "status": status,
        "error": error,
        "started_at": start.isoformat(),
        "ended_at": (start + timedelta(seconds=duration_s)).isoformat(),
        "iterations": [
            {"tool_calls": [{"tool": t, "params": {}, "error": "x" if t == "flaky" else None} for t in tools]}
        ],
    }


@pytest.fixture
def history(ingest):
    runs = [run(f"today-{i}", 0, duration_s=i + 1, tools=("search", "search", "flaky")) for i in range(10)]
    runs += [run("old-fail-1", 3, status="failed", error="HTTP 502 from upstream", duration_s=100)]
    runs += [run("old-fail-2", 3, status="failed", error="HTTP 502 from upstream", duration_s=200)]
    runs += [run("older-fail", 5, status="failed", error="timeout", tools=("fetch",))]
    runs += [run("ancient", 400)]
    assert ingest(runs).status_code == 200


def test_totals_percentiles_and_failure_rate(alice_client, history):
    page = alice_client.get("/p/default/stats/").content.decode()
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>([^<]+)</dd>", page))
    assert facts["Runs"] == "13" and facts["Failed"] == "3"  # the 400-day-old run is outside
    assert facts["Failure rate"] == "23 %"
    # Durations 1..10 s, 1 s, 100 s, 200 s (13 runs): the median is 6 s, p95 (nearest rank) 100 s.
    assert facts["Duration p50"] == "6.0 s" and facts["Duration p95"] == "1 min 40 s"


def test_charts_and_their_tables(alice_client, history):
    page = alice_client.get("/p/default/stats/?days=7").content.decode()
    charts = re.findall(r'<svg class="chart" viewBox="0 0 1000 220".*?</svg>', page, re.S)
    # Runs, failure rate, and latency over time (these runs report no model calls: no
    # cost or tokens chart).
    runs_chart, failure_chart, latency_chart = charts
    assert all(chart.count("<rect ") == 7 for chart in (runs_chart, failure_chart))
    today = timezone.now().date().isoformat()
    assert f"<title>{today}: 10</title>" in runs_chart
    three_ago = (timezone.now().date() - timedelta(days=3)).isoformat()
    assert f"<title>{three_ago}: 100%</title>" in failure_chart
    assert "Run duration p50 and p95" in latency_chart and "No model calls in this period." in page
    # Today's 10 runs of 1 to 10 s: the median (5 or 6 s) within a bucket's width.
    assert re.search(rf"<title>{today} p50: (4\.[89]|5\.\d|6\.[0-3]) s</title>", latency_chart)
    assert (
        f'<tr><td>{today}</td><td class="num" data-label="Runs">10</td><td class="num" data-label="Failed">0</td>'
        in page
    )


def test_top_tools_and_errors(alice_client, history):
    page = alice_client.get("/p/default/stats/").content.decode()
    tools = re.findall(
        r'\?tool=(\w+)"><code>\w+</code></a></td><td class="num"[^>]*>(\d+)</td><td class="num"[^>]*>(\d+)</td>',
        page,
    )
    assert tools == [("search", "20", "0"), ("flaky", "10", "10"), ("fetch", "1", "0")]
    errors = re.findall(
        r'title="A run with this error">([^<]+)</a></td><td class="num"[^>]*>(\d+)</td>', page
    )
    assert errors == [("HTTP 502 from upstream", "2"), ("timeout", "1")]


def test_a_longer_period_reaches_older_runs(alice_client, history):
    page = alice_client.get("/p/default/stats/?days=365").content.decode()
    assert "<dt>Runs</dt><dd>13</dd>" in page
    assert "<dt>Runs</dt><dd>0</dd>" not in page


@pytest.mark.parametrize("days", ["0", "366", "x", "-3"])
def test_bad_period_is_a_400(alice_client, days):
    response = alice_client.get("/p/default/stats/", {"days": days})
    assert response.status_code == 400 and "<code>days</code>" in response.content.decode()


def test_empty_stats(alice_client):
    page = alice_client.get("/p/default/stats/").content.decode()
    assert "No tool calls in this period." in page and "<dt>Failure rate</dt><dd>—</dd>" in page


def test_stats_query_count_does_not_grow(alice_client, ingest, django_assert_num_queries):
    ingest([run(f"a{i}", i % 5, tools=("t",)) for i in range(5)])
    # session + user, project + role + the project menu, runs per day (kept at ingestion), the durations (one read for both
    # percentiles), tools per day (kept at ingestion), errors; model usage per day, per
    # model and per agent, and latency buckets per day (kept at ingestion); the scores'
    # names (none here: their three other reads are skipped).
    with django_assert_num_queries(12):
        alice_client.get("/p/default/stats/")
    ingest([run(f"b{i}", i % 20, tools=("t", "u"), status="failed", error=f"e{i % 3}") for i in range(80)])
    with django_assert_num_queries(12):
        alice_client.get("/p/default/stats/")


def test_a_large_window_reads_its_percentiles_from_the_rollup(
    alice_client, ingest, monkeypatch, django_assert_num_queries
):
    """Past EXACT_DURATIONS timed runs the durations are not read: p50 and p95 come from the
    latency buckets, within 5 % of the exact figures, and the page marks them."""
    from history_app.reading import stats as stats_module

    runs = [run(f"w{i}", i % 3, duration_s=1 + i) for i in range(40)]
    assert ingest(runs).status_code == 200
    exact = stats_module.stats(project=models.Project.default(), days=7)
    monkeypatch.setattr(stats_module, "EXACT_DURATIONS", 10)
    rough = stats_module.stats(project=models.Project.default(), days=7)
    assert rough["timed"] == exact["timed"] == 40 and not rough["exact_percentiles"]
    for key in ("p50", "p95"):
        assert abs(rough[key] - exact[key]) <= 0.05 * exact[key]
    with django_assert_num_queries(11):  # one fewer: the durations are not read
        page = alice_client.get("/p/default/stats/?days=7").content.decode()
    assert 'title="From the latency rollup' in page
