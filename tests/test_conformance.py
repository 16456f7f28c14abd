"""Exactly what the model saw: real frameworks and instrumentations call the recording fake
OpenAI server (the ground truth: each request body as received), send what they report to
a live test server, and every recorded request must equal a stored model call message for
message (``tests/conformance.py`` states the rule).

The frameworks are pinned in the ``test`` extra of pyproject.toml. On a machine without one
its test is skipped with the framework's name; with ``HISTORY_REQUIRE_FRAMEWORKS=1`` (set
by .ci/run) a missing framework fails instead, so CI never passes on a skip."""

from __future__ import annotations

import contextvars
import json
import os

import pytest

from history_app import models
from history_app.agent_history import messages as wire
from history_app.store import mapper

from . import conformance, fake_openai
from .test_otlp_live import provider

pytestmark = pytest.mark.django_db(transaction=True)


def framework(module: str):
    """The framework's module, or a skip naming it (a failure where CI requires them)."""
    if os.environ.get("HISTORY_REQUIRE_FRAMEWORKS") == "1":
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (the test extra pins it)")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def stored_calls() -> list[dict]:
    return [
        mapper.model_call_record(call).to_dict()
        for call in models.ModelCall.objects.order_by("run__started_at", "position")
    ]


def assert_conforms(server, *, exact_arguments: bool = True, expected: int | None = None) -> list[str]:
    """Every request the server recorded is a stored call, message for message; returns
    the notes (roles an instrumentation reported under another name)."""
    assert server.requests, "the framework sent no request to the fake server"
    if expected is not None:
        assert len(server.requests) == expected
    exact, report, notes = conformance.match(server.requests, stored_calls(), exact_arguments=exact_arguments)
    # The figure the docs' table quotes (``pytest -s tests/test_conformance.py | grep exact``).
    print(
        f"\n{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}: {exact} of {len(server.requests)} calls exact"
    )
    assert report == [], "\n".join(report)
    assert exact == len(server.requests)
    return notes


# -- The harness itself -----------------------------------------------------------------


def _post(server, path: str, body: dict, stream: bool = False) -> bytes:
    import urllib.request

    data = json.dumps({**body, "stream": stream}).encode()
    request = urllib.request.Request(f"{server.base_url}{path}", data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()


def test_the_fake_server_records_each_body_exactly_and_answers_each_api():
    server = fake_openai.start()
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS}
        first = json.loads(_post(server, "/chat/completions", body))
        call = first["choices"][0]["message"]["tool_calls"][0]
        assert (call["function"]["name"], call["function"]["arguments"]) == ("add", '{"a": 2, "b": 3}')
        streamed = _post(
            server,
            "/chat/completions",
            {
                **body,
                "messages": [
                    *body["messages"],
                    first["choices"][0]["message"],
                    {"role": "tool", "tool_call_id": call["id"], "content": "5"},
                ],
            },
            stream=True,
        ).decode()
        assert streamed.endswith("data: [DONE]\n\n") and '"content": "The a"' in streamed
        answer = json.loads(
            _post(server, "/responses", {"model": "m", "input": "Hi", "instructions": "Be brief."})
        )
        assert answer["output"][0]["content"][0]["text"] == fake_openai.ANSWER
        events = _post(server, "/responses", {"model": "m", "input": "Hi"}, stream=True).decode()
        assert "event: response.completed" in events
    finally:
        server.shutdown()
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2 + ["/v1/responses"] * 2
    assert json.loads(server.requests[0].raw) == {**body, "stream": False}
    assert server.requests[2].api == "responses"
    assert server.requests[0].answer["tool_calls"][0]["function"]["name"] == "add"


