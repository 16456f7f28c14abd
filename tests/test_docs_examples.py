"""Every example of the README and of the reference pages (history_app/docs/) runs as
written, against a live server where it sends data.

After the README's first command (here: ``quickstart --no-serve`` on the test database,
which loads the demo), each page's shell blocks are run in order: ``python manage.py …``
lines in-process (the test database is this process's), a ``$(python manage.py …)``
substitution likewise with its output put in its place, ``curl`` and ``export`` lines by
bash with ``http://127.0.0.1:8000`` pointed at the live server. The README's recipes and
the OpenTelemetry page's set-ups run as Python scripts against it; the format samples of
the ingestion page are posted to the endpoint. What cannot run here (installing packages,
serving, production settings) is listed in NOT_RUN with why, and the list must match the
pages exactly, so a new example is either run or listed.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from history_app import models

from .readme_examples import library_examples

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "history_app" / "docs"
DOC_PAGES = sorted(p.name for p in DOCS.glob("*.md"))
PORT = "http://127.0.0.1:8000"
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
SUBSTITUTION = re.compile(r"\$\((python manage\.py [^)]*)\)")

# Commands that are not run here, by the page and the start of the command, with why.
NOT_RUN = {
    (
        "README.md",
        "python3 -m venv .venv",
    ): "makes a virtual environment and installs: .ci/run does exactly this",
    ("README.md", ". .venv/bin/activate"): "activates the environment this test already runs in",
    ("testing.md", "python3 -m venv .venv"): "the README's test command: .ci/run runs it",
    ("testing.md", "python -m pytest"): "runs the suite this test belongs to: .ci/run runs it",
    ("testing.md", "/usr/bin/time"): "times one test file (FILE is a placeholder): .ci/run runs every file",
    ("library.md", "pip install ./history_app/agent_history"): ".ci/run installs the library alone this way",
    ("library.md", "pip wheel"): "test_library_isolation builds the wheels",
    ("library.md", "pip install ~/wheels/"): "installs the wheel built above",
    ("operations.md", "git pull"): "updates a checkout",
    ("operations.md", "pip install -e"): "the README's install command",
    ("operations.md", "gunicorn history_app.wsgi"): "serves; the module it names is imported below",
    ("operations.md", "python manage.py migrate && python manage.py createsuperuser"): (
        "createsuperuser asks for a password; migrate runs in the upgrade block"
    ),
    ("ingestion.md", "python manage.py import_agno postgresql://"): "needs an agno PostgreSQL database",
}
# Production settings: each variable an ``export`` sets must be one the settings read.
SETTINGS_EXPORTS = {"operations.md"}


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(2), textwrap.dedent(m.group(3))) for m in FENCE.finditer(text)]


def commands(script: str) -> list[str]:
    """A shell block's commands: continuation lines joined, a quoted argument spanning
    lines kept whole, blank lines dropped (an ``&&`` chain is one command)."""
    found, pending, joiner = [], "", "\n"
    for line in script.splitlines():
        pending = f"{pending}{joiner}{line}" if pending else line
        joiner = "\n"
        if pending.endswith("\\"):
            pending, joiner = pending[:-1].rstrip(), " "
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quoted argument goes on on the next line
            continue
        if pending.strip():
            found.append(pending.strip())
        pending = ""
    assert not pending, f"unfinished command: {pending!r}"
    return found


def not_run(page: str, command: str) -> str | None:
    for (where, start), why in NOT_RUN.items():
        if where == page and command.startswith(start):
            return why
    return None


def manage(command: str) -> str:
    """Runs ``python manage.py …`` in this process, on the test database; its output."""
    argv = shlex.split(command, comments=True)
    assert argv[:2] == ["python", "manage.py"], command
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv[2:], stdout=out, stderr=err)
    return out.getvalue().strip()


def bash(command: str, url: str) -> str:
    result = subprocess.run(
        ["bash", "-c", command.replace(PORT, url)],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (command, result.stderr)
    return result.stdout


def run_shell(page: str, script: str, url: str, ran: list[str], skipped: set[tuple[str, str]]) -> None:
    for chain in commands(script):
        if not_run(page, chain):
            skipped.add((page, next(s for (p, s) in NOT_RUN if p == page and chain.startswith(s))))
            continue
        for command in chain.split(" && "):
            run_command(page, command.strip(), url)
        ran.append(chain)


def run_command(page: str, command: str, url: str) -> None:
    command = SUBSTITUTION.sub(lambda m: shlex.quote(manage(m.group(1))), command)
    if command.startswith("python manage.py"):
        manage(command)
    elif command.startswith("export "):
        if page in SETTINGS_EXPORTS:
            check_settings_exports(command)
            return
        for assignment in shlex.split(command[len("export ") :], comments=True):
            name, _, _ = assignment.partition("=")
            os.environ[name] = bash(f'{command}; printf %s "${name}"', url)
    elif command.startswith("curl "):
        answer = json.loads(bash(command, url))
        assert answer["ok"] is True, (command, answer)
    else:
        raise AssertionError(f"{page}: no way to run {command!r}: run it or list it in NOT_RUN")


def check_settings_exports(command: str) -> None:
    settings_source = (ROOT / "history_app" / "settings.py").read_text()
    for assignment in shlex.split(command[len("export ") :], comments=True):
        name = assignment.partition("=")[0]
        assert f'"{name}"' in settings_source, f"{name} is not read by the settings"


# SQLite's in-memory test database just after the first command and the users, copied
# once a process (SQLite's backup) and copied back before each test that starts there: the
# same rows, search index and key counters as running the command again, which cost about
# 0.4 s a test (14 tests) in the demo's ingestion.
DEMO_DATABASE: list[sqlite3.Connection] = []


def start_from_the_demo(django_user_model) -> None:
    in_memory = connection.vendor == "sqlite" and connection.is_in_memory_db()
    if in_memory and DEMO_DATABASE:
        connection.ensure_connection()
        DEMO_DATABASE[0].backup(connection.connection)
        return
    call_command("quickstart", "--no-serve", stdout=io.StringIO())
    for name in ("alice", "bob"):
        django_user_model.objects.create_user(name, password=f"{name}-password-1")
    if in_memory:
        copy = sqlite3.connect(":memory:", check_same_thread=False)
        connection.connection.backup(copy)
        DEMO_DATABASE.append(copy)


@pytest.fixture
def after_quickstart(live_server, monkeypatch, tmp_path, django_user_model):
    """The state the pages start from: the first command run (demo loaded), the users
    the projects page names, the checkout as the working folder, an empty cache."""
    start_from_the_demo(django_user_model)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("TOKEN", "EVAL_TOKEN", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    yield live_server.url
    for name in ("TOKEN", "EVAL_TOKEN", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS"):
        os.environ.pop(name, None)


def test_the_readme_is_short_and_links_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 25_000
    for name in DOC_PAGES:
        assert f"(history_app/docs/{name})" in readme, name


def test_the_configuration_table_names_every_variable_the_settings_read():
    source = (ROOT / "history_app" / "settings.py").read_text()
    read = set(re.findall(r'env_(?:str|int|bool|list)\(\s*"([A-Z_]+)"', source)) | {"SECRET_KEY"}
    quickstart = (ROOT / "history_app" / "management" / "commands" / "quickstart.py").read_text()
    read |= set(re.findall(r'os\.environ\.get\("([A-Z_]+)"\)', quickstart))
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration") : readme.index("## Reference")]
    documented = set(re.findall(r"^\| `([A-Z_]+)`(?:, `([A-Z_]+)`)?", table, re.MULTILINE))
    names = {n for pair in documented for n in pair if n}
    assert len(read) > 40
    assert read - names == set()
    assert names - read == set()


def test_the_readme_recipes_run_as_pasted(after_quickstart, monkeypatch, tmp_path):
    url = after_quickstart
    readme = (ROOT / "README.md").read_text()
    recipes = readme[readme.index("## Recipes") : readme.index("## Configuration")]
    ran, skipped = [], set()
    python = []
    for lang, code in blocks(recipes):
        if lang == "sh":
            run_shell("README.md", code, url, ran, skipped)
        else:
            assert lang == "python"
            python.append(code)
    assert os.environ["TOKEN"].startswith("aht_")
    # 1: the fixture the curl sends is stored, as a run of its own (the demo holds a copy
    # of that log, moved in time, under another run id).
    from history_app.agent_history import formats

    fixture = re.search(r"--data-binary @(\S+)", recipes).group(1)
    (parsed,) = formats.parse_body((ROOT / fixture).read_bytes())
    (sent,) = parsed.runs
    lima = models.Run.objects.get(run_id=sent.run_id)
    assert "Weather in Lima" in lima.input
    assert models.Run.objects.filter(input__contains="Weather in Lima").count() == 2
    assert lima.tool_calls.count() >= 1
    page = exec_as_page(url, lima)
    assert "Lima" in page

    # 2: the middleware's run, through the HttpSink, with its files next to the script.
    monkeypatch.chdir(tmp_path)
    second, third = python
    output = run_python(second, url)
    assert output.startswith("True\n")
    run = models.Run.objects.get(session__session_id="recipe-weather")
    assert run.input == "What is the weather in Tokyo?" and run.output == "It is 22 C and sunny in Tokyo."
    (call,) = models.ToolCall.objects.filter(run=run)
    assert call.tool == "get_weather" and "sk-proj" not in json.dumps(call.params)
    assert call.params["api_key"] == "[REDACTED:secret-key]"  # as the recipe says
    assert run.input_tokens == 310 and run.output_tokens == 18
    assert sorted(p.suffix for p in (tmp_path / "Agent History").iterdir()) == [".json", ".md"]

    # 3: the OpenTelemetry trace: one run with its model call, priced, and its tool call.
    run_python(third, url)
    run = models.Run.objects.get(session__session_id="recipe-otel")
    assert run.agent_name == "weather-bot" and run.status == "completed"
    assert run.model_call_count == 1 and run.input_tokens == 52 and run.cost is not None and run.cost > 0
    assert list(models.ToolCall.objects.filter(run=run).values_list("tool", "result")) == [
        ("get_weather", "4 C, rain")
    ]
    assert skipped == {("README.md", ". .venv/bin/activate")}


def exec_as_page(url: str, run: models.Run) -> str:
    """The run's page as the admin sees it (the recipe says: open it)."""
    from django.test import Client

    client = Client()
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username="admin"))
    return client.get(f"/p/default/runs/{run.run_id}/").content.decode()


