"""More shapes of the frameworks' runs (issue #33, outside tester attack33b): sessions with
history, teams over several runs, tools that raise, turn limits, deps, output validation
retries, planning steps, nodes calling the model twice, and the run page each user opens.
Each real framework calls the recording fake OpenAI server; spans go over OTLP to a live
test server; each test asserts what that framework's user would expect to see."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from pydantic_ai import RunContext

from history_app import models

from . import fake_openai
from .test_conformance import assert_conforms, drive, framework
from .test_framework_runs import steps, top_runs, weather
from .test_framework_shapes import (
    _agents_instrumentor,
    _agents_model,
    _agno,
    _agno_instrumentor,
    _chat,
    _langchain,
    _pydantic_agent,
    _smol,
    _smol_model,
    broken,
    forecast,
)

pytestmark = pytest.mark.django_db(transaction=True)

A = fake_openai.Answer


def run_page(client, run: models.Run) -> str:
    return client.get(f"/p/default/runs/{run.run_id}/").content.decode()


def assert_page_shows(client, run: models.Run, question: str, answer: str, tools: list[str]) -> None:
    """The run page shows the user's text, the answer, and the tools in the order called."""
    page = run_page(client, run)
    iterations = client.get(f"/p/default/runs/{run.run_id}/iterations/").content.decode()
    text = page + iterations
    assert question in page, "the run page does not show the user's text"
    assert answer in page, "the run page does not show the answer"
    positions = [text.find(f">{t}<") for t in tools]
    assert all(p >= 0 for p in positions), f"tool names missing from the run page: {tools} {positions}"
    assert positions == sorted(positions), f"tools not in call order: {tools} {positions}"


# -- agno ------------------------------------------------------------------------------------


def test_agno_agent_with_history_over_three_runs_is_three_runs_of_one_session(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent
    from agno.db.in_memory import InMemoryDb

    def body(server, tracer_provider):
        agent = Agent(
            name="Chatty",
            model=_agno(server),
            db=InMemoryDb(),
            add_history_to_context=True,
            num_history_runs=5,
        )
        for q in ("My name is Ann.", "What is my name?", "Spell it."):
            agent.run(q, session_id="hist-3")

    script = [A("Hello Ann."), A("Ann."), A("A-N-N.")]
    server = drive(live_server, token, [instrumentor], body, script)
    runs = top_runs()
    assert [(r.agent_name, r.input, r.output) for r in runs] == [
        ("Chatty", "My name is Ann.", "Hello Ann."),
        ("Chatty", "What is my name?", "Ann."),
        ("Chatty", "Spell it.", "A-N-N."),
    ]
    assert {r.session.session_id for r in runs} == {"hist-3"}
    assert [steps(r) for r in runs] == [[(1, "", 1, [])]] * 3
    # The third call carries the history: stored exactly as sent.
    assert len(server.requests[2].body["messages"]) >= 5
    assert_conforms(server, expected=3)


def test_agno_team_over_two_runs_is_two_team_runs_each_with_its_member(live_server, token):
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
        team.run("Paris now?", session_id="team-2")
        team.run("Paris tomorrow?", session_id="team-2")

    def delegate(member, task):
        return A(tool_calls=[("delegate_task_to_member", json.dumps({"member_id": member, "task": task}))])

    script = [
        delegate("now", "Paris now"),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A("Sunny now."),
        A("It is sunny."),
        delegate("later", "Paris tomorrow"),
        A(tool_calls=[("forecast", '{"city": "Paris"}')]),
        A("Rain tomorrow."),
        A("It will rain."),
    ]
    server = drive(live_server, token, [instrumentor], body, script)
    runs = top_runs()
    assert [(r.kind, r.agent_name, r.input, r.output) for r in runs] == [
        ("team", "desk", "Paris now?", "It is sunny."),
        ("team", "desk", "Paris tomorrow?", "It will rain."),
    ]
    for run, member, task, answer, tool in (
        (runs[0], "Now", "Paris now", "Sunny now.", "weather"),
        (runs[1], "Later", "Paris tomorrow", "Rain tomorrow.", "forecast"),
    ):
        (m,) = models.Run.objects.filter(parent_run_id=run.run_id)
        assert (m.agent_name, m.input, m.output) == (member, task, answer)
        assert steps(m) == [(1, "", 1, [tool]), (2, "", 1, [])]
        assert steps(run) == [(1, "", 1, ["delegate_task_to_member"]), (2, "", 1, [])]
    assert {r.session.session_id for r in models.Run.objects.all()} == {"team-2"}
    assert_conforms(server, expected=8)


def test_agno_run_page_shows_question_answer_and_tools_in_order(live_server, token, alice_client):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent

    def body(server, tracer_provider):
        Agent(name="Desk", model=_agno(server), tools=[weather, forecast]).run("Paris?", session_id="pg-agno")

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("forecast", '{"city": "Paris"}')]),
        A("Sunny, then rain."),
    ]
    drive(live_server, token, [instrumentor], body, script)
    (run,) = top_runs()
    assert_page_shows(alice_client, run, "Paris?", "Sunny, then rain.", ["weather", "forecast"])