def test_the_rule_tells_exact_from_lossy():
    body = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 1,"b": 2}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
        ]
    }
    same = {"messages": conformance.expected(body), "messages_source": "middleware"}
    assert conformance.call_differences(body, same) == ([], [])
    # Arguments re-encoded (key order, spaces) differ as text, not as JSON values.
    reencoded = json.loads(json.dumps(same))
    reencoded["messages"][2]["tool_calls"][0].update(arguments='{"b": 2, "a": 1}', arguments_exact=False)
    assert conformance.call_differences(body, reencoded, exact_arguments=True) == ([], [])
    reencoded["messages"][2]["tool_calls"][0]["arguments_exact"] = True
    assert conformance.call_differences(body, reencoded, exact_arguments=True)[0]
    # The old lossy shapes all differ: a folded role, two parts as one text, a lost call id.
    lossy = json.loads(json.dumps(same))
    lossy["messages"][0]["role"] = "system"
    lossy["messages"][1].update(parts=[], content="Hi\nthere")
    lossy["messages"][3]["tool_call_id"] = ""
    found, notes = conformance.call_differences(body, lossy)
    assert len(found) == 3 and notes == []
    # From an instrumentation, a mapped role is a note, not a difference.
    lossy["messages_source"] = "openinference"
    found, notes = conformance.call_differences(body, lossy)
    assert len(found) == 2 and notes == ["messages[0]: role 'developer' stored as 'system'"]


def test_responses_requests_are_normalised_one_documented_way():
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "What is 2+3?"},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "add",
                "arguments": '{"a":2,"b":3}',
                "id": "fc_1",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "5"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "5", "annotations": []}],
            },
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],
    }
    found = [m.to_dict() for m in wire.responses_messages(body)]
    assert [(m["role"], m["content"], m["tool_call_id"]) for m in found] == [
        ("system", "Be brief.", ""),
        ("user", "What is 2+3?", ""),
        ("assistant", "", ""),
        ("tool", "5", "c1"),
        ("assistant", "5", ""),
        ("", "", ""),
    ]
    assert found[2]["tool_calls"][0] | {"extra": None} == {
        "name": "add",
        "arguments": '{"a":2,"b":3}',
        "id": "c1",
        "type": "function",
        "arguments_exact": True,
        "extra": None,
    }
    assert found[2]["content_null"] and found[4]["parts"][0]["wire_type"] == "output_text"
    assert found[5]["parts"] == [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]


# -- Our own middleware ------------------------------------------------------------------


def test_our_middleware_stores_every_call_exactly(live_server, token, tmp_path, alice_client):
    import openai

    from history_app.agent_history import AgentHistoryMiddleware, HttpSink

    from .conftest import TOKEN

    server = fake_openai.start()
    sink = HttpSink(
        f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path / "spool"
    )
    middleware = AgentHistoryMiddleware(folder=str(tmp_path / "files"), sinks=[sink])
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test")
    try:
        middleware.on_agent_start("What is 2+3?")
        messages = [
            {"role": "developer", "content": "You add."},
            {"role": "user", "content": "Earlier: 1+1?", "name": "ann"},
            {"role": "assistant", "content": "2"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": " 2+3?"}],
            },
        ]
        for stream in (False, True):
            middleware.on_iteration_start(1 if not stream else 3)
            middleware.on_llm_start(list(messages))
            first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            middleware.on_llm_end(None, raw=first)
            asked = first.choices[0].message
            call = asked.tool_calls[0]
            middleware.on_tool_start("add", json.loads(call.function.arguments))
            middleware.on_tool_end("add", "5")
            messages += [
                asked.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "5"},
            ]
            middleware.on_iteration_start(2 if not stream else 4)
            middleware.on_llm_start(list(messages))
            second = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            middleware.on_llm_end(second.choices[0].message.content, raw=second)
            messages += [{"role": "user", "content": "And again?"}]
        middleware.on_agent_end("The answer is 5.")
        assert middleware.flush(30) and sink.flush(30)
        sink.close()
    finally:
        server.shutdown()
    assert_conforms(server, exact_arguments=True, expected=4)
    run = models.Run.objects.get()
    page = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/2/").content.decode()
    assert '<strong class="role">developer</strong>' in page and "name <code>ann</code>" in page
    assert "asks for tool <strong>add</strong>" in page and "{&quot;a&quot;: 2, &quot;b&quot;: 3}" in page
    first_page = alice_client.get(f"/p/default/runs/{run.run_id}/model-calls/1/").content.decode()
    answer = first_page[first_page.index('id="answer"') :]
    assert "asks for tool <strong>add</strong>" in answer and "<code>call_1_0</code>" in answer
    # The replayed turns are history, the last user message of the first call the input.
    first = alice_client.get(f"/api/v1/runs/{run.run_id}/model-calls/1").json()["model_call"]
    assert [m["part"] for m in first["messages"]] == ["instructions", "history", "history", "input"]
    data = alice_client.get(f"/api/v1/runs/{run.run_id}/model-calls/2").json()["model_call"]
    assert [m["part"] for m in data["messages"]] == [
        "instructions",
        "history",
        "history",
        "input",
        "run",
        "run",
    ]
    assert data["api"] == "chat.completions" and data["roles_as_reported_by"] is None
    assert {row["part"] for row in data["composition"]} >= {"instructions", "input", "run"}
    assert sum(row["chars"] for row in data["composition"]) > 0


