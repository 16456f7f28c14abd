"""Property: whatever arrives at the endpoint, it never answers 500 and never keeps a
partly stored run (every stored run has exactly the children its counts say)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from history_app import models

from .conftest import AUTOURGOS, FIXTURES

SAMPLES = [json.loads(p.read_text()) for p in sorted(AUTOURGOS.glob("Task_*.json"))[:4]]
SAMPLES += [json.loads((FIXTURES / "agno" / "run_outputs" / "team_run2.json").read_text())]
SAMPLES += [
    {
        "schema": "agent-history/v1",
        "run_id": "n1",
        "session_id": "s1",
        "iterations": [{"tool_calls": [{"tool": "t"}]}],
    }
]

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
KEYS = ["run_id", "session_id", "iterations", "tools", "observations", "thought", "status", "started_at", "input",
        "output", "query", "final_response", "error", "tool_calls", "params", "messages", "member_responses", "schema",
        "injected_contexts", "kind", "created_at", "step_results", "index", "iteration", "agent_name", "\\x00"]  # fmt: skip


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


@pytest.mark.django_db
@settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies, ndjson=st.booleans())
def test_random_and_mutated_payloads_never_500(client, token, body, ndjson):
    response = client.post(
        "/api/v1/ingest",
        body,
        content_type="application/x-ndjson" if ndjson else "application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    # 415 only for an empty body, which carries no content type at all.
    assert response.status_code in ({200, 207, 400} | ({415} if not body else set())), response.content[:500]
    answer = response.json()
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
