"""POST /v1/traces: encodings, assembly across requests, the mapping of each convention,
redaction, and OTLP-conformant refusals (issue #15). The live tests with real
instrumentation are in test_otlp_live.py."""

from __future__ import annotations

import gzip
import json
import sys
import zlib

import pytest

from history_app import models
from history_app.agent_history import otlp

from .conftest import database_dump, load_jsonl
from .otlp_spans import genai_agent_trace, request, span
from .otlp_spans import value as otlp_value

T1 = "ab" * 16
T2 = "cd" * 16
AGENT = "a0" * 8


def kept() -> dict[str, dict]:
    """Every span kept, by span id (the latest copy)."""
    from history_app.intake import spans as span_store

    found = {}
    for project_id in models.SpanBatch.objects.values_list("project_id", flat=True).distinct():
        batches = models.SpanBatch.objects.filter(project_id=project_id)
        spans, _ = span_store.kept_spans(
            list(batches.values_list("trace_id", flat=True).distinct()), project_id
        )
        found.update((span_id, span) for by_id in spans.values() for span_id, span in by_id.items())
    return found


def kept_text() -> str:
    return "".join(
        zlib.decompress(bytes(d)).decode() for d in models.SpanBatch.objects.values_list("data", flat=True)
    )


def post(client, auth_headers, payload, *, content_type="application/json", **extra):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post("/v1/traces", body, content_type=content_type, **auth_headers, **extra)


