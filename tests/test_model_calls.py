"""Model calls (issue #14): the record, every format that carries them, prices, the
migration of existing rows, and what each page shows."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from history_app import models
from history_app.agent_history import records, usage
from history_app.agent_history.formats import agno
from history_app.intake import pricing
from history_app.store import rollups

from .conftest import FIXTURES, native

pytestmark = pytest.mark.django_db

AGNO = FIXTURES / "agno"  # real agno output, copied into the test fixtures


def _call(**fields) -> dict:
    return {
        "model": "gpt-4o",
        "provider": "openai",
        "messages": [
            {"role": "system", "content": "You are terse.", "part": "instructions"},
            {"role": "user", "content": "What is 2+2?", "part": "input"},
        ],
        "output": "4",
        "finish_reason": "stop",
        "input_tokens": 1000,
        "output_tokens": 500,
        "started_at": "2026-11-20T10:00:00Z",
        "ended_at": "2026-11-20T10:00:01.250Z",
        **fields,
    }


def _run(run_id="mc-1", session_id="mc-s", calls=None, run_calls=None, **fields) -> dict:
    return native(
        run_id,
        session_id,
        agent_name="Calc",
        input="What is 2+2?",
        output="4",
        started_at="2026-11-20T10:00:00Z",
        ended_at="2026-11-20T10:00:02Z",
        iterations=[{"index": 1, "thought": "add", "model_calls": calls if calls is not None else [_call()]}],
        model_calls=run_calls or [],
        **fields,
    )


def test_record_round_trip_and_properties():
    run = records.Run.from_dict(_run(run_calls=[_call(model="claude-sonnet-4", cost=0.5)]))
    (first,) = run.iterations[0].model_calls
    assert first.duration_ms == 1250 and first.total_tokens == 1500
    assert [m.part for m in first.messages] == ["instructions", "input"]
    assert run.model_calls[0].cost_source == "reported"  # a cost the client sent
    again = records.Run.from_dict(json.loads(run.to_json()))
    assert again == run


@pytest.mark.parametrize(
    ("call", "path", "message"),
    [
        ({"input_tokens": -1}, "input_tokens", "whole number of tokens"),
        ({"output_tokens": 1.5}, "output_tokens", "whole number of tokens"),
        ({"cached_tokens": "12"}, "cached_tokens", "whole number of tokens"),
        ({"reasoning_tokens": True}, "reasoning_tokens", "whole number of tokens"),
        ({"cost": -0.1}, "cost", "from 0 to 1,000,000"),
        ({"cost": "cheap"}, "cost", "from 0 to 1,000,000"),
        ({"cost": 1e308}, "cost", "from 0 to 1,000,000"),
        ({"input_tokens": 2**32 + 1}, "input_tokens", "from 0 to 4294967296"),
        ({"output_tokens": 2**63 - 1}, "output_tokens", "whole number of tokens"),
        ({"ended_at": "2026-11-20T09:59:59Z"}, "ended_at", "must not be before started_at"),
        ({"metadata": {"aggregate": "yes"}}, "metadata.aggregate", "must be true"),
        ({"metadata": {"calls": [1]}}, "metadata.calls", "integer from 0"),
        ({"metadata": {"omitted_messages": "lots"}}, "metadata.omitted_messages", "integer from 0"),
        ({"model": True}, "model", "must be a string, not boolean"),
        ({"cost": 1, "cost_source": "guessed"}, "cost_source", "one of reported, estimated"),
        ({"messages": [{"role": "user", "part": "secret"}]}, "messages[0].part", "one of instructions"),
        ({"messages": [{"role": "user", "context": 3}]}, "messages[0].context", "names no injected context"),
        ({"messages": [{"role": "user", "context": -1}]}, "messages[0].context", "integer from 0"),
        ({"messages": "hello"}, "messages", "must be an array"),
        ({"started_at": "yesterday"}, "started_at", "ISO 8601"),
    ],
)
def test_a_bad_model_call_is_refused_with_its_path(ingest, call, path, message):
    response = ingest([_run(calls=[_call(**call)])])
    assert response.status_code == 400
    (error,) = response.json()["results"][0]["errors"]
    assert error["path"] == f"$.iterations[0].model_calls[0].{path}" and message in error["message"]
    assert not models.Run.objects.exists() and not models.ModelCall.objects.exists()


def test_prices_a_known_model_and_never_invents_one(ingest):
    """gpt-4o is priced by genai-prices (1,000 in, 500 out: $0.0075); a model the list does
    not know keeps its tokens and has no price; a reported cost is kept as reported."""
    calls = [
        _call(),
        _call(model="my-local-llama", provider="ollama", input_tokens=70, output_tokens=7),
        _call(model="gpt-4o", provider="my-gateway", input_tokens=70, output_tokens=7),
        _call(model="gpt-4o", cost=0.25),
    ]
    assert ingest([_run(calls=calls)]).status_code == 200
    known, unknown, gateway, reported = models.ModelCall.objects.order_by("position")
    assert known.cost == pytest.approx(0.0075) and known.cost_source == "estimated"
    assert known.price_source == pricing.price_source() and known.price_source.startswith("genai-prices ")
    assert unknown.cost is None and unknown.cost_source == "" and unknown.input_tokens == 70
    # gpt-4o has a price at OpenAI, but not through a provider the list does not know.
    assert gateway.cost is None and gateway.cost_source == ""
    assert reported.cost == 0.25 and reported.cost_source == "reported"
    run = models.Run.objects.get()
    assert run.model_call_count == 4 and run.unpriced_calls == 2
    assert run.input_tokens == 2140 and run.output_tokens == 1014
    assert run.cost == pytest.approx(0.2575)
    session = models.Session.objects.get()
    assert (session.input_tokens, session.output_tokens) == (2140, 1014)
    assert session.cost == pytest.approx(0.2575)


def test_the_run_page_and_the_call_page(alice_client, ingest):
    contexts = [{"text": "user: earlier question\nassistant: earlier answer", "kind": "chat_history"}]
    calls = [
        _call(
            messages=[
                {"role": "system", "content": "You are terse.", "part": "instructions"},
                {"role": "user", "content": "earlier question", "part": "history"},
                {"role": "user", "content": "What is 2+2?", "part": "input"},
            ]
        ),
        _call(model="my-local-llama", messages=[]),
    ]
    assert ingest([_run(calls=calls, injected_contexts=contexts)]).status_code == 200
    page = alice_client.get("/p/default/runs/mc-1/").content.decode()
    assert "<dt>Model calls</dt>" in page and "<dt>Tokens (in / out)</dt><dd>2,000 / 1,000</dd>" in page
    assert "$0.0075" in page and "estimated with genai-prices" in page and "1 call with no price" in page
    lines = re.findall(r'<p class="model-call-line">.*?</p>', page, re.S)
    assert len(lines) == 2 and "gpt-4o" in lines[0] and "1,000 in / 500 out" in lines[0]
    assert "1.2 s" in lines[0] or "1250 ms" in lines[0] or "1.3 s" in lines[0]
    assert "no price" in lines[1]
    call_page = alice_client.get("/p/default/runs/mc-1/model-calls/1/").content.decode()
    parts = re.findall(r'<span class="tag part">([^<]+)</span>', call_page)
    assert parts == ["instructions", "history", "new input"]
    # The replayed message is part of the history context: linked to the inspector.
    assert call_page.count('/p/default/runs/mc-1/context/1/">carries an injected context') == 1
    assert "You are terse." in call_page and "What is 2+2?" in call_page and "<code>stop</code>" in call_page
    assert "(estimated with genai-prices" in call_page
    second = alice_client.get("/p/default/runs/mc-1/model-calls/2/").content.decode()
    assert "the price list does not know this model" in second and "did not report the messages" in second
    for missing in (
        "/p/default/runs/mc-1/model-calls/3/",
        "/p/default/runs/mc-1/model-calls/0/",
        "/p/default/runs/nope/model-calls/1/",
    ):
        assert alice_client.get(missing).status_code == 404
    bad = alice_client.get("/p/default/runs/mc-1/model-calls/1/?full=x")
    assert bad.status_code == 400 and "full" in bad.content.decode()


def test_long_messages_are_previewed_and_shown_whole_on_request(alice_client, ingest, settings):
    settings.HISTORY_MESSAGE_PREVIEW_CHARS = 100
    text = "word " * 100 + "THE-END"
    assert ingest([_run(calls=[_call(messages=[{"role": "user", "content": text}])])]).status_code == 200
    page = alice_client.get("/p/default/runs/mc-1/model-calls/1/").content.decode()
    assert "THE-END" not in page and "more characters" in page
    assert "THE-END" in alice_client.get("/p/default/runs/mc-1/model-calls/1/?full=0").content.decode()


def test_messages_beyond_the_cap_are_counted_not_dropped_silently(ingest, settings, alice_client):
    settings.HISTORY_MAX_CALL_MESSAGES = 20
    messages = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    response = ingest([_run(calls=[_call(messages=messages)])])
    assert response.status_code == 200
    call = models.ModelCall.objects.get()
    kept = [m["content"] for m in call.messages]
    assert kept == [f"m{i}" for i in range(10)] + [f"m{i}" for i in range(40, 50)]
    assert call.metadata["omitted_messages"] == 30 and call.message_count == 20
    receipt = models.IngestReceipt.objects.get()
    assert {"run_id": "mc-1", "path": "$.model_calls[*].messages", "rules": {"omitted_messages": 30}} in (
        receipt.changed_fields
    )
    assert (
        "30 messages between the first ten"
        in alice_client.get("/p/default/runs/mc-1/model-calls/1/").content.decode()
    )


def test_secrets_in_messages_are_redacted_and_resending_is_a_duplicate(ingest):
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2
    payload = _run(calls=[_call(messages=[{"role": "user", "content": f"use {key}"}], output=f"ok {key}")])
    assert ingest([payload]).json()["results"][0]["status"] == "created"
    call = models.ModelCall.objects.get()
    assert key not in call.messages_json and key not in call.output and "[REDACTED" in call.messages_json
    assert ingest([payload]).json()["results"][0]["status"] == "duplicate"


def test_the_json_api_and_export_carry_model_calls_and_a_re_import_is_a_duplicate(alice_client, ingest):
    assert (
        ingest([_run(run_calls=[_call(model="o1", reasoning_tokens=300, cached_tokens=200)])]).status_code
        == 200
    )
    data = json.loads(b"".join(alice_client.get("/api/v1/runs/mc-1").streaming_content))
    run = data.get("run", data)
    (in_iteration,) = run["iterations"][0]["model_calls"]
    (own,) = run["model_calls"]
    assert in_iteration["cost_source"] == "estimated" and in_iteration["messages"][1]["part"] == "input"
    assert own["reasoning_tokens"] == 300 and own["cached_tokens"] == 200
    exported = json.loads(b"".join(alice_client.get("/p/default/runs/mc-1/export.json").streaming_content))
    assert exported["model_calls"] == run["model_calls"]
    assert exported["iterations"][0]["model_calls"] == run["iterations"][0]["model_calls"]
    assert ingest([exported]).json()["results"][0]["status"] == "duplicate"


def test_run_metrics_become_one_call_of_totals(ingest, alice_client):
    """A run that reports only totals (an older client, agno's run metrics) gets one call
    marked as the run's totals: tokens, and a price from its model where it names one."""
    payload = native(
        "tot-1",
        "tot-s",
        metrics={"input_tokens": 1000, "output_tokens": 500, "model": "gpt-4o", "llm_calls": 3},
    )
    assert ingest([payload]).status_code == 200
    call = models.ModelCall.objects.get()
    assert call.iteration_id is None and call.metadata == {"aggregate": True, "calls": 3}
    assert call.cost == pytest.approx(0.0075)
    page = alice_client.get("/p/default/runs/tot-1/").content.decode()
    assert "run totals</span>" in page
    assert (
        "totals the run reported for all its model calls (3 calls)"
        in alice_client.get("/p/default/runs/tot-1/model-calls/1/").content.decode()
    )


def test_agno_assistant_messages_are_model_calls():
    payload = json.loads((AGNO / "run_outputs" / "agent_sess-agent-travel_run3.json").read_text())
    (run,) = agno.parse(payload)
    calls = run.all_model_calls()
    # The run's own two answers (replayed history is not a call of this run).
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [(131, 6), (148, 26)]
    assert sum(c.input_tokens for c in calls) == payload["metrics"]["input_tokens"]
    assert {c.model for c in calls} == {"stub-model-1"} and {c.provider for c in calls} == {"StubProvider"}
    first, second = calls
    answers = [m for m in payload["messages"] if m["role"] == "assistant" and not m["from_history"]]
    assert first.finish_reason == "tool_calls" and second.output == answers[-1]["content"]
    parts = [m.part for m in first.messages]
    assert parts[0] == "instructions" and parts[-1] == "input" and set(parts[1:-1]) == {"history"}
    assert [m.part for m in second.messages][-2:] == ["run", "run"]  # its own tool call and result
    usage.link_messages(run)
    (history,) = [n for n, c in enumerate(run.injected_contexts) if c.kind == "chat_history"]
    linked = [m for m in first.messages if m.part == "history" and m.content.strip()]
    assert linked and all(m.context == history for m in linked)
    assert "time_to_first_token_ms" in first.metadata


def test_agno_through_the_endpoint_prices_nothing_it_does_not_know(ingest, alice_client):
    payload = json.loads((AGNO / "run_outputs" / "agent_sess-agent-travel_run3.json").read_text())
    assert ingest([payload]).status_code == 200
    run = models.Run.objects.get(run_id=payload["run_id"])
    assert (run.model_call_count, run.input_tokens, run.output_tokens) == (2, 279, 32)
    assert run.cost is None and run.unpriced_calls == 2
    page = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/1/").content.decode()
    assert "carries an injected context" in page and "the price list does not know this model" in page


def test_sessions_list_timeline_and_json_show_tokens_cost_latency(alice_client, ingest):
    assert ingest([_run(), _run("mc-2", calls=[_call(input_tokens=10, output_tokens=5)])]).status_code == 200
    page = alice_client.get("/p/default/").content.decode()
    row = re.search(r'<tr data-nav>.*?href="/p/default/sessions/mc-s/".*?</tr>', page, re.S).group(0)
    cells = dict(re.findall(r'<td class="num" data-label="([^"]+)">([^<]*)</td>', row))
    assert (cells["Tokens"], cells["Cost"], cells["Latency"]) == ("1,515", "$0.007575", "2.0 s")
    (listed,) = alice_client.get("/api/v1/sessions").json()["sessions"]
    assert (listed["input_tokens"], listed["output_tokens"], listed["mean_duration_ms"]) == (1010, 505, 2000)
    assert listed["cost"] == pytest.approx(0.0075 + 0.000075)
    timeline = alice_client.get("/p/default/sessions/mc-s/").content.decode()
    assert "<dt>Cost</dt>" in timeline and "$0.007575" in timeline
    assert '<span title="input / output">10 / 5</span>' in timeline


def test_stats_show_cost_tokens_per_model_and_agent_and_latency(alice_client, ingest):
    today = timezone.now().replace(hour=0, minute=0, second=5, microsecond=0)
    runs = []
    for n, (agent, model, latency) in enumerate(
        [("Calc", "gpt-4o", 100), ("Calc", "gpt-4o", 300), ("Poet", "mystery", 200)]
    ):
        start = today - timedelta(days=n)
        runs.append(
            {
                **_run(f"st-{n}", f"st-s{n}", calls=[_call(model=model, started_at=start.isoformat(), ended_at=(start + timedelta(milliseconds=latency)).isoformat())]),
                "agent_name": agent,
                "started_at": start.isoformat(),
                "ended_at": (start + timedelta(seconds=1)).isoformat(),
            }
        )  # fmt: skip
    assert ingest(runs).status_code == 200
    page = alice_client.get("/p/default/stats/?days=7").content.decode()
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>([^<]+)", page))
    assert (
        facts["Model calls"] == "3" and facts["Tokens in"] == "3,000" and facts["Cost"].startswith("$0.015")
    )
    assert "1 call with no price" in page
    per_model = re.findall(
        r"<tr><td[^>]*><code>([^<]+)</code></td><td class=\"num\"[^>]*>(\d+)</td>.*?<td class=\"num\"[^>]*>([^<]+)</td></tr>",
        page,
    )
    assert ("gpt-4o", "2", "$0.015") in per_model and ("mystery", "1", "no price") in per_model
    assert re.search(r'\?agent=Calc">Calc</a></td><td class="num" data-label="Calls">2</td>', page)
    assert "Cost per day" in page and 'aria-label="Model cost per day' in page
    assert (
        'aria-label="Run duration p50 and p95' in page
        and 'aria-label="Model-call latency p50 and p95' in page
    )
    # Model-call latency 100, 200, 300 ms: the median within a bucket's width of 200 ms.
    assert (
        190
        <= rollups.bucket_percentile({rollups.latency_bucket(ms): 1 for ms in (100, 200, 300)}, 0.5)
        <= 210
    )
    assert re.search(r"<dt>Model latency p50</dt><dd>(19\d|20\d|210) ms", page)


def test_usage_rollups_follow_rewrites_and_prunes(ingest):
    from history_app.upkeep import retention

    assert ingest([_run()]).status_code == 200
    assert models.DailyUsage.objects.get().calls == 1
    assert (
        ingest([_run(calls=[_call(), _call(model="x-unknown")])]).json()["results"][0]["status"] == "updated"
    )
    assert sorted(models.DailyUsage.objects.values_list("model", "calls", "unpriced")) == [
        ("gpt-4o", 1, 0),
        ("x-unknown", 1, 1),
    ]
    retention.prune_sessions(session_ids=[models.Session.objects.get().pk])
    assert not models.DailyUsage.objects.exists() and not models.DailyLatency.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_turns_existing_metrics_into_model_calls(alice_client):
    """Rows stored before model calls: a run with run-level metrics (agno), one whose
    iterations kept the middleware's usage (``metadata["llm"]``), one with neither."""
    from django.core.management import call_command
    from django.db.migrations.executor import MigrationExecutor

    call_command("migrate", "history_app", "0010", verbosity=0)
    executor = MigrationExecutor(connection)
    state = executor.loader.project_state(("history_app", "0010_session_indexes"))
    Session = state.apps.get_model("history_app", "Session")
    Run = state.apps.get_model("history_app", "Run")
    Iteration = state.apps.get_model("history_app", "Iteration")
    now = timezone.now()
    session = Session.objects.create(session_id="old", last_activity_at=now, run_count=3)
    common = {
        "session": session,
        "content_hash": "x",
        "started_at": now,
        "ended_at": now + timedelta(seconds=2),
        "duration_ms": 2000,
    }
    Run.objects.create(run_id="old-agno", metrics={"input_tokens": 1000, "output_tokens": 500, "details": {"model": [{"id": "gpt-4o", "provider": "openai"}]}}, **common)  # fmt: skip
    mw = Run.objects.create(run_id="old-mw", metrics={"input_tokens": 300, "llm_calls": 2}, **common)
    Iteration.objects.create(run=mw, position=0, index=1, ended_at=now, metadata={"llm": [{"input_tokens": 100, "output_tokens": 10, "total_cost": 0.001, "provider": "openai", "latency_ms": 250}]})  # fmt: skip
    Iteration.objects.create(run=mw, position=1, index=2, ended_at=now, metadata={"llm": [{"input_tokens": 200, "output_tokens": 20, "total_cost": 0.002, "provider": "openai"}]})  # fmt: skip
    Run.objects.create(run_id="old-plain", **common)
    call_command("migrate", "history_app", verbosity=0)
    agno_run = models.Run.objects.get(run_id="old-agno")
    (total,) = agno_run.model_calls.all()
    assert (
        total.model == "gpt-4o"
        and total.metadata == {"aggregate": True}
        and total.cost == pytest.approx(0.0075)
    )
    mw_run = models.Run.objects.get(run_id="old-mw")
    first, second = mw_run.model_calls.order_by("position")
    assert (first.iteration.index, first.duration_ms, first.cost) == (
        1,
        250,
        0.001,
    ) and first.cost_source == "reported"
    assert (second.iteration.index, second.input_tokens, second.cost) == (2, 200, 0.002)
    assert mw_run.input_tokens == 300 and mw_run.cost == pytest.approx(0.003)
    assert models.Run.objects.get(run_id="old-plain").model_call_count == 0
    migrated = models.Session.objects.get(session_id="old")
    assert (migrated.input_tokens, migrated.output_tokens, migrated.timed_runs) == (1300, 530, 3)
    assert migrated.cost == pytest.approx(0.0105)
    assert sum(models.DailyUsage.objects.values_list("calls", flat=True)) == 3
    assert sum(models.DailyLatency.objects.filter(kind="run").values_list("count", flat=True)) == 3
    alice_client.force_login(alice_client_user())
    assert "$0.0105" in alice_client.get("/p/default/sessions/old/").content.decode()
    assert "run totals</span>" in alice_client.get("/p/default/runs/old-agno/").content.decode()


def alice_client_user():
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get_or_create(username="alice-migration")[0]
    models.Membership.objects.get_or_create(project=models.Project.default(), user=user)
    return user


# -- the autourgos middleware -------------------------------------------------------------


class _Collect:
    """A sink that keeps what it is sent."""

    def __init__(self) -> None:
        self.runs: list = []

    def send(self, run) -> None:
        self.runs.append(run if isinstance(run, dict) else run.to_dict())


def _recorded(scenario_name: str, tmp_path, **options) -> dict:
    from history_app.agent_history import AgentHistoryMiddleware

    from .test_dropin_autourgos import SCENARIOS, build_agent, invoke

    (scenario,) = [s for s in SCENARIOS if s.name == scenario_name]
    sink = _Collect()
    middleware = AgentHistoryMiddleware(folder=str(tmp_path), sinks=[sink], **options)
    invoke(build_agent(scenario, [middleware]), scenario)
    assert middleware.flush(30)
    (run,) = sink.runs
    return run


def _calls(run: dict) -> list[dict]:
    return [call for it in run["iterations"] for call in it["model_calls"]] + run["model_calls"]


def test_the_middleware_keeps_what_on_llm_end_reports(tmp_path):
    """autourgos-agent 3.11 passes on_llm_end the client's provider_used, tokens, total_cost
    and latency_ms (``_extract_llm_metadata``) and ``raw``: each call is kept, in its
    iteration, with the cost as reported. It fires no on_llm_start: no messages."""
    run = _recorded("usage_reported", tmp_path)
    calls = _calls(run)
    assert [(c["input_tokens"], c["output_tokens"], c["cost"]) for c in calls] == [
        (100, 10, 0.001),
        (200, 20, 0.002),
    ]
    assert all(c["provider"] == "openai" and c["cost_source"] == "reported" for c in calls)
    assert all(c["price_source"] == "reported by openai" and c["messages"] == [] for c in calls)
    for call in calls:
        started, ended = (records.parse_time(call[k]) for k in ("started_at", "ended_at"))
        assert round((ended - started).total_seconds() * 1000) == 250
    assert [len(it["model_calls"]) for it in run["iterations"]] == [1, 1]
    assert calls[1]["output"] and "ok" in calls[1]["output"]


def test_capture_prompts_keeps_the_exact_messages_prompt_mode(tmp_path):
    run = _recorded("one_tool", tmp_path, capture_prompts=True)
    first, second = _calls(run)
    roles = [(m["role"], m["part"]) for m in first["messages"]]
    assert roles in ([("system", "instructions"), ("user", "input")], [("user", "input")])
    prompt = first["messages"][-1]["content"]
    assert "What is the weather in Tokyo?" in prompt and "Available tools" in prompt
    # The second call's prompt holds the first step's observation (the scratchpad).
    assert "hi" in second["messages"][-1]["content"] and second["messages"][-1]["content"] != prompt


def test_capture_prompts_native_mode_marks_the_loop_as_this_run(tmp_path):
    run = _recorded("native_tools", tmp_path, capture_prompts=True)
    calls = _calls(run)
    assert len(calls) >= 2
    last = calls[-1]["messages"]
    parts = [m["part"] for m in last]
    assert "input" in parts and parts.count("input") == 1
    assert any(m["role"] == "tool" and m["part"] == "run" for m in last)
    assert calls[0]["finish_reason"] == "tool_calls" and calls[0]["output"] is None


def test_on_llm_start_where_an_agent_fires_it(tmp_path):
    from history_app.agent_history import AgentHistoryMiddleware

    sink = _Collect()
    middleware = AgentHistoryMiddleware(folder=str(tmp_path), sinks=[sink])
    agent = object()
    middleware.on_agent_start("hello", agent=agent)
    middleware.on_iteration_start(1, agent=agent)
    sent = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hello"}]
    middleware.on_llm_start(sent, agent=agent)
    sent.append({"role": "assistant", "content": "appended after the call"})  # the agent's loop goes on
    middleware.on_llm_end("hi there", agent=agent, raw={"model": "gpt-4o-mini", "choices": [{"finish_reason": "stop"}]}, input_tokens=12, output_tokens=3)  # fmt: skip
    middleware.on_parse_error(1, raw_response="hi there", agent=agent)
    middleware.on_agent_pause(1, reason="human approval", agent=agent)
    middleware.on_agent_resume(1, paused_duration=1.5, agent=agent)
    middleware.on_agent_end("hi there", agent=agent)
    assert middleware.flush(10)
    (run,) = sink.runs
    (call,) = _calls(run)
    assert call["model"] == "gpt-4o-mini" and call["finish_reason"] == "stop"
    assert [(m["role"], m["part"]) for m in call["messages"]] == [
        ("system", "instructions"),
        ("user", "input"),
    ]
    assert call["cost"] is None  # priced on the server, not by the library
    assert run["iterations"][0]["metadata"]["parse_error"] is True
    assert [e["event"] for e in run["metadata"]["events"]] == ["paused", "resumed"]
    assert run["metadata"]["events"][1]["paused_seconds"] == 1.5


@pytest.mark.django_db(transaction=True)
def test_middleware_calls_reach_the_pages(live_server, token, tmp_path, alice_client):
    from history_app.agent_history import AgentHistoryMiddleware, HttpSink

    from .conftest import TOKEN
    from .test_dropin_autourgos import SCENARIOS, build_agent, invoke

    (scenario,) = [s for s in SCENARIOS if s.name == "usage_reported"]
    sink = HttpSink(
        f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path / "spool"
    )
    middleware = AgentHistoryMiddleware(folder=str(tmp_path / "files"), sinks=[sink], capture_prompts=True)
    invoke(build_agent(scenario, [middleware]), scenario)
    assert middleware.flush(30) and sink.flush(30)
    sink.close()
    run = models.Run.objects.get()
    assert (run.model_call_count, run.input_tokens, run.output_tokens) == (2, 300, 30)
    assert run.cost == pytest.approx(0.003)
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "300 / 30" in page and "openai, as reported" in page
    call_page = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/1/").content.decode()
    assert "new input" in call_page and "What is the weather in Tokyo?" in call_page
    assert "(as reported: reported by openai)" in call_page
    # The start was measured (capture_prompts): the latency is the measured one, the
    # client's own figure kept beside it.
    assert models.ModelCall.objects.filter(metadata__reported_latency_ms=250).count() == 2


def test_model_calls_slice_without_javascript_and_in_place(alice_client, ingest, settings):
    settings.HISTORY_RUN_PAGE_MODEL_CALLS = 5
    calls = [_call(model=f"model-{n}") for n in range(12)]
    assert ingest([_run(calls=calls)]).status_code == 200
    page = alice_client.get("/p/default/runs/mc-1/").content.decode()
    assert page.count('data-label="Model"') == 5 and "(5 of 12 shown)" in page
    more = alice_client.get("/p/default/runs/mc-1/model-calls/?start=5").content.decode()
    assert "<h1>Calc: more model calls</h1>" in more and "model-5" in more and "model-9" in more
    assert "model-10" not in more and "(10 of 12 shown)" in more
    fragment = alice_client.get(
        "/p/default/runs/mc-1/model-calls/?start=10", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<h1>" not in fragment and fragment.count("<tr>") == 2 and "Show more" not in fragment
    assert alice_client.get("/p/default/runs/mc-1/model-calls/?start=-1").status_code == 400
    empty = alice_client.get("/p/default/runs/mc-1/model-calls/?start=99").content.decode()
    assert "No more model calls: this run has 12." in empty


def test_the_offline_session_export_shows_model_calls(alice_client, ingest):
    assert ingest([_run(run_calls=[_call(model="mystery-model")])]).status_code == 200
    html = b"".join(alice_client.get("/p/default/sessions/mc-s/export.html").streaming_content).decode()
    assert (
        "<dt>Cost</dt><dd>$0.0075</dd>" in html and "<dt>Tokens (in / out)</dt><dd>2,000 / 1,000</dd>" in html
    )
    assert html.count('<details class="model-call">') == 2
    assert "Model call · gpt-4o · 1,000 in / 500 out · $0.0075 (estimated)" in html
    assert "Model call · mystery-model · 1,000 in / 500 out · no price" in html
    assert '<span class="tag">new input</span>' in html


def test_the_waterfall_draws_model_calls_linked_to_their_page(alice_client, ingest):
    payload = _run()
    payload["iterations"][0].update(started_at="2026-11-20T10:00:00Z", ended_at="2026-11-20T10:00:02Z")
    assert ingest([payload]).status_code == 200
    page = alice_client.get("/p/default/runs/mc-1/").content.decode()
    (bar,) = re.findall(
        r'<a href="/p/default/runs/mc-1/model-calls/1/"><text[^>]*>gpt-4o call 1</text><rect class="wf-model"[^>]*><title>([^<]+)</title>',
        page,
    )
    assert (
        bar == "gpt-4o call 1: starts at 0 ms, lasts 1.2 s"
        or bar == "gpt-4o call 1: starts at 0 ms, lasts 1.3 s"
    )
    assert '<span class="key wf-model"></span> model call' in page


@pytest.mark.parametrize(
    "fields",
    [
        {"metrics": {"input_tokens": 2**70, "output_tokens": 5}},
        {"metrics": {"input_tokens": 1e300}},
        {"metrics": {"input_tokens": [2**62, 2**62, 2**62]}},
        {"metrics": {"total_cost": 1e308}},
        {"metrics": {"input_tokens": float("nan")}},
        {
            "iterations": [
                {
                    "ended_at": "0001-01-02T00:00:01Z",
                    "metadata": {"llm": [{"prompt_tokens": 2**70, "latency_ms": 1e15}]},
                }
            ]
        },
        {
            "iterations": [
                {
                    "ended_at": "0001-01-02T00:00:01Z",
                    "metadata": {"llm": [{"input_tokens": 5, "latency_ms": 1e15}]},
                }
            ]
        },
    ],
)
def test_usage_figures_out_of_bounds_stay_in_metrics_and_never_fail(ingest, fields):
    """Run-level figures become a call only where they are sane; the rest is kept as sent."""
    payload = native("odd", "odd-s", **fields)
    if "nan" in json.dumps(fields, allow_nan=True).lower():
        response = ingest(json.dumps([payload], allow_nan=True))
        assert response.status_code == 400  # JSON readers refuse NaN: a clear error, as before
        return
    response = ingest([payload])
    assert response.status_code == 200, response.content
    run = models.Run.objects.get()
    for call in run.model_calls.all():
        for value in (call.input_tokens, call.output_tokens):
            assert value is None or 0 <= value <= records.MAX_TOKENS
        assert call.cost is None or call.cost <= records.MAX_COST
    session = models.Session.objects.get()
    assert session.input_tokens <= records.MAX_TOKENS


def test_agno_calls_keep_a_bounded_number_of_messages():
    """Each of agno's calls received every message before it: 3,000 turns would list 4.5
    million. A call keeps the first ten and the most recent (100 in all), the run 20,000."""
    turns = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    turns += [{"role": "assistant", "content": f"a{n}", "metrics": {"input_tokens": 10}} for n in range(3000)]
    (run,) = agno.parse({"run_id": "long", "session_id": "s", "messages": turns, "created_at": 1795992236})
    calls = run.all_model_calls()
    assert len(calls) == 3000
    kept = [len(c.messages) for c in calls]
    assert max(kept) == usage.MAX_CALL_MESSAGES and sum(kept) <= agno.RUN_MESSAGES_BUDGET
    last_kept = calls[150]
    assert [m.content for m in last_kept.messages[:3]] == ["sys", "go", "a0"]
    assert last_kept.messages[-1].content == "a149" and last_kept.metadata["omitted_messages"] == 152 - 100
    assert calls[-1].messages == [] and calls[-1].metadata["omitted_messages"] == 3001
    assert [m.part for m in calls[1].messages] == ["instructions", "input", "run"]


def test_money_is_written_sanely():
    from history_app.templatetags.history_tags import money

    assert [money(v) for v in (None, 0, 1e-9, -2.78e-16, 0.0075, 0.25751, 0.9999999, 1, 123456.789)] == [
        "no price",
        "$0",
        "<$0.000001",
        "$0",
        "$0.0075",
        "$0.2575",
        "$1.00",
        "$1.00",
        "$123,456.79",
    ]


def test_query_counts_do_not_grow_with_model_calls(alice_client, ingest, django_assert_num_queries):
    """Pinned: the run page, the call page and the slice read the same number of queries
    for a run of 2 calls and one of 200 (session and user, project and role with the
    project menu: 3 of each count)."""
    small = _run("q-small", calls=[_call(), _call()])
    big = _run("q-big", calls=[])
    big["iterations"] = [{"index": n, "model_calls": [_call() for _ in range(10)]} for n in range(20)]
    assert ingest([small, big]).status_code == 200
    for run_id in ("q-small", "q-big"):
        alice_client.get(f"/p/default/runs/{run_id}/")  # its first view keeps the answer's HTML: one more
        # session + user, the run, iterations, tool calls, the count of contexts, model
        # calls of the iterations, the list of model calls, where the cost came from, the
        # runs before and after it in its session (with the nearest of the other group,
        # timed or not), its annotations, the runs it started.
        with django_assert_num_queries(13):
            alice_client.get(f"/p/default/runs/{run_id}/")
        # session + user, project + role + the project menu, the run, the call (with its
        # iteration).
        with django_assert_num_queries(5):
            alice_client.get(f"/p/default/runs/{run_id}/model-calls/2/")
        with django_assert_num_queries(5):
            alice_client.get(f"/p/default/runs/{run_id}/model-calls/?start=1")


@pytest.mark.parametrize("scenario", ["parallel_tools_async", "native_async_tool_raises"])
def test_capture_prompts_in_async_runs(tmp_path, scenario):
    """The agent's async paths (``ainvoke``, ``ainvoke_with_tools``) are captured too."""
    run = _recorded(scenario, tmp_path, capture_prompts=True)
    calls = _calls(run)
    assert calls and all(call["messages"] for call in calls)
    assert all(sum(m["part"] == "input" for m in call["messages"]) == 1 for call in calls)


def test_admin_lists_model_calls_read_only(admin_client, ingest):
    assert ingest([_run()]).status_code == 200
    page = admin_client.get("/admin/history_app/modelcall/").content.decode()
    assert "gpt-4o" in page and "estimated" in page
    call = models.ModelCall.objects.get()
    assert admin_client.get(f"/admin/history_app/modelcall/{call.pk}/change/").status_code == 200
    assert admin_client.get("/admin/history_app/modelcall/add/").status_code == 403
