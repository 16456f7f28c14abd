"""Issue #32, a third outside attack: agno 3.1 shapes neither ``test_agno_shapes.py`` nor the
other agno files drive. Each is real agno with its own SqliteDb, run against the recording
fake OpenAI server, read by ``import_agno`` with the settings it ran with, and held to the
same checks (``test_agno_shapes.check_*``): every request a stored call message for message,
every run agno ran a run here, nothing outside its parent in time, every agno block byte
exact, a second import changing nothing. ``pytest -s -n 0 tests/test_agno_shapes3.py | grep
exact`` prints each shape's figure."""

from __future__ import annotations

import json
from collections.abc import Callable
from unittest import mock

import pytest
from django.db import transaction

from history_app import models

from . import fake_openai
from .test_agno_shapes import (
    Responder,
    _model,
    add,
    check_again,
    check_blocks,
    check_calls,
    check_runs,
    check_times,
    lookup,
    recorded,
    run_import,
)

pytestmark = pytest.mark.django_db

# Set by a shape's driver between runs: what its tool does this time.
SWITCH: dict[str, bool] = {}


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    if SWITCH.get("raise"):
        raise ValueError(f"weather service down for {city} ✗")
    return f"Sunny in {city} ☀"


def halt(city: str, run_context=None) -> str:
    """Look a city up (the driver may cancel the run from inside).

    Args:
        city: The city's name.
    """
    from agno.agent import Agent

    if SWITCH.get("cancel") and run_context is not None:
        Agent.cancel_run(run_context.run_id)
    return f"{city}: looked up"


class Responder3(Responder):
    """The shapes' Responder, plus agno's reasoning agent (ReasoningSteps) and a team
    leader in tasks mode (create a task, execute it, mark all complete)."""

    def __call__(self, body: dict) -> fake_openai.Answer:
        if "messages" not in body:  # the Responses API: a tool once per question, then text
            self.n += 1
            items = body["input"] if isinstance(body.get("input"), list) else []
            tools = [(t["name"], t.get("parameters") or {}) for t in body.get("tools") or [] if t.get("name")]
            if tools and not (items and items[-1].get("type") == "function_call_output"):
                if tools[0][0] == "delegate_task_to_member":
                    system = str(items[0].get("content")) if items else ""
                    member = next((m[0] for key, m in self.members.items() if key in system), "")
                    task = json.dumps({"member_id": member, "task": f"Task {self.n}"})
                    return fake_openai.Answer(tool_calls=[("delegate_task_to_member", task)])
                return fake_openai.Answer(
                    tool_calls=[(tools[0][0], fake_openai.sample_arguments(tools[0][1]))]
                )
            return fake_openai.Answer(f"Answer {self.n}: ça va ✓")
        fmt = json.dumps(body.get("response_format") or {})
        if "reasoning_steps" in fmt:
            self.n += 1
            step = {
                "title": f"Step {self.n}",
                "action": "I will think",
                "result": "I thought ✓",
                "reasoning": "Because.",
                "next_action": "final_answer",
                "confidence": 0.9,
            }
            return fake_openai.Answer(json.dumps({"reasoning_steps": [step]}))
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if "create_task" in names:
            self.n += 1
            messages = body["messages"]
            last = messages[-1]
            mine = messages[max(i for i, m in enumerate(messages) if m["role"] == "user") :]
            done = [m for m in mine if m["role"] == "tool"]
            if last["role"] == "user" and "<current_task_state>" not in str(last.get("content")):
                return fake_openai.Answer(
                    tool_calls=[
                        (
                            "create_task",
                            json.dumps(
                                {"title": f"Task {self.n}", "description": "Do it ✓", "assignee": "alpha"}
                            ),
                        )
                    ]
                )
            if last["role"] == "tool" and str(last.get("content")).startswith("Task created: ["):
                task_id = str(last["content"]).split("[", 1)[1].split("]", 1)[0]
                return fake_openai.Answer(
                    tool_calls=[("execute_task", json.dumps({"task_id": task_id, "member_id": "alpha"}))]
                )
            if done and "mark_all_complete" not in str(mine):
                return fake_openai.Answer(
                    f"All done {self.n}",
                    tool_calls=[("mark_all_complete", json.dumps({"summary": f"Summary {self.n}"}))],
                )
            return fake_openai.Answer(f"Finished {self.n}")
        return super().__call__(body)


