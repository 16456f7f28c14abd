"""What a daily user trips on (issue 17), in a real browser at desktop and phone width.

Every test runs twice, at 1280 px and at 390 px, and ends with no console error, no CSP
violation and no request to another host (``page.problems``).
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest

from history_app import models
from history_app.intake import ingestion

from .conftest import native
from .test_browser import load_demo, log_in, open_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=sorted(WIDTHS))
def page(request, chromium, live_server):
    page = open_page(chromium, live_server, viewport=WIDTHS[request.param])
    page.width = request.param
    yield page
    page.context.close()


def back(page) -> None:
    """The browser's Back, from the page, until the page htmx reloads for it has loaded
    (its history cache is off, so every step back is a fresh page from the server)."""
    with page.expect_event("load"):
        page.evaluate("setTimeout(() => history.back(), 0)")


def open_search(page, live_server, django_user_model, query: str) -> None:
    load_demo()
    log_in(page, live_server, django_user_model)
    page.fill("#q", query)
    page.wait_for_url(f"**/?q={query}*")
    page.wait_for_selector(".hits a")


@pytest.mark.parametrize("link", ["run", "session"])
def test_search_then_click_a_result_keeps_the_result_in_the_address_bar(
    page, live_server, django_user_model, link
):
    open_search(page, live_server, django_user_model, "partitioning")
    selector = ".hits a" if link == "run" else "#session-rows td > a"
    href = page.get_attribute(selector, "href")
    page.click(selector)  # the search box loses focus as the link is followed
    page.wait_for_url(f"**{href}")
    page.wait_for_selector("#transcript" if link == "run" else "#timeline")
    page.wait_for_timeout(800)  # any late search response would have landed by now
    assert page.url.endswith(href)
    page.reload()
    page.wait_for_selector("#transcript" if link == "run" else "#timeline")
    assert page.url.endswith(href)
    assert page.problems == []


def test_a_link_followed_while_a_search_waits_for_its_pause_wins(page, live_server, django_user_model):
    open_search(page, live_server, django_user_model, "partitioning")
    href = page.get_attribute(".hits a", "href")
    page.type("#q", " x", delay=20)  # a new search is due 300 ms after the last key…
    page.click(".hits a")  # …but the link is followed first
    page.wait_for_url(f"**{href}")
    page.wait_for_timeout(1000)
    assert page.url.endswith(href)
    assert page.locator("#transcript").count() == 1
    assert page.problems == []


def test_typing_replaces_the_address_and_a_search_adds_one_history_entry(
    page, live_server, django_user_model
):
    load_demo()
    log_in(page, live_server, django_user_model)
    start = page.evaluate("history.length")
    # Type, pause, delete, retype, pause: each pause searches and updates the address.
    for text in ("par", "partition", "part", "partitioning"):
        page.fill("#q", text)
        page.wait_for_url(f"**/?q={text}&*")
        page.wait_for_timeout(150)
    assert page.evaluate("history.length") == start + 1
    assert page.title().startswith("“partitioning” · Sessions")
    # Submitting the same search adds nothing; a new filter is a new entry.
    page.press("#q", "Enter")
    page.wait_for_timeout(400)
    assert page.evaluate("history.length") == start + 1
    page.click("summary:has-text('Filters and sorting')")
    page.select_option("select[name=sort]", "runs")
    page.wait_for_url("**sort=runs*")
    assert page.evaluate("history.length") == start + 2
    # Back goes to the search, then to the list as it was before the search (htmx reloads
    # the page at each step, which aborts Playwright's own go_back: go back in the page).
    back(page)
    page.wait_for_url("**/?q=partitioning&sort=recent")
    back(page)
    page.wait_for_url(lambda url: not urlparse(url).query)
    page.wait_for_selector("#session-rows")
    assert page.input_value("#q") == ""
    assert page.problems == []


def label_of(page, selector: str) -> str:
    """What a cell's ::before shows (its label when the table is stacked), or "none"."""
    return page.eval_on_selector(selector, "el => getComputedStyle(el, '::before').content")