# -- OpenTelemetry instrumentations --------------------------------------------------------


def _run_instrumented(live_server, token, instrumentor, body) -> fake_openai.FakeServer:
    server = fake_openai.start()
    tracer_provider = provider(live_server, token, "protobuf")
    if instrumentor is not None:
        instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        # In a copy of the context: a framework that leaves a span attached must not
        # parent the spans of the tests after it.
        contextvars.copy_context().run(body, server, tracer_provider)
        assert tracer_provider.force_flush(30_000)
        tracer_provider.shutdown()
    finally:
        if instrumentor is not None:
            instrumentor.uninstrument()
        server.shutdown()
    return server


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat.completions", "responses"])
def test_openinference_openai_client_calls_are_stored_exactly(live_server, token, api, stream):
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor

    def body(server, tracer_provider):
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test")
        if api == "chat.completions":
            messages = [
                {"role": "developer", "content": "You add."},
                {"role": "user", "content": "What is 2+3?"},
            ]
            first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            asked = first.choices[0].message
            messages += [
                asked.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": asked.tool_calls[0].id, "content": "5"},
            ]
            answer = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=TOOLS, stream=stream
            )
            if stream:
                list(answer)
        else:
            tools = [{"type": "function", **TOOLS[0]["function"]}]
            first = client.responses.create(
                model="gpt-4o-mini", instructions="You add.", input="What is 2+3?", tools=tools
            )
            call = first.output[0]
            items = [
                {"role": "user", "content": "What is 2+3?"},
                call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "5"},
            ]
            answer = client.responses.create(
                model="gpt-4o-mini", instructions="You add.", input=items, tools=tools, stream=stream
            )
            if stream:
                list(answer)

    server = _run_instrumented(live_server, token, OpenAIInstrumentor(), body)
    assert_conforms(server, exact_arguments=True, expected=2)
    assert {c["api"] for c in stored_calls()} == {api}


def test_pydantic_ai_calls_are_stored_exactly(live_server, token):
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def body(server, tracer_provider):
        model = OpenAIChatModel(
            "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
        )
        agent = Agent(model, name="adder", instructions="You add numbers.")
        agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)

        @agent.tool_plain
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        first = agent.run_sync("What is 2+3?")
        agent.run_sync("And 4+4?", message_history=first.all_messages())

    server = _run_instrumented(live_server, token, None, body)
    # Pydantic AI reports tool-call arguments as JSON values (the GenAI conventions).
    assert_conforms(server, exact_arguments=False, expected=4)


# -- Agent frameworks (the ``conformance`` extra) ----------------------------------------


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def test_agno_through_openinference_is_stored_exactly(live_server, token):
    framework("agno")
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.models.openai import OpenAIChat
    from openinference.instrumentation.agno import AgnoInstrumentor

    def body(server, tracer_provider):
        agent = Agent(
            name="adder",
            model=OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test"),
            tools=[add],
            instructions="You add numbers.",
            db=InMemoryDb(),
            add_history_to_context=True,
        )
        agent.run("What is 2+3?", session_id="agno-1")
        agent.run("And 4+4?", session_id="agno-1")

    server = _run_instrumented(live_server, token, AgnoInstrumentor(), body)
    notes = assert_conforms(server, exact_arguments=True, expected=4)
    # agno sends its system message as "developer" to OpenAI and reports it as "system":
    # stored as reported, and the page says whose roles they are.
    assert notes and all(note.endswith("role 'developer' stored as 'system'") for note in notes)


def _delegate(task: str) -> fake_openai.Answer:
    arguments = json.dumps({"member_id": "researcher", "task": task})
    return fake_openai.Answer(tool_calls=[("delegate_task_to_member", arguments)])