def run_python(code: str, url: str) -> str:
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        exec(compile(code.replace(PORT, url), "example", "exec"), {"__name__": "__main__"})
    return out.getvalue()


@pytest.mark.parametrize("page", [p for p in DOC_PAGES if p != "otlp.md"])
def test_every_command_of_a_page_runs(page, after_quickstart):
    url = after_quickstart
    ran, skipped = [], set()
    for lang, code in blocks((DOCS / page).read_text(encoding="utf-8")):
        if lang == "sh":
            run_shell(page, code, url, ran, skipped)
    assert skipped == {key for key in NOT_RUN if key[0] == page}
    if page == "pages.md":
        annotations = models.Annotation.objects.filter(run__run_id="demo-wf-run-3")
        assert annotations.count() == 4 and annotations.filter(iteration_index__isnull=False).count() == 1
    if page == "projects.md":
        project = models.Project.objects.get(slug="support-bots")
        assert list(project.memberships.values_list("user__username", "role")) == [("alice", "admin")]
        assert models.Run.objects.filter(project=project).exists()
    if page == "ingestion.md":
        assert models.Run.objects.filter(source_format="autourgos-markdown").exists()
        assert models.Run.objects.filter(framework="agno").exists()
    if page == "operations.md":
        import history_app.wsgi  # noqa: F401  (what gunicorn serves)


