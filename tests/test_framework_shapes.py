"""Shapes of the frameworks' runs that tests/test_framework_runs.py does not drive (issue
#33, an outside tester's attack): agents as tools, streamed runs, chains of handoffs,
guardrails, custom graphs, parallel branches, subgraphs, failing tools, retries, workflows
of several steps, two frameworks in one session. Each real framework calls the recording
fake OpenAI server (the truth) and sends its spans over OTLP to a live test server; each
test asserts what that framework's user would expect to see."""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, TypedDict

import pytest

from history_app import models

from . import fake_openai
from .test_conformance import assert_conforms, drive, framework
from .test_framework_runs import session_list, steps, top_runs, weather

pytestmark = pytest.mark.django_db(transaction=True)

A = fake_openai.Answer


def forecast(city: str) -> str:
    """Get tomorrow's forecast for a city.

    Args:
        city: The city.
    """
    return f"Rain in {city} tomorrow"


def broken(city: str) -> str:
    """Get the pollen count in a city.

    Args:
        city: The city.
    """
    raise ValueError(f"no pollen data for {city}")


def asked_ids(run: models.Run, index: int) -> list[str]:
    """The ids of the tool calls the model call of iteration ``index`` asked for."""
    call = run.iterations.get(index=index).model_calls.get()
    return [c["id"] for c in call.answer.get("tool_calls") or []]


TWO_CITIES = [
    A(tool_calls=[("weather", '{"city": "Paris"}'), ("weather", '{"city": "Lyon"}')]),
    A("Sunny in both."),
]


# -- OpenAI Agents SDK ---------------------------------------------------------------------


def _agents_model(server):
    agents = framework("agents")
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
    return agents.OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)


def _agents_instrumentor():
    agents = framework("agents")
    agents.set_trace_processors([])  # nothing to OpenAI's own exporter, before instrumenting
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return OpenAIAgentsInstrumentor()


def test_agents_sdk_agent_as_tool_is_one_run_with_the_tool_agent_a_member(live_server, token):
    agents = framework("agents")
    script = [
        A(tool_calls=[("ask_weather", json.dumps({"input": "Paris"}))]),
        A(tool_calls=[("weather", json.dumps({"city": "Paris"}))]),
        A("Sunny in Paris."),
        A("It is sunny in Paris."),
    ]

    def body(server, tracer_provider):
        model = _agents_model(server)
        weather_agent = agents.Agent(
            name="weather_agent",
            instructions="You tell the weather.",
            model=model,
            tools=[agents.function_tool(weather)],
        )
        boss = agents.Agent(
            name="boss",
            instructions="Use your tools.",
            model=model,
            tools=[weather_agent.as_tool(tool_name="ask_weather", tool_description="Ask for the weather.")],
        )
        assert agents.Runner.run_sync(boss, "Weather in Paris?").final_output == "It is sunny in Paris."

    server = drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("boss", "Weather in Paris?", "It is sunny in Paris.")
    # The agent-tool's run: a member of the member run of the agent that called it.
    boss = models.Run.objects.get(agent_name="boss", kind="member")
    assert boss.parent_run_id == run.run_id
    tool_agent = models.Run.objects.get(agent_name="weather_agent")
    assert (tool_agent.kind, tool_agent.input, tool_agent.output) == ("member", "Paris", "Sunny in Paris.")
    assert tool_agent.parent_run_id == boss.run_id
    assert list(boss.member_interactions.values_list("member", "task", "response", "member_run_id")) == [
        ("weather_agent", "Paris", "Sunny in Paris.", tool_agent.run_id)
    ]
    assert steps(tool_agent) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    # The boss's call of its agent-tool: a tool call with the arguments its model sent.
    assert steps(boss) == [(1, "", 1, ["ask_weather"]), (2, "", 1, [])]
    call = boss.tool_calls.get()
    assert (call.params, call.result) == ({"input": "Paris"}, "Sunny in Paris.")
    assert_conforms(server, expected=4)


def test_agents_sdk_run_streamed_is_one_run_like_run(live_server, token):
    agents = framework("agents")
    script = [A(tool_calls=[("weather", json.dumps({"city": "Paris"}))]), A("Sunny in Paris.")]

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="helper",
            instructions="You tell the weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather)],
        )

        async def go():
            result = agents.Runner.run_streamed(agent, "Weather in Paris?")
            async for _ in result.stream_events():
                pass
            return result.final_output

        assert asyncio.run(go()) == "Sunny in Paris."

    server = drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("helper", "Weather in Paris?", "Sunny in Paris.")
    (member,) = models.Run.objects.filter(kind="member")
    assert steps(member) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    call = member.tool_calls.get()
    assert (call.params, call.result) == ({"city": "Paris"}, "Sunny in Paris")
    assert_conforms(server, expected=2)


