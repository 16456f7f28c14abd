"""The runs a framework's user recognises (issue #33): real frameworks, through their
OpenInference instrumentation (Pydantic AI through its own), call the recording fake
OpenAI server and send their spans over OTLP to a live test server; each test asserts the
runs, sessions, session titles, inputs, outputs, iterations (numbered from 1) and where
the tool calls sit, as the pages and the API show them.

What each framework's runs look like is documented in the OTLP help page
(``history_app/docs/opentelemetry.md``, "What each framework's runs look like")."""

from __future__ import annotations

import json

import pytest

from history_app import models

from . import fake_openai
from .test_conformance import drive, framework

pytestmark = pytest.mark.django_db(transaction=True)

A = fake_openai.Answer


def weather(city: str) -> str:
    """Get the weather in a city.

    Args:
        city: The city.
    """
    return f"Sunny in {city}"


def top_runs() -> list[models.Run]:
    return list(models.Run.objects.filter(parent_run_id__isnull=True).order_by("started_at", "id"))


def steps(run: models.Run) -> list[tuple[int, str, int, list[str]]]:
    """(index, name, model calls, tool calls) of each iteration of ``run``, in order."""
    return [
        (it.index, it.name, it.model_calls.count(), [c.tool for c in it.tool_calls.all()])
        for it in run.iterations.order_by("position")
    ]


def session_list(client) -> str:
    return client.get("/p/default/").content.decode()


def run_openai_agents_handoff(live_server, token) -> fake_openai.FakeServer:
    """Two Runner runs of a triage agent that hands weather questions off to an agent
    with the weather tool, in the session "weather-chat"."""
    agents = framework("agents")
    import openai
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_trace_processors([])  # nothing to OpenAI's own exporter
    script = []
    for city in ("Paris", "Lyon"):
        script += [
            A(tool_calls=[("transfer_to_weather_agent", "{}")]),
            A(tool_calls=[("weather", json.dumps({"city": city}))]),
            A(f"Sunny in {city}."),
        ]

    def body(server, tracer_provider):
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        model = agents.OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
        weather_agent = agents.Agent(
            name="weather_agent",
            instructions="You tell the weather.",
            model=model,
            tools=[agents.function_tool(weather)],
        )
        triage = agents.Agent(
            name="triage", instructions="Hand weather questions off.", model=model, handoffs=[weather_agent]
        )
        # What groups a conversation's runs into one session: OpenInference's session.
        with using_session("weather-chat"):
            first = agents.Runner.run_sync(triage, "Weather in Paris?")
            agents.Runner.run_sync(
                triage, [*first.to_input_list(), {"role": "user", "content": "And in Lyon?"}]
            )

    return drive(live_server, token, [OpenAIAgentsInstrumentor()], body, script)


def test_openai_agents_sdk_one_run_per_runner_run_with_its_handoff(live_server, token, alice_client):
    server = run_openai_agents_handoff(live_server, token)
    assert len(server.requests) == 6
    runs = top_runs()
    assert [(r.kind, r.agent_name, r.input, r.output) for r in runs] == [
        ("team", "triage", "Weather in Paris?", "Sunny in Paris."),
        ("team", "triage", "And in Lyon?", "Sunny in Lyon."),
    ]
    assert models.Run.objects.count() == 6
    assert {r.session.session_id for r in models.Run.objects.all()} == {"weather-chat"}
    # Named after the framework the user wrote it with, not the instrumentation's family.
    assert set(models.Run.objects.values_list("framework", flat=True)) == {"openai-agents"}
    first = runs[0]
    handoffs = list(first.member_interactions.values_list("member", "task", "response"))
    assert handoffs == [
        ("triage", "Weather in Paris?", "handoff to weather_agent"),
        ("weather_agent", "Weather in Paris?", "Sunny in Paris."),
    ]
    members = {r.agent_name: r for r in models.Run.objects.filter(kind="member", parent_run_id=first.run_id)}
    assert steps(members["triage"]) == [(1, "", 1, ["handoff to weather_agent"])]
    assert steps(members["weather_agent"]) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    call = members["weather_agent"].tool_calls.get()
    assert (call.params, call.result) == ({"city": "Paris"}, "Sunny in Paris")
    page = session_list(alice_client)
    assert "Weather in Paris?" in page and "Agent workflow" not in page


def test_openai_agents_sdk_runs_in_one_trace_are_one_session_of_one_run_each(
    live_server, token, alice_client
):
    agents = framework("agents")
    import openai
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_trace_processors([])

    def body(server, tracer_provider):
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        model = agents.OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
        helper = agents.Agent(name="helper", instructions="Help.", model=model)
        # The SDK's own grouping: one trace around the conversation's runs.
        with agents.trace("Conversation", group_id="chat-7"):
            first = agents.Runner.run_sync(helper, "Hi")
            agents.Runner.run_sync(helper, [*first.to_input_list(), {"role": "user", "content": "Again"}])

    drive(live_server, token, [OpenAIAgentsInstrumentor()], body, [A("Hello."), A("Hello again.")])
    runs = top_runs()
    assert [(r.kind, r.agent_name, r.input, r.output) for r in runs] == [
        ("team", "helper", "Hi", "Hello."),
        ("team", "helper", "Again", "Hello again."),
    ]
    assert len({r.session_id for r in models.Run.objects.all()}) == 1
    assert models.Run.objects.filter(kind="member").count() == 2
    assert "Hi" in session_list(alice_client)