# -- LangChain / LangGraph -------------------------------------------------------------------


def test_langchain_create_agent_two_tools_over_two_turns_of_one_thread(live_server, token, alice_client):
    instrumentor = _langchain()
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    def body(server, tracer_provider):
        graph = create_agent(
            _chat(server),
            [tool(weather), tool(forecast)],
            system_prompt="Weather.",
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "t-2"}}
        graph.invoke({"messages": [("user", "Paris now?")]}, config)
        graph.invoke({"messages": [("user", "And tomorrow?")]}, config)

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A("Sunny in Paris."),
        A(tool_calls=[("forecast", '{"city": "Paris"}')]),
        A("Rain tomorrow."),
    ]
    server = drive(live_server, token, [instrumentor], body, script)
    runs = top_runs()
    assert [(r.input, r.output) for r in runs] == [
        ("Paris now?", "Sunny in Paris."),
        ("And tomorrow?", "Rain tomorrow."),
    ]
    assert {r.session.session_id for r in runs} == {"t-2"}
    assert steps(runs[0]) == [(1, "model", 1, ["weather"]), (2, "model", 1, [])]
    assert steps(runs[1]) == [(1, "model", 1, ["forecast"]), (2, "model", 1, [])]
    call = runs[1].tool_calls.get()
    assert (call.params, call.result) == ({"city": "Paris"}, "Rain in Paris tomorrow")
    assert_conforms(server, expected=4)
    assert_page_shows(alice_client, runs[1], "And tomorrow?", "Rain tomorrow.", ["forecast"])


def test_langgraph_node_calling_the_model_twice_is_two_iterations_named_after_it(live_server, token):
    instrumentor = _langchain()
    from langgraph.graph import END, START, MessagesState, StateGraph

    def body(server, tracer_provider):
        model = _chat(server)

        def draft_and_polish(state):
            draft = model.invoke(state["messages"])
            return {"messages": [model.invoke(state["messages"] + [draft, ("user", "Polish it.")])]}

        builder = StateGraph(MessagesState)
        builder.add_node("write", draft_and_polish)
        builder.add_edge(START, "write")
        builder.add_edge("write", END)
        builder.compile().invoke({"messages": [("user", "A line on Lyon")]})

    server = drive(live_server, token, [instrumentor], body, [A("Lyon ok."), A("Lyon shines.")])
    (run,) = top_runs()
    assert (run.input, run.output) == ("A line on Lyon", "Lyon shines.")
    # As documented (otlp.md): a node's model calls are iterations named after the node.
    assert steps(run) == [(1, "write", 1, []), (2, "write", 1, [])]
    assert_conforms(server, expected=2)


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def test_agents_sdk_max_turns_exceeded_is_one_failed_run_with_its_turns(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="looper",
            instructions="Weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather)],
        )
        with pytest.raises(agents.MaxTurnsExceeded):
            agents.Runner.run_sync(agent, "Weather in Paris?", max_turns=2)

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("weather", '{"city": "Lyon"}')]),
    ]
    server = drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input) == ("looper", "Weather in Paris?")
    assert run.status == "failed" and "turn" in (run.error or "").lower()
    assert not run.output
    (member,) = models.Run.objects.filter(kind="member")
    assert member.status == "failed"
    assert steps(member) == [(1, "", 1, ["weather"]), (2, "", 1, ["weather"])]
    assert_conforms(server, expected=2)


