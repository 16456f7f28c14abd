"""Hostile input at the ingestion endpoint: each payload here once answered 500 (or a
different answer on SQLite and PostgreSQL). Now each is stored whole or refused with a
400 naming the JSON path, the same on both databases, and every /api/ error is JSON."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from history_app import models
from history_app.intake import ingestion

from .conftest import native

pytestmark = pytest.mark.django_db

SURROGATE = "a\ud800b"


def nested(depth: int, leaf: object = 1) -> object:
    """``depth`` levels of objects/arrays around ``leaf``, alternating."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def body(payload: object) -> str:
    """The JSON text a hostile client sends: json.dumps escapes a lone surrogate as
    ``\\ud800``; the string ``"DEEP-n"`` becomes arrays nested n deep (more than
    json.dumps can write) and ``"HUGE"`` the number 1e400 (which Python reads as inf)."""
    text = json.dumps(payload)
    text = re.sub(r'"DEEP-(\d+)"', lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)
    return text.replace('"HUGE"', "1e400")


def first_error(response) -> dict:
    answer = response.json()
    errors = answer["results"][0]["errors"] if "results" in answer else answer["errors"]
    return errors[0]


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (native(input=SURROGATE), lambda run: run.input),
        (native(output=SURROGATE), lambda run: run.output),
        (
            native(iterations=[{"tool_calls": [{"tool": "t", "params": {"q": SURROGATE}}]}]),
            lambda run: run.tool_calls.get().params_json,
        ),
        (native(metadata={SURROGATE: 1}), lambda run: json.dumps(run.metadata, ensure_ascii=False)),
        (native(run_id=SURROGATE), lambda run: run.run_id),
        (native(session_id=SURROGATE), lambda run: run.session.session_id),
        (
            {"agent_name": "A", "start_time": None, "iterations": [], "final_response": SURROGATE},
            lambda run: run.output,
        ),
    ],
    ids=["input", "output", "params", "metadata-key", "run_id", "session_id", "autourgos"],
)
def test_a_lone_surrogate_is_stored_as_a_replacement_character(ingest, payload, where):
    response = ingest(body(payload))
    assert response.status_code == 200, response.content
    run = models.Run.objects.get()
    assert "a\ufffdb" in where(run)
    assert run.redactions["lone_surrogate"] == 1
    # The same payload again is recognised as the same run.
    assert ingest(body(payload)).json()["results"][0]["status"] == "duplicate"


@pytest.mark.parametrize(
    ("escape", "stored", "rule"),
    [
        ("\\ud800", "\ufffd", "lone_surrogate"),
        ("\\uD800", "\ufffd", "lone_surrogate"),
        ("\\uDbFf", "\ufffd", "lone_surrogate"),
        ("\\udfff", "\ufffd", "lone_surrogate"),
        ("\\u0000", "\ufffd", None),
    ],
)
@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
def test_every_spelling_of_an_unstorable_escape_is_caught(
    client, auth_headers, escape, stored, rule, content_type
):
    """The endpoint skips the search for NULs and lone surrogates in a body whose text
    holds no escape that makes one (``formats.escape_free``): each spelling JSON allows,
    in either case, in a value and in a key, still arrives replaced."""
    text = json.dumps(native(input="aXb", metadata={"kXy": 1})).replace("X", escape)
    response = client.post("/api/v1/ingest", text, content_type=content_type, **auth_headers)
    assert response.status_code == 200, response.content
    run = models.Run.objects.get()
    assert run.input == f"a{stored}b"
    assert list(run.metadata) == [f"k{stored}y"]
    if rule:
        assert run.redactions[rule] == 2


def test_the_body_scan_flags_every_escape_that_can_make_an_unstorable_character():
    from history_app.agent_history import formats

    assert formats.escape_free(b'{"a": "plain \\u00e9 text \\ud7ff \\ue000"}')
    for escape in (b"\\u0000", b"\\ud800", b"\\uD9AB", b"\\uDC00", b"\\udfff", b"\\\\u0000"):
        assert not formats.escape_free(b'{"a": "x' + escape + b'y"}'), escape
    # A text body can hold either character as it is: it is always searched.
    assert not formats.escape_free('{"a": "plain"}')


def test_a_surrogate_beside_a_rejected_run_still_leaves_a_receipt(ingest):
    response = ingest(body([native(run_id=SURROGATE, status=5), native("ok", input=SURROGATE)]))
    assert response.status_code == 207
    assert [r["status"] for r in response.json()["results"]] == ["rejected", "created"]
    assert models.IngestReceipt.objects.get().counts == {
        "created": 1,
        "updated": 0,
        "duplicate": 0,
        "rejected": 1,
    }