def test_an_agno_team_over_otlp_keeps_every_block_on_the_wire_as_a_context(live_server, token, alice_client):
    framework("agno")
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.models.openai import OpenAIChat
    from agno.team import Team
    from openinference.instrumentation.agno import AgnoInstrumentor

    from history_app.agent_history import blocks

    answer = fake_openai.Answer
    # Leader, member, leader, member (given the interactions so far), leader; then a
    # second run whose member is given the team's history.
    script = [
        _delegate("Find key facts"),
        answer("Facts found"),
        _delegate("Check the facts"),
        answer("Checked"),
    ]
    script += [
        answer("Lyon is big."),
        _delegate("Facts about Paris"),
        answer("Paris facts"),
        answer("Paris is big."),
    ]
    server = fake_openai.start(script)
    tracer_provider = provider(live_server, token, "protobuf")
    instrumentor = AgnoInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:

        def model():
            return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

        member = Agent(name="Researcher", id="researcher", model=model(), instructions="You find facts.")
        team = Team(
            name="desk",
            model=model(),
            members=[member],
            db=InMemoryDb(),
            add_history_to_context=True,
            share_member_interactions=True,
            add_team_history_to_members=True,
        )
        for question in ("Find facts about Lyon.", "And Paris?"):
            contextvars.copy_context().run(team.run, question, session_id="agno-2")
        assert tracer_provider.force_flush(30_000)
        tracer_provider.shutdown()
    finally:
        instrumentor.uninstrument()
        server.shutdown()
    assert_conforms(server, exact_arguments=True, expected=8)
    # Every block on the wire, found by the block finder in the recorded bodies, is a
    # context of the run whose call sent it, byte-exact, linked from its message.
    sent = set()
    for request in server.requests:
        for message in request.body["messages"]:
            text = message.get("content") or ""
            sent.update((b.kind, b.text) for b in blocks.locate_member_blocks(text))
    assert {kind for kind, _ in sent} == {"member_interactions", "team_history"}
    stored = set(models.InjectedContext.objects.values_list("kind", "text"))
    assert sent <= stored
    context = models.InjectedContext.objects.get(kind="member_interactions")
    assert context.settings["found_in"]["offset"] == 0 and context.target == "user"
    call = models.ModelCall.objects.get(run=context.run, position=context.settings["found_in"]["call"])
    message = call.messages[context.settings["found_in"]["message"]]
    assert message["context"] == context.position and message["content"].startswith(context.text)
    page = alice_client.get(
        f"/p/default/runs/{context.run.run_id}/model-calls/{call.number}/"
    ).content.decode()
    assert f"/context/{context.position + 1}/" in page and "carries an injected context" in page


@pytest.mark.parametrize("api", ["chat.completions", "responses"])
def test_openai_agents_sdk_is_stored_exactly(live_server, token, api):
    agents = framework("agents")
    import openai
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # No trace goes to OpenAI's own exporter: only OpenInference's processor (added by
    # ``instrument``, so after this).
    agents.set_trace_processors([])

    def body(server, tracer_provider):
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        if api == "responses":
            model = agents.OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
        else:
            model = agents.OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
        agent = agents.Agent(
            name="adder", instructions="You add numbers.", model=model, tools=[agents.function_tool(add)]
        )
        first = agents.Runner.run_sync(agent, "What is 2+3?")
        agents.Runner.run_sync(agent, [*first.to_input_list(), {"role": "user", "content": "And 4+4?"}])

    server = _run_instrumented(live_server, token, OpenAIAgentsInstrumentor(), body)
    assert_conforms(server, exact_arguments=True, expected=4)


def test_langgraph_through_openinference_is_stored_exactly(live_server, token):
    framework("langgraph")
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent
    from openinference.instrumentation.langchain import LangChainInstrumentor

    def body(server, tracer_provider):
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        graph = create_react_agent(model, [tool(add)], prompt="You add numbers.")
        state = graph.invoke({"messages": [HumanMessage("What is 2+3?")]})
        graph.invoke({"messages": [*state["messages"], HumanMessage("And 4+4?")]})

    server = _run_instrumented(live_server, token, LangChainInstrumentor(), body)
    assert_conforms(server, exact_arguments=True, expected=4)