def run_langgraph_thread(live_server, token, builder: str, script=None) -> fake_openai.FakeServer:
    """Three questions in the thread "thread-1" of a graph with the weather tool, built by
    LangGraph's create_react_agent or LangChain 1's create_agent (the fake server's
    answers: ``script``, or its default)."""
    framework("langgraph")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from openinference.instrumentation.langchain import LangChainInstrumentor

    def body(server, tracer_provider):
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        if builder == "create_react_agent":
            from langgraph.prebuilt import create_react_agent

            graph = create_react_agent(
                model, [tool(weather)], prompt="You tell the weather.", checkpointer=InMemorySaver()
            )
        else:
            from langchain.agents import create_agent

            graph = create_agent(
                model, [tool(weather)], system_prompt="You tell the weather.", checkpointer=InMemorySaver()
            )
        config = {"configurable": {"thread_id": "thread-1"}}
        for n in (1, 2, 3):
            graph.invoke({"messages": [("user", f"Weather in Paris? (question {n})")]}, config)

    return drive(live_server, token, [LangChainInstrumentor()], body, script)


@pytest.mark.parametrize("builder", ["create_react_agent", "create_agent"])
def test_langgraph_one_run_per_invocation_with_its_nodes_as_steps(live_server, token, alice_client, builder):
    # LangGraph's prebuilt ReAct agent (its model node is "agent", which the
    # instrumentation reports as an agent span) and LangChain 1's create_agent ("model").
    node = "agent" if builder == "create_react_agent" else "model"
    server = run_langgraph_thread(live_server, token, builder)
    assert len(server.requests) == 6
    assert models.Run.objects.count() == 3  # no member run for the "agent" node
    runs = top_runs()
    assert [(r.kind, r.input, r.output) for r in runs] == [
        ("agent", f"Weather in Paris? (question {n})", fake_openai.ANSWER) for n in (1, 2, 3)
    ]
    assert {r.session.session_id for r in runs} == {"thread-1"}
    assert {r.framework for r in runs} == {"langgraph"}  # LangChain's instrumentation, a graph
    for run in runs:
        # Node executions are the run's steps: the tool call sits with the model call that
        # asked for it, though the graph ran it in its "tools" node.
        assert steps(run) == [(1, node, 1, ["weather"]), (2, node, 1, [])]
        call = run.tool_calls.get()
        asked = run.iterations.get(index=1).model_calls.get().answer["tool_calls"][0]
        assert (call.params, call.result, call.call_id) == ({"city": "Paris"}, "Sunny in Paris", asked["id"])
        # The graph's whole state is one click away: the run's metadata.
        state = json.loads(run.metadata["input.value"])
        assert state == {"messages": [["user", run.input]]}
        assert json.loads(run.metadata["output.value"])["messages"][-1]["data"]["content"] == run.output
    page = session_list(alice_client)
    assert "Weather in Paris? (question 1)" in page and "{&quot;messages&quot;" not in page
    run_page = alice_client.get(f"/p/default/runs/{runs[0].run_id}/").content.decode()
    # One click away on the run page: the whole state values the graph was given and gave.
    assert "The whole input value the framework sent" in run_page
    assert "The whole output value the framework sent" in run_page
    assert (
        "{&quot;messages&quot;: [[&quot;user&quot;, &quot;Weather in Paris? (question 1)&quot;]]}" in run_page
    )
    assert f">Iteration 1</a> · {node}" in run_page and ">Iteration 0<" not in run_page
    # A link saved when OTLP runs were numbered from 0 still lands on the first iteration.
    alias = run_page.index('id="iteration-0"')
    assert run_page.index('id="iteration-1"') > alias and run_page.count('class="card iteration"') == 2


def run_smolagents_task(live_server, token) -> fake_openai.FakeServer:
    """A ToolCallingAgent with the weather tool, asked one question, ending through its
    final_answer tool."""
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    def body(server, tracer_provider):
        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
        agent = ToolCallingAgent(tools=[tool(weather)], model=model, max_steps=4, name="weather_agent")
        agent.run("Weather in Paris?")

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Paris."}')]),
    ]
    return drive(live_server, token, [SmolagentsInstrumentor(), OpenAIInstrumentor()], body, script)


def test_smolagents_run_is_the_task_with_the_tools_arguments(live_server, token):
    run_smolagents_task(live_server, token)
    (run,) = models.Run.objects.all()
    assert (run.agent_name, run.input, run.output, run.framework) == (
        "weather_agent",
        "Weather in Paris?",
        "Sunny in Paris.",
        "smolagents",  # the framework's instrumentation, though the OpenAI client's spans are there too
    )
    assert json.loads(run.metadata["input.value"])["task"] == "Weather in Paris?"
    assert steps(run) == [(1, "", 1, ["weather"]), (2, "", 1, ["final_answer"])]
    params = [c.params for c in run.tool_calls.order_by("iteration__position")]
    assert params == [{"city": "Paris"}, {"answer": "Sunny in Paris."}]