def protobuf_body(payload: dict) -> bytes:
    """The JSON form encoded as protobuf by the protobuf library's own JSON parser (ids
    as base64, as protobuf's JSON mapping writes bytes)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    data = json.loads(json.dumps(payload))
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    s[key] = __import__("base64").b64encode(bytes.fromhex(s[key])).decode()
    message = trace_service_pb2.ExportTraceServiceRequest()
    json_format.ParseDict(data, message)
    return message.SerializeToString()


def test_a_genai_trace_becomes_a_run_with_iterations_tool_and_model_calls(client, auth_headers, alice_client):
    response = post(client, auth_headers, request(*genai_agent_trace(T1)))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {}
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.agent_name, run.framework, run.session.session_id) == (
        "completed",
        "calc",
        "opentelemetry",
        "conv-1",
    )
    assert (run.input, run.output) == ("What is 2+3?", "2+3 is 5.")
    assert (run.model_call_count, run.input_tokens, run.output_tokens) == (2, 2300, 220)
    assert run.cost is not None and run.cost > 0  # gpt-4o-mini, priced by genai-prices
    iterations = list(run.iterations.order_by("position"))
    assert len(iterations) == 2 and iterations[0].thought == "Let me add."
    call = models.ToolCall.objects.get(run=run)
    assert (call.tool, call.result, call.call_id) == ("add", "5", "c1")
    page = alice_client.get(f"/p/default/runs/{T1}/").content.decode()
    assert "calc" in page and "gpt-4o-mini" in page and "2,300" in page and "add" in page
    first = alice_client.get(f"/p/default/runs/{T1}/model-calls/1/").content.decode()
    assert "You add numbers." in first and "What is 2+3?" in first and "Let me add." in first
    second = alice_client.get(f"/p/default/runs/{T1}/model-calls/2/").content.decode()
    assert "2+3 is 5." in second
    # The tool-call request as a request (name, id, arguments), not as pseudo-text, and
    # the tool message linked to it.
    assert "[tool call add" not in second
    assert "asks for tool <strong>add</strong>" in second and "<code>c1</code>" in second
    assert "{&quot;a&quot;: 2, &quot;b&quot;: 3}" in second
    assert 'answers tool call <a href="#request-1-c1"><code>c1</code></a>' in second
    stored = models.ModelCall.objects.get(run=run, position=1)
    assert [(m["role"], m["tool_call_id"], [t["id"] for t in m["tool_calls"]]) for m in stored.messages] == [
        ("user", "", []),
        ("assistant", "", ["c1"]),
        ("tool", "c1", []),
    ]
    receipt = models.IngestReceipt.objects.get()
    assert receipt.source == "otlp" and receipt.counts["created"] == 1


def test_protobuf_gzip_and_resending_is_idempotent(client, auth_headers):
    body = protobuf_body(request(*genai_agent_trace(T1)))
    response = post(
        client,
        auth_headers,
        gzip.compress(body),
        content_type="application/x-protobuf",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert response.status_code == 200 and response["Content-Type"] == "application/x-protobuf"
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert models.Run.objects.get(run_id=T1).model_call_count == 2
    before = (
        len(kept()),
        models.SpanBatch.objects.count(),
        models.Run.objects.count(),
        models.ModelCall.objects.count(),
    )
    again = post(client, auth_headers, body, content_type="application/x-protobuf")
    assert again.status_code == 200
    after = (
        len(kept()),
        models.SpanBatch.objects.count(),
        models.Run.objects.count(),
        models.ModelCall.objects.count(),
    )
    assert before == after == (4, 1, 1, 2)
    assert models.IngestReceipt.objects.order_by("pk").last().counts["duplicate"] == 1


def test_spans_in_several_requests_out_of_order_assemble_and_stay_running_until_the_root_ends(
    client, auth_headers, alice_client
):
    chat1, tool, chat2, root = genai_agent_trace(T1)
    # The last model call first, then the root, then what came before it.
    post(client, auth_headers, request(chat2))
    run = models.Run.objects.get(run_id=T1)
    assert run.status == "running" and run.model_call_count == 1
    assert "running" in alice_client.get(f"/p/default/runs/{T1}/").content.decode()
    post(client, auth_headers, request(tool))
    assert models.Run.objects.get(run_id=T1).status == "running"
    post(client, auth_headers, request(root))
    run = models.Run.objects.get(run_id=T1)
    assert run.status == "completed" and run.agent_name == "calc"
    post(client, auth_headers, request(chat1))
    run = models.Run.objects.get(run_id=T1)
    assert (run.model_call_count, run.input_tokens) == (2, 2300)
    assert run.iterations.count() == 2 and models.ToolCall.objects.filter(run=run).count() == 1
    # The same as all at once.
    post(client, auth_headers, request(*genai_agent_trace(T2)))
    other = models.Run.objects.get(run_id=T2)
    assert (other.model_call_count, other.input_tokens, other.output_tokens, other.cost) == (
        run.model_call_count,
        run.input_tokens,
        run.output_tokens,
        run.cost,
    )
    assert models.Run.objects.filter(session__session_id="conv-1").count() == 2


def test_agents_inside_an_agent_are_member_runs_under_it(client, auth_headers, alice_client):
    member = "b0" * 8
    spans = [
        span(
            T1,
            AGENT,
            "",
            "invoke_agent team",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead"},
            end_ms=50,
        ),
        span(
            T1,
            "e1" * 8,
            AGENT,
            "execute_tool ask_writer",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ask_writer"},
            start_ms=1,
            end_ms=40,
        ),
        span(
            T1,
            member,
            "e1" * 8,
            "invoke_agent writer",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "Writer",
                "input.value": "Write a haiku",
                "output.value": "Leaves fall.",
            },
            start_ms=2,
            end_ms=39,
        ),
        span(
            T1,
            "f1" * 8,
            member,
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 7},
            start_ms=3,
            end_ms=30,
        ),
    ]
    assert post(client, auth_headers, request(*spans)).status_code == 200
    lead = models.Run.objects.get(run_id=T1)
    writer = models.Run.objects.get(run_id=f"{T1}-{member}")
    assert (lead.kind, writer.kind, writer.parent_run_id, writer.agent_name) == (
        "team",
        "member",
        T1,
        "Writer",
    )
    assert writer.model_call_count == 1 and lead.model_call_count == 0
    interaction = models.MemberInteraction.objects.get(run=lead)
    assert (interaction.member, interaction.task, interaction.response) == (
        "Writer",
        "Write a haiku",
        "Leaves fall.",
    )
    assert "Writer" in alice_client.get(f"/p/default/sessions/trace-{T1}/").content.decode()


def test_openinference_spans(client, auth_headers):
    spans = [
        span(
            T1,
            AGENT,
            "",
            "run_agent",
            {
                "openinference.span.kind": "AGENT",
                "input.value": "What is 2+3?",
                "output.value": "5",
                "session.id": "s-oi",
                "user.id": "u-7",
            },
            end_ms=20,
        ),
        span(
            T1,
            "c1" * 8,
            AGENT,
            "ChatCompletion",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.provider": "openai",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "You add.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.contents.0.message_content.type": "text",
                "llm.input_messages.1.message.contents.0.message_content.text": "What is 2+3?",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "add",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"a": 2}',
                "llm.token_count.prompt": 100,
                "llm.token_count.completion": 20,
                "llm.token_count.prompt_details.cache_read": 10,
                "llm.cost.total": 0.5,
            },
            start_ms=1,
            end_ms=5,
        ),
        span(
            T1,
            "d1" * 8,
            AGENT,
            "add",
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "add",
                "input.value": '{"a": 2}',
                "output.value": "5",
            },
            start_ms=6,
            end_ms=7,
        ),
        span(
            T1,
            "d2" * 8,
            AGENT,
            "search docs",
            {"openinference.span.kind": "RETRIEVER", "input.value": "adding"},
            start_ms=8,
            end_ms=9,
            status=2,
            message="index offline",
        ),
    ]
    assert (
        post(client, auth_headers, request(*spans, scope="openinference.instrumentation.openai")).status_code
        == 200
    )
    run = models.Run.objects.get(run_id=T1)
    assert (run.session.session_id, run.user_id, run.input, run.output, run.framework) == (
        "s-oi",
        "u-7",
        "What is 2+3?",
        "5",
        "openinference",
    )
    call = models.ModelCall.objects.get(run=run)
    assert (call.model, call.provider, call.input_tokens, call.output_tokens, call.cached_tokens) == (
        "gpt-4o-mini",
        "openai",
        100,
        20,
        10,
    )
    assert (call.cost, call.cost_source) == (0.5, "reported")
    messages = json.loads(call.messages_json)
    assert [(m["role"], m["part"], m["content"]) for m in messages] == [
        ("system", "instructions", "You add."),
        ("user", "input", "What is 2+3?"),
    ]
    # An answer that only asks for a tool has no text; the request is kept whole.
    assert call.output is None
    assert [(t["name"], t["arguments"], t["arguments_exact"]) for t in call.answer["tool_calls"]] == [
        ("add", '{"a": 2}', True)
    ]
    tools = {t.tool: t for t in models.ToolCall.objects.filter(run=run)}
    assert tools["add"].params == {"a": 2} and tools["add"].result == "5"
    assert tools["search docs"].error == "index offline"


def test_older_genai_events_and_openllmetry_attributes(client, auth_headers):
    events_form = span(
        T1,
        "c1" * 8,
        "",
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.prompt_tokens": 30,
            "gen_ai.usage.completion_tokens": 4,
        },
        events=[
            {"name": "gen_ai.system.message", "attributes": {"content": "Be brief."}},
            {"name": "gen_ai.user.message", "attributes": {"content": "Hi"}},
            {
                "name": "gen_ai.choice",
                "attributes": {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": json.dumps({"content": "Hello."}),
                },
            },
        ],
    )
    openllmetry = span(
        T2,
        "c2" * 8,
        "",
        "openai.chat",
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Ping",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Pong",
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.usage.input_tokens": 5,
        },
    )
    assert post(client, auth_headers, request(events_form, openllmetry)).status_code == 200
    first = models.ModelCall.objects.get(run__run_id=T1)
    assert [(m["role"], m["content"]) for m in json.loads(first.messages_json)] == [
        ("system", "Be brief."),
        ("user", "Hi"),
    ]
    assert (first.output, first.finish_reason, first.input_tokens, first.output_tokens) == (
        "Hello.",
        "stop",
        30,
        4,
    )
    second = models.ModelCall.objects.get(run__run_id=T2)
    assert (second.output, second.finish_reason, second.input_tokens) == ("Pong", "stop", 5)
    assert models.Run.objects.get(run_id=T2).output == "Pong"


def test_a_failed_root_span_fails_the_run_with_the_exception(client, auth_headers):
    root = span(
        T1,
        AGENT,
        "",
        "invoke_agent x",
        {"gen_ai.operation.name": "invoke_agent"},
        status=2,
        events=[
            {"name": "exception", "attributes": {"exception.type": "ValueError", "exception.message": "boom"}}
        ],
    )
    post(client, auth_headers, request(root))
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.error) == ("failed", "ValueError: boom")


SECRETS = load_jsonl("secrets.jsonl")


@pytest.mark.parametrize("entry", SECRETS[:12], ids=[e["kind"] for e in SECRETS[:12]])
def test_secrets_anywhere_in_a_span_are_never_stored(client, auth_headers, entry):
    secret = entry["secret"]
    spans = genai_agent_trace(T1, secret=secret)
    spans[0]["attributes"].append(
        {"key": "http.request.header.authorization", "value": {"stringValue": f"Bearer {secret}"}}
    )
    spans[2]["name"] = f"chat {secret}"
    spans[3]["events"] = [
        {
            "name": "log",
            "timeUnixNano": "1",
            "attributes": [{"key": "note", "value": {"stringValue": f"key={secret}"}}],
        }
    ]
    response = post(client, auth_headers, request(*spans))
    assert response.status_code == 200
    dump = database_dump()
    spans_text = kept_text()
    assert secret not in dump and secret not in spans_text
    assert "[REDACTED" in spans_text
    receipt = models.IngestReceipt.objects.get()
    assert any(f["path"].startswith("span ") for f in receipt.changed_fields)
    # Innocuous values stay as they were.
    assert models.ModelCall.objects.filter(run__run_id=T1).first().input_tokens == 1000
    assert models.Run.objects.get(run_id=T1).session.session_id == "conv-1"


def test_bad_spans_are_refused_with_paths_and_the_rest_kept(client, auth_headers, alice_client):
    good = genai_agent_trace(T1)
    bad = [
        span("zz" * 16, "11" * 8),
        span(T2, ""),
        span(T2, "12" * 8, name=7),
        {**span(T2, "13" * 8), "startTimeUnixNano": "soon"},
        {**span(T2, "14" * 8), "attributes": [{"key": "k", "value": {"intValue": "1e99"}}]},
        "not a span",
    ]
    response = post(client, auth_headers, request(*good, *bad))
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "6"
    assert "$.resourceSpans[0].scopeSpans[0].spans[4].traceId" in partial["errorMessage"]
    assert models.Run.objects.get(run_id=T1).model_call_count == 2
    receipt = models.IngestReceipt.objects.get()
    paths = {r["path"] for r in receipt.rejections}
    assert "$.resourceSpans[0].scopeSpans[0].spans[5].spanId" in paths
    assert "$.resourceSpans[0].scopeSpans[0].spans[8].attributes[0].value.intValue" in paths
    page = alice_client.get("/p/default/receipts/").content.decode()
    assert "OpenTelemetry" in page and "$.resourceSpans[0].scopeSpans[0].spans[5].spanId" in page


@pytest.mark.parametrize(
    ("body", "content_type", "extra", "status", "needle"),
    [
        (b"\xff\xff\xff", "application/x-protobuf", {}, 400, "protobuf"),
        (b"{not json", "application/json", {}, 400, "not valid JSON"),
        (b"[1, 2]", "application/json", {}, 400, "ExportTraceServiceRequest"),
        (b'{"resourceSpans": 5}', "application/json", {}, 400, "resourceSpans"),
        (b"<xml/>", "text/xml", {}, 415, "content type"),
        (b"\x00\x01garbage", "application/json", {"HTTP_CONTENT_ENCODING": "gzip"}, 400, "gzip"),
        (b"{}", "application/json", {"HTTP_CONTENT_ENCODING": "br"}, 415, "Content-Encoding"),
    ],
)
def test_malformed_requests_get_otlp_errors_and_receipts(
    client, auth_headers, body, content_type, extra, status, needle
):
    response = post(client, auth_headers, body, content_type=content_type, **extra)
    assert response.status_code == status
    if response["Content-Type"] == "application/x-protobuf":
        from google.rpc import status_pb2

        message = status_pb2.Status.FromString(response.content).message
    else:
        message = response.json()["message"]
    assert needle in message
    assert models.IngestReceipt.objects.get().rejections[0]["message"] == message
    assert models.Run.objects.count() == 0


def test_too_many_spans_and_a_gzip_bomb_are_refused_before_anything_is_stored(client, auth_headers, settings):
    many = request(*[{"traceId": T1, "spanId": f"{n + 1:016x}"} for n in range(100_001)])
    body = json.dumps(many).encode()
    response = post(client, auth_headers, gzip.compress(body), HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "100001 spans" in response.json()["message"]
    settings.HISTORY_OTLP_MAX_DECOMPRESSED_BYTES = 1_000_000
    bomb = gzip.compress(b" " * 50_000_000)
    assert len(bomb) < 100_000
    response = post(client, auth_headers, bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "decompresses" in response.json()["message"]
    assert models.SpanBatch.objects.count() == 0 and models.Run.objects.count() == 0


def test_authentication_and_method(client, auth_headers):
    response = client.post("/v1/traces", b"{}", content_type="application/x-protobuf")
    assert response.status_code == 401 and response["WWW-Authenticate"]
    from google.rpc import status_pb2

    assert status_pb2.Status.FromString(response.content).code == 16
    bad = client.post("/v1/traces", b"{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer nope")
    assert bad.status_code == 401
    assert client.get("/v1/traces", **auth_headers).status_code == 405
    assert post(client, auth_headers, {}).status_code == 200  # an empty export is fine


def test_deep_values_and_cycles_do_not_break_the_server(client, auth_headers):
    deep: dict = {"stringValue": "x"}
    for _ in range(50):
        deep = {"arrayValue": {"values": [deep]}}
    spans = [
        {**span(T1, "11" * 8), "attributes": [{"key": "deep", "value": deep}]},
        span(T2, "21" * 8, "22" * 8, "a"),
        span(T2, "22" * 8, "21" * 8, "b"),  # each the other's parent
    ]
    response = post(client, auth_headers, request(*spans))
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert models.Run.objects.get(run_id=T2).status == "running"  # no root span yet
    body = b"[" * (sys.getrecursionlimit() * 4) + b"]" * (sys.getrecursionlimit() * 4)
    assert post(client, auth_headers, body).status_code == 400


def test_retention_takes_a_trace_s_spans_with_its_session(client, auth_headers):
    from history_app.upkeep import retention

    post(client, auth_headers, request(*genai_agent_trace(T1)))
    assert models.SpanBatch.objects.get(session__session_id="conv-1").span_count == 4
    session = models.Session.objects.get(session_id="conv-1")
    retention.prune_sessions(session_ids=[session.pk])
    assert models.SpanBatch.objects.count() == 0 and models.Run.objects.count() == 0


def test_the_library_reads_and_assembles_without_django():
    spans, errors, total = otlp.read_request(request(*genai_agent_trace(T1)))
    assert (len(spans), errors, total) == (4, [], 4)
    (run,) = otlp.assemble(spans)
    assert run.run_id == T1 and [c.model for c in run.all_model_calls()] == ["gpt-4o-mini"] * 2
    assert [m.part for m in run.iterations[1].model_calls[0].messages] == ["input", "run", "run"]


def test_a_trace_that_names_its_session_late_moves_there_and_the_placeholder_goes(client, auth_headers):
    chat1, tool, chat2, root = genai_agent_trace(T1, session="later")
    for item in (chat1, tool, chat2):
        item["attributes"] = [a for a in item["attributes"] if a["key"] != "gen_ai.conversation.id"]
    post(client, auth_headers, request(tool))
    assert models.Run.objects.get(run_id=T1).session.session_id == f"trace-{T1}"
    post(client, auth_headers, request(root))
    assert models.Run.objects.get(run_id=T1).session.session_id == "later"
    assert not models.Session.objects.filter(session_id=f"trace-{T1}").exists()
    assert models.SpanBatch.objects.filter(session__session_id="later").count() == 2 and len(kept()) == 2
    assert models.Session.objects.get(session_id="later").run_count == 1


def test_a_trace_beyond_its_span_limit_refuses_further_spans_but_its_root(client, auth_headers, settings):
    settings.HISTORY_OTLP_MAX_TRACE_SPANS = 3
    chat1, tool, chat2, root = genai_agent_trace(T1)
    assert post(client, auth_headers, request(chat1, tool, chat2)).json() == {}
    extra = span(T1, "e1" * 8, AGENT, "execute_tool more", {"gen_ai.operation.name": "execute_tool"})
    answer = post(client, auth_headers, request(extra, root, *genai_agent_trace(T2)[:1])).json()
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    assert "HISTORY_OTLP_MAX_TRACE_SPANS" in answer["partialSuccess"]["errorMessage"]
    run = models.Run.objects.get(run_id=T1)
    assert run.status == "completed" and models.ToolCall.objects.filter(run=run).count() == 1
    assert models.Run.objects.filter(run_id=T2).exists()
    # Spans already kept may be sent again.
    assert post(client, auth_headers, request(chat1)).json() == {}


# --- Found by attacking the endpoint from outside ------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("startTimeUnixNano", "²", "startTimeUnixNano"),
        ("startTimeUnixNano", "9" * 5000, "startTimeUnixNano"),
        ("endTimeUnixNano", "١٢٣", "endTimeUnixNano"),
        ("attributes", [{"key": "k", "value": {"intValue": "١٢"}}], "attributes[0].value.intValue"),
        ("attributes", [{"key": "k", "value": {"stringValue": "a", "intValue": "1"}}], "attributes[0].value"),
        (
            "attributes",
            [{"key": "k", "value": {"arrayValue": [{"stringValue": "a"}]}}],
            "attributes[0].value.arrayValue",
        ),
        ("attributes", [{"key": "k", "value": {"kvlistValue": {"values": [{"key": 1}]}}}], "values[0].key"),
        (
            "attributes",
            [{"key": "k", "value": {"bytesValue": "not base64!"}}],
            "attributes[0].value.bytesValue",
        ),
        ("attributes", ["k"], "attributes[0]"),
    ],
)
def test_odd_values_are_refused_with_their_path(client, auth_headers, field, value, path):
    response = post(client, auth_headers, request({**span(T1, "11" * 8), field: value}))
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and path in partial["errorMessage"]


@pytest.mark.parametrize(
    "payload",
    [
        {"resourceSpans": [{"resource": "x", "scopeSpans": [{"spans": 5}]}]},
        {"resourceSpans": [{"scopeSpans": [{"scope": 7, "spans": 7}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": True}]}]},
        {"resourceSpans": [{"scopeSpans": 3}]},
    ],
)
def test_broken_containers_are_refused_not_a_500(client, auth_headers, payload):
    response = post(client, auth_headers, payload)
    assert response.status_code in (200, 400)
    if response.status_code == 200:
        assert int(response.json()["partialSuccess"]["rejectedSpans"]) >= 1


def test_values_that_would_break_a_trace_are_kept_in_a_form_it_can_hold(client, auth_headers):
    """A bad value never makes a trace's runs unstorable (and so every later request of
    the trace too): it is kept as text, or made a valid id."""
    deep = "[" * 500 + "]" * 500
    spans = [
        span(
            T1,
            AGENT,
            "",
            "invoke_agent a",
            {"gen_ai.operation.name": "invoke_agent", "session.id": "org/42\x07"},
        ),
        span(
            T1,
            "d1" * 8,
            AGENT,
            "execute_tool t",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "t",
                "gen_ai.tool.call.arguments": deep,
            },
            start_ms=1,
        ),
        span(
            T1,
            "d2" * 8,
            AGENT,
            "execute_tool u",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "u",
                "gen_ai.tool.call.arguments": '{"x": NaN, "y": 1e999}',
            },
            start_ms=2,
        ),
        span(
            T1,
            "c1" * 8,
            AGENT,
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": "²"},
            start_ms=3,
        ),
        {
            **span(
                T1,
                "c2" * 8,
                AGENT,
                "chat \ud800 cut\x00",
                {"gen_ai.operation.name": "chat", "k\udc00": "v\ud83d"},
            ),
            "start": 4,
        },
    ]
    response = post(client, auth_headers, json.dumps(request(*spans)).encode())
    assert response.status_code == 200 and response.json() == {}
    run = models.Run.objects.get(run_id=T1)
    assert run.session.session_id == "org%2F42" and run.status == "completed"
    params = {call.tool: call.params for call in models.ToolCall.objects.filter(run=run)}
    assert params == {"t": deep, "u": '{"x": NaN, "y": 1e999}'}
    assert models.ModelCall.objects.filter(run=run, input_tokens__isnull=True).count() == 2
    assert "\ufffd" in kept()["c2" * 8]["name"] and "\x00" not in kept()["c2" * 8]["name"]


def test_a_trace_that_cannot_be_assembled_keeps_what_it_had(client, auth_headers, monkeypatch):
    chat1, tool, chat2, root = genai_agent_trace(T1)
    post(client, auth_headers, request(chat1, tool))
    real = otlp.assemble

    def broken(spans):
        if any(s["span_id"] == "c2" * 8 for s in spans):
            raise KeyError("a mapping bug")
        return real(spans)

    monkeypatch.setattr(otlp, "assemble", broken)
    answer = post(client, auth_headers, request(chat2, *genai_agent_trace(T2)[:1])).json()
    assert (
        answer["partialSuccess"]["rejectedSpans"] == "1"
        and "could not be assembled" in answer["partialSuccess"]["errorMessage"]
    )
    assert "c2" * 8 not in kept()  # not kept to break the trace
    assert models.Run.objects.filter(run_id=T2).exists()
    monkeypatch.setattr(otlp, "assemble", real)
    post(client, auth_headers, request(root))
    assert models.Run.objects.get(run_id=T1).status == "completed"


@pytest.mark.parametrize("kind", ["bytes", "escaped slash", "escaped unicode", "glued to an id"])
def test_secrets_in_the_shapes_spans_hide_them_in(client, auth_headers, kind):
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3
    dsn = "postgres://admin:Hunter2Escaped99@db.internal/x"
    attributes = {
        "bytes": [
            {
                "key": "blob",
                "value": {"bytesValue": __import__("base64").b64encode(f"key={key} {dsn}".encode()).decode()},
            }
        ],
        "escaped slash": [
            {"key": "cfg", "value": {"stringValue": json.dumps({"dsn": dsn}).replace("/", "\\/")}}
        ],
        "escaped unicode": [{"key": "cfg", "value": {"stringValue": '{"key": "\\u0073' + key[1:] + '"}'}}],
        "glued to an id": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.call.id", "value": {"stringValue": f"call_{key}"}},
        ],
    }[kind]
    response = post(client, auth_headers, request({**span(T1, "11" * 8), "attributes": attributes}))
    assert response.status_code == 200
    spans_text = kept_text()
    everything = database_dump() + spans_text
    assert key[3:] not in everything and "Hunter2Escaped99" not in everything


def test_binary_bytes_are_not_kept(client, auth_headers):
    blob = __import__("base64").b64encode(bytes(range(256))).decode()
    post(
        client,
        auth_headers,
        request({**span(T1, "11" * 8), "attributes": [{"key": "b", "value": {"bytesValue": blob}}]}),
    )
    assert models.Run.objects.get(run_id=T1).metadata["b"] == "<256 bytes of binary data>"


def test_a_chain_ten_thousand_deep_and_many_attributes(client, auth_headers):
    ids = [f"{n + 1:016x}" for n in range(10_000)]
    chain = [
        span(
            T1,
            ids[n],
            ids[n - 1] if n else "",
            f"s{n}",
            {"gen_ai.operation.name": "execute_tool"} if n % 100 == 0 and n else {},
        )
        for n in range(10_000)
    ]
    assert post(client, auth_headers, request(*chain)).json() == {}
    assert models.ToolCall.objects.filter(run__run_id=T1).count() == 99
    many = [{"key": f"k{n}", "value": {"intValue": str(n)}} for n in range(10_050)]
    post(client, auth_headers, request({**span(T2, "22" * 8), "attributes": many}))
    assert models.Run.objects.get(run_id=T2).metadata["otel.dropped_attributes"] == 50


def test_gzip_that_lies_is_refused_and_several_members_are_read(client, auth_headers):
    body = json.dumps(request(*genai_agent_trace(T1))).encode()
    whole = gzip.compress(body)
    headers = {"HTTP_CONTENT_ENCODING": "gzip"}
    assert post(client, auth_headers, whole[:-8], **headers).status_code == 400  # no trailer
    assert post(client, auth_headers, whole + b"garbage", **headers).status_code == 400
    half = len(body) // 2
    members = gzip.compress(body[:half]) + gzip.compress(body[half:])
    assert post(client, auth_headers, members, **headers).status_code == 200
    assert models.Run.objects.get(run_id=T1).model_call_count == 2


def test_a_tiny_protobuf_of_many_empty_spans_is_refused_before_it_is_read(client, auth_headers):
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    message = trace_service_pb2.ExportTraceServiceRequest()
    scope = message.resource_spans.add().scope_spans.add()
    for _ in range(200_000):
        scope.spans.add()
    body = gzip.compress(message.SerializeToString())
    assert len(body) < 10_000
    response = post(
        client, auth_headers, body, content_type="application/x-protobuf", HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 413


def test_spans_another_request_kept_meanwhile_are_assembled_too(client, auth_headers, monkeypatch):
    """The request plans outside its transaction; spans of the same trace another request
    stored since it read them are found under the lock, and the trace planned again."""
    from history_app.intake import spans as span_store

    chat1, tool, chat2, root = genai_agent_trace(T1)
    real_plan, calls = span_store._plan, []

    def plan_while_another_request_writes(trace_id, spans, kept, redactor, *rest):
        calls.append(len(kept))
        if len(calls) == 1:  # "another request" keeps the first model call meanwhile
            other, _, _ = otlp.read_request(request(chat1))
            models.SpanBatch.objects.create(
                project=models.Project.default(), trace_id=T1, span_count=1, data=span_store._pack(other)
            )
        return real_plan(trace_id, spans, kept, redactor, *rest)

    monkeypatch.setattr(span_store, "_plan", plan_while_another_request_writes)
    assert post(client, auth_headers, request(tool, chat2, root)).json() == {}
    assert calls == [0, 1]
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.model_call_count, run.input_tokens) == ("completed", 2, 2300)


# --- Found by a second attack ---------------------------------------------------------


def test_numbers_no_double_can_hold_are_kept_as_text(client, auth_headers):
    body = json.dumps(request(span(T1, "11" * 8))).replace(
        '"attributes": []', '"attributes": [{"key": "big", "value": {"doubleValue": 1' + "0" * 400 + "}}]"
    )
    assert post(client, auth_headers, body.encode()).json() == {}
    assert models.Run.objects.get(run_id=T1).metadata["big"] == "1" + "0" * 400
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    message = trace_service_pb2.ExportTraceServiceRequest()
    resource = message.resource_spans.add()
    resource.resource.attributes.add(key="sample.rate").value.double_value = float("nan")
    pb = resource.scope_spans.add().spans.add(
        trace_id=bytes.fromhex(T2), span_id=bytes.fromhex("22" * 8), name="x"
    )
    pb.attributes.add(key="score").value.double_value = float("-inf")
    answer = post(client, auth_headers, message.SerializeToString(), content_type="application/x-protobuf")
    assert answer.status_code == 200 and answer.content == b""  # no partial success: nothing refused
    assert models.Run.objects.get(run_id=T2).metadata["score"] == "-Infinity"


@pytest.mark.parametrize(
    "flag", [("calls", "3"), ("calls", -1), ("aggregate", "yes"), ("omitted_messages", True)]
)
def test_attribute_names_the_server_uses_never_fail_a_run(client, auth_headers, flag):
    chat1, tool, chat2, root = genai_agent_trace(T1)
    chat1["attributes"].append({"key": flag[0], "value": otlp_value(flag[1])})
    assert post(client, auth_headers, request(chat1, tool, chat2, root)).json() == {}
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.model_call_count) == ("completed", 2)


def test_a_few_kilobytes_cannot_become_megabytes(client, auth_headers):
    huge = {"arrayValue": {"values": [{}] * 20_000}}
    body = gzip.compress(
        json.dumps(request({**span(T1, "11" * 8), "attributes": [{"key": "k", "value": huge}]})).encode()
    )
    answer = post(client, auth_headers, body, HTTP_CONTENT_ENCODING="gzip").json()
    assert (
        answer["partialSuccess"]["rejectedSpans"] == "1"
        and "at most 10000" in answer["partialSuccess"]["errorMessage"]
    )
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    message = trace_service_pb2.ExportTraceServiceRequest()
    pb = (
        message.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=bytes.fromhex(T2), span_id=bytes.fromhex("22" * 8))
    )
    for n in range(12_000):
        pb.attributes.add(key=f"k{n}").value.int_value = n
    assert (
        post(
            client, auth_headers, message.SerializeToString(), content_type="application/x-protobuf"
        ).status_code
        == 200
    )
    assert models.Run.objects.get(run_id=T2).metadata["otel.dropped_attributes"] == 2_000
    members = gzip.compress(json.dumps(request()).encode()) + gzip.compress(b"") * 200
    assert post(client, auth_headers, members, HTTP_CONTENT_ENCODING="gzip").status_code == 400


@pytest.mark.parametrize(
    "attribute",
    [
        {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": '{"a": "ESC"}'}]}}},
        {
            "key": "a",
            "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": '{"a": "ESC"}'}}]}},
        },
        {"key": "a", "value": {"stringValue": ' \n{"a": "ESC"}'}},
        {"key": "a", "value": {"stringValue": '"ESC"'}},
        {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"args": "{\\"k\\": \\"ESC\\"}"}'}},
    ],
    ids=["array", "kvlist", "whitespace", "literal", "double-encoded"],
)
def test_json_escaped_secrets_anywhere_are_redacted(client, auth_headers, attribute):
    key = "sk-proj-" + "AbCdEfGh12345678" * 3
    escaped = "\\\\u0073" + key[1:]
    if "double" in json.dumps(attribute) or attribute["key"].startswith("gen_ai"):
        escaped = "\\\\\\\\u0073" + key[1:]
    raw = json.dumps(attribute).replace("ESC", escaped)
    spans = [
        {
            **span(T1, "11" * 8, "", "execute_tool t", {"gen_ai.operation.name": "execute_tool"}),
            "attributes": [json.loads(raw)],
        }
    ]
    payload = request(*spans)
    payload["resourceSpans"][0]["resource"]["attributes"].append(
        {"key": "cfg", "value": {"stringValue": '{"a": "' + escaped.replace("\\\\", "\\") + '"}'}}
    )
    assert post(client, auth_headers, payload).status_code == 200
    everything = database_dump() + kept_text()
    assert key[3:20] not in everything and key[1:][:20] not in everything


def test_a_span_whose_parent_is_in_another_service_is_the_trace_s_root(client, auth_headers):
    chat1, tool, chat2, root = genai_agent_trace(T1)
    root = {**root, "parentSpanId": "99" * 8, "flags": 0x300}
    assert post(client, auth_headers, request(chat1, tool, chat2, root)).json() == {}
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.agent_name, run.kind) == ("completed", "calc", "agent")


def test_over_the_span_cap_what_fits_is_taken(client, auth_headers, settings):
    settings.HISTORY_OTLP_MAX_TRACE_SPANS = 4
    chat1, tool, chat2, root = genai_agent_trace(T1)
    extra = span(
        T1, "e1" * 8, AGENT, "execute_tool more", {"gen_ai.operation.name": "execute_tool"}, start_ms=8
    )
    assert post(client, auth_headers, request(chat1, tool)).json() == {}
    answer = post(client, auth_headers, request(chat2, extra, root)).json()
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    run = models.Run.objects.get(run_id=T1)
    assert (run.status, run.model_call_count) == ("completed", 2)


def test_refusals_never_echo_a_secret_back(client, auth_headers):
    key = "sk-proj-" + "Zz9Yy8Xx7Ww6" * 3
    bad = {
        **span(T1, "11" * 8),
        "attributes": [{"key": "k", "value": {key: "x"}}, {"key": key, "value": {"a": 1, "b": 2}}],
    }
    answer = post(client, auth_headers, request(bad))
    assert answer.status_code == 200 and key not in answer.content.decode()
    # Empty groups are read up to the limit; past it the request is refused, with why.
    assert post(client, auth_headers, {"resourceSpans": [{"resource": {}}] * 10_000}).status_code == 200
    many_empty = post(client, auth_headers, {"resourceSpans": [{"resource": {}}] * 10_001})
    assert many_empty.status_code == 413 and "10001 ResourceSpans" in many_empty.json()["message"]
    dropped = {**span(T2, "22" * 8), "droppedEventsCount": 3, "droppedAttributesCount": 4}
    post(client, auth_headers, request(dropped))
    metadata = models.Run.objects.get(run_id=T2).metadata
    assert (metadata["otel.dropped_events"], metadata["otel.dropped_attributes"]) == (3, 4)


def _rpc_status(response):
    from google.rpc import status_pb2

    return status_pb2.Status.FromString(response.content)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (tag byte, varint length, payload)."""
    length, out = len(payload), bytearray([tag])
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + payload