def test_smolagents_through_openinference_is_stored_exactly(live_server, token):
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    def body(server, tracer_provider):
        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
        agent = ToolCallingAgent(tools=[tool(add)], model=model, max_steps=4)
        agent.run("What is 2+3?")
        agent.run("And 4+4?", reset=False)

    # smolagents' own spans report its memory before the model merges consecutive
    # messages of one role: the OpenAI client's instrumentation beside it reports the
    # request as sent, and the wrapping span is not counted twice.
    server = fake_openai_final_answer(
        live_server, token, [SmolagentsInstrumentor(), OpenAIInstrumentor()], body
    )
    assert_conforms(server, exact_arguments=True, expected=4)
    assert models.ModelCall.objects.count() == 4


def drive(live_server, token, instrumentors, body, script=None) -> fake_openai.FakeServer:
    """Run ``body(server)`` with the instrumentations sending to the live server, in a copy
    of the context: a framework that leaves a span attached must not parent the spans of
    the tests after it."""
    server = fake_openai.start(script)
    tracer_provider = provider(live_server, token, "protobuf")
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        contextvars.copy_context().run(body, server, tracer_provider)
        assert tracer_provider.force_flush(30_000)
        tracer_provider.shutdown()
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        server.shutdown()
    return server


def fake_openai_final_answer(live_server, token, instrumentors, body):
    """smolagents ends a run only through its ``final_answer`` tool: the script asks for
    ``add`` then for ``final_answer``, twice."""
    answers = [
        fake_openai.Answer(tool_calls=[("add", '{"a": 2, "b": 3}')]),
        fake_openai.Answer(tool_calls=[("final_answer", '{"answer": "5"}')]),
        fake_openai.Answer(tool_calls=[("add", '{"a": 4, "b": 4}')]),
        fake_openai.Answer(tool_calls=[("final_answer", '{"answer": "8"}')]),
    ]
    return drive(live_server, token, instrumentors, body, answers)


# -- The native format ----------------------------------------------------------------------


def api_run(client, run_id: str) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}")
    return json.loads(b"".join(response.streaming_content))["run"]


def test_the_native_format_keeps_every_new_field_and_reads_old_payloads(ingest, alice_client):
    from .conftest import native

    message = {
        "role": "assistant",
        "content": "",
        "content_null": True,
        "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a":2, "b":3}'}],
        "extra": {"refusal": None},
    }
    call = {
        "model": "gpt-4o-mini",
        "api": "responses",
        "messages_source": "native",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": "Hi there",
                "parts": [
                    {"type": "text", "text": "Hi"},
                    {"type": "input_image", "image_url": "https://x/y.png"},
                ],
            },
            message,
            {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"},
        ],
        "answer": {"role": "assistant", "content": "5", "tool_calls": []},
        "output": "5",
    }
    old = {"model": "m", "messages": [{"role": "user", "content": "old shape"}], "output": "ok"}
    assert ingest([native("n-1", model_calls=[call]), native("n-2", model_calls=[old])]).status_code == 200
    data = api_run(alice_client, "n-1")["model_calls"][0]
    assert data["api"] == "responses" and data["answer"]["content"] == "5"
    assert data["messages"][2]["tool_calls"][0]["arguments"] == '{"a":2, "b":3}'
    assert data["messages"][1]["parts"][1] == {"type": "input_image", "image_url": "https://x/y.png"}
    assert [m["role"] for m in data["messages"]] == ["developer", "user", "assistant", "tool"]
    assert data["messages"][3]["tool_call_id"] == "c1" and data["messages"][2]["extra"] == {"refusal": None}
    page = alice_client.get("/p/default/runs/n-1/model-calls/1/").content.decode()
    assert "input_image part" in page and 'answers tool call <a href="#request-2-c1">' in page
    old_data = api_run(alice_client, "n-2")["model_calls"][0]
    assert old_data["messages"][0]["content"] == "old shape" and old_data["answer"] is None
    assert "old shape" in alice_client.get("/p/default/runs/n-2/model-calls/1/").content.decode()


def test_a_bad_tool_call_request_is_refused_with_its_path(ingest):
    from .conftest import native

    call = {"messages": [{"role": "assistant", "tool_calls": ["add"]}]}
    response = ingest([native("n-3", model_calls=[call])])
    assert response.status_code == 400
    assert "$.model_calls[0].messages[0].tool_calls[0]" in response.content.decode()