def _markdown_log(answer: str, fence: str = "{}") -> str:
    return "\n".join(
        ["# Task Session: A", "", "---", "", "## Iteration 1", "", "### Action (Tools)", "**Tool:** `t`"]
        + ["```json", fence, "```", "", "---", "", "## Final Answer", answer]
    )


def test_deep_fenced_json_gets_the_same_answer_at_any_stack_depth():
    """Python's JSON parser recurses: a fence 900 deep parsed near the recursion limit
    once became text (stored) while the same log parsed at the top was refused."""
    from history_app.agent_history.formats.autourgos import parse_markdown
    from history_app.agent_history.records import RecordError

    text = _markdown_log("done", json.dumps(nested(900)))

    def at_depth(levels: int):
        if levels:
            return at_depth(levels - 1)
        try:
            parse_markdown(text)
        except RecordError as error:
            return error.errors
        return None

    assert at_depth(0) == at_depth(700)
    assert at_depth(0)[0][0] == "$.iterations[0].tools[0].params"


def test_deep_bracket_prose_in_a_markdown_answer_is_kept_as_text(ingest):
    answer = "[" * 5000 + " not JSON"
    response = ingest(_markdown_log(answer), content_type="text/markdown")
    assert response.status_code in (200, 201), response.content
    run = models.Run.objects.get()
    assert run.output == answer


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (native(metadata=nested(500)), "$.metadata"),
        (native(metrics="DEEP-900"), "$.metrics"),
        (native(iterations=[{"tool_calls": [{"tool": "t", "params": nested(466)}]}]), "$.iterations[0]"),
        (native(iterations=[{"metadata": nested(70)}]), "$.iterations[0].metadata"),
        (native(extra=nested(64)), "$.extra"),
        ({"process_id": "p", "history": [nested(600)]}, "$.history[0]"),
        (
            {
                "run_id": "g",
                "workflow_id": "w",
                "status": "completed",
                "started_at": None,
                "events": nested(500),
            },
            "$.events",
        ),
    ],  # fmt: skip
)
def test_values_nested_deeper_than_the_limit_are_refused_with_their_path(ingest, payload, path):
    response = ingest(body(payload))
    assert response.status_code == 400, response.content
    error = first_error(response)
    assert error["path"].startswith(path)
    assert "nested deeper than 64 levels" in error["message"]
    assert not models.Run.objects.exists()


def test_a_value_just_within_the_limit_is_stored(ingest):
    # The run object is level 1, so metadata may hold 63 levels of its own.
    response = ingest(body(native(metadata=nested(63))))
    assert response.status_code == 200, response.content
    assert models.Run.objects.get().metadata == nested(63)


@pytest.mark.parametrize(
    ("depth", "path"),
    [
        # Past the limit: refused in the record, wherever the parsed value sits.
        (100, "$.iterations[0].tool_calls[0].params"),
        # Too deep to parse at all: refused at the raw field, before Python's JSON parser
        # could meet the recursion limit (which depends on the caller's stack, so the
        # answer would differ between a test runner and a server).
        (900, "$.messages[0].tool_calls[0].function.arguments"),
        (50_000, "$.messages[0].tool_calls[0].function.arguments"),
    ],
)
def test_deep_json_inside_an_agno_arguments_string_is_refused(ingest, depth, path):
    arguments = '{"a": ' * depth + "1" + "}" * depth
    call = {"id": "c1", "function": {"name": "f", "arguments": arguments}}
    payload = {"run_id": "a1", "agent_id": "x", "messages": [{"role": "assistant", "tool_calls": [call]}]}
    response = ingest(body(payload))
    assert response.status_code == 400, response.content
    assert first_error(response)["path"].startswith(path)