def _refused_before_decoding(monkeypatch):
    """Decoding fails the test: what is refused must be refused by counting alone."""
    from history_app.intake import traces

    def no_decoding(body):
        raise AssertionError("the body was decoded")

    monkeypatch.setattr(traces, "decode_protobuf", no_decoding)


def test_a_million_empty_resource_spans_are_counted_and_refused_before_decoding(
    client, auth_headers, monkeypatch
):
    body = gzip.compress(b"\x0a\x00" * 1_000_000, 9)
    assert len(body) < 4_000
    _refused_before_decoding(monkeypatch)
    response = post(
        client, auth_headers, body, content_type="application/x-protobuf", HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 413 and response["Content-Type"] == "application/x-protobuf"
    status = _rpc_status(response)
    assert status.code == 8 and "more than 10000 ResourceSpans" in status.message
    assert models.IngestReceipt.objects.get().rejections[0]["message"] == status.message
    assert models.SpanBatch.objects.count() == 0 and models.Run.objects.count() == 0


def test_empty_scope_spans_and_tiny_attributes_are_counted_too(client, auth_headers, settings, monkeypatch):
    _refused_before_decoding(monkeypatch)
    scopes = _field(0x0A, b"\x12\x00" * 20_000)
    response = post(client, auth_headers, scopes, content_type="application/x-protobuf")
    assert response.status_code == 413 and "more than 10000 ScopeSpans" in _rpc_status(response).message
    settings.HISTORY_OTLP_MAX_ELEMENTS = 1_000
    span = _field(0x0A, bytes.fromhex(T1)) + _field(0x12, bytes(8)) + b"\x4a\x00" * 1_500
    deep = _field(0x0A, _field(0x12, _field(0x12, span)))
    response = post(client, auth_headers, deep, content_type="application/x-protobuf")
    assert response.status_code == 413 and "more than 1000 repeated elements" in _rpc_status(response).message
    values = _field(0x4A, _field(0x12, _field(0x2A, b"\x0a\x00" * 1_500)))  # one array attribute
    response = post(
        client,
        auth_headers,
        _field(0x0A, _field(0x12, _field(0x12, _field(0x0A, bytes.fromhex(T1)) + values))),
        content_type="application/x-protobuf",
    )
    assert response.status_code == 413 and "repeated elements" in _rpc_status(response).message
    # Fields that are no elements (a number sent again and again) bound the walk too.
    padded = _field(0x0A, _field(0x12, _field(0x12, _field(0x0A, bytes.fromhex(T1)) + b"\x50\x00" * 5_000)))
    response = post(client, auth_headers, padded, content_type="application/x-protobuf")
    assert response.status_code == 413 and "more than 4000 protobuf fields" in _rpc_status(response).message


@pytest.mark.parametrize(
    "body",
    [b"\x0a\x05\x12", b"\x0a\x00\x0b\x0c", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"],
    ids=["length-past-the-end", "group", "eleven-byte-varint"],
)
def test_protobuf_that_is_no_message_is_refused_by_the_walk(client, auth_headers, body):
    response = post(client, auth_headers, body, content_type="application/x-protobuf")
    assert response.status_code == 400 and _rpc_status(response).code == 3


def test_the_json_form_is_counted_before_it_is_read(client, auth_headers, settings):
    flood = b'{"resourceSpans":[' + b"{}," * 3_000_000 + b"{}]}"
    response = post(client, auth_headers, gzip.compress(flood, 9), HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert "more than 2000000 JSON values" in response.json()["message"]
    numbers = b'{"resourceSpans":[{"x":[' + b"1.5," * 2_500_000 + b"1]}]}"
    response = post(client, auth_headers, gzip.compress(numbers, 9), HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "JSON values" in response.json()["message"]
    # Strings are skipped whole: braces and commas inside them are no values.
    inside = json.dumps(request(span(T1, "11" * 8, attributes={"note": "{[,]}" * 600_000})))
    assert post(client, auth_headers, inside.encode()).status_code == 200
    settings.HISTORY_OTLP_MAX_SPANS = 100
    empty_groups = {"resourceSpans": [{}] * 101}
    response = post(client, auth_headers, empty_groups)
    assert response.status_code == 413 and "101 ResourceSpans" in response.json()["message"]
    empty_scopes = {"resourceSpans": [{"scopeSpans": [{}] * 101}]}
    response = post(client, auth_headers, empty_scopes)
    assert response.status_code == 413 and "101 ScopeSpans" in response.json()["message"]


def test_a_large_trace_is_not_assembled_again_for_each_few_spans(client, auth_headers, monkeypatch):
    """Assembling a trace costs all its spans: a request adding a few to a large trace
    keeps them, and the trace is assembled again once an eighth of it is new, or its root
    arrives; a request changing nothing assembles nothing."""
    from history_app.intake import spans as span_store

    monkeypatch.setattr(span_store, "ASSEMBLE_ALWAYS", 10)
    assembled = []
    real = otlp.assemble

    def counted(spans):
        assembled.append(len(spans))
        return real(spans)

    monkeypatch.setattr(otlp, "assemble", counted)

    def tool(n: int) -> dict:
        return span(T1, f"{n:016x}", AGENT, "tool", {"gen_ai.operation.name": "execute_tool"}, start_ms=n)

    def tool_calls() -> int:
        return models.Run.objects.get(run_id=T1).tool_call_count

    assert post(client, auth_headers, request(*[tool(n) for n in range(1, 20)])).json() == {}
    assert assembled == [19] and tool_calls() == 19
    # One new span of 20: kept, not assembled; the receipt counts the trace a duplicate.
    assert post(client, auth_headers, request(tool(20))).status_code == 200
    assert assembled == [19] and tool_calls() == 19
    assert models.IngestReceipt.objects.order_by("id").last().counts["duplicate"] == 1
    assert sum(models.SpanBatch.objects.values_list("span_count", flat=True)) == 20
    assert models.SpanBatch.objects.filter(session__isnull=True).count() == 0
    # Sent again: nothing changes, nothing is assembled.
    assert post(client, auth_headers, request(tool(5), tool(20))).status_code == 200
    assert assembled == [19] and models.SpanBatch.objects.count() == 2
    # Enough new spans (3 of 22 since the last assembly): assembled with every kept span.
    assert post(client, auth_headers, request(tool(21), tool(22))).status_code == 200
    assert assembled == [19, 22] and tool_calls() == 22
    # The root arriving ends the run at once, however few spans came with it.
    root = span(T1, AGENT, "", "agent", {"gen_ai.operation.name": "invoke_agent"}, end_ms=100)
    assert post(client, auth_headers, request(root)).status_code == 200
    run = models.Run.objects.get(run_id=T1)
    assert assembled == [19, 22, 23] and run.status == "completed" and run.tool_call_count == 22


@pytest.mark.parametrize(
    "result",
    [
        '{"note": "KEY", "note": "ok"}',
        '[{"a": 1}, {"api_key": "PLAIN", "api_key": ""}]',
        '{"outer": {"note": "KEY", "note": "ok"}, "n": 1}',
    ],
    ids=["duplicate", "secret-key-in-a-list", "nested"],
)
def test_a_secret_under_a_key_written_twice_is_not_kept_in_the_span_store(client, auth_headers, result):
    """JSON keeps the last value of a repeated key: a tool result read as JSON lost the
    secret from sight, and the span batch kept the original text."""
    key = "sk-proj-" + "Dup1Key2Abc3Def4" * 3
    plain = "FAKEdupPlain77"
    text = result.replace("KEY", key).replace("PLAIN", plain)
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "t",
        "gen_ai.tool.call.result": text,
    }
    payload = request(span(T1, "11" * 8, "", "execute_tool t", attributes))
    assert post(client, auth_headers, payload).status_code == 200
    batches = models.SpanBatch.objects.filter(trace_id=T1)
    assert batches.exists()
    stored = kept_text() + database_dump()
    assert key[8:30] not in stored and plain not in stored
    (kept_span,) = kept().values()
    assert "[REDACTED:" in kept_span["attributes"]["gen_ai.tool.call.result"]


# --- Spans parsed and redacted once --------------------------------------------------


def _trace_with_a_secret_in_its_messages(key: str) -> list[dict]:
    chat1, tool, chat2, root = genai_agent_trace(T1)
    for attribute in chat1["attributes"]:
        if attribute["key"] == "gen_ai.input.messages":
            messages = json.loads(attribute["value"]["stringValue"])
            messages[0]["parts"][0]["content"] = f"What is 2+3? My key is {key}"
            attribute["value"]["stringValue"] = json.dumps(messages)
    return [chat1, tool, chat2, root]


def test_a_span_s_json_attribute_is_read_as_json_once(client, auth_headers, monkeypatch):
    """The messages a model span carries are parsed once on their way to the stored run:
    redaction reads them, and the assembly takes what redaction made of them."""
    spans = genai_agent_trace(T1)
    messages = next(a for a in spans[0]["attributes"] if a["key"] == "gen_ai.input.messages")
    text = messages["value"]["stringValue"]
    real_loads, reads = json.loads, []

    def counting_loads(value, *args, **kwargs):
        if value == text:
            reads.append(value)
        return real_loads(value, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting_loads)
    assert post(client, auth_headers, request(*spans)).status_code == 200
    monkeypatch.setattr(json, "loads", real_loads)
    call = models.ModelCall.objects.filter(run__run_id=T1).order_by("pk").first()
    assert "What is 2+3?" in json.dumps(call.messages)
    assert len(reads) == 1


def test_runs_are_redacted_again_when_the_span_pass_let_a_secret_through(client, auth_headers, monkeypatch):
    """The runs assembled from spans go through the server's redaction whatever the spans'
    own pass did (here made to do nothing): no run row holds the secret."""
    from history_app.intake import spans as span_store

    key = "sk-proj-" + "Once1Twice2Thrice3" * 3
    monkeypatch.setattr(span_store, "redact_spans", lambda spans, redactor: [])
    assert post(client, auth_headers, request(*_trace_with_a_secret_in_its_messages(key))).status_code == 200
    run = models.Run.objects.get(run_id=T1)
    assert run.model_call_count == 2
    assert key[3:] not in database_dump()


def test_a_secret_in_a_span_s_messages_is_not_stored_when_the_runs_pass_is_skipped(
    client, auth_headers, monkeypatch
):
    """The assembly reads the JSON the spans' redaction made, never the string as it came:
    with the runs' own redaction made to do nothing, the run still holds no secret."""
    from history_app.agent_history.redact import Redactor
    from history_app.intake import ingestion

    class Blind(Redactor):
        def redact_with_report(self, obj, path="$"):
            return obj, __import__("collections").Counter(), []

    key = "sk-proj-" + "Once1Twice2Thrice3" * 3
    real_prepare = ingestion.prepare_item

    def prepare_blind(item, result, *, redactor, **kwargs):
        return real_prepare(item, result, redactor=Blind(), **kwargs)

    monkeypatch.setattr(ingestion, "prepare_item", prepare_blind)
    assert post(client, auth_headers, request(*_trace_with_a_secret_in_its_messages(key))).status_code == 200
    call = models.ModelCall.objects.filter(run__run_id=T1).order_by("pk").first()
    assert "What is 2+3? My key is [REDACTED" in json.dumps(call.messages)
    assert key[3:] not in database_dump() + kept_text()
