"""agno-go workflow sessions, CoT process histories and Markdown logs on the endpoint."""

from __future__ import annotations

import json

import pytest

from history_app import models
from history_app.agent_history import RecordError, parse
from history_app.agent_history.formats import detect

from .conftest import AUTOURGOS

SESSION = {
    "session_id": "go-sess-1",
    "workflow_id": "chat-workflow",
    "user_id": "user-123",
    "created_at": "2026-11-29T10:00:00.123456789Z",
    "updated_at": "2026-11-29T10:05:00Z",
    "metadata": {},
    "cancellations": [],
    "runs": [
        {"run_id": "go-1", "session_id": "go-sess-1", "workflow_id": "chat-workflow", "input": "Hello, my name is Alice",
         "output": "Hello Alice!", "messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hello Alice!"}],
         "status": "completed", "started_at": "2026-11-29T10:00:00.123456789Z", "completed_at": "2026-11-29T10:00:01.5Z"},
        {"run_id": "go-2", "session_id": "go-sess-1", "workflow_id": "chat-workflow", "input": "boom", "status": "failed",
         "error": "model down", "started_at": "2026-11-29T10:01:00Z", "completed_at": "2026-11-29T10:01:00.2Z"},
        {"run_id": "go-3", "session_id": "go-sess-1", "workflow_id": "chat-workflow", "input": "stop", "status": "cancelled",
         "cancellation_reason": "user pressed stop", "started_at": "2026-11-29T10:02:00Z", "completed_at": None},
    ],
}  # fmt: skip

COT = {
    "process_id": "orderForm",
    "task": "Add an order date field",
    "history": [
        {"taskID": "inspect", "summary": "Read the schema", "ts": 1764410000000},
        {"goTo": "addField", "intent": "add orderDate", "stepAfter": "validate", "ts": 1764410005000},
        {"taskID": "addField", "summary": "Added field 'orderDate'", "ts": 1764410010000},
    ],
}


def test_agno_go_session_becomes_its_runs():
    assert detect(SESSION) == "agno-go" and detect(SESSION["runs"][0]) == "agno-go"
    runs = parse(SESSION)
    assert [(r.run_id, r.status) for r in runs] == [
        ("go-1", "completed"),
        ("go-2", "failed"),
        ("go-3", "cancelled"),
    ]
    assert runs[0].user_id == "user-123" and runs[0].duration_ms == 1377
    assert runs[0].iterations[0].thought == "Hello Alice!"
    assert runs[1].error == "model down"
    assert runs[2].metadata["cancellation_reason"] == "user pressed stop"


def test_agno_go_bad_fields_have_paths():
    bad = {
        **SESSION,
        "runs": [{"run_id": "x", "workflow_id": "w", "status": "exploded", "started_at": "x"}, 3],
    }
    with pytest.raises(RecordError) as caught:
        parse(bad)
    assert {p for p, _ in caught.value.errors} == {"$.runs[0].started_at", "$.runs[0].status", "$.runs[1]"}


def test_cot_process_history_is_one_run_with_its_rendered_history():
    assert detect(COT) == "cot"
    (run,) = parse(COT)
    assert run.run_id == "cot:orderForm" and [it.name for it in run.iterations] == [
        "inspect",
        "addField",
        "addField",
    ]
    context = run.injected_contexts[0]
    assert context.kind == "cot_history" and context.reported is False
    assert "2. addField" in context.text and "   intent: add orderDate" in context.text
    with pytest.raises(RecordError):
        parse({"process_id": "", "history": []})


@pytest.mark.django_db
def test_every_format_through_the_endpoint_and_again_as_duplicate(ingest):
    payloads = [SESSION, COT, json.loads((AUTOURGOS / "named_run_custom.json").read_text())]
    first = ingest(payloads)
    assert first.status_code == 200, first.json()
    assert models.Run.objects.count() == 5
    assert {r["status"] for r in ingest(payloads).json()["results"]} == {"duplicate"}
    longer = {**COT, "history": [*COT["history"], {"taskID": "validate", "summary": "ok"}]}
    assert ingest(longer).json()["results"][0]["status"] == "updated"
    assert models.Run.objects.get(run_id="cot:orderForm").iteration_count == 4


@pytest.mark.django_db
def test_markdown_log_through_the_endpoint(ingest):
    text = (AUTOURGOS / "Task_20261129_224355_610116_7bfd7d3a.md").read_text()
    response = ingest(text, content_type="text/markdown")
    assert response.status_code == 200
    run = models.Run.objects.get()
    assert run.status == "failed" and run.metadata["imported_from"] == "markdown"
    bad = ingest("# Not a log", content_type="text/markdown")
    assert bad.status_code == 400
    # Rejected like any item, at its index, with the path and the reason.
    [error] = bad.json()["results"][0]["errors"]
    assert error["path"] == "$" and "Task Session" in error["message"]
