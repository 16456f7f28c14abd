"""Property: whatever arrives at the endpoint, it never answers 500 and never keeps a
partly stored run (every stored run has exactly the children its counts say).

The payloads are real samples of every format (native, autourgos JSON and Markdown, agno
agent/team/workflow, agno-go, CoT), mutated with random JSON and with the values that
once broke ingestion, put where they hurt: values nested past the depth limit, lone
surrogates (in keys too), times in year 1 or 9999 at extreme offsets, epoch seconds and
iteration numbers beyond any column, and 1e400 (which Python's JSON reader turns into
infinity)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from history_app import models

from .conftest import AUTOURGOS, FIXTURES, examples
from .test_formats_more import COT, SESSION

SAMPLES = [json.loads(p.read_text()) for p in sorted(AUTOURGOS.glob("Task_*.json"))[:4]]
SAMPLES += [json.loads(p.read_text()) for p in sorted((FIXTURES / "agno" / "run_outputs").glob("*.json"))]
SAMPLES += [SESSION, SESSION["runs"][0], {**COT, "settings": {"history_detail_items": 2}}]
SAMPLES += [
    {
        "schema": "agent-history/v1",
        "run_id": "n1",
        "session_id": "s1",
        "started_at": "2026-11-29T10:00:00Z",
        "ended_at": 1764410000.5,
        "metrics": {"input_tokens": 10},
        "metadata": {"k": [1, {"v": None}]},
        "iterations": [
            {"index": 1, "started_at": "2026-11-29T10:00:00", "metadata": {}, "tool_calls": [
                {"tool": "t", "params": {"q": "x"}, "started_at": 1764410000, "ended_at": "2026-11-29T10:00:01Z"}]}
        ],
        "member_interactions": [{"member": "m", "task": "t", "response": "r", "member_run_id": "n2"}],
        "injected_contexts": [{"text": "ctx", "kind": "team_history", "settings": {"n": 3}, "source_run_ids": ["n0"]}],
    }
]  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
HOSTILE_TIMES = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59.999999999Z",
                 "0001-01-01T00:00:00", "9999-12-30T23:59:59Z", "0001-01-02T00:00:00Z", "2026-13-45T99:00:00"]  # fmt: skip
HOSTILE_NUMBERS = [2**31 - 1, 2**31, 2**63, 2**64, 2**70, -(2**63) - 1, -1, 1e300, -1e300, 1.7976931348623157e308,
                   253402300800, -62135596801, 0.5, "HUGE"]  # fmt: skip


def deep(depth: int) -> str:
    """A marker the body writer expands into arrays nested ``depth`` levels deep."""
    return f"DEEP-{depth}"


hostile_values = st.one_of(
    st.sampled_from(HOSTILE_TIMES),
    st.sampled_from(HOSTILE_NUMBERS),
    st.integers(min_value=56, max_value=70).map(deep),
    st.sampled_from([465, 466, 989]).map(deep),
    st.text(st.characters() | SURROGATES, min_size=1, max_size=8),
    st.dictionaries(st.text(SURROGATES, min_size=1, max_size=2), st.just(1), min_size=1, max_size=2),
)
KEYS = ["run_id", "session_id", "iterations", "tools", "observations", "thought", "status", "started_at", "input",
        "output", "query", "final_response", "error", "tool_calls", "params", "messages", "member_responses", "schema",
        "injected_contexts", "kind", "created_at", "step_results", "index", "iteration", "agent_name", "\\x00",
        "settings", "history", "process_id", "ts", "events", "completed_at", "metrics", "step_executor_runs",
        "function", "arguments", "start_time", "end_time", "metadata", "runs", "workflow_id"]  # fmt: skip


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


@st.composite
def mutated(draw):
    payload = json.loads(json.dumps(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = list(_paths(payload))
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS))] = draw(json_values)
    return payload


@st.composite
def poisoned(draw):
    """A sample with hostile values put at up to three of its paths (every field any
    parser reads is a path of some sample)."""
    payload = json.loads(json.dumps(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(list(_paths(payload))[1:]))
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = draw(hostile_values)
    return payload


def hostile_body(payloads) -> str:
    """The JSON text: markers become arrays nested too deep for json.dumps, and 1e400."""
    text = json.dumps(payloads)
    text = re.sub(r'"DEEP-(\d+)"', lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)
    return text.replace('"HUGE"', "1e400")


seen_run_ids: set[str] = set()

bodies = st.one_of(
    mutated().map(json.dumps),
    st.lists(mutated(), max_size=3).map(json.dumps),
    json_values.map(json.dumps),
    st.binary(max_size=200),
    st.text(max_size=200),
)


def assert_no_partial_runs(run_ids):
    """Each run the request touched is whole: its rows match its own counts."""
    for run in models.Run.objects.filter(run_id__in=run_ids).select_related("session"):
        assert run.iterations.count() == run.iteration_count
        assert run.tool_calls.count() == run.tool_call_count
        assert run.session.runs.count() == run.session.run_count


def assert_never_500_and_nothing_partial(response, body):
    # 415 only for an empty body, which carries no content type at all.
    assert response.status_code in ({200, 207, 400} | ({415} if not body else set())), response.content[:500]
    answer = response.json()
    if "results" not in answer:
        # The whole request was refused: it says why, and where.
        assert answer["status"] == response.status_code and answer["error"]
        assert all(e["path"] and e["message"] for e in answer["errors"])
    for result in answer.get("results", []):
        if result["status"] == "rejected":
            assert result["errors"] and all(e["path"] and e["message"] for e in result["errors"])
    stored = [
        r["run_id"] for r in answer.get("results", []) if r["status"] in {"created", "updated", "duplicate"}
    ]
    rejected = [r["run_id"] for r in answer.get("results", []) if r["status"] == "rejected" and r["run_id"]]
    assert models.Run.objects.filter(run_id__in=stored).count() == len(set(stored))
    # A rejected run leaves nothing behind (unless an earlier request stored it whole).
    for run_id in rejected:
        assert run_id in seen_run_ids or not models.Run.objects.filter(run_id=run_id).exists()
    seen_run_ids.update(stored)
    assert_no_partial_runs(stored)
    return answer


def post(client, token, body, content_type):
    return client.post(
        "/api/v1/ingest", body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}"
    )


@pytest.mark.django_db
@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies, ndjson=st.booleans())
def test_random_and_mutated_payloads_never_500(client, token, body, ndjson):
    response = post(client, token, body, "application/x-ndjson" if ndjson else "application/json")
    assert_never_500_and_nothing_partial(response, body)


MARKDOWN = [p.read_text() for p in sorted(AUTOURGOS.glob("*.md"))[:3]]


@st.composite
def poisoned_markdown(draw):
    """An autourgos Markdown log whose start time or query JSON is hostile."""
    text = draw(st.sampled_from(MARKDOWN))
    time = draw(st.sampled_from(HOSTILE_TIMES)).replace("T", " ")
    text = re.sub(r"\*\*Started At:\*\* .*", f"**Started At:** {time}", text, count=1)
    query = hostile_body(draw(hostile_values))
    return text.replace("## Initial Query\n", f"## Initial Query\n{query}\n", 1)


hostile_bodies = st.one_of(
    poisoned().map(lambda p: (hostile_body(p), "application/json")),
    st.lists(poisoned(), min_size=1, max_size=3).map(lambda ps: (hostile_body(ps), "application/json")),
    st.lists(poisoned(), min_size=1, max_size=3).map(
        lambda ps: ("\n".join(hostile_body(p) for p in ps), "application/x-ndjson")
    ),
    poisoned_markdown().map(lambda text: (text, "text/markdown")),
)


@pytest.mark.django_db
@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=hostile_bodies)
def test_hostile_values_in_every_format_never_500(client, token, request):
    body, content_type = request
    answer = assert_never_500_and_nothing_partial(post(client, token, body, content_type), body)
    for result in answer.get("results", []):
        if result["status"] == "created":
            # Really stored, and with nothing no database can hold.
            run = models.Run.objects.get(run_id=result["run_id"])
            for text in (
                run.run_id,
                run.session.session_id,
                run.input,
                run.output or "",
                json.dumps(run.metadata),
            ):
                assert not re.search("[\ud800-\udfff]", text)
