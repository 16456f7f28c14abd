from __future__ import annotations

from datetime import UTC, datetime

import pytest

from history_app.agent_history import InjectedContext, Iteration, RecordError, Run, ToolCall


def full_run() -> Run:
    return Run(
        run_id="r1",
        session_id="s1",
        kind="team",
        status="failed",
        agent_name="Team",
        input="hello",
        error="boom",
        started_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        ended_at=datetime(2026, 1, 1, 12, 0, 2, 500000, tzinfo=UTC),
        iterations=[
            Iteration(index=1, thought="t", tool_calls=[ToolCall(tool="search", params={"q": 1}, result="r")])
        ],
        injected_contexts=[
            InjectedContext(text="<x>", kind="team_history", target="user", source_run_ids=["r0"])
        ],
        metrics={"total_tokens": 5},
    )


def test_round_trip_keeps_every_field():
    run = full_run()
    data = run.to_dict()
    assert data["schema"] == "agent-history/v1"
    assert Run.from_dict(data) == run
    assert run.duration_ms == 2500


def test_from_dict_reports_every_bad_field_with_its_path():
    with pytest.raises(RecordError) as caught:
        Run.from_dict(
            {
                "session_id": "s",
                "status": "exploded",
                "started_at": "yesterday",
                "iterations": [{"index": 1, "tool_calls": [{"params": {}}, 5]}, "nope"],
            }
        )
    paths = dict(caught.value.errors)
    assert paths["$.run_id"] == "is required"
    assert "must be one of" in paths["$.status"]
    assert "timestamp" in paths["$.started_at"]
    assert paths["$.iterations[0].tool_calls[0].tool"] == "is required"
    assert paths["$.iterations[0].tool_calls[1]"] == "must be an object"
    assert paths["$.iterations[1]"] == "must be an object"


def test_ids_with_slashes_or_control_characters_are_refused():
    with pytest.raises(RecordError) as caught:
        Run.from_dict({"run_id": "a/b", "session_id": "x\ny"})
    assert {p for p, _ in caught.value.errors} == {"$.run_id", "$.session_id"}


def test_unknown_fields_are_kept_in_metadata():
    run = Run.from_dict({"run_id": "r", "session_id": "s", "model": "gpt-x", "cost": 0.1})
    assert run.metadata["extra_fields"] == {"model": "gpt-x", "cost": 0.1}


def test_go_style_nanosecond_timestamps_parse():
    run = Run.from_dict({"run_id": "r", "session_id": "s", "started_at": "2026-11-29T22:43:55.123456789Z"})
    assert run.started_at == datetime(2026, 11, 29, 22, 43, 55, 123456, tzinfo=UTC)