def test_deep_json_in_a_markdown_fence_is_refused(ingest):
    text = "\n".join(
        [
            "# Task Session: A",
            "",
            "---",
            "",
            "## Iteration 1",
            "",
            "### Action (Tools)",
            "**Tool:** `t`",
            "```json",
            json.dumps(nested(900)),
            "```",
        ]
    )
    response = ingest(text, content_type="text/markdown")
    assert response.status_code == 400, response.content
    [error] = response.json()["results"][0]["errors"]
    assert error["path"] == "$.iterations[0].tools[0].params"
    assert "nested deeper than 64 levels" in error["message"]


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (
            {"process_id": "p", "history": [{"action": "a"}], "settings": {"history_detail_items": "x"}},
            "$.settings.history_detail_items",
        ),
        (
            {"process_id": "p", "history": [{"action": "a"}], "settings": {"history_result_max_chars": [1]}},
            "$.settings.history_result_max_chars",
        ),
        ({"process_id": "p", "history": [{"action": "a"}], "settings": 5}, "$.settings"),
        (
            {"run_id": "g", "workflow_id": "w", "status": "completed", "started_at": None, "messages": 5},
            "$.messages",
        ),
        (
            {
                "run_id": "g",
                "workflow_id": "w",
                "status": "completed",
                "started_at": None,
                "messages": [{"role": "assistant", "content": {"x": 1}}],
                "events": 5,
            },
            "$.events",
        ),
        (
            {"agent_name": "A", "start_time": None, "iterations": [], "parent_run_id": {"a": 1}},
            "$.parent_run_id",
        ),
        (
            {"session_id": "s", "workflow_id": "w", "runs": [{"run_id": "g", "messages": {"a": 1}}]},
            "$.runs[0].messages",
        ),
        ({"run_id": "a1", "agent_id": "x", "messages": 5}, "$.messages"),
        (
            {"run_id": "a1", "agent_id": "x", "messages": [{"role": "assistant", "tool_calls": 5}]},
            "$.messages[0].tool_calls",
        ),
        (
            {
                "run_id": "a1",
                "agent_id": "x",
                "messages": [{"role": "assistant", "tool_calls": [{"function": 3}]}],
            },
            "$.messages[0].tool_calls[0].function",
        ),
        ({"run_id": "a1", "agent_id": "x", "status": "COMPLETED", "tools": {"a": 1}}, "$.tools"),
        (
            {"run_id": "a1", "team_id": "t", "status": "COMPLETED", "member_responses": "x"},
            "$.member_responses",
        ),
        (
            {
                "run_id": "a1",
                "workflow_id": "w",
                "step_results": [{"step_name": "s"}],
                "step_executor_runs": 4,
            },
            "$.step_executor_runs",
        ),
        ({"run_id": "a1", "agent_id": "x", "status": "COMPLETED", "metrics": []}, "$.metrics"),
        (
            {"agent_name": "A", "start_time": None, "iterations": [{"iteration": 2**70}]},
            "$.iterations[0].iteration",
        ),
    ],  # fmt: skip
)
def test_type_errors_in_every_format_name_their_path(ingest, payload, path):
    response = ingest(body(payload))
    assert response.status_code == 400, response.content
    assert first_error(response)["path"] == path
    assert not models.Run.objects.exists()


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"run_id": "a1", "agent_id": "x", "status": "COMPLETED", "created_at": 1e300}, "$.created_at"),
        (
            {
                "run_id": "a1",
                "agent_id": "x",
                "status": "COMPLETED",
                "created_at": 1e9,
                "metrics": {"duration": 1e300},
            },
            "$.metrics.duration",
        ),
        (
            {
                "run_id": "a1",
                "agent_id": "x",
                "status": "COMPLETED",
                "tools": [{"tool_call_id": "c", "metrics": {"start_time": -1e20}}],
            },
            "$.tools[0].metrics.start_time",
        ),
        (native(started_at="9999-12-31T23:59:59-14:00"), "$.started_at"),
        (native(ended_at="0001-01-01T00:00:00+14:00"), "$.ended_at"),
        (native(started_at=-1e15), "$.started_at"),
        (native(iterations=[{"started_at": "9999-12-31T23:59:59-14:00"}]), "$.iterations[0].started_at"),
        (
            native(iterations=[{"tool_calls": [{"tool": "t", "ended_at": "9999-12-31T23:00:00-10:00"}]}]),
            "$.iterations[0].tool_calls[0].ended_at",
        ),
        ({"agent_name": "A", "start_time": "9999-12-31T23:59:59-14:00", "iterations": []}, "$.start_time"),
        (
            {
                "run_id": "g",
                "workflow_id": "w",
                "status": "completed",
                "started_at": "0001-01-01T00:00:00+01:00",
            },
            "$.started_at",
        ),
        (native(iterations=[{"index": 2**70}]), "$.iterations[0].index"),
        (native(iterations=[{"index": 2**31}]), "$.iterations[0].index"),
        (native(metrics={"tokens": "HUGE"}), "$.metrics.tokens"),
        (
            native(iterations=[{"tool_calls": [{"tool": "t", "params": [1, "HUGE"]}]}]),
            "$.iterations[0].tool_calls[0].params[1]",
        ),
    ],  # fmt: skip
)
def test_values_out_of_range_give_the_same_400_on_every_database(ingest, payload, path):
    response = ingest(body(payload))
    assert response.status_code == 400, response.content
    assert first_error(response)["path"] == path
    assert not models.Run.objects.exists()