def test_agents_sdk_tool_that_raises_keeps_its_error_and_the_run_answers(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="pollen",
            instructions="Pollen.",
            model=_agents_model(server),
            tools=[agents.function_tool(broken)],
        )
        assert agents.Runner.run_sync(agent, "Pollen in Paris?").final_output == "No pollen data."

    script = [A(tool_calls=[("broken", '{"city": "Paris"}')]), A("No pollen data.")]
    server = drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.input, run.output, run.status) == ("Pollen in Paris?", "No pollen data.", "completed")
    (member,) = models.Run.objects.filter(kind="member")
    assert steps(member) == [(1, "", 1, ["broken"]), (2, "", 1, [])]
    call = member.tool_calls.get()
    assert call.call_id == member.iterations.get(index=1).model_calls.get().answer["tool_calls"][0]["id"]
    assert call.params == {"city": "Paris"}
    # The SDK redacts the exception in its span: the error names the tool; the result is
    # what the model was sent as the tool's output.
    assert "broken" in (call.error or "")
    sent = [i for i in server.requests[1].body["input"] if i.get("type") == "function_call_output"]
    assert [call.result] == [i["output"] for i in sent]
    assert_conforms(server, expected=2)


# -- Pydantic AI -----------------------------------------------------------------------------


@dataclass
class Deps:
    unit: str


def test_pydantic_ai_deps_and_two_tools_in_sequence_over_three_requests(live_server, token, alice_client):
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider, deps_type=Deps)

        @agent.tool
        def temperature(ctx: RunContext[Deps], city: str) -> str:
            """Temperature in a city."""
            return f"20 {ctx.deps.unit} in {city}"

        @agent.tool
        def humidity(ctx: RunContext[Deps], city: str) -> str:
            """Humidity in a city."""
            return f"50% in {city}"

        assert agent.run_sync("Paris conditions?", deps=Deps("C")).output == "20 C, 50%."

    script = [
        A(tool_calls=[("temperature", '{"city": "Paris"}')]),
        A(tool_calls=[("humidity", '{"city": "Paris"}')]),
        A("20 C, 50%."),
    ]
    server = drive(live_server, token, [], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("weather", "Paris conditions?", "20 C, 50%.")
    assert steps(run) == [(1, "", 1, ["temperature"]), (2, "", 1, ["humidity"]), (3, "", 1, [])]
    first, second = run.tool_calls.order_by("iteration__position")
    assert (first.params, first.result) == ({"city": "Paris"}, "20 C in Paris")
    assert (second.params, second.result) == ({"city": "Paris"}, "50% in Paris")
    assert_conforms(server, exact_arguments=False, expected=3)
    assert_page_shows(alice_client, run, "Paris conditions?", "20 C, 50%.", ["temperature", "humidity"])


def test_pydantic_ai_output_validator_retry_is_two_iterations_with_the_final_answer(live_server, token):
    from pydantic_ai import ModelRetry

    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)

        @agent.output_validator
        def must_mention_paris(output: str) -> str:
            if "Paris" not in output:
                raise ModelRetry("Mention Paris.")
            return output

        assert agent.run_sync("Weather?").output == "Sunny in Paris."

    server = drive(live_server, token, [], body, [A("Sunny."), A("Sunny in Paris.")])
    (run,) = top_runs()
    assert (run.input, run.output, run.status) == ("Weather?", "Sunny in Paris.", "completed")
    assert steps(run) == [(1, "", 1, []), (2, "", 1, [])]
    assert_conforms(server, exact_arguments=False, expected=2)


# -- smolagents ------------------------------------------------------------------------------


