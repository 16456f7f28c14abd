"""The connect page and its recipes (``history_app/reading/connect.py``): every recipe
runs as the page shows it, against a live server, with the recording fake OpenAI server
in place of OpenAI; its run arrives in the token's project, in the recipe's session. The
page never makes a token on a GET, makes one on an admin's POST and shows it once, and
refuses a viewer's POST; the help page holds the same recipes."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import pytest

from history_app import models
from history_app.access.auth import register_token
from history_app.reading import connect

from . import fake_openai
from .test_conformance import framework
from .test_framework_crewai import crew_environment, crewai_or_skip

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
    "crewai": None,  # its own virtual environment (CrewAI requires openai<3)
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
    python = sys.executable
    if MODULES[key]:
        framework(MODULES[key])
    else:
        python = str(crewai_or_skip())
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
        **(crew_environment(tmp_path) if key == "crewai" else os.environ),
        "TOKEN": RECIPE_TOKEN,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    try:
        done = subprocess.run(
            [python, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
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


# -- The page ------------------------------------------------------------------------------


def member(django_user_model, name: str, role: str):
    user = django_user_model.objects.create_user(name, password=f"{name}-password-1")
    models.Membership.objects.create(project=models.Project.default(), user=user, role=role)
    return user


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(member(django_user_model, "ada", models.Membership.ADMIN))
    return client


def shown_code(page: str, box: str) -> str:
    """The text of a code box as the browser shows it (and its Copy button copies)."""
    found = re.search(rf'id="{box}">\s*<pre><code[^>]*>(.*?)</code></pre>', page, re.DOTALL)
    assert found, f"no code box {box!r}"
    return html.unescape(found.group(1))


@pytest.mark.parametrize("key", [r.key for r in connect.RECIPES])
def test_the_page_shows_each_recipe_with_this_servers_address(admin_client, key):
    response = admin_client.get(f"/p/default/connect/?framework={key}")
    assert response.status_code == 200
    page = response.content.decode()
    recipe = connect.BY_KEY[key]
    expected = recipe.code_for(
        traces_url="http://testserver/v1/traces", ingest_url="http://testserver/api/v1/ingest"
    )
    assert shown_code(page, "script") == expected
    assert "127.0.0.1:8000" not in page
    assert shown_code(page, "install") == recipe.install and recipe.install.startswith("pip install ")
    assert f'href="?framework={key}"' in page and 'aria-current="page">' + recipe.title in page
    assert f"/help/otlp/#{recipe.anchor}" in page
    for name in recipe.instruments:
        assert f"<code>{name}</code>" in page
    # A recipe for OpenTelemetry names its exporter, the token's header and the flush.
    if recipe.endpoint_path == "/v1/traces":
        assert "OTLPSpanExporter(" in expected and "force_flush()" in expected
        assert '"Authorization": f"Bearer {os.environ[\'TOKEN\']}"' in expected
        assert '<code id="endpoint">http://testserver/v1/traces</code>' in page
    assert connect.SESSION in recipe.session and connect.SESSION in expected


def test_a_get_never_makes_a_token(admin_client):
    before = models.IngestToken.objects.count()
    for key in ["", *connect.BY_KEY]:
        page = admin_client.get(f"/p/default/connect/?framework={key}").content.decode()
        assert 'export TOKEN="paste-your-ingest-token-here"' in page
        assert "aht_" not in page
    admin_client.get("/p/default/connect/token/")  # a GET at the form's address: 405
    assert models.IngestToken.objects.count() == before
    assert admin_client.get("/p/default/connect/token/").status_code == 405


def test_an_admins_post_makes_one_token_shown_once(admin_client):
    response = admin_client.post("/p/default/connect/token/", {"framework": "agno"})
    assert response.status_code == 302
    assert response["Location"] == "/p/default/connect/?framework=agno#token"
    (row,) = models.IngestToken.objects.all()
    assert (row.project.slug, row.scopes, row.name) == ("default", ["ingest"], "connect: agno")
    first = admin_client.get(response["Location"])
    assert first["Cache-Control"] == "no-store"
    page = first.content.decode()
    line = shown_code(page, "token-line")
    token = line.removeprefix("export TOKEN=")
    assert token.startswith("aht_") and models.IngestToken.hash(token) == row.token_hash
    assert "shown only this once" in page
    again = admin_client.get(response["Location"]).content.decode()
    assert token not in again and 'export TOKEN="paste-your-ingest-token-here"' in again
    assert models.AuditEvent.objects.filter(
        action="token_created", target__startswith="connect: agno"
    ).exists()
    # The token made here ingests into the project.
    answer = admin_client.post(
        "/v1/traces", b"{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer.status_code == 200


@pytest.mark.parametrize("role", [models.Membership.VIEWER, models.Membership.EDITOR])
def test_a_post_by_a_role_that_makes_no_tokens_is_refused(client, django_user_model, role):
    client.force_login(member(django_user_model, "vic", role))
    page = client.get("/p/default/connect/?framework=openai").content.decode()
    assert "connect/token/" not in page and f"Your role ({role}) does not make tokens" in page
    response = client.post("/p/default/connect/token/", {"framework": "openai"})
    assert response.status_code == 403
    assert "your role in this project does not allow this (manage tokens)" in response.content.decode()
    assert not models.IngestToken.objects.exists()


def test_a_project_you_are_not_in_has_no_connect_page(client, django_user_model):
    models.Project.objects.create(slug="secret", name="Secret")
    client.force_login(member(django_user_model, "eve", models.Membership.ADMIN))
    assert client.get("/p/secret/connect/").status_code == 404
    assert client.post("/p/secret/connect/token/", {"framework": "agno"}).status_code == 404
    assert not models.IngestToken.objects.exists()
    assert client.get("/p/default/connect/").status_code == 200
    client.logout()
    assert client.get("/p/default/connect/").status_code == 302  # to the login page


def test_an_unknown_framework_is_a_400_naming_it(admin_client):
    response = admin_client.get("/p/default/connect/?framework=autogen")
    assert response.status_code == 400
    page = response.content.decode()
    assert "framework: must be one of openai-agents, langgraph" in page and "<code>framework</code>" in page
    twin = admin_client.get("/api/v1/connect?framework=autogen")
    assert twin.status_code == 400 and twin.json()["parameter"] == "framework"
    posted = admin_client.post("/p/default/connect/token/", {"framework": "autogen"})
    assert posted.status_code == 400 and "framework: must be one of" in posted.content.decode()
    assert not models.IngestToken.objects.exists()


def test_htmx_gets_only_the_recipe(admin_client):
    response = admin_client.get("/p/default/connect/?framework=smolagents", HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200 and "<html" not in page
    assert page.lstrip().startswith('<div id="recipe"') and "SmolagentsInstrumentor" in page


def test_the_twin_has_the_recipe_and_no_token(admin_client, client, auth_headers):
    data = admin_client.get("/api/v1/connect?framework=pydantic-ai").json()
    assert data["ok"] is True and [f["framework"] for f in data["frameworks"]] == list(connect.BY_KEY)
    recipe = data["recipe"]
    assert recipe["endpoint"] == "http://testserver/v1/traces"
    assert recipe["code"] == connect.BY_KEY["pydantic-ai"].code_for(
        traces_url="http://testserver/v1/traces", ingest_url="http://testserver/api/v1/ingest"
    )
    assert "aht_" not in json.dumps(data)
    assert client.get("/api/v1/connect", **auth_headers).json()["recipe"]["framework"] == "openai-agents"
    assert not models.IngestToken.objects.exclude(name="suite").exists()


def test_settings_and_a_new_projects_empty_list_link_to_the_page(admin_client):
    assert "/p/default/connect/" in admin_client.get("/p/default/settings/").content.decode()
    empty = admin_client.get("/p/default/").content.decode()
    assert "No runs yet" in empty and 'href="/p/default/connect/"' in empty


def test_the_help_page_holds_the_same_recipes(client):
    text = connect.DOCS_PAGE.read_text(encoding="utf-8")
    assert connect.docs_with_section(text) == text, "run: python -m history_app.reading.connect"
    page = client.get("/help/otlp/").content.decode()
    for recipe in connect.RECIPES:
        assert f'id="{recipe.anchor}"' in page
        assert html.escape(recipe.code.splitlines()[-1], quote=False) in page


def test_the_page_counts_its_queries(admin_client, django_assert_num_queries):
    admin_client.get("/p/default/connect/")  # the project is remembered in the session
    # The login session (2), the project with the user's role and the header's project
    # menu (one query); as many for htmx's fragment, which shows no menu.
    with django_assert_num_queries(3):
        assert admin_client.get("/p/default/connect/?framework=native").status_code == 200
    with django_assert_num_queries(3):
        admin_client.get("/p/default/connect/?framework=agno", HTTP_HX_REQUEST="true")


def test_a_token_waits_for_its_own_projects_page(admin_client):
    other = models.Project.objects.create(slug="other", name="Other")
    models.Membership.objects.create(
        project=other, user=models.Membership.objects.get().user, role=models.Membership.ADMIN
    )
    admin_client.post("/p/default/connect/token/", {"framework": "native"})
    assert "aht_" not in admin_client.get("/p/other/connect/").content.decode()
    page = admin_client.get("/p/default/connect/?framework=native").content.decode()
    assert (
        "export TOKEN=aht_" in page and 'Sent to: <code id="endpoint">http://testserver/api/v1/ingest' in page
    )


def test_switching_project_on_the_page_keeps_the_framework(admin_client):
    other = models.Project.objects.create(slug="other", name="Other")
    models.Membership.objects.create(
        project=other, user=models.Membership.objects.get().user, role=models.Membership.VIEWER
    )
    referer = "http://testserver/p/default/connect/?framework=smolagents"
    response = admin_client.get("/switch/other/", HTTP_REFERER=referer)
    assert response["Location"] == "/p/other/connect/?framework=smolagents"
