"""Real instrumentation sending to a live test server (issue #15): the OpenTelemetry SDK
with the standard protobuf exporter and with an OTLP/JSON exporter, a Pydantic AI agent
(GenAI conventions), and the OpenInference OpenAI instrumentation with the openai client
pointed at a fake OpenAI-compatible server on 127.0.0.1. Each asserts what the pages show."""

from __future__ import annotations

import json
import urllib.request

import pytest

from history_app import models

from . import fake_openai

pytestmark = pytest.mark.django_db(transaction=True)


class JsonExporter:
    """An OTLP/HTTP JSON span exporter: the SDK's spans encoded by ``otlp-json`` (OTLP 1.5
    JSON), POSTed as ``application/json``. Counts the spans the server accepted."""

    def __init__(self, endpoint: str, token: str):
        self.endpoint, self.token, self.sent = endpoint, token, 0

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult
        from otlp_json import CONTENT_TYPE, encode_spans

        request = urllib.request.Request(
            self.endpoint,
            encode_spans(spans),
            {"Content-Type": CONTENT_TYPE, "Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read() or b"{}")
        rejected = int(answer.get("partialSuccess", {}).get("rejectedSpans", 0))
        self.sent += len(spans) - rejected
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def provider(live_server, token, encoding: str):
    """A TracerProvider exporting to the live server, with the standard batch processor."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    endpoint = f"{live_server.url}/v1/traces"
    if encoding == "protobuf":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(
            endpoint=endpoint, headers={"Authorization": f"Bearer {token}"}, compression=Compression.Gzip
        )
    else:
        exporter = JsonExporter(endpoint, token)
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "live-test"}))
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    return tracer_provider


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_the_sdk_with_each_exporter(live_server, token, alice_client, encoding):
    tracer_provider = provider(live_server, token, encoding)
    tracer = tracer_provider.get_tracer("my-agent")
    with tracer.start_as_current_span(
        "invoke_agent planner",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "planner",
            "session.id": "live-1",
        },
    ) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Plan a trip"}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Go to Lyon."}]}]
                ),
                "gen_ai.usage.input_tokens": 2000,
                "gen_ai.usage.output_tokens": 100,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.result": "sunny",
            },
        ):
            pass
    assert tracer_provider.force_flush(30_000)
    tracer_provider.shutdown()
    run = models.Run.objects.get(run_id=trace_id)
    assert (run.status, run.agent_name, run.session.session_id, run.input_tokens) == (
        "completed",
        "planner",
        "live-1",
        2000,
    )
    page = alice_client.get(f"/p/default/runs/{trace_id}/").content.decode()
    assert "planner" in page and "gpt-4o" in page and "2,000" in page and "weather" in page and "$" in page
    assert models.IngestReceipt.objects.filter(source="otlp").exists()


def test_a_pydantic_ai_agent(live_server, token, alice_client):
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.test import TestModel

    tracer_provider = provider(live_server, token, "protobuf")
    agent = Agent(
        TestModel(),
        name="adder",
        instructions="You add numbers.",
        capabilities=None,
    )
    agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    result = agent.run_sync("What is 2+3?")
    assert tracer_provider.force_flush(30_000)
    tracer_provider.shutdown()
    run = models.Run.objects.get(framework="pydantic-ai")
    assert (run.agent_name, run.status, run.input) == ("adder", "completed", "What is 2+3?")
    assert run.output == result.output if isinstance(result.output, str) else True
    assert run.model_call_count == 2 and run.input_tokens > 0 and run.output_tokens > 0
    assert run.unpriced_calls == 2  # the test model has no price: never a made-up figure
    assert models.ToolCall.objects.get(run=run).tool == "add"
    page = alice_client.get(f"/p/default/runs/{run.run_id}/").content.decode()
    assert "adder" in page and "add" in page and "no price" in page
    call = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/1/").content.decode()
    assert "You add numbers." in call and "What is 2+3?" in call
    session = alice_client.get(f"/p/default/sessions/{run.session.session_id}/").content.decode()
    assert "adder" in session


def test_a_pydantic_ai_agent_on_an_openai_compatible_server_is_priced(live_server, token, alice_client):
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    server = fake_openai.start()
    try:
        tracer_provider = provider(live_server, token, "json")
        model = OpenAIChatModel(
            "gpt-4o-mini",
            provider=OpenAIProvider(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="sk-test"),
        )
        agent = Agent(model, name="priced")
        agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)

        @agent.tool_plain
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        assert agent.run_sync("What is 2+3?").output == "The answer is 5."
        assert tracer_provider.force_flush(30_000)
        tracer_provider.shutdown()
    finally:
        server.shutdown()
    run = models.Run.objects.get(agent_name="priced")
    assert run.model_call_count == 2
    assert (
        run.input_tokens == 2 * fake_openai.PROMPT_TOKENS
        and run.output_tokens == 2 * fake_openai.COMPLETION_TOKENS
    )
    assert run.cost is not None and run.cost > 0 and run.unpriced_calls == 0
    call = models.ModelCall.objects.filter(run=run).first()
    # Pydantic AI prices its calls itself (``operation.cost``): the cost is the one it reported.
    assert (call.provider, call.cost_source, call.cached_tokens) == (
        "openai",
        "reported",
        fake_openai.CACHED_TOKENS,
    )
    page = alice_client.get(f"/p/default/runs/{run.run_id}/").content.decode()
    assert "gpt-4o-mini" in page and "The answer is 5." in page and "$0.0000" in page


def run_openai_client_support_bot(live_server, token) -> str:
    """An agent of plain OpenAI client calls (OpenInference's OpenAI instrumentation, the
    agent and its add tool traced by hand) asked "What is 2+3?" in the session
    "oi-session"; returns its answer."""
    import openai
    from openinference.instrumentation import OITracer, TraceConfig, using_session, using_user
    from openinference.instrumentation.openai import OpenAIInstrumentor

    server = fake_openai.start()
    tracer_provider = provider(live_server, token, "protobuf")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        tracer = OITracer(tracer_provider.get_tracer("support-bot"), config=TraceConfig())
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="sk-test")
        schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
        tools = [{"type": "function", "function": {"name": "add", "parameters": schema}}]

        @tracer.tool
        def add(a: int, b: int) -> int:
            return a + b

        @tracer.agent
        def support_bot(question: str) -> str:
            messages = [{"role": "system", "content": "You add."}, {"role": "user", "content": question}]
            first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
            call = first.choices[0].message.tool_calls[0]
            result = add(**json.loads(call.function.arguments))
            messages += [
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": str(result)},
            ]
            return (
                client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
                .choices[0]
                .message.content
            )

        with using_session("oi-session"), using_user("user-9"):
            answer = support_bot("What is 2+3?")
        assert tracer_provider.force_flush(30_000)
        tracer_provider.shutdown()
    finally:
        instrumentor.uninstrument()
        server.shutdown()
    return answer


def test_openinference_openai_instrumentation(live_server, token, alice_client):
    assert run_openai_client_support_bot(live_server, token) == "The answer is 5."
    run = models.Run.objects.get(session__session_id="oi-session")
    assert (run.agent_name, run.user_id, run.framework, run.output) == (
        "support_bot",
        "user-9",
        "openinference",
        "The answer is 5.",
    )
    assert run.model_call_count == 2 and run.input_tokens == 200 and run.cost is not None and run.cost > 0
    assert list(models.ToolCall.objects.filter(run=run).values_list("tool", "result")) == [("add", "5")]
    assert run.iterations.count() == 2
    page = alice_client.get(f"/p/default/runs/{run.run_id}/").content.decode()
    assert "support_bot" in page and "gpt-4o-mini" in page and "add" in page
    # Each call's tokens and estimated cost in its iteration, the run's totals in its facts.
    assert page.count("100 in / 20 out") == 2 and "200 / 40" in page and "estimated with genai-prices" in page
    second = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/2/").content.decode()
    assert "You add." in second and "The answer is 5." in second
    # The assistant's request as a request (name, id, arguments), the tool message linked to it.
    assert "asks for tool <strong>add</strong>" in second and "<code>call_1_0</code>" in second
    assert 'answers tool call <a href="#request-2-call_1_0">' in second
    listing = alice_client.get("/p/default/").content.decode()
    assert "oi-session" in listing


def test_the_exporter_configured_only_by_environment_variables(live_server, token, monkeypatch):
    """The OpenTelemetry page's and quickstart's no-code set-up: the two OTEL_* variables, as printed."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{live_server.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{token}")
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    with tracer_provider.get_tracer("env").start_as_current_span(
        "invoke_agent env",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "from-env"},
    ):
        pass
    assert tracer_provider.force_flush(30_000)
    tracer_provider.shutdown()
    assert models.Run.objects.get(agent_name="from-env").status == "completed"