def test_a_structured_agno_go_output_is_kept_as_json(ingest):
    payload = {
        "run_id": "g",
        "workflow_id": "w",
        "status": "completed",
        "started_at": None,
        "output": {"a": [1]},
    }
    assert ingest(body(payload)).status_code == 200
    assert json.loads(models.Run.objects.get().output) == {"a": [1]}


def test_the_largest_accepted_values_are_stored(ingest):
    response = ingest(
        body(
            native(
                started_at="0001-01-02T00:00:00Z",
                ended_at="9999-12-30T23:59:59Z",
                iterations=[{"index": 2**31 - 1}],
                metrics={"big": 2**70, "huge": 1e308},
            )
        )
    )
    assert response.status_code == 200, response.content
    run = models.Run.objects.get()
    assert run.iterations.get().index == 2**31 - 1
    assert run.metrics["big"] == 2**70
    # PostgreSQL's jsonb gives a float this large back as an integer of equal value.
    assert float(run.metrics["huge"]) == 1e308


def test_nesting_too_deep_for_the_json_parser_names_the_limit(ingest):
    response = ingest(body(native(metrics="DEEP-5000")))
    assert response.status_code == 400
    assert "nested deeper than 64 levels" in response.json()["error"]
    # Too deep for the parser wherever it is called from, the answer still names the field.
    assert first_error(response)["path"] == "$.metrics" + "[0]" * 63


def test_a_body_too_deep_to_parse_names_the_deep_field_under_keys_and_indexes(ingest):
    deep = '{"z": ' * 3000 + "1" + "}" * 3000
    text = body(native(metadata={"a b": [1, {'k"x': "DEEP"}]})).replace('"DEEP"', deep)
    response = ingest(text)
    assert response.status_code == 400
    assert first_error(response)["path"] == '$.metadata.a b[1].k"x' + ".z" * 60


def test_an_unknown_api_url_answers_json_404(client, auth_headers):
    response = client.get("/api/v1/nothing-here", **auth_headers)
    assert response.status_code == 404
    assert response.json() == {
        "ok": False,
        "error": "no such API endpoint: /api/v1/nothing-here",
        "status": 404,
    }


def test_a_wrong_method_on_the_api_answers_json_405(client, auth_headers):
    response = client.get("/api/v1/ingest", **auth_headers)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    message = "GET is not allowed here; send runs with POST"
    assert response.json() == {
        "ok": False,
        "error": message,
        "status": 405,
        "errors": [{"path": "$", "message": message}],
    }
    assert client.post("/api/v1/sessions", **auth_headers).json()["status"] == 405


def test_an_unexpected_error_on_the_api_answers_json_500(token, auth_headers, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("internal detail that must not leak")

    monkeypatch.setattr(ingestion, "ingest_items", broken)
    client = Client(raise_request_exception=False)
    response = client.post("/api/v1/ingest", body(native()), content_type="application/json", **auth_headers)
    assert response.status_code == 500
    assert response.json() == {"ok": False, "error": "internal server error", "status": 500}


def test_pages_outside_the_api_keep_their_html_errors(alice_client, monkeypatch):
    missing = alice_client.get("/no-such-page/")
    assert missing.status_code == 404
    assert missing["Content-Type"].startswith("text/html")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("history_app.reading.views.listing.sessions_page", broken)
    alice_client.raise_request_exception = False
    failed = alice_client.get("/p/default/")
    assert failed.status_code == 500
    assert failed["Content-Type"].startswith("text/html")
    assert b"Server Error" in failed.content


@pytest.mark.parametrize("key", [SURROGATE, "a\x00b"])
def test_a_too_deep_value_under_an_unstorable_key_is_refused_and_receipted(ingest, key):
    response = ingest(body(native(metadata={key: nested(70)})))
    assert response.status_code == 400
    assert first_error(response)["path"].startswith("$.metadata.a\ufffdb")
    assert models.IngestReceipt.objects.get().counts["rejected"] == 1


def test_a_bad_request_caught_by_django_answers_json_under_the_api(client, auth_headers):
    response = client.get("/api/v1/sessions", HTTP_HOST="evil.example", **auth_headers)
    assert response.status_code == 400
    assert response.json() == {"ok": False, "error": "bad request", "status": 400}