def smallest_text_px(page, selector: str) -> float:
    return page.eval_on_selector_all(
        selector, "els => Math.min(...els.map(e => e.getBoundingClientRect().height))"
    )


def test_tables_stack_with_labels_and_charts_keep_readable_labels(page, live_server, django_user_model):
    load_demo()
    results = ingestion.ingest_items(items=[native("receipt-run", "receipt-session")])
    ingestion.record_receipt(source="import_history", results=results, label="one run")
    log_in(page, live_server, django_user_model)
    phone = page.width == "phone"
    checks = [
        ("/p/default/", 'td[data-label="Runs"]', "Runs"),
        ("/p/default/sessions/demo-workflow-blog/", 'td[data-label="Duration"]', "Duration"),
        ("/p/default/stats/?days=365", 'td[data-label="Failed"]', "Failed"),
        ("/p/default/receipts/", 'td[data-label="Created"]', "Created"),
    ]
    for url, cell, label in checks:
        page.goto(live_server.url + url)
        assert label_of(page, cell) == (f'"{label}"' if phone else "none"), url
        # Nothing is wider than the screen: a chart scrolls inside its own box.
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"], url
    # The stats charts and a run's waterfall keep their labels readable (≥ 9 px high;
    # they were about 3 px at 390 px wide).
    page.goto(live_server.url + "/p/default/stats/?days=365")
    assert smallest_text_px(page, ".figure svg.chart text") >= 9
    page.goto(live_server.url + "/p/default/runs/demo-wf-run-1/")
    assert page.locator(".figure svg.waterfall").count() == 1
    assert smallest_text_px(page, ".figure svg.waterfall text") >= 9
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"]
    assert page.problems == []