def run_pydantic_ai_conversation(live_server, token, script=None) -> fake_openai.FakeServer:
    """Two runs of an agent with the weather tool, the second continuing the first's messages
    (the fake server's answers: ``script``, or its default)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def body(server, tracer_provider):
        model = OpenAIChatModel(
            "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
        )
        agent = Agent(model, name="weather", instructions="You tell the weather.")
        agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)
        agent.tool_plain(weather)
        first = agent.run_sync("Weather in Paris?")
        agent.run_sync("And in Lyon?", message_history=first.all_messages())

    return drive(live_server, token, [], body, script)


def test_pydantic_ai_runs_are_the_users_text(live_server, token, alice_client):
    run_pydantic_ai_conversation(live_server, token)
    runs = top_runs()
    assert [(r.agent_name, r.input, r.output) for r in runs] == [
        ("weather", "Weather in Paris?", fake_openai.ANSWER),
        ("weather", "And in Lyon?", fake_openai.ANSWER),
    ]
    # Pydantic AI names the conversation (gen_ai.conversation.id): one session.
    assert len({r.session_id for r in runs}) == 1
    for run in runs:
        assert steps(run) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    assert "Weather in Paris?" in session_list(alice_client)


def run_agno_team_and_workflow(live_server, token) -> fake_openai.FakeServer:
    """A team that delegates to a member with the weather tool (session "team-s"), then a
    one-step workflow (session "flow-s"), in one trace."""
    framework("agno")
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.models.openai import OpenAIChat
    from agno.team import Team
    from agno.workflow import Step, Workflow
    from openinference.instrumentation.agno import AgnoInstrumentor

    script = [
        A(tool_calls=[("delegate_task_to_member", json.dumps({"member_id": "researcher", "task": "Paris"}))]),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A("Sunny in Paris."),
        A("It is sunny in Paris."),
        A("Lyon is lovely."),
    ]

    def body(server, tracer_provider):
        def model():
            return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

        member = Agent(
            name="Researcher", id="researcher", model=model(), instructions="You find facts.", tools=[weather]
        )
        team = Team(name="desk", model=model(), members=[member], db=InMemoryDb())
        team.run("Weather in Paris?", session_id="team-s")
        writer = Agent(name="Writer", model=model(), instructions="You write.")
        flow = Workflow(name="report", steps=[Step(name="write", agent=writer)], db=InMemoryDb())
        flow.run("Write about Lyon", session_id="flow-s")

    return drive(live_server, token, [AgnoInstrumentor()], body, script)


def test_agno_sessions_follow_each_span_inside_one_trace(live_server, token, alice_client):
    run_agno_team_and_workflow(live_server, token)
    by_session = {
        s.session_id: list(s.runs.order_by("started_at").values_list("kind", "agent_name", "input", "output"))
        for s in models.Session.objects.all()
    }
    assert by_session == {
        "team-s": [
            ("team", "desk", "Weather in Paris?", "It is sunny in Paris."),
            ("member", "Researcher", "Paris", "Sunny in Paris."),
        ],
        "flow-s": [
            ("workflow", "report", "Write about Lyon", "Lyon is lovely."),
            ("member", "Writer", "Write about Lyon", "Lyon is lovely."),
        ],
    }
    assert set(models.Run.objects.values_list("framework", flat=True)) == {"agno"}
    researcher = models.Run.objects.get(agent_name="Researcher")
    assert steps(researcher) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    team = models.Run.objects.get(agent_name="desk")
    assert steps(team) == [(1, "", 1, ["delegate_task_to_member"]), (2, "", 1, [])]
    # The trace's kept spans go with the session of its root (the team's).
    assert set(models.SpanBatch.objects.values_list("session__session_id", flat=True)) == {"team-s"}
    page = session_list(alice_client)
    assert "Weather in Paris?" in page and "Write about Lyon" in page


# -- The rules, on hand-made spans (whatever the framework) -------------------------------


def _assembled(*items):
    from history_app.agent_history import otlp

    from .otlp_spans import request

    spans, errors, _ = otlp.read_request(request(*items))
    assert errors == []
    return otlp.assemble(spans)


def _node(trace, span_id, parent, name, namespace, *, kind="CHAIN", start_ms=0, end_ms=10, **extra):
    from .otlp_spans import span

    metadata = {"langgraph_node": name, "langgraph_checkpoint_ns": namespace}
    attributes = {"openinference.span.kind": kind, "metadata": json.dumps(metadata), **extra}
    return span(trace, span_id, parent, name, attributes, start_ms=start_ms, end_ms=end_ms)


def _llm(trace, span_id, parent, text, *, start_ms, node="", namespace=""):
    from .otlp_spans import span

    attributes = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": text,
    }
    if node:
        attributes["metadata"] = json.dumps({"langgraph_node": node, "langgraph_checkpoint_ns": namespace})
    return span(trace, span_id, parent, "ChatOpenAI", attributes, start_ms=start_ms, end_ms=start_ms + 1)


def test_a_graph_node_is_a_step_a_subgraph_a_member_run_and_a_plain_node_a_step_of_its_own():
    from .otlp_spans import span

    trace = "ab" * 16
    state = json.dumps({"messages": [{"role": "user", "content": "Plan a trip"}]})
    answer = json.dumps({"messages": [{"type": "ai", "data": {"content": "Go to Lyon."}}]})
    runs = _assembled(
        span(
            trace,
            "0000000000000001",
            name="LangGraph",
            attributes={"openinference.span.kind": "CHAIN", "input.value": state, "output.value": answer},
            end_ms=100,
        ),
        # An AGENT node (any name with "agent" in it) is a step, not a member run.
        _node(
            trace, "0000000000000002", "0000000000000001", "planner_agent", "planner_agent:1", kind="AGENT"
        ),
        _llm(trace, "0000000000000003", "0000000000000002", "Lyon", start_ms=1, node="planner_agent"),
        # A node that calls no model and no tool is a step of its own.
        _node(trace, "0000000000000004", "0000000000000001", "fetch", "fetch:2", start_ms=20, end_ms=30),
        # A node running a graph of its own (a deeper checkpoint namespace) is a member run,
        # and a step of the graph's run linked to it.
        _node(
            trace, "0000000000000005", "0000000000000001", "research", "research:3", start_ms=40, end_ms=90
        ),
        _node(
            trace,
            "0000000000000006",
            "0000000000000005",
            "agent",
            "research:3|agent:4",
            start_ms=41,
            end_ms=60,
        ),
        _llm(trace, "0000000000000007", "0000000000000006", "Found", start_ms=42, node="agent"),
    )
    top, member = runs
    assert (top.kind, top.input, top.output) == ("workflow", "Plan a trip", "Go to Lyon.")
    assert [(it.index, it.name, len(it.model_calls)) for it in top.iterations] == [
        (1, "planner_agent", 1),
        (2, "fetch", 0),
        (3, "research", 0),
    ]
    assert (member.kind, member.agent_name, member.parent_run_id) == ("member", "research", top.run_id)
    assert top.iterations[2].metadata["member_run_id"] == member.run_id
    assert top.iterations[2].thought == "Found"
    assert [(it.index, it.name) for it in member.iterations] == [(1, "agent")]


def test_a_span_naming_another_session_starts_a_run_of_that_session_inside_the_trace():
    from .otlp_spans import span

    trace = "cd" * 16
    agent = {"openinference.span.kind": "AGENT"}
    runs = _assembled(
        span(trace, "0000000000000001", name="desk", attributes={**agent, "session.id": "a"}, end_ms=100),
        span(trace, "0000000000000002", "0000000000000001", "flow", {"session.id": "b"}, start_ms=10),
        span(trace, "0000000000000003", "0000000000000002", "w", {**agent, "session.id": "b"}, start_ms=11),
        span(trace, "0000000000000004", "0000000000000001", "m", {**agent, "session.id": "a"}, start_ms=50),
    )
    assert [
        (r.run_id[-4:], r.kind, r.session_id, r.parent_run_id and r.parent_run_id[-4:]) for r in runs
    ] == [
        (trace[-4:], "team", "a", None),
        ("0002", "workflow", "b", None),
        ("0003", "member", "b", "0002"),
        ("0004", "member", "a", trace[-4:]),
    ]


def test_a_tool_call_sits_with_the_model_call_that_asked_for_it_by_its_id():
    from .otlp_spans import span

    trace = "ef" * 16
    asked = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_a",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "weather",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
    }
    tool = {"openinference.span.kind": "TOOL", "tool.name": "weather", "tool_call.id": "call_a"}
    runs = _assembled(
        span(
            trace, "0000000000000001", name="run", attributes={"openinference.span.kind": "AGENT"}, end_ms=100
        ),
        span(trace, "0000000000000002", "0000000000000001", "llm", asked, start_ms=1, end_ms=2),
        _llm(trace, "0000000000000003", "0000000000000001", "thinking more", start_ms=3),
        # Run after a later model call: still the first model call's.
        span(
            trace,
            "0000000000000004",
            "0000000000000001",
            "weather",
            {**tool, "input.value": "Paris"},
            start_ms=5,
        ),
    )
    (run,) = runs
    assert [(it.index, [t.tool for t in it.tool_calls]) for it in run.iterations] == [
        (1, ["weather"]),
        (2, []),
    ]
    # The arguments the model asked for, where the tool span kept only a text.
    assert run.iterations[0].tool_calls[0].params == {"city": "Paris"}


def test_the_migration_numbers_stored_otlp_iterations_from_one(ingest, alice_client):
    import importlib

    from django.apps import apps

    from .conftest import native

    migration = importlib.import_module("history_app.migrations.0025_otlp_iterations_from_one")
    iterations = [{"index": 0, "thought": "first"}, {"index": 1, "thought": "second"}]
    assert (
        ingest(
            [native("old-otlp", iterations=iterations), native("native", iterations=iterations)]
        ).status_code
        == 200
    )
    models.Run.objects.filter(run_id="old-otlp").update(source_format="otlp")
    old = models.Run.objects.get(run_id="old-otlp")
    models.Annotation.objects.create(
        project_id=old.project_id, run=old, kind="comment", text="see this", author="alice", iteration_index=1
    )
    migration.renumber(apps, None)
    assert list(old.iterations.order_by("position").values_list("index", flat=True)) == [1, 2]
    assert models.Annotation.objects.get().iteration_index == 2
    native_run = models.Run.objects.get(run_id="native")
    assert list(native_run.iterations.order_by("position").values_list("index", flat=True)) == [0, 1]
    migration.renumber(apps, None)  # a second pass changes nothing
    assert list(old.iterations.order_by("position").values_list("index", flat=True)) == [1, 2]
    page = alice_client.get("/p/default/runs/old-otlp/").content.decode()
    assert page.index('id="iteration-0"') < page.index('id="iteration-1"') < page.index('id="iteration-2"')


def test_reassemble_traces_rewrites_stored_runs_and_deletes_those_the_mapping_no_longer_makes(
    client, auth_headers, ingest, monkeypatch
):
    from django.core.management import call_command

    from .conftest import native
    from .otlp_spans import request, span
    from .test_otlp import post

    trace = "12" * 16
    state = json.dumps({"messages": [["user", "Plan a trip"]]})
    items = [
        span(
            trace,
            "0000000000000001",
            name="LangGraph",
            attributes={"openinference.span.kind": "CHAIN", "input.value": state, "session.id": "t-1"},
            end_ms=100,
        ),
        _node(trace, "0000000000000002", "0000000000000001", "agent", "agent:1", kind="AGENT"),
        _llm(trace, "0000000000000003", "0000000000000002", "Go to Lyon.", start_ms=1, node="agent"),
    ]
    from history_app.agent_history import otlp

    # Stored as an earlier version did: the graph's state as the run's input.
    with monkeypatch.context() as patch:
        patch.setattr(otlp, "_user_text", lambda value, side: None)
        assert post(client, auth_headers, request(*items)).status_code == 200
    assert models.Run.objects.get(run_id=trace).input == state
    # What an earlier version made of the trace: a member run for the "agent" node, here
    # in a session of its own, which it leaves empty when it goes.
    stale = native(f"{trace}-0000000000000002", session_id="old-s", kind="member", parent_run_id=trace)
    assert ingest([stale]).status_code == 200
    call_command("reassemble_traces")
    (run,) = models.Run.objects.all()
    assert (run.run_id, run.input, run.output, run.session.session_id) == (
        trace,
        "Plan a trip",
        "Go to Lyon.",
        "t-1",
    )
    assert list(models.Session.objects.values_list("session_id", flat=True)) == ["t-1"]
    assert models.Session.objects.get().run_count == 1
    call_command("reassemble_traces")  # again: nothing changes
    assert list(models.Run.objects.values_list("run_id", "input")) == [(trace, "Plan a trip")]


# -- Shapes an outside attack found wrong ------------------------------------------------


def test_agno_a_run_after_a_nested_team_run_is_its_own_and_each_model_call_is_its_innermost_agents(
    live_server, token, alice_client
):
    # agno's instrumentation leaves the last agent span as the context of what follows:
    # the outer team's last model call arrives under the inner team's span, and the next
    # Agent.run under the outer team's. Each ran after that span had ended.
    framework("agno")
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.models.openai import OpenAIChat
    from agno.team import Team
    from openinference.instrumentation.agno import AgnoInstrumentor

    script = [
        A(
            tool_calls=[
                ("delegate_task_to_member", json.dumps({"member_id": "inner", "task": "Paris weather"}))
            ]
        ),
        A(tool_calls=[("delegate_task_to_member", json.dumps({"member_id": "researcher", "task": "Paris"}))]),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A("Sunny in Paris."),
        A("Inner: sunny."),
        A("Outer: sunny in Paris."),
        A("Hello from solo."),
    ]

    def body(server, tracer_provider):
        def model():
            return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

        researcher = Agent(
            name="Researcher", id="researcher", model=model(), instructions="You find facts.", tools=[weather]
        )
        inner = Team(name="inner", id="inner", model=model(), members=[researcher])
        outer = Team(name="outer", id="outer", model=model(), members=[inner], db=InMemoryDb())
        outer.run("Weather in Paris?", session_id="outer-s")
        Agent(name="Solo", model=model()).run("Hi solo", session_id="outer-s")

    server = drive(live_server, token, [AgnoInstrumentor()], body, script)
    assert len(server.requests) == 7
    assert [(r.kind, r.agent_name, r.input, r.output) for r in top_runs()] == [
        ("team", "outer", "Weather in Paris?", "Outer: sunny in Paris."),
        ("agent", "Solo", "Hi solo", "Hello from solo."),
    ]
    assert {r.session.session_id for r in models.Run.objects.all()} == {"outer-s"}
    outer = models.Run.objects.get(agent_name="outer")
    assert list(outer.member_interactions.values_list("member", "task")) == [("inner", "Paris weather")]
    assert steps(outer) == [(1, "", 1, ["delegate_task_to_member"]), (2, "", 1, [])]
    final = outer.iterations.get(index=2).model_calls.get()
    assert final.output == "Outer: sunny in Paris."
    inner = models.Run.objects.get(agent_name="inner")
    assert (inner.kind, inner.parent_run_id) == ("member", outer.run_id)
    assert steps(inner) == [(1, "", 1, ["delegate_task_to_member"]), (2, "", 1, [])]
    assert [c.output for c in models.ModelCall.objects.filter(run=inner).order_by("started_at")] == [
        None,
        "Inner: sunny.",
    ]
    solo = models.Run.objects.get(agent_name="Solo")
    assert (solo.parent_run_id, solo.member_interactions.count()) == (None, 0)
    assert steps(solo) == [(1, "", 1, [])]
    page = alice_client.get(f"/p/default/runs/{outer.run_id}/").content.decode()
    assert "Outer: sunny in Paris." in page and "Hello from solo." not in page


def test_langgraph_resumed_with_a_command_shows_the_resume_value_as_its_input(
    live_server, token, alice_client
):
    framework("langgraph")
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt
    from openinference.instrumentation.langchain import LangChainInstrumentor

    def book(city: str) -> str:
        """Book a trip to a city.

        Args:
            city: The city.
        """
        return f"Booked {city}" if interrupt(f"Book {city}?") == "yes" else "Not booked"

    def body(server, tracer_provider):
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        graph = create_agent(model, [tool(book)], system_prompt="You book.", checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "trip"}}
        graph.invoke({"messages": [("user", "Book Paris")]}, config)
        graph.invoke(Command(resume="yes"), config)

    drive(live_server, token, [LangChainInstrumentor()], body)
    first, resumed = top_runs()
    assert (first.input, resumed.input, resumed.output) == ("Book Paris", "yes", fake_openai.ANSWER)
    # The whole command, one click away.
    assert json.loads(resumed.metadata["input.value"])["resume"] == "yes"
    assert steps(resumed) == [(1, "tools", 0, ["book"]), (2, "model", 1, [])]
    call = resumed.tool_calls.get()
    assert (call.params, call.result) == ({"city": "Paris"}, "Booked Paris")
    assert "{&quot;graph&quot;" not in session_list(alice_client)


def test_smolagents_managed_agent_is_a_member_run_of_the_task_its_manager_gave(
    live_server, token, alice_client
):
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    def body(server, tracer_provider):
        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
        member = ToolCallingAgent(
            tools=[tool(weather)],
            model=model,
            max_steps=4,
            name="weather_agent",
            description="Knows the weather.",
        )
        boss = ToolCallingAgent(tools=[], model=model, max_steps=4, name="boss", managed_agents=[member])
        boss.run("What is the weather in Paris?")

    script = [
        A(tool_calls=[("weather_agent", json.dumps({"task": "Weather in Paris?"}))]),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Paris."}')]),
        A(tool_calls=[("final_answer", '{"answer": "It is sunny in Paris."}')]),
    ]
    drive(live_server, token, [SmolagentsInstrumentor(), OpenAIInstrumentor()], body, script)
    (boss,) = top_runs()
    member = models.Run.objects.get(kind="member")
    assert (boss.agent_name, boss.input, boss.output) == (
        "boss",
        "What is the weather in Paris?",
        "It is sunny in Paris.",
    )
    assert (member.agent_name, member.parent_run_id, member.input, member.output) == (
        "weather_agent",
        boss.run_id,
        "Weather in Paris?",
        "Sunny in Paris.",
    )
    # The prompt smolagents wrapped the task in, one click away.
    prompt = json.loads(member.metadata["input.value"])["task"]
    assert "Weather in Paris?" in prompt and len(prompt) > 300
    assert list(boss.member_interactions.values_list("member", "task", "response", "member_run_id")) == [
        ("weather_agent", "Weather in Paris?", "Sunny in Paris.", member.run_id)
    ]
    # The delegation is the manager's tool call, in the iteration of the model call that
    # made it, and links to the member run.
    assert steps(boss) == [(1, "", 1, ["weather_agent"]), (2, "", 1, ["final_answer"])]
    call = boss.iterations.get(index=1).tool_calls.get()
    asked = boss.iterations.get(index=1).model_calls.get().answer["tool_calls"][0]
    assert (call.params, call.result, call.call_id) == (
        {"task": "Weather in Paris?"},
        "Sunny in Paris.",
        asked["id"],
    )
    page = alice_client.get(f"/p/default/runs/{boss.run_id}/").content.decode()
    assert (
        f'Started the member run of <strong>weather_agent</strong>: <a href="/p/default/runs/{member.run_id}/"'
        in page
    )


def test_langchain_tool_that_raises_keeps_its_arguments_and_its_error(live_server, token):
    framework("langgraph")
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from openinference.instrumentation.langchain import LangChainInstrumentor

    def broken(city: str) -> str:
        """Get the weather in a city.

        Args:
            city: The city.
        """
        raise ValueError(f"no weather for {city}")

    def body(server, tracer_provider):
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        graph = create_agent(model, [tool(broken)], system_prompt="You tell the weather.")
        with pytest.raises(ValueError):
            graph.invoke({"messages": [("user", "Weather in Paris?")]})

    drive(live_server, token, [LangChainInstrumentor()], body)
    (run,) = top_runs()
    assert (run.status, run.input) == ("failed", "Weather in Paris?")
    assert steps(run) == [(1, "model", 1, ["broken"])]
    call = run.tool_calls.get()
    asked = run.iterations.get().model_calls.get().answer["tool_calls"][0]
    assert (call.params, call.call_id, call.result) == ({"city": "Paris"}, asked["id"], None)
    assert call.error.startswith("ValueError('no weather for Paris')")


def test_openai_agents_sdk_handoff_params_are_the_arguments_the_model_sent(live_server, token):
    run_openai_agents_handoff(live_server, token)
    handoffs = models.ToolCall.objects.filter(tool="handoff to weather_agent")
    assert handoffs.count() == 2
    for call in handoffs:
        asked = call.iteration.model_calls.get().answer["tool_calls"][0]
        assert asked["name"] == "transfer_to_weather_agent"
        assert (call.params, call.call_id, call.result) == ({}, asked["id"], "weather_agent")


def test_smolagents_code_agent_final_answer_params_are_named(live_server, token):
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import CodeAgent, OpenAIServerModel, tool

    def body(server, tracer_provider):
        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
        CodeAgent(tools=[tool(weather)], model=model, max_steps=4, name="coder").run("Weather in Paris?")

    code = 'Thought: ask.\n<code>\nr = weather(city="Paris")\nfinal_answer(r)\n</code>'
    drive(live_server, token, [SmolagentsInstrumentor(), OpenAIInstrumentor()], body, [A(code)])
    (run,) = models.Run.objects.all()
    assert (run.agent_name, run.input, run.output) == ("coder", "Weather in Paris?", "Sunny in Paris")
    assert steps(run) == [(1, "", 1, ["weather", "final_answer"])]
    params = [c.params for c in run.tool_calls.order_by("position")]
    assert params == [{"city": "Paris"}, {"answer": "Sunny in Paris"}]


def test_pydantic_ai_structured_output_is_the_final_result_call_of_the_last_iteration(
    live_server, token, alice_client
):
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class Forecast(BaseModel):
        city: str
        sky: str

    def body(server, tracer_provider):
        model = OpenAIChatModel(
            "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
        )
        agent = Agent(model, name="weather", instructions="You tell the weather.", output_type=Forecast)
        agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)
        agent.tool_plain(weather)
        assert agent.run_sync("Weather in Paris?").output == Forecast(city="Paris", sky="sunny")

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_result", '{"city": "Paris", "sky": "sunny"}')]),
    ]
    drive(live_server, token, [], body, script)
    (run,) = top_runs()
    assert json.loads(run.output) == {"city": "Paris", "sky": "sunny"}
    assert steps(run) == [(1, "", 1, ["weather"]), (2, "", 1, ["final_result"])]
    call = run.iterations.get(index=2).tool_calls.get()
    asked = run.iterations.get(index=2).model_calls.get().answer["tool_calls"][0]
    assert (call.params, call.call_id, call.result) == (
        {"city": "Paris", "sky": "sunny"},
        asked["id"],
        "Final result processed.",
    )
    page = alice_client.get(f"/p/default/runs/{run.run_id}/").content.decode()
    assert "final_result" in page


def test_openai_agents_sdk_runner_run_has_its_agents_turns_as_steps(live_server, token, alice_client):
    run_openai_agents_handoff(live_server, token)
    first = top_runs()[0]
    members = {r.agent_name: r for r in models.Run.objects.filter(parent_run_id=first.run_id)}
    assert [
        (it.index, it.name, it.thought, it.metadata["member_run_id"])
        for it in first.iterations.order_by("position")
    ] == [
        (1, "triage", "handoff to weather_agent", members["triage"].run_id),
        (2, "weather_agent", "Sunny in Paris.", members["weather_agent"].run_id),
    ]
    # Each model call counted once: in the member run of the agent that made it.
    assert first.model_calls.count() == 0
    assert models.ModelCall.objects.count() == 6
    page = alice_client.get(f"/p/default/runs/{first.run_id}/").content.decode()
    assert ">Iteration 1</a> · triage" in page and ">Iteration 2</a> · weather_agent" in page
    assert "handoff to weather_agent" in page


def test_reassemble_traces_makes_an_agent_run_stored_as_a_member_a_run_of_its_own(
    client, auth_headers, monkeypatch
):
    from django.core.management import call_command

    from history_app.agent_history import otlp

    from .otlp_spans import request, span
    from .test_otlp import post

    trace = "34" * 16
    agent = {"openinference.span.kind": "AGENT", "session.id": "s-1"}
    items = [
        span(
            trace, "0000000000000001", name="desk.run", attributes={**agent, "input.value": "Hi"}, end_ms=50
        ),
        _llm(trace, "0000000000000002", "0000000000000001", "Hello.", start_ms=1),
        # Sent under the team's span, though it began after that span had ended.
        span(
            trace,
            "0000000000000003",
            "0000000000000001",
            "Solo.run",
            {**agent, "input.value": "Again"},
            start_ms=60,
            end_ms=90,
        ),
        _llm(trace, "0000000000000004", "0000000000000003", "Solo here.", start_ms=61),
    ]
    # Stored as the earlier version did: the later agent run a member of the team run.
    with monkeypatch.context() as patch:
        patch.setattr(otlp._Trace, "_enclosing", lambda self, span: span["parent_span_id"])
        assert post(client, auth_headers, request(*items)).status_code == 200
    solo = models.Run.objects.get(agent_name="Solo")
    assert (solo.kind, solo.parent_run_id) == ("member", trace)
    call_command("reassemble_traces")
    solo = models.Run.objects.get(agent_name="Solo")
    assert (solo.run_id, solo.kind, solo.parent_run_id, solo.input, solo.output) == (
        f"{trace}-0000000000000003",
        "agent",
        None,
        "Again",
        "Solo here.",
    )
    team = models.Run.objects.get(run_id=trace)
    assert (team.kind, team.output, team.member_interactions.count()) == ("agent", "Hello.", 0)
    assert models.Session.objects.get().run_count == 2


def test_smolagents_code_agent_calling_its_managed_agent_in_code_delegates_the_task_it_gave(
    live_server, token, alice_client
):
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

    def body(server, tracer_provider):
        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
        member = ToolCallingAgent(
            tools=[tool(weather)],
            model=model,
            max_steps=4,
            name="weather_agent",
            description="Knows the weather.",
        )
        CodeAgent(tools=[], model=model, max_steps=4, name="boss", managed_agents=[member]).run(
            "What is the weather in Paris?"
        )

    code = 'Thought: ask.\n<code>\nr = weather_agent(task="Weather in Paris?")\nfinal_answer(r)\n</code>'
    script = [
        A(code),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Paris."}')]),
    ]
    drive(live_server, token, [SmolagentsInstrumentor(), OpenAIInstrumentor()], body, script)
    (boss,) = top_runs()
    member = models.Run.objects.get(kind="member")
    assert (member.agent_name, member.parent_run_id, member.input) == (
        "weather_agent",
        boss.run_id,
        "Weather in Paris?",
    )
    assert "Task:\nWeather in Paris?" in json.loads(member.metadata["input.value"])["task"]
    # The call the code made, in the step that ran it, before the final answer.
    assert steps(boss) == [(1, "", 1, ["weather_agent", "final_answer"])]
    call = boss.tool_calls.get(tool="weather_agent")
    assert (call.params, call.result) == ({"task": "Weather in Paris?"}, "Sunny in Paris.")
    page = alice_client.get(f"/p/default/runs/{boss.run_id}/").content.decode()
    assert (
        f'Started the member run of <strong>weather_agent</strong>: <a href="/p/default/runs/{member.run_id}/"'
        in page
    )


def test_a_pydantic_ai_retry_prompt_is_stored_wrapped_as_its_openai_model_sends_it():
    from .otlp_spans import span

    trace = "ef" * 16
    asked = [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "city", "arguments": {}}]}
    ]
    retry = {"type": "tool_call_response", "id": "c1", "name": "city", "result": "Capitalise the city."}
    later = json.dumps(
        [
            {"role": "user", "parts": [{"type": "text", "content": "Hi"}]},
            *asked,
            {"role": "user", "parts": [retry]},
        ]
    )

    def chat(span_id, provider, start_ms):
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.input.messages": later,
        }
        return span(trace, span_id, "0000000000000001", "chat", attributes, start_ms=start_ms)

    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "city", "gen_ai.tool.call.id": "c1"}
    (run,) = _assembled(
        span(
            trace, "0000000000000001", name="agent run", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
        span(
            trace,
            "0000000000000002",
            "0000000000000001",
            "execute_tool city",
            {**tool, "pydantic_ai.tool.retry.cause": "model_retry"},
            start_ms=1,
        ),
        chat("0000000000000003", "openai", 2),
        chat("0000000000000004", "anthropic", 3),
    )
    openai_call, anthropic_call = run.all_model_calls()
    sent = openai_call.messages[-1]
    assert (sent.tool_call_id, sent.content) == ("c1", '{"error":"Capitalise the city."}')
    assert sent.extra["reported_content"] == "Capitalise the city."
    # Anthropic's API has an error channel of its own (is_error): the text is what it sends.
    assert anthropic_call.messages[-1].content == "Capitalise the city."
