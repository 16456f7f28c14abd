"""One run of each framework the dashboard reads over OTLP, as its user opens it in a
browser (issue #33): the framework runs for real against the recording fake OpenAI server
and sends its spans to a live test server (the drives of ``tests/test_framework_runs.py``
and ``tests/test_otlp_live.py``); the run's page shows the agent's name, the user's
question, the tool call in an iteration numbered from 1 and the final answer, with no
console error or CSP violation. Each page's top is saved as
``test-output/shots/fw-<framework>.png`` (the README's framework table; copied to
``.docs/screenshots/`` by hand)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from history_app import models

from . import fake_openai
from . import test_framework_crewai as crew
from . import test_framework_runs as drives
from .test_browser import OUTPUT, log_in, open_page
from .test_otlp_live import run_openai_client_support_bot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 1280
# The most of a page a screenshot keeps: the run's header, its input and first iterations.
MOST = 1700


def weather_answers(*cities: str) -> list[fake_openai.Answer]:
    """The fake server's answers to one weather question per city: the weather tool's
    call, then the answer a reader expects beside that question."""
    script = []
    for city in cities:
        script += [
            fake_openai.Answer(tool_calls=[("weather", json.dumps({"city": city}))]),
            fake_openai.Answer(f"Sunny in {city}."),
        ]
    return script


def post_recorded_crew(live_server, token) -> None:
    """What the real CrewAI sent for a crew kicked off for Paris and Lyon (recorded in
    ``tests/fixtures/crewai/``: CrewAI needs an environment of its own, see
    ``tests/test_framework_crewai.py``), posted to the live server as the crew posted it."""
    bodies = sorted(crew.RECORDED.glob("otlp-*.pb"), key=lambda p: int(p.stem.split("-")[1]))
    assert bodies, "tests/fixtures/crewai/ holds no recorded request"
    for body in bodies:
        request = urllib.request.Request(
            f"{live_server.url}/v1/traces",
            data=body.read_bytes(),
            headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200


@dataclass(frozen=True)
class Case:
    drive: Callable  # (live_server, token): the framework's run(s), sent to the live server
    question: str  # the run's input: the user's text, whatever the framework wraps it in
    name: str  # the run's heading: the agent (or team) the user named
    answer: str
    tool: str  # the tool the model asked for in iteration 1
    shown: tuple[str, ...] = ()  # more text the page shows this framework's user
    member: bool = False  # the page of the member run that made the tool call, not of the top run


CASES = {
    # A triage agent hands off to the agent with the weather tool: the page of the member
    # run of the agent handed to (the Runner's run, its parent, lists no iteration).
    "openai-agents": Case(
        drives.run_openai_agents_handoff,
        question="Weather in Paris?",
        name="weather_agent",
        answer="Sunny in Paris.",
        tool="weather",
        shown=("Parent run", "Kind\nmember", "Framework\nopenai-agents"),
        member=True,
    ),
    # A graph of LangChain's create_agent (the connect page's recipe), one question of a thread.
    "langgraph": Case(
        lambda live_server, token: drives.run_langgraph_thread(
            live_server, token, "create_agent", weather_answers("Paris", "Paris", "Paris")
        ),
        question="Weather in Paris? (question 1)",
        name="LangGraph",
        answer="Sunny in Paris.",
        tool="weather",
        shown=("Iteration 1 · model", "Iteration 2 · model", "Framework\nlanggraph"),
    ),
    "smolagents": Case(
        drives.run_smolagents_task,
        question="Weather in Paris?",
        name="weather_agent",
        answer="Sunny in Paris.",
        tool="weather",
        shown=("final_answer", "Framework\nsmolagents"),
    ),
    "pydantic-ai": Case(
        lambda live_server, token: drives.run_pydantic_ai_conversation(
            live_server, token, weather_answers("Paris", "Lyon")
        ),
        question="Weather in Paris?",
        name="weather",
        answer="Sunny in Paris.",
        tool="weather",
        shown=("Framework\npydantic-ai",),
    ),
    # A team whose leader delegates to its member with the weather tool.
    "agno": Case(
        drives.run_agno_team_and_workflow,
        question="Weather in Paris?",
        name="desk",
        answer="It is sunny in Paris.",
        tool="delegate_task_to_member",
        shown=("Started the member run of Researcher", "Framework\nagno"),
    ),
    # A crew's researcher, given its task, calls the weather tool and answers: the page of
    # its member run (the crew's run is the kickoff; each agent's task a member run).
    "crewai": Case(
        post_recorded_crew,
        question="Find the weather in Paris.",
        name="Researcher",
        answer="Sunny in Paris.",
        tool="weather",
        shown=("Parent run", "Framework\ncrewai"),
        member=True,
    ),
    # The plain OpenAI client, the agent and its tool traced with OpenInference's decorators.
    "openai": Case(
        run_openai_client_support_bot,
        question="What is 2+3?",
        name="support_bot",
        answer="The answer is 5.",
        tool="add",
        shown=("Framework\nopeninference",),  # the OpenAI client alone: the instrumentation's family
    ),
}


def in_a_thread(function, *args):
    """``function(*args)`` in a thread of its own: Playwright's sync API keeps an event loop
    running in this one, and the frameworks' synchronous calls run one with asyncio.run()."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.mark.parametrize("key", list(CASES))
def test_one_run_of_each_framework_as_its_user_sees_it(key, chromium, live_server, token, django_user_model):
    case = CASES[key]
    in_a_thread(case.drive, live_server, token)
    if case.member:
        run = models.Run.objects.get(parent_run_id__isnull=False, input=case.question, agent_name=case.name)
    else:
        run = models.Run.objects.get(parent_run_id__isnull=True, input=case.question)
    page = open_page(chromium, live_server, viewport={"width": WIDTH, "height": 900})
    log_in(page, live_server, django_user_model)
    page.goto(live_server.url + run.get_absolute_url())
    page.wait_for_selector("#transcript")

    assert page.inner_text("#transcript h1").split()[0] == case.name
    input_card = page.locator("#transcript section.card", has=page.locator("h2", has_text="Input"))
    assert input_card.locator("pre.text").first.inner_text() == case.question
    assert page.inner_text("#transcript section.answer .markdown").strip() == case.answer
    headings = page.locator("section.iteration > h2").all_inner_texts()
    assert (
        headings
        and headings[0].startswith("Iteration 1")
        and not any(h.startswith("Iteration 0") for h in headings)
    )
    first = page.locator("section.iteration#iteration-1")
    assert first.locator(".tool-call h3 code").first.inner_text() == case.tool
    text = page.inner_text("#transcript")
    for shown in case.shown:
        assert shown in text, shown
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH

    # The run's header, its input and first iterations: to the end of the final answer,
    # or of the iteration with the tool call where the whole would be too tall.
    bottom = page.evaluate(
        "Math.ceil(document.querySelector('#transcript section.answer').getBoundingClientRect().bottom"
        " + window.scrollY) + 16"
    )
    if bottom > MOST:
        bottom = page.evaluate(
            "Math.ceil(document.querySelector('#iteration-1').getBoundingClientRect().bottom"
            " + window.scrollY) + 16"
        )
    shots = OUTPUT / "shots"
    shots.mkdir(parents=True, exist_ok=True)
    clip = {"x": 0, "y": 0, "width": WIDTH, "height": min(bottom, MOST)}
    page.screenshot(path=str(shots / f"fw-{key}.png"), full_page=True, clip=clip)
    page.context.close()
    assert page.problems == []