def test_every_code_block_is_run_somewhere():
    """Each block's language says how it is run: shell and Python above (and the library's
    Python in test_readme.py), JSON below; blocks without a language are output or
    diagrams, on the two pages that have them."""
    library = []
    for page in ["README.md", *DOC_PAGES]:
        path = ROOT / page if page == "README.md" else DOCS / page
        for lang, code in blocks(path.read_text(encoding="utf-8")):
            assert lang in {"sh", "python", "json", ""}, (page, lang)
            if lang == "python" and page == "library.md":
                library.append(code)
            elif lang == "python":
                assert page in {"README.md", "otlp.md", "operations.md"}, page
            elif lang == "":
                assert page in {"benchmarks.md", "operations.md"}, page
    assert library == library_examples()


def test_the_derived_table_example_is_kept_on_every_write(client, auth_headers):
    """The operations page's derived table, registered as the page shows, counts a new
    run in, and a run sent again changed is taken off and counted again."""
    from history_app.intake import writer

    ((code,),) = [
        [c for lang, c in blocks((DOCS / "operations.md").read_text(encoding="utf-8")) if lang == "python"]
    ]
    before = list(writer.DERIVED)
    namespace: dict = {}
    try:
        exec(compile(code, "operations.md", "exec"), namespace)  # noqa: S102 — the page's own example
        counts = namespace["RUNS_BY_FRAMEWORK"]
        run = {"schema": "agent-history/v1", "run_id": "fw-1", "session_id": "fw", "framework": "agno"}
        for payload in (run, {**run, "input": "changed"}):
            response = client.post("/api/v1/ingest", json.dumps(payload), "application/json", **auth_headers)
            assert response.status_code == 200, response.content
            assert +counts == {"agno": 1}
    finally:
        writer.DERIVED[:] = before


