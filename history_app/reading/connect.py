"""The recipes that connect an agent framework to a project: one script a framework, in
``recipes/``, the one source of both the dashboard's connect page and the OpenTelemetry
help page's "Connect a framework" section (``docs_section()`` writes that section;
``python -m history_app.reading.connect`` rewrites it in ``docs/otlp.md``, and a test holds
the two equal).

Each script runs as it is, with an ingest token in the environment variable ``TOKEN``,
against a dashboard serving on ``http://127.0.0.1:8000`` (the address every example of the
docs uses); the connect page puts the project's own addresses in its place
(``code_for``). The scripts name no project: the token does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
DOCS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "otlp.md"
# The addresses the scripts are written with (the docs' local server).
LOCAL_TRACES = "http://127.0.0.1:8000/v1/traces"
LOCAL_INGEST = "http://127.0.0.1:8000/api/v1/ingest"
# The session every recipe puts its run in.
SESSION = "ticket-4711"
HEADING = "## Connect a framework"
# Where a token made on the connect page waits, in the user's session, for the one page
# that shows it.
NEW_TOKEN_KEY = "history_connect_token"


@dataclass(frozen=True)
class Recipe:
    key: str  # the page's ``framework`` parameter
    title: str
    file: str  # in recipes/
    instruments: tuple[str, ...]  # what records the run (code)
    session: str  # the code that names the run's session
    session_note: str  # what that code is
    note: str = ""  # anything else the page says about it

    @property
    def code(self) -> str:
        """The script as the docs show it (the local addresses)."""
        return (RECIPES_DIR / self.file).read_text(encoding="utf-8")

    @property
    def install(self) -> str:
        """The ``pip install`` line the script starts with, as a command."""
        first = self.code.splitlines()[0]
        return first.removeprefix("# ").split("   (")[0]

    @property
    def endpoint_path(self) -> str:
        return "/api/v1/ingest" if LOCAL_INGEST in self.code else "/v1/traces"

    @property
    def anchor(self) -> str:
        """The recipe's heading's anchor on the help page (GitHub's way)."""
        kept = "".join(c for c in self.title.lower() if c.isalnum() or c in " -_")
        return kept.replace(" ", "-")

    def code_for(self, *, traces_url: str, ingest_url: str) -> str:
        """The script with a server's own addresses in place of the local ones."""
        return self.code.replace(LOCAL_TRACES, traces_url).replace(LOCAL_INGEST, ingest_url)


RECIPES = (
    Recipe(
        "openai-agents",
        "OpenAI Agents SDK",
        "with_openai_agents.py",
        ("OpenAIAgentsInstrumentor",),
        f'with using_session("{SESSION}"):',
        "OpenInference's context manager: every span started inside it carries the session id",
    ),
    Recipe(
        "langgraph",
        "LangGraph and LangChain",
        "with_langgraph.py",
        ("LangChainInstrumentor",),
        f'{{"configurable": {{"thread_id": "{SESSION}"}}}}',
        "LangGraph's thread id is the session; a LangChain chain alone takes "
        f'metadata={{"session_id": "{SESSION}"}} in its config',
    ),
    Recipe(
        "smolagents",
        "smolagents",
        "with_smolagents.py",
        ("SmolagentsInstrumentor", "OpenAIInstrumentor"),
        f'with using_session("{SESSION}"):',
        "OpenInference's context manager",
        "The OpenAI client's instrumentation beside smolagents' keeps each model call's messages "
        "exactly as they were sent.",
    ),
    Recipe(
        "pydantic-ai",
        "Pydantic AI",
        "with_pydantic_ai.py",
        ("Agent.instrument_all",),
        f'conversation_id="{SESSION}"',
        "Pydantic AI's conversation id, reported as gen_ai.conversation.id, is the session",
        "Pydantic AI's own instrumentation writes the GenAI conventions, which the dashboard reads: "
        "no OpenInference package is needed.",
    ),
    Recipe(
        "agno",
        "agno",
        "with_agno.py",
        ("AgnoInstrumentor",),
        f'session_id="{SESSION}"',
        "agno's own session id, which the instrumentation reports as the session",
    ),
    Recipe(
        "crewai",
        "CrewAI",
        "with_crewai.py",
        ("CrewAIInstrumentor", "OpenAIInstrumentor"),
        f'with using_session("{SESSION}"):',
        "OpenInference's context manager (CrewAI's instrumentation sends no session of its own)",
        "One crew.kickoff is one run named after the crew, each agent's task a member run. The "
        "OpenAI client's instrumentation beside CrewAI's keeps each model call's messages exactly as "
        "they were sent. CrewAI 1.x requires openai<3: give it an environment of its own if your "
        "agents also use the OpenAI Agents SDK.",
    ),
    Recipe(
        "openai",
        "The OpenAI client",
        "with_openai_client.py",
        ("OpenAIInstrumentor", "OITracer"),
        f'with using_session("{SESSION}"):',
        "OpenInference's context manager",
        "The function under @tracer.agent (an OITracer's agent span) is one run; the OpenAI calls "
        "inside it are its model calls.",
    ),
    Recipe(
        "native",
        "The agent-history library",
        "with_native.py",
        ("AgentHistoryMiddleware", "HttpSink"),
        f'session_id="{SESSION}"',
        "the middleware's session id; an agent built on autourgos takes the middleware as it is: "
        "Agent(llm=..., middleware=[history])",
        "No OpenTelemetry: the library records the run itself and sends it in the native format.",
    ),
)
BY_KEY = {recipe.key: recipe for recipe in RECIPES}


def recipe(key: str | None) -> Recipe | None:
    """The recipe named ``key``; the first one when none is named; None for a name that is
    none of them."""
    if not key:
        return RECIPES[0]
    return BY_KEY.get(key)


def docs_section() -> str:
    """The help page's "Connect a framework" section, from the recipes."""
    lines = [
        HEADING,
        "",
        "The exact lines for each framework, the same as on a project's **Connect** page (linked",
        "from its settings and from its empty sessions list), which puts the project's own",
        "address in place of `http://127.0.0.1:8000` and makes an ingest token for them. Each is",
        "a whole script: with the token in `TOKEN` (see the top of this page) and",
        "`OPENAI_API_KEY` set, `python` runs it, one agent call whose run lands in the session",
        f"`{SESSION}` of the token's project. `force_flush()` (the library's `flush()`) sends what",
        "is waiting before a short script exits; a long-running process need not call it.",
        "`tests/test_connect.py` runs every one against a live server, with the fake OpenAI",
        "server in place of OpenAI.",
        "",
    ]
    for one in RECIPES:
        lines += [
            f"### {one.title}",
            "",
            "- Recorded by: " + " and ".join(f"`{name}`" for name in one.instruments),
            f"- Sent to: `{one.endpoint_path}`",
            f"- The session: `{one.session}` ({one.session_note})",
            "",
            *([one.note, ""] if one.note else []),
            "```python",
            one.code.rstrip("\n"),
            "```",
            "",
        ]
    return "\n".join(lines)


def docs_with_section(page: str) -> str:
    """``page`` (the help page's Markdown) with its section replaced by ``docs_section()``."""
    start = page.index(f"\n{HEADING}\n") + 1
    end = page.index("\n## ", start) + 1
    return page[:start] + docs_section() + page[end:]


if __name__ == "__main__":
    text = DOCS_PAGE.read_text(encoding="utf-8")
    DOCS_PAGE.write_text(docs_with_section(text), encoding="utf-8")
    sys.exit(0)