def test_agents_sdk_chain_of_two_handoffs_is_one_run_of_three_turns(live_server, token):
    agents = framework("agents")
    script = [
        A(tool_calls=[("transfer_to_router", "{}")]),
        A(tool_calls=[("transfer_to_weather_agent", "{}")]),
        A(tool_calls=[("weather", json.dumps({"city": "Paris"}))]),
        A("Sunny in Paris."),
    ]

    def body(server, tracer_provider):
        model = _agents_model(server)
        weather_agent = agents.Agent(
            name="weather_agent", instructions="Weather.", model=model, tools=[agents.function_tool(weather)]
        )
        router = agents.Agent(name="router", instructions="Route.", model=model, handoffs=[weather_agent])
        triage = agents.Agent(name="triage", instructions="Triage.", model=model, handoffs=[router])
        agents.Runner.run_sync(triage, "Weather in Paris?")

    server = drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.kind, run.agent_name, run.input, run.output) == (
        "team",
        "triage",
        "Weather in Paris?",
        "Sunny in Paris.",
    )
    assert [(it.index, it.name, it.thought) for it in run.iterations.order_by("position")] == [
        (1, "triage", "handoff to router"),
        (2, "router", "handoff to weather_agent"),
        (3, "weather_agent", "Sunny in Paris."),
    ]
    members = {r.agent_name: r for r in models.Run.objects.filter(parent_run_id=run.run_id)}
    assert set(members) == {"triage", "router", "weather_agent"}
    assert steps(members["router"]) == [(1, "", 1, ["handoff to weather_agent"])]
    assert list(run.member_interactions.values_list("member", "response")) == [
        ("triage", "handoff to router"),
        ("router", "handoff to weather_agent"),
        ("weather_agent", "Sunny in Paris."),
    ]
    assert_conforms(server, expected=4)


def run_agents_guardrail(live_server, token) -> fake_openai.FakeServer:
    """Two runs of an agent with an input guardrail: the first passes it, the second trips it."""
    agents = framework("agents")

    def body(server, tracer_provider):
        @agents.input_guardrail
        def no_lyon(context, agent, text):
            return agents.GuardrailFunctionOutput(
                output_info="checked", tripwire_triggered="Lyon" in str(text)
            )

        agent = agents.Agent(
            name="helper", instructions="Help.", model=_agents_model(server), input_guardrails=[no_lyon]
        )
        agents.Runner.run_sync(agent, "Weather in Paris?")
        with pytest.raises(agents.InputGuardrailTripwireTriggered):
            agents.Runner.run_sync(agent, "Weather in Lyon?")

    return drive(live_server, token, [_agents_instrumentor()], body, [A("Sunny in Paris."), A("Unused.")])


def test_agents_sdk_guardrails_leave_one_run_per_runner_run(live_server, token):
    server = run_agents_guardrail(live_server, token)
    runs = top_runs()
    assert [r.agent_name for r in runs] == ["helper", "helper"]
    assert (runs[0].input, runs[0].output, runs[0].status) == (
        "Weather in Paris?",
        "Sunny in Paris.",
        "completed",
    )
    assert_conforms(server)


def test_agents_sdk_input_guardrail_is_not_an_iteration_before_the_model_call(live_server, token):
    run_agents_guardrail(live_server, token)
    member = models.Run.objects.filter(kind="member").order_by("started_at").first()
    assert steps(member) == [(1, "", 1, [])]


def test_agents_sdk_tripped_input_guardrail_fails_the_run(live_server, token):
    run_agents_guardrail(live_server, token)
    tripped = top_runs()[1]
    assert tripped.status == "failed"


def test_agents_sdk_function_tool_calls_keep_the_ids_the_model_gave(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="helper",
            instructions="Weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather)],
        )
        agents.Runner.run_sync(agent, "Weather in Paris and Lyon?")

    drive(live_server, token, [_agents_instrumentor()], body, list(TWO_CITIES))
    (member,) = models.Run.objects.filter(kind="member")
    assert [c.call_id for c in member.tool_calls.order_by("position")] == asked_ids(member, 1)


# -- LangGraph -------------------------------------------------------------------------------


def _langchain():
    framework("langgraph")
    from openinference.instrumentation.langchain import LangChainInstrumentor

    return LangChainInstrumentor()


def _chat(server):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")