class Facts:
    """An output schema (a pydantic model built lazily: agno imports pydantic)."""

    @staticmethod
    def model():
        from pydantic import BaseModel

        class Facts(BaseModel):
            summary: str
            topics: list[str]

        return Facts


# ---------------------------------------------------------------- shapes


def shape_cancelled_middle(db, server):
    """The second of four runs is cancelled from inside its tool: agno stores it CANCELLED
    and leaves it out of later replays (HISTORY_SKIP_STATUSES)."""
    from agno.agent import Agent

    agent = Agent(
        name="Halted", id="halted", model=_model(server), tools=[halt], db=db,
        add_history_to_context=True,
    )  # fmt: skip
    for n, question in enumerate(("First?", "Second?", "Third?", "Fourth?")):
        SWITCH["cancel"] = n == 1
        agent.run(question, session_id="halted-1")
    SWITCH.clear()
    return ["--history-runs", "3"]


def shape_tool_raises(db, server):
    """A tool that raises in the second run: agno sends the error as the tool's result."""
    from agno.agent import Agent

    agent = Agent(
        name="Fragile", id="fragile", model=_model(server), tools=[weather], db=db,
        add_history_to_context=True,
    )  # fmt: skip
    for n, question in enumerate(("Lyon?", "Nice?", "Pau?")):
        SWITCH["raise"] = n == 1
        agent.run(question, session_id="fragile-1")
    SWITCH.clear()
    return ["--history-runs", "3"]


