"""The main path in a real browser: headless Debian Chromium driven by Playwright.

Skips where no Chromium is installed (a user's laptop); CI installs it and sets
HISTORY_REQUIRE_BROWSER=1, which turns that skip into a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlencode, urlparse

import pytest

from history_app import models
from history_app.agent_history import parse
from history_app.intake import ingestion, writer

from .conftest import AUTOURGOS, load_jsonl, native

CHROMIUM = Path(os.environ.get("HISTORY_CHROMIUM", "/usr/bin/chromium"))
OUTPUT = Path(os.environ.get("TEST_OUTPUT_DIR", Path(__file__).resolve().parent.parent / "test-output"))

if not CHROMIUM.exists():
    if os.environ.get("HISTORY_REQUIRE_BROWSER"):
        raise RuntimeError(f"HISTORY_REQUIRE_BROWSER is set but {CHROMIUM} does not exist")
    pytest.skip(
        f"no Chromium at {CHROMIUM}: install Debian's chromium to run browser tests", allow_module_level=True
    )

# Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run
# "inside" one unless told that this test code is really synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def launch(playwright):
    """Debian's headless Chromium, never a downloaded one, with no background traffic."""
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-background-networking",
            "--disable-gpu",
            "--disable-component-update",
        ],
    )


def open_page(browser, live_server, **context_options):
    """A page in a new context of ``browser`` whose ``problems`` collect every console
    error or warning, page error, dialog, CSP violation and request to another host."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context_options})
    page = context.new_page()
    # Report each CSP violation with the element that caused it (Chromium's own
    # console message does not say which element it was).
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.warn('CSP violation', "
        "e.violatedDirective, e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 300) : e.target))"
    )
    problems: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type} at {page.url}: {m.text[:600]}")
            if m.type in {"error", "warning"}
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog opened: {d.message}"), d.dismiss()))
    live_host = urlparse(live_server.url).netloc
    page.on(
        "request",
        lambda r: (
            problems.append(f"foreign request: {r.url}")
            if urlparse(r.url).netloc not in {live_host, ""} and not r.url.startswith("data:")
            else None
        ),
    )
    page.problems = problems
    return page


@pytest.fixture
def browser_page(chromium, live_server):
    page = open_page(chromium, live_server)
    yield page
    page.context.close()


def shot(page, name: str) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUTPUT / f"{name}.png"), full_page=True)


def editor(django_user_model, name: str, project: str = "default"):
    """A user who is an editor of the project (the default one unless named)."""
    user = django_user_model.objects.create_user(name, password=f"{name}-password-1")
    target = models.Project.default() if project == "default" else models.Project.objects.get(slug=project)
    models.Membership.objects.create(project=target, user=user, role=models.Membership.EDITOR)
    return user


def open_session(page, session_id: str) -> None:
    """Follow a session's link in the sessions list (the link names the session by its
    first input; its id is written beneath)."""
    page.click(f"#session-rows tr:has(code.sid:text-is('{session_id}')) td.title-cell > a")


def log_in(page, live_server, django_user_model):
    editor(django_user_model, "alice")
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Sessions')")


def test_main_path_log_in_open_session_open_run(browser_page, live_server, django_user_model):
    results = []
    for name in (
        "Task_20261129_224355_551407_bc481e3f.json",
        "Task_20261129_224355_610116_7bfd7d3a.json",
        "Task_20261129_224355_630165_f0f3ce5c.json",
    ):
        results += ingestion.ingest_items(items=[json.loads((AUTOURGOS / name).read_text())])
    ingestion.record_receipt(source="import_history", results=results, label="tests/fixtures/autourgos")
    page = browser_page
    log_in(page, live_server, django_user_model)
    shot(page, "01-sessions")
    open_session(page, "autourgos:ResearchBot:2026-11-29")
    page.wait_for_selector("#timeline")
    assert "Compare Tokyo and Osaka" in page.inner_text("#timeline")
    shot(page, "02-session")
    page.click("#timeline a >> nth=0")
    page.wait_for_selector("#transcript")
    text = page.inner_text("#transcript")
    assert "Search for both cities' background" in text
    assert "web_search" in text and "Tokyo population" in text
    assert "Tokyo (~37.4M metro)" in page.inner_text(".answer")
    shot(page, "03-run")
    # Back to the list with the browser's own history, restored by htmx.
    page.go_back()
    page.wait_for_selector("#timeline")
    page.goto(f"{live_server.url}/")
    open_session(page, "autourgos:Agent:2026-11-29")
    page.click("#timeline a >> nth=0")
    page.wait_for_selector(".error-card")
    assert "HTTP 502" in page.inner_text(".error-card")
    page.click("text=Receipts")
    page.wait_for_selector("h1:has-text('Ingestion receipts')")
    shot(page, "05-receipts")
    assert page.problems == []


DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"


def load_demo() -> None:
    for path in sorted(DEMO.glob("*.json")):
        data = json.loads(path.read_text())
        results = ingestion.ingest_items(items=data if isinstance(data, list) else [data])
        assert all(r.status == "created" for r in results), (path, results)


def test_main_path_search_context_link_and_export(browser_page, live_server, django_user_model):
    load_demo()
    page = browser_page
    log_in(page, live_server, django_user_model)
    # Search as you type: htmx swaps the results and puts the query in the URL.
    page.fill("#q", "partitioning")
    page.wait_for_url("**/?q=partitioning*")
    page.wait_for_selector(".hits a")
    assert page.locator("#session-rows tr").count() == 1
    assert "Now one about PostgreSQL partitioning" in page.inner_text(".hits")
    shot(page, "06-search")
    # Filters live in the URL: reloading it shows the same view.
    page.click("summary:has-text('Filters and sorting')")
    page.select_option("select[name=framework]", "agent-history")
    page.wait_for_url("**framework=agent-history*")
    page.reload()
    assert page.input_value("#q") == "partitioning"
    assert page.locator("#session-rows tr").count() == 1
    open_session(page, "demo-workflow-blog")
    page.wait_for_selector("#timeline")
    assert page.locator("tr.idle").count() == 3
    shot(page, "02-session-workflow")
    page.click("#timeline a >> text=demo-wf-run-3")
    page.wait_for_selector("#transcript .contexts")
    page.click(".context-list a")
    page.wait_for_selector("#context-text")
    assert "✓ Identical" in page.inner_text("#rebuild")
    shot(page, "07-context")
    # Re-render with one history run: the diff appears in place.
    page.fill("input[name=runs]", "1")
    page.click("#rerender-card button[type=submit]")
    page.wait_for_selector("#rerender pre.diff")
    assert "-[run-2]" in page.inner_text("#rerender pre.diff")
    assert "runs=1" in page.url
    shot(page, "08-context-rerendered")
    # Follow a [run-N] link to the run the entry came from.
    page.click("#context-text a.src >> text=[run-1]")
    page.wait_for_url("**/runs/demo-wf-run-1/")
    assert "Write a post about SQLite WAL mode" in page.inner_text("#transcript")
    # Export the session, both ways.
    page.click("nav.crumbs a >> nth=1")
    page.wait_for_selector("#timeline")
    with page.expect_download() as download:
        page.click("text=JSON bundle")
    bundle = json.loads(Path(download.value.path()).read_text())
    assert [run["run_id"] for run in bundle["runs"]][:2] == ["demo-wf-run-1", "demo-wf-run-2"]
    with page.expect_download() as download:
        page.click("text=offline HTML")
    assert "demo-wf-run-4" in Path(download.value.path()).read_text()
    page.click("text=Stats")
    page.wait_for_selector("svg.chart")
    shot(page, "09-stats")
    assert page.problems == []


def test_keyboard_navigation(browser_page, live_server, django_user_model):
    load_demo()
    page = browser_page
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/sessions/demo-workflow-blog/")
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == "run-demo-wf-run-2"
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.id") == "run-demo-wf-run-1"
    page.keyboard.press("Enter")
    page.wait_for_url("**/runs/demo-wf-run-1/")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("haiku")
    page.keyboard.press("Enter")
    page.wait_for_url("**/?q=haiku")
    assert page.problems == []


def test_dark_mode_and_phone_width(chromium, live_server, django_user_model):
    load_demo()
    editor(django_user_model, "alice")
    with chromium.new_context(color_scheme="dark", viewport={"width": 390, "height": 844}) as context:
        page = context.new_page()
        page.goto(f"{live_server.url}/accounts/login/?next=/runs/demo-wf-run-1/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-password-1")
        page.click("button[type=submit]")
        page.wait_for_selector("#transcript")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(20, 21, 24)"
        # Nothing is wider than the phone's screen.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, "10-run-dark-phone")


def test_pages_work_without_javascript(chromium, live_server, django_user_model):
    load_demo()  # includes autourgos' named_run_custom.json
    editor(django_user_model, "alice")
    with chromium.new_context(java_script_enabled=False) as context:
        page = context.new_page()
        page.goto(f"{live_server.url}/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-password-1")
        page.click("button[type=submit]")
        open_session(page, "autourgos:Agent:2026-11-29")
        page.click("#timeline tr:has-text('What is 6*7?') a >> nth=0")
        assert "Quick answer." in page.inner_text("#transcript")
        # Search and filters are a plain GET form.
        page.goto(f"{live_server.url}/")
        page.fill("#q", "partitioning")
        page.click("#filters button[type=submit] >> nth=0")
        assert "q=partitioning" in page.url
        assert page.locator("#session-rows tr").count() == 1
        # The inspector's re-render is a plain GET form too.
        page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-3/context/1/")
        page.fill("input[name=runs]", "1")
        page.click("#rerender-card button[type=submit]")
        assert "runs=1" in page.url and "-[run-2]" in page.inner_text("#rerender pre.diff")


def test_xss_payloads_open_no_dialog_and_fetch_nothing(browser_page, live_server, django_user_model):
    payloads = [entry["payload"] for entry in load_jsonl("xss.jsonl")]
    runs = [
        {
            "schema": "agent-history/v1",
            "run_id": f"xss-{i}",
            "session_id": "xss-session",
            "agent_name": payload[:100],
            "input": payload,
            "output": payload,
            "status": "failed",
            "error": payload,
            "injected_contexts": [{"kind": "workflow_history", "text": f"[run-1] {payload}"}],
            "iterations": [
                {
                    "thought": payload,
                    "tool_calls": [{"tool": payload[:200], "params": {payload: payload}, "result": payload}],
                }
            ],
        }
        for i, payload in enumerate(payloads)
    ]
    ingestion.ingest_items(items=runs)
    page = browser_page
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/sessions/xss-session/")
    page.goto(f"{live_server.url}/p/default/stats/")
    page.goto(f"{live_server.url}/p/default/?errors=1")
    for i in range(len(payloads)):
        page.goto(f"{live_server.url}/p/default/?{urlencode({'q': payloads[i]})}")
        page.goto(f"{live_server.url}/p/default/runs/xss-{i}/context/1/?runs=2")
        page.wait_for_selector("#context-text")
        page.goto(f"{live_server.url}/p/default/runs/xss-{i}/")
        page.wait_for_selector("#transcript")
        for link in page.query_selector_all(".markdown a, .markdown details, pre"):
            link.hover()
        for href in page.eval_on_selector_all(".markdown a", "links => links.map(a => a.href)"):
            assert href == "" or urlparse(href).scheme in {"http", "https", "mailto"}, href
    shot(page, "04-xss-run")
    assert page.problems == []


def test_library_parser_is_the_one_the_server_uses():
    """Guards the single normalisation path: the page shows what the library parses."""
    data = json.loads((AUTOURGOS / "named_run_custom.json").read_text())
    assert parse(data)[0].output == "42"


def test_show_more_loads_the_next_tool_calls_in_place(browser_page, live_server, django_user_model):
    calls = [{"tool": f"tool-{n}", "params": {"n": n}, "result": "ok"} for n in range(45)]
    ingestion.ingest_items(items=[{**native("big-run", "big"), "iterations": [{"tool_calls": calls}]}])
    page = browser_page
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/big-run/")
    assert page.locator(".tool-call").count() == 20
    page.click("text=Show more tool calls")
    page.locator(".tool-call").nth(39).wait_for()  # no wait_for_function: the CSP forbids eval
    assert urlparse(page.url).path == "/p/default/runs/big-run/"  # loaded in place, not a new page
    page.click("text=Show more tool calls")
    page.locator(".tool-call").nth(44).wait_for()
    assert page.locator(".tool-call").count() == 45 and page.locator("text=Show more tool calls").count() == 0
    assert page.locator(".tool-call h3 code").last.inner_text() == "tool-44"
    assert page.problems == []


def test_show_more_loads_the_next_contexts_in_place(browser_page, live_server, django_user_model):
    contexts = [{"kind": "custom", "text": f"context {n}"} for n in range(45)]
    ingestion.ingest_items(items=[{**native("ctx-run", "ctx"), "injected_contexts": contexts}])
    page = browser_page
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/ctx-run/")
    items = page.locator(".context-list > li:not(.more)")
    assert items.count() == 20
    page.click("text=Show more contexts")
    items.nth(39).wait_for()  # no wait_for_function: the CSP forbids eval
    assert urlparse(page.url).path == "/p/default/runs/ctx-run/"  # loaded in place, not a new page
    assert page.locator(".context-list").count() == 1  # the items joined the list
    page.click("text=Show more contexts")
    items.nth(44).wait_for()
    assert items.count() == 45 and page.locator("text=Show more contexts").count() == 0
    assert items.last.locator("> a").get_attribute("href") == "/p/default/runs/ctx-run/context/45/"
    assert page.problems == []


def test_model_calls_from_run_to_call_to_inspector_and_stats(browser_page, live_server, django_user_model):
    """agno's real run output: open the run, the first model call of an iteration, see what
    it received marked by part, follow a history message to the inspector; more model
    calls load in place; the stats page draws cost and tokens."""
    payload = json.loads(
        (Path(__file__).parent / "fixtures/agno/run_outputs/agent_sess-agent-travel_run3.json").read_text()
    )
    calls = [
        {"model": "gpt-4o", "input_tokens": 1000, "output_tokens": 500, "messages": [{"role": "user", "content": f"q{n}"}]}
        for n in range(60)
    ]  # fmt: skip
    ingestion.ingest_items(items=[payload, {**native("many-calls", "many"), "model_calls": calls}])
    page = browser_page
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/{payload['run_id']}/")
    assert page.locator(".model-call-line").count() == 2
    assert page.locator("#model-calls tbody tr").count() == 2
    page.click(".model-call-line >> text=Model call 1")
    page.wait_for_selector("h1:has-text('Model call 1')")
    tags = page.locator(".message .tag.part").all_inner_texts()
    assert tags[0] == "instructions" and tags[-1] == "new input" and "history" in tags
    assert page.locator("dd:has-text('the price list does not know this model')").count() == 1
    page.locator("text=carries an injected context: inspect it").first.click()
    page.wait_for_url("**/context/1/")
    assert "user: What's the weather in Tokyo and Kyoto?" in page.content()
    page.goto(f"{live_server.url}/p/default/runs/many-calls/")
    rows = page.locator("#model-calls tbody tr:not(.more)")
    assert rows.count() == 50
    page.click("text=Show more model calls")
    rows.nth(59).wait_for()  # no wait_for_function: the CSP forbids eval
    assert urlparse(page.url).path == "/p/default/runs/many-calls/" and rows.count() == 60
    assert page.locator("text=Show more model calls").count() == 0
    page.goto(f"{live_server.url}/p/default/stats/?days=365")
    assert page.locator("svg[aria-label^='Model cost per day']").count() == 1
    assert page.locator("#per-model ~ table code:has-text('gpt-4o')").count() == 1
    shot(page, "model-calls-stats")
    assert page.problems == []


def test_switching_project_in_the_header_on_the_list_and_in_search(
    browser_page, live_server, django_user_model
):
    """Issue #16: carol, a member of two projects, switches between them from the header,
    on the sessions list and in the middle of a search (the search carries over)."""
    page = browser_page
    beta = models.Project.objects.create(slug="beta", name="Beta")
    for project, session, text in (
        (models.Project.default(), "s-default", "keeper"),
        (beta, "s-beta", "sonar"),
    ):
        for run in parse(native(f"r-{session}", session, input=f"lighthouse {text}")):
            writer.write_run(run=ingestion.prepare_run(run), project_id=project.pk)
    carol = editor(django_user_model, "carol")
    models.Membership.objects.create(project=beta, user=carol, role=models.Membership.VIEWER)
    page.goto(f"{live_server.url}/p/default/")
    page.fill("#id_username", "carol")
    page.fill("#id_password", "carol-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Sessions')")
    assert "s-default" in page.inner_text("#results") and "s-beta" not in page.inner_text("#results")
    # The header names the project; its menu lists the other one.
    page.click("details.switcher summary")
    page.click("details.switcher a >> text=Beta")
    page.wait_for_url("**/p/beta/")
    assert "Beta" in page.inner_text("details.switcher summary")
    assert "s-beta" in page.inner_text("#results") and "s-default" not in page.inner_text("#results")
    shot(page, "20-project-beta")
    # Search in Beta (htmx updates the list and the address), then switch: the same
    # search runs in the other project.
    page.fill("#q", "lighthouse")
    page.wait_for_url("**/p/beta/?q=lighthouse*")
    page.wait_for_selector("#results .hits")
    assert "sonar" in page.inner_text("#results")
    assert page.title() == "“lighthouse” · Sessions · Agent history"  # the htmx swap names the search
    page.click("details.switcher summary")
    page.click("details.switcher a >> text=Default")
    page.wait_for_url("**/p/default/?q=lighthouse*")
    assert page.input_value("#q") == "lighthouse"
    assert "keeper" in page.inner_text("#results") and "sonar" not in page.inner_text("#results")
    shot(page, "21-project-switched-in-search")
    assert page.problems == []
    # A page of a project she is not in does not exist for her.
    assert page.goto(f"{live_server.url}/p/nowhere/").status == 404