def test_langgraph_custom_graph_with_conditional_edges_has_its_nodes_as_steps(live_server, token):
    instrumentor = _langchain()
    from langgraph.graph import END, START, MessagesState, StateGraph

    def body(server, tracer_provider):
        model = _chat(server)

        def planner(state):
            return {"messages": [model.invoke(state["messages"])]}

        def writer(state):
            return {"messages": [model.invoke(state["messages"] + [("user", "Now write it.")])]}

        def reviewer(state):
            return {}

        def route(state):
            return "writer" if "plan" in state["messages"][-1].content else END

        builder = StateGraph(MessagesState)
        builder.add_node("planner", planner)
        builder.add_node("writer", writer)
        builder.add_node("reviewer", reviewer)
        builder.add_edge(START, "planner")
        builder.add_conditional_edges("planner", route, ["writer", END])
        builder.add_edge("writer", "reviewer")
        builder.add_edge("reviewer", END)
        graph = builder.compile()
        graph.invoke({"messages": [("user", "Plan a trip to Lyon")]})

    server = drive(live_server, token, [instrumentor], body, [A("A plan: go."), A("Lyon in two days.")])
    (run,) = top_runs()
    assert (run.input, run.output) == ("Plan a trip to Lyon", "Lyon in two days.")
    assert models.Run.objects.count() == 1
    assert steps(run) == [(1, "planner", 1, []), (2, "writer", 1, []), (3, "reviewer", 0, [])]
    assert_conforms(server, expected=2)


def test_langgraph_state_without_messages_shows_the_question_and_answer_not_the_state(live_server, token):
    instrumentor = _langchain()
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        question: str
        answer: str

    def body(server, tracer_provider):
        model = _chat(server)

        def answer(state):
            return {"answer": model.invoke(state["question"]).content}

        builder = StateGraph(State)
        builder.add_node("answer", answer)
        builder.add_edge(START, "answer")
        builder.add_edge("answer", END)
        builder.compile().invoke({"question": "What is 2+3?"})

    server = drive(live_server, token, [instrumentor], body, [A("5")])
    (run,) = top_runs()
    # The whole state, one click away.
    assert json.loads(run.metadata["output.value"]) == {"question": "What is 2+3?", "answer": "5"}
    # Never a state dump: the user's text and the final answer.
    assert (run.input, run.output) == ("What is 2+3?", "5")
    assert steps(run) == [(1, "answer", 1, [])]
    assert_conforms(server, expected=1)


def _react(server):
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    return create_agent(_chat(server), [tool(weather)], system_prompt="You tell the weather.")


def test_langgraph_stream_is_one_run_like_invoke(live_server, token):
    instrumentor = _langchain()

    def body(server, tracer_provider):
        for _ in _react(server).stream({"messages": [("user", "Weather in Paris?")]}, stream_mode="values"):
            pass

    server = drive(live_server, token, [instrumentor], body)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in Paris?", fake_openai.ANSWER)
    assert steps(run) == [(1, "model", 1, ["weather"]), (2, "model", 1, [])]
    call = run.tool_calls.get()
    assert (call.params, call.call_id) == ({"city": "Paris"}, asked_ids(run, 1)[0])
    assert_conforms(server, expected=2)


def test_langgraph_astream_updates_is_one_run_like_invoke(live_server, token):
    instrumentor = _langchain()

    def body(server, tracer_provider):
        async def go():
            graph = _react(server)
            async for _ in graph.astream(
                {"messages": [("user", "Weather in Paris?")]}, stream_mode="updates"
            ):
                pass

        asyncio.run(go())

    server = drive(live_server, token, [instrumentor], body)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in Paris?", fake_openai.ANSWER)
    assert steps(run) == [(1, "model", 1, ["weather"]), (2, "model", 1, [])]
    assert_conforms(server, expected=2)


def run_langgraph_subgraph(live_server, token) -> fake_openai.FakeServer:
    """A graph whose first node is a create_agent graph (a subgraph), then a summarising node."""
    instrumentor = _langchain()
    from langgraph.graph import END, START, MessagesState, StateGraph

    def body(server, tracer_provider):
        model = _chat(server)
        inner = _react(server)

        def summarise(state):
            return {"messages": [model.invoke(state["messages"] + [("user", "Summarise.")])]}

        builder = StateGraph(MessagesState)
        builder.add_node("researcher", inner)
        builder.add_node("summarise", summarise)
        builder.add_edge(START, "researcher")
        builder.add_edge("researcher", "summarise")
        builder.add_edge("summarise", END)
        builder.compile().invoke({"messages": [("user", "Weather in Paris?")]})

    script = [A(tool_calls=[("weather", '{"city": "Paris"}')]), A("Sunny in Paris."), A("Sunny.")]
    return drive(live_server, token, [instrumentor], body, script)


def test_langgraph_subgraph_node_is_a_member_run_of_the_invocation(live_server, token):
    server = run_langgraph_subgraph(live_server, token)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in Paris?", "Sunny.")
    (member,) = models.Run.objects.filter(parent_run_id=run.run_id)
    assert (member.kind, member.input, member.output) == ("member", "Weather in Paris?", "Sunny in Paris.")
    assert steps(member) == [(1, "model", 1, ["weather"]), (2, "model", 1, [])]
    assert [(i, n, m) for i, n, m, _ in steps(run)][-1] == (len(steps(run)), "summarise", 1)
    assert steps(run)[0][0] == 1
    assert_conforms(server, expected=3)