def shape_reasoning(db, server):
    """A reasoning model (agno 3.1 has no ``reasoning=True``: a native reasoning model, here
    an OpenAI o3-mini): agno's reasoning agent thinks before the agent answers, every run,
    with history."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    thinker = OpenAIChat(id="o3-mini", base_url=server.base_url, api_key="sk-test")
    agent = Agent(
        name="Thinker", id="thinker", model=_model(server), db=db, reasoning_model=thinker,
        instructions="Think first ✓", add_history_to_context=True,
    )  # fmt: skip
    for question in ("Why is the sky blue?", "And the sea?"):
        agent.run(question, session_id="thinker-1")
    return ["--history-runs", "3"]


def shape_tasks_team(db, server):
    """A team in tasks mode: the leader makes a task list, has a member execute a task, then
    marks all complete; its leader has history."""
    from agno.agent import Agent
    from agno.team import Team
    from agno.team.mode import TeamMode

    team = Team(
        name="Planner", id="planner", model=_model(server), db=db, mode=TeamMode.tasks,
        members=[Agent(name="Alpha", id="alpha", model=_model(server), instructions="Alpha.")],
        add_history_to_context=True, instructions="PLANNER", max_iterations=4,
    )  # fmt: skip
    for question in ("Plan a trip to Lyon.", "Plan a trip to Nice."):
        team.run(question, session_id="planner-1")
    return ["--history-runs", "3"]


def shape_team_summary(db, server):
    """A team leader with session summaries made after each run and given to the next."""
    from agno.agent import Agent
    from agno.team import Team

    team = Team(
        name="Summarised", id="summarised", model=_model(server), db=db, instructions="SUMMED",
        members=[Agent(name="Theta", id="theta", model=_model(server), instructions="Theta.")],
        enable_session_summaries=True, add_session_summary_to_context=True,
        add_history_to_context=True, num_history_runs=1,
    )  # fmt: skip
    for question in ("One?", "Two?", "Three?"):
        team.run(question, session_id="summarised-1")
    return ["--history-runs", "1"]


def shape_loop_names(db, server):
    """A Loop of two steps run three times, the same step names in each iteration, its agent
    with history, the workflow run twice."""
    from agno.agent import Agent
    from agno.workflow import Loop, Step, Workflow

    workflow = Workflow(
        name="Rounds", id="rounds", db=db,
        steps=[
            Loop(
                name="polish", max_iterations=3,
                steps=[
                    Step(name="draft", agent=Agent(name="Drafter", id="drafter", model=_model(server),
                                                   instructions="Draft.", add_history_to_context=True)),
                    Step(name="check", agent=Agent(name="Checker", id="checker", model=_model(server),
                                                   instructions="Check.")),
                ],
            ),
        ],
    )  # fmt: skip
    for question in ("Lyon", "Nice"):
        workflow.run(question, session_id="rounds-1")
    return ["--history-runs", "Drafter=3"]


def shape_workflow_team_history(db, server):
    """A workflow whose only step is a team, its leader with history, run three times."""
    from agno.agent import Agent
    from agno.team import Team
    from agno.workflow import Step, Workflow

    workflow = Workflow(
        name="Desk", id="desk", db=db,
        steps=[Step(name="answer", team=Team(
            name="Board", id="board", model=_model(server), instructions="BOARD",
            members=[Agent(name="Iota", id="iota", model=_model(server), tools=[add], instructions="Iota.")],
            add_history_to_context=True, num_history_runs=2,
        ))],
    )  # fmt: skip
    for question in ("Lyon", "Nice", "Pau"):
        workflow.run(question, session_id="desk-1")
    return ["--history-runs", "Board=2"]


def shape_history_window(db, server):
    """num_history_messages and max_tool_calls_from_history both set, two tool calls a run."""
    from agno.agent import Agent

    agent = Agent(
        name="Window", id="window", model=_model(server), tools=[add], db=db,
        add_history_to_context=True, num_history_messages=5, max_tool_calls_from_history=1,
    )  # fmt: skip
    for question in ("1+1?", "2+2?", "3+3?", "4+4?"):
        agent.run(question, session_id="window-1")
    return ["--history-messages", "Window=5", "--max-tool-calls-from-history", "Window=1"]


def shape_schema_history(db, server):
    """An output schema answered by the model itself (response_format), with history."""
    from agno.agent import Agent

    agent = Agent(
        name="Typed", id="typed", model=_model(server), db=db, output_schema=Facts.model(),
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("Facts on Lyon?", "Facts on Nice?", "Facts on Pau?"):
        agent.run(question, session_id="typed-1")
    return ["--history-runs", "3"]


def shape_raw_input_members(db, server):
    """determine_input_for_members=False: members get the user's input as it came."""
    from agno.agent import Agent
    from agno.team import Team

    team = Team(
        name="Passthru", id="passthru", model=_model(server), db=db, instructions="PASSTHRU",
        members=[
            Agent(name="Kappa", id="kappa", model=_model(server), instructions="Kappa."),
            Agent(name="Lambda", id="lambda", model=_model(server), instructions="Lambda."),
        ],
        determine_input_for_members=False, add_history_to_context=True,
    )  # fmt: skip
    for question in ("One?", "Two?", "Three?"):
        team.run(question, session_id="passthru-1")
    return ["--history-runs", "3"]


def shape_two_sessions(db, server):
    """One agent in two sessions taken in turns, and another agent in a third session."""
    from agno.agent import Agent

    one = Agent(
        name="Juggler", id="juggler", model=_model(server), tools=[add], db=db, add_history_to_context=True
    )
    other = Agent(name="Solo", id="solo", model=_model(server), db=db, add_history_to_context=True)
    for n in range(3):
        one.run(f"A{n}?", session_id="juggle-a")
        one.run(f"B{n}?", session_id="juggle-b")
        other.run(f"C{n}?", session_id="solo-c")
    return ["--history-runs", "2"]