def test_smolagents_tool_calling_agent_with_planning_interval(live_server, token, alice_client):
    instrumentors = _smol()
    from smolagents import ToolCallingAgent, tool

    def body(server, tracer_provider):
        ToolCallingAgent(
            tools=[tool(weather)], model=_smol_model(server), max_steps=4, planning_interval=2, name="planner"
        ).run("Weather in Paris?")

    script = [
        A("1. Ask the weather tool.\n2. Answer."),
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Paris."}')]),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("planner", "Weather in Paris?", "Sunny in Paris.")
    found = steps(run)
    assert [i for i, *_ in found] == list(range(1, len(found) + 1))
    assert [t for *_, t in found if t] == [["weather"], ["final_answer"]]
    assert sum(m for _, _, m, _ in found) == len(server.requests)
    assert_conforms(server, expected=len(server.requests))
    assert_page_shows(alice_client, run, "Weather in Paris?", "Sunny in Paris.", ["weather", "final_answer"])


# -- Round two: history passed by hand, streams, tool results as the answer -------------------


def test_agents_sdk_second_run_given_the_history_as_input_list_has_the_new_text_as_input(live_server, token):
    agents = framework("agents")
    from openinference.instrumentation import using_session

    def body(server, tracer_provider):
        agent = agents.Agent(name="helper", instructions="Help.", model=_agents_model(server))
        with using_session("conv-1"):
            first = agents.Runner.run_sync(agent, "Hi, I am Ann.")
            agents.Runner.run_sync(agent, first.to_input_list() + [{"role": "user", "content": "Who am I?"}])

    server = drive(live_server, token, [_agents_instrumentor()], body, [A("Hello Ann."), A("You are Ann.")])
    runs = top_runs()
    assert [(r.input, r.output) for r in runs] == [
        ("Hi, I am Ann.", "Hello Ann."),
        ("Who am I?", "You are Ann."),
    ]
    assert {r.session.session_id for r in runs} == {"conv-1"}
    assert_conforms(server, expected=2)


def test_agents_sdk_stop_on_first_tool_answers_with_the_tool_result(live_server, token):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="direct",
            instructions="Weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather)],
            tool_use_behavior="stop_on_first_tool",
        )
        assert agents.Runner.run_sync(agent, "Paris?").final_output == "Sunny in Paris"

    server = drive(
        live_server, token, [_agents_instrumentor()], body, [A(tool_calls=[("weather", '{"city": "Paris"}')])]
    )
    (run,) = top_runs()
    assert (run.input, run.output, run.status) == ("Paris?", "Sunny in Paris", "completed")
    (member,) = models.Run.objects.filter(kind="member")
    assert member.output == "Sunny in Paris"
    assert steps(member) == [(1, "", 1, ["weather"])]
    assert_conforms(server, expected=1)


def test_pydantic_ai_second_run_with_message_history_has_the_new_prompt_as_input(live_server, token):
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)
        first = agent.run_sync("Hi, I am Ann.")
        agent.run_sync("Who am I?", message_history=first.all_messages())

    server = drive(live_server, token, [], body, [A("Hello Ann."), A("You are Ann.")])
    runs = top_runs()
    assert [(r.input, r.output) for r in runs] == [
        ("Hi, I am Ann.", "Hello Ann."),
        ("Who am I?", "You are Ann."),
    ]
    assert len(server.requests[1].body["messages"]) == 4
    assert_conforms(server, exact_arguments=False, expected=2)


def test_pydantic_ai_structured_output_validator_retry_keeps_the_final_result(live_server, token):
    from pydantic import BaseModel
    from pydantic_ai import ModelRetry

    class Forecast(BaseModel):
        city: str
        sky: str

    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider, output_type=Forecast)

        @agent.output_validator
        def capitalised(output: Forecast) -> Forecast:
            if not output.city[:1].isupper():
                raise ModelRetry("Capitalise the city.")
            return output

        assert agent.run_sync("Paris sky?").output == Forecast(city="Paris", sky="sunny")

    script = [
        A(tool_calls=[("final_result", '{"city": "paris", "sky": "sunny"}')]),
        A(tool_calls=[("final_result", '{"city": "Paris", "sky": "sunny"}')]),
    ]
    server = drive(live_server, token, [], body, script)
    (run,) = top_runs()
    assert run.input == "Paris sky?" and run.status == "completed"
    assert json.loads(run.output) == {"city": "Paris", "sky": "sunny"}
    assert [i for i, *_ in steps(run)] == [1, 2]
    assert_conforms(server, exact_arguments=False, expected=2)


def test_smolagents_second_run_without_reset_is_a_run_of_the_new_task(live_server, token):
    instrumentors = _smol()
    from smolagents import ToolCallingAgent, tool

    def body(server, tracer_provider):
        agent = ToolCallingAgent(tools=[tool(weather)], model=_smol_model(server), max_steps=3, name="chat")
        agent.run("Weather in Paris?")
        agent.run("And in Lyon?", reset=False)

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Paris."}')]),
        A(tool_calls=[("weather", '{"city": "Lyon"}')]),
        A(tool_calls=[("final_answer", '{"answer": "Sunny in Lyon."}')]),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    runs = top_runs()
    assert [(r.agent_name, r.input, r.output) for r in runs] == [
        ("chat", "Weather in Paris?", "Sunny in Paris."),
        ("chat", "And in Lyon?", "Sunny in Lyon."),
    ]
    assert steps(runs[1]) == [(1, "", 1, ["weather"]), (2, "", 1, ["final_answer"])]
    assert runs[1].tool_calls.get(tool="weather").params == {"city": "Lyon"}
    assert_conforms(server, expected=4)