def test_langgraph_subgraph_node_is_a_step_linked_to_its_member_run(live_server, token):
    run_langgraph_subgraph(live_server, token)
    (run,) = top_runs()
    member = models.Run.objects.get(parent_run_id=run.run_id)
    assert [(i, n) for i, n, _, _ in steps(run)] == [(1, "researcher"), (2, "summarise")]
    assert run.iterations.get(index=1).metadata.get("member_run_id") == member.run_id


def run_langgraph_send(live_server, token) -> fake_openai.FakeServer:
    """A graph fanning out with Send to one branch a city, then summarising the reports."""
    instrumentor = _langchain()
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    class State(TypedDict, total=False):
        cities: list[str]
        reports: Annotated[list[str], operator.add]
        summary: str

    class Branch(TypedDict):
        city: str

    def body(server, tracer_provider):
        model = _chat(server)

        def report(state: Branch):
            return {"reports": [model.invoke(f"Weather in {state['city']}?").content]}

        def summarise(state):
            return {"summary": model.invoke("Summarise: " + "; ".join(sorted(state["reports"]))).content}

        builder = StateGraph(State)
        builder.add_node("report", report)
        builder.add_node("summarise", summarise)
        builder.add_conditional_edges(START, lambda s: [Send("report", {"city": c}) for c in s["cities"]])
        builder.add_edge("report", "summarise")
        builder.add_edge("summarise", END)
        builder.compile().invoke({"cities": ["Paris", "Lyon"]})

    return drive(live_server, token, [instrumentor], body, [A("Sunny."), A("Sunny."), A("Both sunny.")])


def test_langgraph_parallel_send_branches_are_one_run(live_server, token):
    server = run_langgraph_send(live_server, token)
    (run,) = top_runs()
    assert models.Run.objects.count() == 1
    assert [(n, m) for _, n, m, _ in steps(run) if m] == [("report", 1), ("report", 1), ("summarise", 1)]
    assert_conforms(server, expected=3)


def test_langgraph_send_graph_output_is_the_final_answer_not_the_state(live_server, token):
    run_langgraph_send(live_server, token)
    (run,) = top_runs()
    assert run.output == "Both sunny."


def test_langgraph_send_graph_steps_are_its_nodes_from_one(live_server, token):
    run_langgraph_send(live_server, token)
    (run,) = top_runs()
    assert steps(run) == [(1, "report", 1, []), (2, "report", 1, []), (3, "summarise", 1, [])]


# -- smolagents ------------------------------------------------------------------------------


def _smol():
    framework("smolagents")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    return [SmolagentsInstrumentor(), OpenAIInstrumentor()]


def _smol_model(server):
    from smolagents import OpenAIServerModel

    return OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-test")