def test_the_opentelemetry_set_ups_run_against_a_live_server(after_quickstart):
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from pydantic_ai import Agent

    url = after_quickstart
    text = (DOCS / "otlp.md").read_text(encoding="utf-8")
    # The page's set-ups; its "Connect a framework" recipes are scripts of their own,
    # each run by tests/test_connect.py.
    text = text[: text.index("\n## Connect a framework\n")]
    ran, skipped = [], set()
    python = []
    for lang, code in blocks(text):
        if lang == "sh":
            run_shell("otlp.md", code, url, ran, skipped)
        elif lang == "python":
            python.append(code)
    assert os.environ["OTEL_EXPORTER_OTLP_HEADERS"] == f"Authorization=Bearer%20{os.environ['TOKEN']}"
    namespace = {"__name__": "__main__"}
    try:
        for code in python:  # the second uses the first one's provider, as the page says
            exec(compile(code.replace(PORT, url), "otlp.md", "exec"), namespace)
    finally:
        Agent.instrument_all(False)
        OpenAIInstrumentor().uninstrument()
        namespace["provider"].shutdown()
    assert len(python) == 2
    helper = models.Run.objects.get(agent_name="pydantic-helper")
    assert helper.status == "completed" and helper.model_call_count >= 1
    bot = models.Run.objects.get(session__session_id="ticket-4711")
    assert bot.agent_name == "support_bot" and bot.input == "Where is my order?"


def test_the_format_samples_are_accepted(client):
    from history_app.access.auth import register_token

    register_token(name="samples", token="aht_samples-token-0001", scopes=["ingest"])
    text = (DOCS / "ingestion.md").read_text(encoding="utf-8")
    formats = text[text.index("## Accepted formats") : text.index("## Ingestion receipts")]
    samples = [code for lang, code in blocks(formats) if lang == "json"]
    assert len(samples) == 5
    for sample in samples:
        answer = client.post(
            "/api/v1/ingest",
            sample,
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer aht_samples-token-0001",
        )
        assert answer.status_code == 200, (sample, answer.content)
        assert answer.json()["results"][0]["status"] == "created"
    # The answers the pages show are JSON too.
    for page in ["README.md", *DOC_PAGES]:
        path = ROOT / page if page == "README.md" else DOCS / page
        for lang, code in blocks(path.read_text(encoding="utf-8")):
            if lang == "json":
                json.loads(code)