def shape_confirmation(db, server):
    """A tool requiring confirmation: the first run pauses and is left paused (agno skips a
    PAUSED run in later replays), the second is confirmed and continued, the third rejected
    and continued, and the fourth pauses at the end."""
    from agno.agent import Agent
    from agno.tools import tool

    confirmed = tool(requires_confirmation=True)(weather)
    agent = Agent(
        name="Careful", id="careful", model=_model(server), tools=[confirmed], db=db,
        add_history_to_context=True,
    )  # fmt: skip
    agent.run("Lyon?", session_id="careful-1")  # left paused
    for question, yes in (("Nice?", True), ("Pau?", False)):
        run = agent.run(question, session_id="careful-1")
        for requirement in run.active_requirements:
            requirement.confirm() if yes else requirement.reject()
        agent.continue_run(run_response=run, requirements=run.requirements, session_id="careful-1")
    agent.run("Thanks?", session_id="careful-1")
    return ["--history-runs", "3"]


def shape_streamed(db, server):
    """Streamed runs (stream=True) with a tool and history."""
    from agno.agent import Agent

    agent = Agent(
        name="Streamer", id="streamer", model=_model(server), tools=[add], db=db,
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("2+3?", "4+5?", "6+7?"):
        for _ in agent.run(question, session_id="streamer-1", stream=True):
            pass
    return ["--history-runs", "3"]


def shape_session_state(db, server):
    """Session state given to the context, changed by a tool, with history."""
    from agno.agent import Agent

    def remember(item: str, run_context=None) -> str:
        """Remember an item.

        Args:
            item: What to remember.
        """
        run_context.session_state.setdefault("items", []).append(item)
        return f"Remembered {item}"

    agent = Agent(
        name="Stateful", id="stateful", model=_model(server), tools=[remember], db=db,
        session_state={"items": []}, add_session_state_to_context=True, add_history_to_context=True,
    )  # fmt: skip
    for question in ("Keep Lyon.", "Keep Nice.", "What do you keep?"):
        agent.run(question, session_id="stateful-1")
    return ["--history-runs", "3"]


def shape_responses_api(db, server):
    """An agent on OpenAI's Responses API (OpenAIResponses) with a tool and history."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIResponses

    model = OpenAIResponses(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
    agent = Agent(
        name="Responder", id="responder", model=model, tools=[add], db=db, instructions="Add ✓",
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("2+3?", "4+5?", "6+7?"):
        agent.run(question, session_id="responses-1")
    return ["--history-runs", "3"]


def shape_responses_team(db, server):
    """A team on the Responses API, its leader with history, its member with a tool."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIResponses
    from agno.team import Team

    def model():
        return OpenAIResponses(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

    team = Team(
        name="Relay", id="relay", model=model(), db=db, instructions="RELAY",
        members=[Agent(name="Xi", id="xi", model=model(), tools=[add], instructions="Xi.")],
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("One?", "Two?"):
        team.run(question, session_id="relay-1")
    return ["--history-runs", "3"]


def shape_streamed_reasoning(db, server):
    """A reasoning model on a streamed run (agno streams the reasoning agent too)."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    thinker = OpenAIChat(id="o3-mini", base_url=server.base_url, api_key="sk-test")
    agent = Agent(
        name="StreamThinker", id="stream-thinker", model=_model(server), db=db, reasoning_model=thinker,
        instructions="Think ✓", tools=[add], add_history_to_context=True,
    )  # fmt: skip
    for question in ("2+3?", "4+5?"):
        for _ in agent.run(question, session_id="stream-thinker-1", stream=True):
            pass
    return ["--history-runs", "3"]


def shape_team_schema(db, server):
    """A team answering in an output schema, its leader with history."""
    from agno.agent import Agent
    from agno.team import Team

    team = Team(
        name="Typist", id="typist", model=_model(server), db=db, instructions="TYPIST",
        members=[Agent(name="Omicron", id="omicron", model=_model(server), instructions="Omicron.")],
        output_schema=Facts.model(), add_history_to_context=True,
    )  # fmt: skip
    for question in ("Facts on Lyon?", "Facts on Nice?"):
        team.run(question, session_id="typist-1")
    return ["--history-runs", "3"]


def shape_chat_history_tool(db, server):
    """read_chat_history: the agent reads its session's history through a tool."""
    from agno.agent import Agent

    agent = Agent(name="Reader", id="reader", model=_model(server), db=db, read_chat_history=True)
    for question in ("Lyon?", "Nice?", "What did I ask?"):
        agent.run(question, session_id="reader-1")
    return []


def _chars_by_four(messages, tools=None) -> int:
    """A token counter that needs no download (agno's default fetches tiktoken's tables)."""
    return sum(len(str(m.content or "")) for m in messages) // 4


def shape_compaction(db, server):
    """Compaction: once the session passes a (tiny) token threshold, agno folds the older runs
    into a summary its compaction model writes, and replays that summary and the last run."""
    from agno.agent import Agent
    from agno.compaction.compaction import Compaction

    agent = Agent(
        name="Folder", id="folder", model=_model(server), db=db, tools=[lookup],
        compaction=Compaction(model=_model(server), compact_at_tokens=3000, uncompacted_runs=1,
                              token_counter=_chars_by_four),
        add_history_to_context=True,
    )  # fmt: skip
    # agno counts with tiktoken, which downloads its tables: offline, agno's own fallback for
    # a machine without a tokenizer (character-based estimates) stands in.
    with mock.patch("agno.utils.tokens._select_tokenizer", lambda model_id: ("none", None)):
        for question in ("Lyon?", "Nice?", "Pau?", "Metz?", "Brest?"):
            agent.run(question, session_id="folder-1")
    return ["--history-runs", "3"]


def shape_workflow_no_outputs(db, server):
    """A workflow with store_executor_outputs=False: agno keeps no step executor runs."""
    from agno.agent import Agent
    from agno.workflow import Step, Workflow

    workflow = Workflow(
        name="Terse", id="terse", db=db, store_executor_outputs=False,
        steps=[Step(name="draft", agent=Agent(name="Scribe", id="scribe", model=_model(server), instructions="Draft."))],
    )  # fmt: skip
    for question in ("Lyon", "Nice"):
        workflow.run(question, session_id="terse-1")
    return []


def shape_streamed_team(db, server):
    """A team run streamed with its events, the leader with history, a member with a tool."""
    from agno.agent import Agent
    from agno.team import Team

    team = Team(
        name="Live", id="live", model=_model(server), db=db, instructions="LIVE",
        members=[Agent(name="Mu", id="mu", model=_model(server), tools=[add], instructions="Mu.")],
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("One?", "Two?"):
        for _ in team.run(question, session_id="live-1", stream=True, stream_events=True):
            pass
    return ["--history-runs", "3"]


def shape_async_sessions(db, server):
    """Two sessions of one agent run concurrently (arun, asyncio.gather), three turns each."""
    import asyncio

    from agno.agent import Agent

    agent = Agent(
        name="Async", id="async", model=_model(server), tools=[add], db=db, add_history_to_context=True
    )

    async def turns(session: str) -> None:
        for n in range(3):
            await agent.arun(f"{session} {n}?", session_id=session)

    async def both() -> None:
        await asyncio.gather(turns("north"), turns("south"))

    asyncio.run(both())
    return ["--history-runs", "3"]


def shape_message_list_input(db, server):
    """A run given a list of messages (a conversation the caller kept) instead of a text."""
    from agno.agent import Agent
    from agno.models.message import Message

    agent = Agent(name="Lister", id="lister", model=_model(server), db=db, add_history_to_context=True)
    agent.run(
        [
            Message(role="user", content="Hello, I am Zoë."),
            Message(role="assistant", content="Hi Zoë ✓"),
            Message(role="user", content="What is my name?"),
        ],
        session_id="lister-1",
    )
    agent.run("And now?", session_id="lister-1")
    return ["--history-runs", "3"]


def shape_tool_call_limit(db, server):
    """tool_call_limit=1 with two tool calls in each answer: agno runs one."""
    from agno.agent import Agent

    agent = Agent(
        name="Limited", id="limited", model=_model(server), tools=[add], db=db, tool_call_limit=1,
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("1+1?", "2+2?"):
        agent.run(question, session_id="limited-1")
    return ["--history-runs", "3"]


def shape_team_reasoning(db, server):
    """A team leader with a reasoning model, delegating, with history."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    team = Team(
        name="Sages", id="sages", model=_model(server), db=db, instructions="SAGES",
        reasoning_model=OpenAIChat(id="o3-mini", base_url=server.base_url, api_key="sk-test"),
        members=[Agent(name="Nu", id="nu", model=_model(server), instructions="Nu.")],
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("One?", "Two?"):
        team.run(question, session_id="sages-1")
    return ["--history-runs", "3"]


def shape_stop_after_tool(db, server):
    """A tool with stop_after_tool_call: the run ends on the tool's result, no second call."""
    from agno.agent import Agent
    from agno.tools import tool

    stopping = tool(stop_after_tool_call=True)(weather)
    agent = Agent(
        name="Stopper", id="stopper", model=_model(server), tools=[stopping], db=db,
        add_history_to_context=True,
    )  # fmt: skip
    for question in ("Lyon?", "Nice?", "Pau?"):
        agent.run(question, session_id="stopper-1")
    return ["--history-runs", "3"]


SHAPES: dict[str, tuple[Callable, Callable[[], Responder]]] = {
    "cancelled_middle": (shape_cancelled_middle, Responder3),
    "tool_raises": (shape_tool_raises, Responder3),
    "reasoning": (shape_reasoning, Responder3),
    "tasks_team": (shape_tasks_team, Responder3),
    "team_summary": (shape_team_summary, lambda: Responder3({"SUMMED": ["theta"]})),
    "loop_names": (shape_loop_names, Responder3),
    "workflow_team_history": (shape_workflow_team_history, lambda: Responder3({"BOARD": ["iota"]})),
    "history_window": (shape_history_window, lambda: Responder3(tool_calls=2)),
    "schema_history": (shape_schema_history, Responder3),
    "raw_input_members": (shape_raw_input_members, lambda: Responder3({"PASSTHRU": ["kappa", "lambda"]})),
    "two_sessions": (shape_two_sessions, Responder3),
    "confirmation": (shape_confirmation, Responder3),
    "streamed": (shape_streamed, Responder3),
    "session_state": (shape_session_state, Responder3),
    "responses_api": (shape_responses_api, Responder3),
    "responses_team": (shape_responses_team, lambda: Responder3({"RELAY": ["xi"]})),
    "streamed_reasoning": (shape_streamed_reasoning, Responder3),
    "team_schema": (shape_team_schema, lambda: Responder3({"TYPIST": ["omicron"]})),
    "chat_history_tool": (shape_chat_history_tool, Responder3),
    "compaction": (shape_compaction, Responder3),
    "workflow_no_outputs": (shape_workflow_no_outputs, Responder3),
    "streamed_team": (shape_streamed_team, lambda: Responder3({"LIVE": ["mu"]})),
    "async_sessions": (shape_async_sessions, Responder3),
    "message_list_input": (shape_message_list_input, Responder3),
    "tool_call_limit": (shape_tool_call_limit, lambda: Responder3(tool_calls=2)),
    "team_reasoning": (shape_team_reasoning, lambda: Responder3({"SAGES": ["nu"]})),
    "stop_after_tool": (shape_stop_after_tool, Responder3),
}

# What agno stores nowhere, by (check, shape): a strict xfail naming each.
XFAIL: dict[tuple[str, str], str] = {
    ("calls", "workflow_no_outputs"): (
        "store_executor_outputs=False: agno stores the step run's messages nowhere (no "
        "step_executor_runs; the session's workflow_data names the steps only, not the step "
        "agent's instructions), so the 2 calls' messages (system and input) cannot be rebuilt. "
        "Each call is stored from step_results[].metrics.details (model, tokens, the answer), "
        "marked messages_not_stored"
    ),
    ("calls", "team_summary"): (
        "a team leader's session-summary call after each run is rebuilt message for message "
        "(reconstructed, from agno's SessionSummaryManager code and the session's runs), but its "
        "answer (the raw JSON the model wrote) is stored nowhere: agno keeps only the session's "
        "latest summary, parsed (agno_sessions.summary), so the 3 answers cannot match"
    ),
}


def cases(check: str):
    return [
        pytest.param(shape, marks=pytest.mark.xfail(strict=True, reason=XFAIL[(check, shape)]))
        if (check, shape) in XFAIL
        else shape
        for shape in SHAPES
    ]


def _imported(shape, tmp_path_factory):
    path, requests, flags = recorded(shape, tmp_path_factory, SHAPES)
    run_import(path, flags)
    return path, requests, flags


@pytest.fixture(scope="module")
def imported(request, django_db_setup, django_db_blocker, tmp_path_factory):
    """A shape imported once per module for the five checks below, which only read what it
    stored (the second-import check imports again inside its own savepoint): as in
    tests/test_agno_shapes.py, the import sits in a transaction opened here, each test's
    own is a savepoint inside it, and this one is rolled back when pytest moves to another
    shape or leaves the module. Every test of this module takes it (a test that imports
    on its own with ``None``), so that none runs inside another shape's import."""
    with django_db_blocker.unblock(), transaction.atomic():
        # None: a test that imports on its own, in a database with no shape in it.
        yield None if request.param is None else _imported(request.param, tmp_path_factory)
        transaction.set_rollback(True)


@pytest.mark.parametrize("imported", cases("calls"), indirect=True)
def test_every_request_is_a_stored_call_message_for_message(imported, request):
    _, requests, _ = imported
    check_calls(requests, f"shapes3 {request.node.callspec.params['imported']}")


@pytest.mark.parametrize("imported", cases("runs"), indirect=True)
def test_every_run_agno_ran_is_a_run(imported, request):
    path, _, _ = imported
    check_runs(path, f"shapes3 {request.node.callspec.params['imported']}")


@pytest.mark.parametrize("imported", cases("times"), indirect=True)
def test_nothing_sits_outside_its_parent(imported):
    check_times()


@pytest.mark.parametrize("imported", cases("blocks"), indirect=True)
def test_every_agno_block_rebuilds_identical(imported, alice_client):
    check_blocks(alice_client)


@pytest.mark.parametrize("imported", cases("again"), indirect=True)
def test_a_second_import_changes_nothing(imported):
    path, _, flags = imported
    check_again(path, flags)


# ---------------------------------------------------------------- what each fix stores


@pytest.mark.parametrize("imported", ["reasoning"], indirect=True)
def test_the_reasoning_agents_call_is_its_own_reconstructed_call(imported):
    for run in models.Run.objects.filter(agent_name="Thinker"):
        first, main = run.model_calls.order_by("position")
        assert first.model == "o3-mini" and first.metadata["role"] == "reasoning_model"
        assert "reconstructed" in first.metadata
        # Given the system message and the input only, never the replayed history.
        assert [m["role"] for m in first.messages] == ["developer", "user"]
        assert first.messages[-1]["content"] == run.input
        assert main.model == "gpt-4o-mini" and "reasoning_model" not in main.metadata.get("role", "")
        assert main.messages[-1]["content"].startswith("<thinking>\n")


@pytest.mark.parametrize("imported", ["responses_api"], indirect=True)
def test_a_responses_api_run_is_sent_with_the_call_ids_the_model_gave(imported):
    calls = list(models.ModelCall.objects.filter(run__agent_name="Responder"))
    assert calls and {c.api for c in calls} == {"responses"}
    ids = [t["id"] for c in calls for m in c.messages for t in m.get("tool_calls") or []]
    assert ids and all(i.startswith("call_") for i in ids), ids


@pytest.mark.parametrize("imported", ["message_list_input"], indirect=True)
def test_assistant_messages_given_as_input_are_not_model_calls(imported):
    first, second = models.Run.objects.filter(agent_name="Lister").order_by("started_at")
    (call,) = first.model_calls.all()
    assert second.model_calls.count() == 1
    assert [m["content"] for m in call.messages] == ["Hello, I am Zoë.", "Hi Zoë ✓", "What is my name?"]


@pytest.mark.parametrize("imported", ["cancelled_middle"], indirect=True)
def test_cancelled_and_paused_runs_are_runs_left_out_of_later_replays(imported, tmp_path_factory):
    runs = {r.input: r for r in models.Run.objects.filter(agent_name="Halted")}
    assert runs["Second?"].status != "completed"
    last = runs["Fourth?"].model_calls.order_by("position").first()
    assert [m["content"] for m in last.messages if m["role"] == "user"] == ["First?", "Third?", "Fourth?"]
    _imported("confirmation", tmp_path_factory)
    careful = {r.input: r for r in models.Run.objects.filter(agent_name="Careful")}
    last = careful["Thanks?"].model_calls.order_by("position").first()
    assert [m["content"] for m in last.messages if m["role"] == "user"] == ["Nice?", "Pau?", "Thanks?"]


@pytest.mark.parametrize("imported", ["workflow_no_outputs"], indirect=True)
def test_a_step_run_agno_did_not_keep_is_a_run_with_its_calls_marked_not_stored(imported):
    for workflow in models.Run.objects.filter(agent_name="Terse"):
        (step,) = workflow.iterations.all()
        (scribe,) = models.Run.objects.filter(parent_run_id=workflow.run_id)
        assert scribe.run_id == step.metadata["step_run_id"] and scribe.agent_name == "Scribe"
        assert "store_executor_outputs=False" in scribe.metadata["messages_not_stored"]
        (call,) = scribe.model_calls.all()
        assert call.messages == [] and "messages_not_stored" in call.metadata
        assert "reconstructed" in call.metadata and call.model == "gpt-4o-mini"
        assert call.input_tokens == fake_openai.PROMPT_TOKENS and call.output == step.metadata["output"]


@pytest.mark.parametrize("imported", ["compaction"], indirect=True)
def test_each_fold_is_a_reconstructed_compaction_call_and_later_runs_replay_its_summary(imported):
    path, _, _ = imported
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        folds = dict(db.execute("SELECT run_id, summary FROM agno_compactions").fetchall())
    finally:
        db.close()
    assert len(folds) == 3
    for run_id, summary in folds.items():
        run = models.Run.objects.get(run_id=run_id)
        (call,) = [c for c in run.model_calls.all() if c.metadata.get("role") == "compaction_model"]
        assert "reconstructed" in call.metadata and call.output == summary
        assert call.messages[0]["role"] == "developer" and call.messages[1]["role"] == "user"
        main = [c for c in run.model_calls.all() if c.metadata.get("role") != "compaction_model"]
        assert main and all(
            c.messages[0]["content"].startswith("Summary of earlier conversation (compacted):\n\n" + summary)
            for c in main
        )
        assert main[0].metadata["reconstructed_history"]["compaction_id"]


@pytest.mark.parametrize("imported", [None], indirect=True)
def test_without_the_compactions_table_each_fold_is_read_from_its_run(imported, tmp_path_factory, tmp_path):
    """A run keeps the fold it made (``compaction``) but not the folded text: that is rendered
    from the stored messages as agno renders it for its summarizer, to the same requests."""
    import sqlite3

    path, requests, flags = recorded("compaction", tmp_path_factory, SHAPES)
    copy = tmp_path / "agno.db"
    source, target = sqlite3.connect(f"file:{path}?mode=ro", uri=True), sqlite3.connect(copy)
    try:
        source.backup(target)
        target.execute("DROP TABLE agno_compactions")
        target.commit()
    finally:
        source.close()
        target.close()
    run_import(copy, flags)
    check_calls(requests, "shapes3 compaction without agno_compactions")
