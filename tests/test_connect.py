"""The connect page and its recipes (``history_app/reading/connect.py``): every recipe
runs as the page shows it, against a live server, with the recording fake OpenAI server
in place of OpenAI; its run arrives in the token's project, in the recipe's session. The
page never makes a token on a GET, makes one on an admin's POST and shows it once, and
refuses a viewer's POST; the help page holds the same recipes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from history_app import models
from history_app.access.auth import register_token
from history_app.reading import connect

from . import fake_openai
from .test_conformance import framework

pytestmark = pytest.mark.django_db(transaction=True)

RECIPE_TOKEN = "aht_connect-recipe-token-0123456789"

# The fake server's answers, by recipe, where its default ("call each offered tool once,
# then answer") does not end the run: smolagents ends only through its final_answer tool.
SCRIPTS = {
    "smolagents": [
        fake_openai.Answer(tool_calls=[("get_weather", '{"city": "Lima"}')]),
        fake_openai.Answer(tool_calls=[("final_answer", '{"answer": "It is sunny in Lima."}')]),
    ],
}
# The module each recipe needs (a skip naming it where it is not installed; a failure
# with HISTORY_REQUIRE_FRAMEWORKS=1, as in CI).
MODULES = {
    "openai-agents": "agents",
    "langgraph": "langgraph",
    "smolagents": "smolagents",
    "pydantic-ai": "pydantic_ai",
    "agno": "agno",
    "openai": "openai",
    "native": "openai",
}


@pytest.fixture
def other_project(db):
    """A second project, its admin bob, and its ingest token: a recipe's run must land
    there, not in the default project."""
    project = models.Project.objects.create(slug="support", name="Support")
    register_token(name="recipe", token=RECIPE_TOKEN, scopes=["ingest"], project=project)
    return project


@pytest.mark.parametrize("key", [r.key for r in connect.RECIPES])
def test_each_recipe_sends_its_run_to_the_tokens_project(key, live_server, other_project, tmp_path):
    framework(MODULES[key])
    recipe = connect.BY_KEY[key]
    code = recipe.code_for(
        traces_url=f"{live_server.url}/v1/traces", ingest_url=f"{live_server.url}/api/v1/ingest"
    )
    assert "127.0.0.1:8000" not in code
    script = tmp_path / recipe.file
    script.write_text(code, encoding="utf-8")
    server = fake_openai.start(SCRIPTS.get(key))
    # Run as a user runs it: a script of its own, in a fresh Python (no instrumentation
    # left switched on in this process), OpenAI's address pointed at the fake server.
    env = {
        **os.environ,
        "TOKEN": RECIPE_TOKEN,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    try:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert server.requests, "the recipe made no model call"
    runs = models.Run.objects.filter(project=other_project)
    assert runs.exists(), "no run arrived in the token's project"
    assert not models.Run.objects.exclude(project=other_project).exists()
    session = models.Session.objects.get(project=other_project, session_id=connect.SESSION)
    # How a framework's spans divide into runs (a run, its member runs) is the mapping's
    # business: here, that the session holds the agent call, and the model calls it made.
    assert any("Lima" in (run.input or "") for run in session.runs.all())
    assert models.ModelCall.objects.filter(run__session=session).count() >= 1