def test_langchain_create_agent_given_prior_messages_has_the_last_user_text_as_input(live_server, token):
    instrumentor = _langchain()
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    def body(server, tracer_provider):
        graph = create_agent(_chat(server), [tool(weather)], system_prompt="Weather.")
        history = [("user", "Hi, I am Ann."), ("assistant", "Hello Ann."), ("user", "Weather in Paris?")]
        graph.invoke({"messages": history})

    script = [A(tool_calls=[("weather", '{"city": "Paris"}')]), A("Sunny in Paris, Ann.")]
    server = drive(live_server, token, [instrumentor], body, script)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Weather in Paris?", "Sunny in Paris, Ann.")
    assert steps(run) == [(1, "model", 1, ["weather"]), (2, "model", 1, [])]
    assert_conforms(server, expected=2)


def test_agno_agent_streamed_run_is_one_run_like_run(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent

    def body(server, tracer_provider):
        agent = Agent(name="Streamer", model=_agno(server), tools=[weather])
        for _ in agent.run("Weather in Paris?", stream=True, session_id="agno-stream"):
            pass

    script = [A(tool_calls=[("weather", '{"city": "Paris"}')]), A("Sunny in Paris.")]
    server = drive(live_server, token, [instrumentor], body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("Streamer", "Weather in Paris?", "Sunny in Paris.")
    assert run.session.session_id == "agno-stream"
    assert steps(run) == [(1, "", 1, ["weather"]), (2, "", 1, [])]
    assert_conforms(server, expected=2)


def test_agents_sdk_run_page_shows_question_answer_and_tools_in_order(live_server, token, alice_client):
    agents = framework("agents")

    def body(server, tracer_provider):
        agent = agents.Agent(
            name="desk",
            instructions="Weather.",
            model=_agents_model(server),
            tools=[agents.function_tool(weather), agents.function_tool(forecast)],
        )
        agents.Runner.run_sync(agent, "Paris today and tomorrow?")

    script = [
        A(tool_calls=[("weather", '{"city": "Paris"}')]),
        A(tool_calls=[("forecast", '{"city": "Paris"}')]),
        A("Sunny, then rain."),
    ]
    drive(live_server, token, [_agents_instrumentor()], body, script)
    (run,) = top_runs()
    assert (run.input, run.output) == ("Paris today and tomorrow?", "Sunny, then rain.")
    (member,) = models.Run.objects.filter(kind="member")
    assert_page_shows(
        alice_client, member, "Paris today and tomorrow?", "Sunny, then rain.", ["weather", "forecast"]
    )
    # The run the user started links to the agent's run that holds the tools.
    assert member.run_id in run_page(alice_client, run)


# -- Round three: failures the user must see --------------------------------------------------


def test_pydantic_ai_tool_raising_a_plain_exception_fails_the_run_with_its_error(live_server, token):
    def body(server, tracer_provider):
        agent = _pydantic_agent(server, tracer_provider)
        agent.tool_plain(broken)
        with pytest.raises(ValueError):
            agent.run_sync("Pollen in Paris?")

    server = drive(live_server, token, [], body, [A(tool_calls=[("broken", '{"city": "Paris"}')])])
    (run,) = top_runs()
    assert (run.input, run.status) == ("Pollen in Paris?", "failed")
    assert "no pollen data for Paris" in (run.error or "")
    assert not run.output
    assert steps(run) == [(1, "", 1, ["broken"])]
    call = run.tool_calls.get()
    assert call.params == {"city": "Paris"} and "no pollen data for Paris" in (call.error or "")
    assert_conforms(server, exact_arguments=False, expected=1)


def test_langgraph_interrupted_and_not_resumed_is_one_run_without_a_made_up_answer(live_server, token):
    instrumentor = _langchain()
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    def body(server, tracer_provider):
        model = _chat(server)

        def draft(state):
            return {"messages": [model.invoke(state["messages"])]}

        def approve(state):
            interrupt("Send this draft?")
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("draft", draft)
        builder.add_node("approve", approve)
        builder.add_edge(START, "draft")
        builder.add_edge("draft", "approve")
        builder.add_edge("approve", END)
        graph = builder.compile(checkpointer=InMemorySaver())
        graph.invoke({"messages": [("user", "Draft a note")]}, {"configurable": {"thread_id": "int-1"}})

    server = drive(live_server, token, [instrumentor], body, [A("Dear all, ...")])
    (run,) = top_runs()
    assert run.input == "Draft a note" and run.session.session_id == "int-1"
    assert run.status != "failed", "an interrupt waiting for the user is no failure"
    assert not (run.output or "").lstrip().startswith(("{", "[")), f"a state dump as output: {run.output!r}"
    assert [(i, n) for i, n, *_ in steps(run)] == [(1, "draft"), (2, "approve")]
    assert_conforms(server, expected=1)


def test_agents_sdk_session_memory_second_run_has_the_new_text_as_input(live_server, token):
    agents = framework("agents")
    from openinference.instrumentation import using_session

    def body(server, tracer_provider):
        agent = agents.Agent(name="helper", instructions="Help.", model=_agents_model(server))
        memory = agents.SQLiteSession("mem-1")
        with using_session("mem-1"):
            agents.Runner.run_sync(agent, "Hi, I am Ann.", session=memory)
            agents.Runner.run_sync(agent, "Who am I?", session=memory)

    server = drive(live_server, token, [_agents_instrumentor()], body, [A("Hello Ann."), A("You are Ann.")])
    runs = top_runs()
    assert [(r.input, r.output) for r in runs] == [
        ("Hi, I am Ann.", "Hello Ann."),
        ("Who am I?", "You are Ann."),
    ]
    assert_conforms(server, expected=2)


def test_langgraph_message_with_content_blocks_has_the_text_as_input(live_server, token):
    instrumentor = _langchain()
    from langchain_core.messages import HumanMessage

    def body(server, tracer_provider):
        from langchain.agents import create_agent

        graph = create_agent(_chat(server), [], system_prompt="Help.")
        graph.invoke(
            {"messages": [HumanMessage(content=[{"type": "text", "text": "Name a city in France."}])]}
        )

    server = drive(live_server, token, [instrumentor], body, [A("Lyon.")])
    (run,) = top_runs()
    assert (run.input, run.output) == ("Name a city in France.", "Lyon.")
    assert_conforms(server, expected=1)


def test_smolagents_code_agent_with_planning_interval_keeps_steps_from_one(live_server, token):
    instrumentors = _smol()
    from smolagents import CodeAgent, tool

    def body(server, tracer_provider):
        CodeAgent(
            tools=[tool(weather)], model=_smol_model(server), max_steps=4, planning_interval=1, name="coder"
        ).run("Weather in Paris?")

    script = [
        A("1. Call weather.\n2. Answer."),
        A('Thought: ask.\n<code>\nw = weather(city="Paris")\nprint(w)\n</code>'),
        A("1. Answer now."),
        A('Thought: done.\n<code>\nfinal_answer("Sunny in Paris.")\n</code>'),
    ]
    server = drive(live_server, token, instrumentors, body, script)
    (run,) = top_runs()
    assert (run.agent_name, run.input, run.output) == ("coder", "Weather in Paris?", "Sunny in Paris.")
    found = steps(run)
    assert [i for i, *_ in found] == list(range(1, len(found) + 1))
    assert [t for *_, t in found if t] == [["weather"], ["final_answer"]]
    assert sum(m for _, _, m, _ in found) == len(server.requests) == 4
    assert_conforms(server, expected=4)


def test_agno_agent_with_output_schema_answers_with_its_structured_output(live_server, token):
    instrumentor = _agno_instrumentor()
    from agno.agent import Agent
    from pydantic import BaseModel

    class Sky(BaseModel):
        city: str
        sky: str

    def body(server, tracer_provider):
        agent = Agent(name="Sky", model=_agno(server), output_schema=Sky)
        assert agent.run("Paris sky?", session_id="sky-1").content == Sky(city="Paris", sky="sunny")

    server = drive(live_server, token, [instrumentor], body, [A('{"city": "Paris", "sky": "sunny"}')])
    (run,) = top_runs()
    assert run.input == "Paris sky?"
    assert json.loads(run.output) == {"city": "Paris", "sky": "sunny"}
    assert_conforms(server, expected=1)