def test_smolagents_code_agent_with_a_failing_tool_keeps_the_error_in_its_step(live_server, token):
    instrumentors = _smol()
    from smolagents import CodeAgent, tool

    def body(server, tracer_provider):
        CodeAgent(
            tools=[tool(weather), tool(broken)], model=_smol_model(server), max_steps=4, name="coder"
        ).run("Weather and pollen in Paris?")

    script = [
        A('Thought: ask.\n<code>\nw = weather(city="Paris")\np = broken(city="Paris")\n</code>'),
        A('Thought: no pollen.\n<code>\nfinal_answer("Sunny in Paris, no pollen data.")\n</code>'),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == (
        "coder",
        "Weather and pollen in Paris?",
        "Sunny in Paris, no pollen data.",
    )
    assert steps(run) == [(1, "", 1, ["weather", "broken"]), (2, "", 1, ["final_answer"])]
    failed = run.tool_calls.get(tool="broken")
    assert failed.params == {"city": "Paris"} and "no pollen data for Paris" in (failed.error or "")
    assert_conforms(server, expected=2)


def test_smolagents_max_steps_reached_keeps_the_forced_final_answer(live_server, token):
    instrumentors = _smol()
    from smolagents import ToolCallingAgent, tool

    def body(server, tracer_provider):
        ToolCallingAgent(tools=[tool(weather)], model=_smol_model(server), max_steps=2, name="looper").run(
            "Weather in Paris?"
        )

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A("Probably sunny in Paris."),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in Paris?", "Probably sunny in Paris.")
    found = steps(run)
    assert [i for i, *_ in found] == list(range(1, len(found) + 1))
    assert [t for *_, t in found][:2] == [["weather"], ["weather"]]
    assert sum(m for _, _, m, _ in found) == 3  # the forced final answer's call too
    assert_conforms(server, expected=3)


def test_smolagents_two_managed_agents_are_two_member_runs(live_server, token):
    instrumentors = _smol()
    from smolagents import ToolCallingAgent, tool

    def body(server, tracer_provider):
        model = _smol_model(server)
        now = ToolCallingAgent(
            tools=[tool(weather)], model=model, max_steps=3, name="now_agent", description="Weather now."
        )
        later = ToolCallingAgent(
            tools=[tool(forecast)], model=model, max_steps=3, name="later_agent", description="Forecasts."
        )
        ToolCallingAgent(tools=[], model=model, max_steps=4, name="boss", managed_agents=[now, later]).run(
            "Weather in Paris today and tomorrow?"
        )

    script = [
        A(tool_calls=[("now_agent", json.dumps({"task": "Paris now?"}))]),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny."}')]),
        A(tool_calls=[("later_agent", json.dumps({"task": "Paris tomorrow?"}))]),
        A(tool_calls=[("forecast", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Rain."}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny, then rain."}')]),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    (boss,) = top_runs()
    assert (boss.agent_name, boss.output) == ("boss", "Sunny, then rain.")
    members = list(
        models.Run.objects.filter(parent_run_id=boss.run_id)
        .order_by("started_at")
        .values_list("agent_name", "input", "output")
    )
    assert members == [("now_agent", "Paris now?", "Sunny."), ("later_agent", "Paris tomorrow?", "Rain.")]
    assert steps(boss) == [
        (1, "", 1, ["now_agent"]),
        (2, "", 1, ["later_agent"]),
        (3, "", 1, ["final_answer"]),
    ]
    assert list(boss.member_interactions.values_list("member", "task", "response")) == [
        ("now_agent", "Paris now?", "Sunny."),
        ("later_agent", "Paris tomorrow?", "Rain."),
    ]
    assert_conforms(server, expected=7)


# -- Pydantic AI -----------------------------------------------------------------------------


def _pydantic_agent(server, tracer_provider, **kwargs):
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
    )
    agent = Agent(model, name="weather", instructions="You tell the weather.", **kwargs)
    agent.instrument = InstrumentationSettings(tracer_provider=tracer_provider)
    return agent


def run_pydantic_ai_retry(live_server, token) -> fake_openai.FakeServer:
    """A tool that raises ModelRetry for a city not capitalised, asked "paris" then "Paris"."""
    from pydantic_ai import ModelRetry

    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)

        @agent.tool_plain
        def city_weather(city: str) -> str:
            """Get the weather in a city (capitalised).

            Args:
                city: The city.
            """
            if not city[:1].isupper():
                raise ModelRetry("Capitalise the city.")
            return f"Sunny in {city}"

        assert agent.run_sync("Weather in paris?").output == "Sunny in Paris."

    script = [
        A(tool_calls=[("city_weather", '{"city": "paris"}')]),
        A(tool_calls=[("city_weather", '{"city": "Paris"}')]),
        A("Sunny in Paris."),
    ]
    return drive(live_server, token, [], body, script)


def test_pydantic_ai_model_retry_is_a_failed_tool_call_then_the_retried_one(live_server, token):
    run_pydantic_ai_retry(live_server, token)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in paris?", "Sunny in Paris.")
    assert steps(run) == [(1, "", 1, ["city_weather"]), (2, "", 1, ["city_weather"]), (3, "", 1, [])]
    first, second = run.tool_calls.order_by("iteration__position")
    assert first.params == {"city": "paris"} and first.result != "Sunny in paris"
    assert "Capitalise the city." in (first.error or "") + (first.result or "")
    assert (second.params, second.result) == ({"city": "Paris"}, "Sunny in Paris")
    assert [c.call_id for c in (first, second)] == [asked_ids(run, 1)[0], asked_ids(run, 2)[0]]


def test_pydantic_ai_model_retry_calls_are_stored_as_sent(live_server, token):
    server = run_pydantic_ai_retry(live_server, token)
    # Pydantic AI reports tool-call arguments as JSON values (the GenAI conventions).
    assert_conforms(server, exact_arguments=False, expected=3)


def test_pydantic_ai_run_stream_is_one_run(live_server, token):
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)
        agent.tool_plain(weather)

        async def go():
            async with agent.run_stream("Weather in Paris?") as result:
                return await result.get_output()

        assert asyncio.run(go()) == fake_openai.ANSWER

    server = drive(live_server, token, [], body)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("weather", "Weather in Paris?", fake_openai.ANSWER)
    assert steps(run) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    assert_conforms(server, exact_arguments=False, expected=2)


# -- agno ------------------------------------------------------------------------------------


def _agno(server):
    framework("agno")
    from agno.models.openai import OpenAIChat

    return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")


def _agno_instrumentor():
    framework("agno")
    from openinference.instrumentation.agno import AgnoInstrumentor

    return AgnoInstrumentor()


def test_agno_agent_with_a_tool_that_raises_keeps_the_error_with_its_model_call(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent

    def body(server, tracer_provider):
        Agent(name="Pollen", model=_agno(server), tools=[broken]).run("Pollen in Paris?", session_id="p-s")

    script = [A(tool_calls=[("broken", '{"city": "Paris"}')]), A("No pollen data for Paris.")]
    server = drive(live_server, token, [instrumentor], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == (
        "Pollen",
        "Pollen in Paris?",
        "No pollen data for Paris.",
    )
    assert run.session.session_id == "p-s"
    assert steps(run) == [(1, "", 1, ["broken"]), (2, "", 1, [])]
    call = run.tool_calls.get()
    assert call.params == {"city": "Paris"}
    assert "no pollen data for Paris" in (call.error or "") + (call.result or "")
    assert_conforms(server, expected=2)


def test_agno_workflow_of_two_steps_is_one_workflow_run_with_two_members(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.workflow import Step, Workflow

    def body(server, tracer_provider):
        researcher = Agent(name="Researcher", model=_agno(server), instructions="Find facts.")
        writer = Agent(name="Writer", model=_agno(server), instructions="Write.")
        flow = Workflow(
            name="report",
            steps=[Step(name="research", agent=researcher), Step(name="write", agent=writer)],
            db=InMemoryDb(),
        )
        flow.run("Write about Lyon", session_id="flow-2")

    server = drive(live_server, token, [instrumentor], body, [A("Lyon facts."), A("Lyon is lovely.")])
    (run,) = top_runs()
    assert (run.kind, run.agent_name, run.input, run.output) == (
        "workflow",
        "report",
        "Write about Lyon",
        "Lyon is lovely.",
    )
    members = list(
        models.Run.objects.filter(parent_run_id=run.run_id)
        .order_by("started_at")
        .values_list("agent_name", "output")
    )
    assert members == [("Researcher", "Lyon facts."), ("Writer", "Lyon is lovely.")]
    assert {r.session.session_id for r in models.Run.objects.all()} == {"flow-2"}
    assert_conforms(server, expected=2)


# -- Two frameworks, one session -------------------------------------------------------------


def test_two_frameworks_runs_in_one_session_keep_their_own_shapes(live_server, token, alice_client):
    agents = framework("agents")
    instrumentors = [_agents_instrumentor(), _langchain()]
    from openinference.instrumentation import using_session

    def body(server, tracer_provider):
        agent = agents.Agent(name="helper", instructions="Help.", model=_agents_model(server))
        with using_session("mixed"):
            agents.Runner.run_sync(agent, "Hi from the SDK")
        _react(server).invoke(
            {"messages": [("user", "Weather in Paris?")]}, {"configurable": {"thread_id": "mixed"}}
        )

    server = drive(live_server, token, instrumentors, body, [A("Hello."), A("Sunny.")])
    runs = top_runs()
    assert [(r.kind, r.input, r.output) for r in runs] == [
        ("team", "Hi from the SDK", "Hello."),
        ("agent", "Weather in Paris?", "Sunny."),
    ]
    assert {r.session.session_id for r in models.Run.objects.all()} == {"mixed"}
    assert models.Session.objects.count() == 1
    assert "Hi from the SDK" in session_list(alice_client)
    assert_conforms(server, expected=2)


@pytest.fixture(autouse=True)
def _dump_on_failure():
    """The stored runs, printed after each test (pytest shows them when it fails)."""
    yield
    for r in models.Run.objects.order_by("started_at"):
        print("RUN", r.run_id, r.kind, r.agent_name, r.parent_run_id, r.session.session_id, r.status)
        print("   in:", repr(r.input)[:200], "\n   out:", repr(r.output)[:200])
        for it in r.iterations.order_by("position"):
            print(
                "   IT",
                it.index,
                it.name,
                repr(it.thought)[:80],
                it.model_calls.count(),
                [
                    (c.tool, c.params, (c.result or "")[:40], (c.error or "")[:60], c.call_id)
                    for c in it.tool_calls.all()
                ],
            )
        print("   META", {k: str(v)[:150] for k, v in (r.metadata or {}).items()})
        print("   MI", list(r.member_interactions.values_list("member", "task", "response")))


# -- Two tool calls in one model answer, and an agent delegating inside a tool ----------------


def _two_calls(run: models.Run, *, ordered: bool = True) -> None:
    """Both calls with the model call of iteration 1 that asked for them, in its order (in
    any order where the framework runs them in parallel threads: they are ordered by when
    they started)."""
    assert steps(run) == [
        (1, run.iterations.get(index=1).name, 1, ["weather", "weather"]),
        (2, run.iterations.get(index=2).name, 1, []),
    ]
    calls = list(run.tool_calls.order_by("iteration__position", "position"))
    found = [(c.params, c.result) for c in calls]
    if not ordered:
        found.sort(key=lambda item: item[0]["city"], reverse=True)
    assert found == [({"city": "Paris"}, "Sunny in Paris"), ({"city": "Lyon"}, "Sunny in Lyon")]


def test_agents_sdk_two_tool_calls_in_one_answer(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="helper",
            instructions="Weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather)],
        )
        agents.Runner.run_sync(agent, "Weather in Paris and Lyon?")

    server = drive(live_server, token, [_agents_instrumentor()], body, list(TWO_CITIES))
    (member,) = models.Run.objects.filter(kind="member")
    _two_calls(member)
    assert_conforms(server, expected=2)


def test_langgraph_two_tool_calls_in_one_answer(live_server, token):
    instrumentor = _langchain()

    def body(server, tracer_provider):
        _react(server).invoke({"messages": [("user", "Weather in Paris and Lyon?")]})

    server = drive(live_server, token, [instrumentor], body, list(TWO_CITIES))
    (run,) = top_runs()
    _two_calls(run, ordered=False)  # LangGraph's ToolNode runs them in parallel threads
    assert sorted(c.call_id for c in run.tool_calls.all()) == sorted(asked_ids(run, 1))
    assert_conforms(server, expected=2)


def run_pydantic_ai_two_calls(live_server, token) -> fake_openai.FakeServer:
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)
        agent.tool_plain(weather)
        agent.run_sync("Weather in Paris and Lyon?")

    return drive(live_server, token, [], body, list(TWO_CITIES))


def test_pydantic_ai_two_tool_calls_in_one_answer(live_server, token):
    run_pydantic_ai_two_calls(live_server, token)
    (run,) = top_runs()
    _two_calls(run)
    assert [c.call_id for c in run.tool_calls.order_by("position")] == asked_ids(run, 1)


def test_pydantic_ai_two_tool_results_are_stored_as_the_two_messages_sent(live_server, token):
    server = run_pydantic_ai_two_calls(live_server, token)
    assert_conforms(server, exact_arguments=False, expected=2)


def run_agno_two_calls(live_server, token) -> fake_openai.FakeServer:
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent

    def body(server, tracer_provider):
        Agent(name="Helper", model=_agno(server), tools=[weather]).run("Weather in Paris and Lyon?")

    return drive(live_server, token, [instrumentor], body, list(TWO_CITIES))


def test_agno_two_tool_calls_in_one_answer(live_server, token):
    server = run_agno_two_calls(live_server, token)
    (run,) = top_runs()
    _two_calls(run)
    assert_conforms(server, expected=2)


def test_agno_tool_calls_keep_the_ids_the_model_gave(live_server, token):
    run_agno_two_calls(live_server, token)
    (run,) = top_runs()
    assert [c.call_id for c in run.tool_calls.order_by("position")] == asked_ids(run, 1)


def run_smolagents_two_calls(live_server, token) -> fake_openai.FakeServer:
    instrumentors = _smol()
    from smolagents import ToolCallingAgent, tool

    def body(server, tracer_provider):
        ToolCallingAgent(tools=[tool(weather)], model=_smol_model(server), max_steps=3, name="helper").run(
            "Weather in Paris and Lyon?"
        )

    script = [TWO_CITIES[0], A(tool_calls=[("final_answer", '{"answer": "Sunny in both."}')])]
    return drive(live_server, token, instrumentors, body, script)


def test_smolagents_two_tool_calls_in_one_answer(live_server, token):
    server = run_smolagents_two_calls(live_server, token)
    (run,) = top_runs()
    assert steps(run) == [(1, "", 1, ["weather", "weather"]), (2, "", 1, ["final_answer"])]
    # smolagents runs a step's tool calls in parallel threads: in the order they started.
    calls = list(run.iterations.get(index=1).tool_calls.all())
    assert sorted(c.params["city"] for c in calls) == ["Lyon", "Paris"]
    assert_conforms(server, expected=2)


def test_smolagents_tool_calls_keep_the_ids_the_model_gave(live_server, token):
    run_smolagents_two_calls(live_server, token)
    (run,) = top_runs()
    assert sorted(c.call_id for c in run.tool_calls.all()) == sorted(asked_ids(run, 1) + asked_ids(run, 2))


def test_pydantic_ai_agent_delegating_in_a_tool_is_a_member_run(live_server, token):
    from pydantic_ai import Agent, RunContext

    # The tool's annotations are strings (this module's ``from __future__ import
    # annotations``): Pydantic AI resolves them in the module's globals.
    globals()["RunContext"] = RunContext

    def body(server, tracer_provider):
        boss = _pydantic_agent(server, tracer_provider)
        helper = Agent(boss.model, name="helper", instructions="You know the weather.")
        helper.instrument = boss.instrument

        @boss.tool
        async def ask_helper(ctx: RunContext[None], question: str) -> str:
            """Ask the helper.

            Args:
                question: The question.
            """
            return (await helper.run(question, usage=ctx.usage)).output

        assert boss.run_sync("Weather in Paris?").output == "It is sunny."

    script = [A(tool_calls=[("ask_helper", '{"question": "Paris?"}')]), A("Sunny."), A("It is sunny.")]
    server = drive(live_server, token, [], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("weather", "Weather in Paris?", "It is sunny.")
    helper = models.Run.objects.get(agent_name="helper")
    assert (helper.kind, helper.parent_run_id, helper.input, helper.output) == (
        "member",
        run.run_id,
        "Paris?",
        "Sunny.",
    )
    assert steps(run) == [(1, "", 1, ["ask_helper"]), (2, "", 1, [])]
    call = run.tool_calls.get()
    assert (call.params, call.result) == ({"question": "Paris?"}, "Sunny.")
    assert_conforms(server, exact_arguments=False, expected=3)


# -- Several runs started at once ------------------------------------------------------------


def test_langgraph_batch_of_two_inputs_is_two_runs(live_server, token):
    instrumentor = _langchain()
    from langgraph.graph import END, START, MessagesState, StateGraph

    def body(server, tracer_provider):
        model = _chat(server)
        builder = StateGraph(MessagesState)
        builder.add_node("answer", lambda state: {"messages": [model.invoke(state["messages"])]})
        builder.add_edge(START, "answer")
        builder.add_edge("answer", END)
        graph = builder.compile()
        graph.batch([{"messages": [("user", "Question A")]}, {"messages": [("user", "Question B")]}])

    server = drive(live_server, token, [instrumentor], body, [A("Answer."), A("Answer.")])
    runs = top_runs()
    assert sorted((r.input, r.output) for r in runs) == [("Question A", "Answer."), ("Question B", "Answer.")]
    for run in runs:
        assert steps(run) == [(1, "answer", 1, [])]
    assert_conforms(server, expected=2)


def test_agents_sdk_two_runner_runs_at_once_are_two_runs(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(name="helper", instructions="Help.", model=_agents_model(server))

        async def go():
            await asyncio.gather(
                agents.Runner.run(agent, "Question A"), agents.Runner.run(agent, "Question B")
            )

        asyncio.run(go())

    server = drive(live_server, token, [_agents_instrumentor()], body, [A("Answer."), A("Answer.")])
    runs = top_runs()
    assert sorted((r.agent_name, r.input, r.output) for r in runs) == [
        ("helper", "Question A", "Answer."),
        ("helper", "Question B", "Answer."),
    ]
    assert models.Run.objects.filter(kind="member").count() == 2
    assert_conforms(server, expected=2)


def test_pydantic_ai_two_runs_at_once_are_two_runs(live_server, token):
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)

        async def go():
            await asyncio.gather(agent.run("Question A"), agent.run("Question B"))

        asyncio.run(go())

    server = drive(live_server, token, [], body, [A("Answer."), A("Answer.")])
    runs = top_runs()
    assert sorted((r.input, r.output) for r in runs) == [("Question A", "Answer."), ("Question B", "Answer.")]
    assert len({r.session_id for r in runs}) == 2
    assert_conforms(server, exact_arguments=False, expected=2)


def test_agno_team_delegating_to_two_members_in_one_answer(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb
    from agno.team import Team

    def body(server, tracer_provider):
        now = Agent(name="Now", id="now", model=_agno(server), instructions="Weather now.", tools=[weather])
        later = Agent(
            name="Later", id="later", model=_agno(server), instructions="Forecasts.", tools=[forecast]
        )
        team = Team(name="desk", model=_agno(server), members=[now, later], db=InMemoryDb())
        team.run("Paris today and tomorrow?", session_id="two-members")

    script = [
        A(
            tool_calls=[
                ("delegate_task_to_member", json.dumps({"member_id": "now", "task": "Paris now"})),
                ("delegate_task_to_member", json.dumps({"member_id": "later", "task": "Paris tomorrow"})),
            ]
        ),
        A("Sunny now."),
        A("Rain tomorrow."),
        A("Sunny, then rain."),
    ]
    server = drive(live_server, token, [instrumentor], body, script)
    (run,) = top_runs()
    assert (run.kind, run.agent_name, run.input, run.output) == (
        "team",
        "desk",
        "Paris today and tomorrow?",
        "Sunny, then rain.",
    )
    members = sorted(
        models.Run.objects.filter(parent_run_id=run.run_id).values_list("agent_name", "input", "output")
    )
    assert members == [("Later", "Paris tomorrow", "Rain tomorrow."), ("Now", "Paris now", "Sunny now.")]
    assert steps(run) == [(1, "", 1, ["delegate_task_to_member"] * 2), (2, "", 1, [])]
    assert {r.session.session_id for r in models.Run.objects.all()} == {"two-members"}
    assert_conforms(server, expected=4)