def test_run_page_context_in_place_copy_and_previous_next(page, live_server, django_user_model):
    load_demo()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-3/")
    # The injected context opens in place, exactly as the inspector shows it was sent.
    page.click(".context-list details.inplace > summary")
    sent = page.wait_for_selector(".context-list .context-sent pre.context-text")
    assert urlparse(page.url).path == "/p/default/runs/demo-wf-run-3/"  # no navigation
    shown = sent.text_content()
    assert shown.startswith("[run-1]") or "[run-1]" in shown
    # Copy it: the clipboard holds the text as sent.
    page.click(".context-list .context-sent button.copy")
    page.wait_for_selector(".context-list .context-sent button.copy:text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == shown
    # The run id's copy button (hidden without JavaScript, shown by our script).
    page.click("dl.facts button.copy")
    assert page.evaluate("navigator.clipboard.readText()") == "demo-wf-run-3"
    # Previous and next run of the session.
    page.click("nav.run-nav a[rel=next]")
    page.wait_for_url("**/runs/demo-wf-run-4/")
    page.click("nav.run-nav a[rel=prev]")
    page.wait_for_url("**/runs/demo-wf-run-3/")
    inspector = page.get_attribute(".context-list > li > a", "href")
    page.goto(live_server.url + inspector)
    assert page.text_content("#context-text").strip() == shown.strip()
    assert page.problems == []


def test_a_team_run_links_its_delegations_to_member_runs(page, live_server, django_user_model):
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/demo-team-run-1/")
    page.click("p.delegation a >> nth=1")
    page.wait_for_url("**/runs/demo-team-member-2/")
    assert page.inner_text("#transcript h1").startswith("Writer")
    assert page.problems == []


def test_error_pages_login_page_and_team_session_at_each_width(page, live_server, django_user_model):
    load_demo()
    width = WIDTHS[page.width]["width"]
    # Logged out: the login page offers no Sessions/Stats/Receipts links, only the help
    # (which holds no data and needs no login).
    page.goto(f"{live_server.url}/accounts/login/")
    assert page.locator("nav a").all_inner_texts() == ["Help"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    log_in(page, live_server, django_user_model)
    # The team session is named after the team (its agent), not a member.
    row = page.locator("#session-rows tr:has(code.sid:text-is('demo-team-research'))")
    assert row.locator("td[data-label='Agent']").inner_text() == "Research team"
    # Unknown run, session and context: the site's 404 with a way back.
    for url in (
        "/p/default/runs/nope/",
        "/p/default/sessions/nope/",
        "/p/default/runs/demo-wf-run-3/context/99/",
    ):
        response = page.goto(live_server.url + url)
        assert response.status == 404
        assert page.inner_text("h1") == "Not found"
        assert page.locator("main a:text('Back to the sessions of Default')").count() == 1
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    # An editor may not open the project's settings: the site's 403, saying why.
    response = page.goto(f"{live_server.url}/p/default/settings/")
    assert response.status == 403 and page.inner_text("h1") == "Not allowed"
    assert "Your role in Default is editor" in page.inner_text("main")
    page.click("main a:text('Back to the sessions of Default')")
    page.wait_for_selector("#session-rows")
    # Context numbers start at 1: the run page's first context link opens context 1.
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-3/")
    assert page.get_attribute(".context-list > li > a", "href").endswith("/context/1/")
    page.click(".context-list > li > a")
    page.wait_for_selector("#context-text")
    # Chromium reports each error status it was shown as a console error: exactly the
    # three 404s and the 403 opened on purpose, nothing else.
    expected = [p for p in page.problems if re.search(r"status of (404 \(Not Found\)|403 \(Forbidden\))", p)]
    assert len(expected) == 4 and page.problems == expected


def test_admin_delete_selected_asks_first_at_each_width(page, live_server, django_user_model):
    ingestion.ingest_items(items=[native("keep-run", "keep-me"), native("go-run", "go-away")])
    models.Session.objects.filter(session_id="keep-me").update(pinned=True)
    django_user_model.objects.create_superuser("root", password="root-password-1")
    page.goto(f"{live_server.url}/admin/login/?next=/admin/history_app/session/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "root-password-1")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "prune_selected")
    page.click("button[name=index]")
    # A confirmation page, saying what goes and what a pin keeps; nothing deleted yet.
    page.wait_for_selector("#summary")
    summary = page.inner_text("#summary")
    assert "2 sessions selected" in summary and "1 of them is pinned (legal hold) and kept" in summary
    assert models.Session.objects.count() == 2
    page.click("input[value='Yes, delete them']")
    page.wait_for_selector(".messagelist")
    assert "Deleted 1 session" in page.inner_text(".messagelist")
    assert list(models.Session.objects.values_list("session_id", flat=True)) == ["keep-me"]
    assert page.problems == []


def test_long_unbroken_words_never_widen_the_page(page, live_server, django_user_model):
    """Found from outside: a title, an agent name or an id that is one long word made the
    list and the run page scroll sideways on a phone."""
    word = "https://github.com/some-org/some-repository/pull/12345/files#diff-" + "0123456789abcdef" * 8
    agent = "ResearchAssistantAgentWithAVeryLongCamelCaseName_v2" * 2
    items = [
        native("long-1", "long-session-" + "x" * 80, input=f"Summarise {word} please", agent_name=agent,
               started_at="2026-11-30T10:00:00Z", output="y\r\nz"),
        native("long-2", "long-session-" + "x" * 80, input=word, agent_name=agent, started_at="2026-11-30T10:01:00Z"),
    ]  # fmt: skip
    ingestion.ingest_items(items=items)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    log_in(page, live_server, django_user_model)
    width = WIDTHS[page.width]["width"]
    for url in ("/p/default/", "/p/default/runs/long-1/", "/p/default/runs/long-2/"):
        page.goto(live_server.url + url)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, url
    # The answer copies exactly, its CRLF kept.
    page.goto(f"{live_server.url}/p/default/runs/long-1/")
    page.click(".answer button.copy")
    assert page.evaluate("navigator.clipboard.readText()") == "y\r\nz"
    assert page.problems == []


def test_retention_preview_lists_what_would_go_at_each_width(page, live_server, django_user_model):
    from datetime import timedelta

    from django.utils import timezone

    old = (timezone.now() - timedelta(days=40)).isoformat()
    ingestion.ingest_items(
        items=[
            native(f"old-{n}", f"old-session-{n}", started_at=old, agent_name="Archivist") for n in range(3)
        ]
    )
    models.Session.objects.filter(session_id="old-session-0").update(pinned=True)
    owner = django_user_model.objects.create_user("olga", password="olga-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=owner, role=models.Membership.ADMIN
    )
    page.goto(f"{live_server.url}/accounts/login/?next=/p/default/settings/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "olga-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("#retention")
    page.fill("#retention input[name=retention_days]", "30")
    page.click("button[name=preview]")
    page.wait_for_selector("#prune-preview")
    listed = page.locator("#prune-preview tbody tr td:first-child a").all_inner_texts()
    assert sorted(listed) == ["old-session-1", "old-session-2"]
    notice = page.inner_text("#retention .notice")
    assert "2 sessions, 2 runs, 2 search documents" in notice
    assert "1 pinned session idle as long is kept" in notice
    assert models.Session.objects.count() == 3  # a preview deletes nothing
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"]
    assert page.problems == []


def test_compare_two_runs_picked_on_the_timeline(page, live_server, django_user_model):
    """Issue #18: tick two runs of a session, compare them; the address can be shared."""
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/sessions/demo-workflow-blog/")
    page.check("input[name=run][value=demo-wf-run-2]")
    page.check("input[name=run][value=demo-wf-run-3]")
    page.click("#compare-form button[type=submit]")
    page.wait_for_url("**/compare/?a=demo-wf-run-2&b=demo-wf-run-3")
    assert "differ" in page.inner_text("#compare-summary")
    assert page.locator("#input.differs .d-add").count() >= 1
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"]
    page.click("text=Swap A and B")
    page.wait_for_url("**/compare/?a=demo-wf-run-3&b=demo-wf-run-2")
    assert page.problems == []


def test_an_editor_scores_a_run_and_the_timeline_shows_it(page, live_server, django_user_model):
    """Issue #18: annotations from the run page's form, at each width."""
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-2/")
    page.select_option("#annotations select[name=kind]", "score")
    page.fill("#annotations input[name=name]", "helpfulness")
    page.fill("#annotations input[name=value]", "0.75")
    page.click("#annotations form.annotation-form button[type=submit]")
    page.wait_for_selector("#annotations .annotation-list")
    assert "helpfulness: 0.75" in page.inner_text("#annotations .annotation-list")
    assert "by alice" in page.inner_text("#annotations .annotation-list")
    page.select_option("#annotations select[name=kind]", "comment")
    page.fill("#annotations textarea[name=text]", "Short and right.")
    page.click("#annotations form.annotation-form button[type=submit]")
    page.wait_for_selector("#annotations pre.comment")
    page.goto(f"{live_server.url}/p/default/sessions/demo-workflow-blog/")
    badges = page.inner_text("#run-demo-wf-run-2 .notes")
    assert "helpfulness: 0.75" in badges and "1 comment" in badges
    page.goto(f"{live_server.url}/p/default/?annotated=helpfulness")
    assert page.locator("#session-rows code.sid").all_inner_texts() == ["demo-workflow-blog"]
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"]
    # Sorted by the score, from the filter panel: the session's mean beside its title.
    if not page.locator("details.filter-panel").evaluate("d => d.open"):
        page.click("details.filter-panel summary")
    page.select_option("select[name=sort]", "score_low")
    page.click("details.filter-panel button[type=submit]")
    page.wait_for_url("**/?*sort=score_low*")
    assert "annotated=helpfulness" in page.url
    assert "helpfulness: 0.750" in page.inner_text("#session-rows .tag.score")
    # Taken back on the run page: the comment goes, the score stays.
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-2/")
    comment = page.locator("#annotations .annotation-list li", has_text="Short and right.")
    with page.expect_navigation():
        comment.locator("button", has_text="Delete").click()
    assert page.locator("#annotations pre.comment").count() == 0
    assert "helpfulness: 0.75" in page.inner_text("#annotations .annotation-list")
    assert page.problems == []
