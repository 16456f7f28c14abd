"""What a newcomer trips on in the first hour, in a real browser with JavaScript on, at
1280 px and 390 px: refused forms say why, a comment typed with a score is kept, a failed
run shows its error first.

Every test ends with no console error (beyond the refused requests' own status line), no
CSP violation and no request to another host (``page.problems``).
"""

from __future__ import annotations

import re

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


def problems_beyond(page, status: int) -> list[str]:
    """The page's problems less Chromium's own line for a request refused with ``status``."""
    return [p for p in page.problems if f"status of {status}" not in p]


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[page.width]["width"]


def test_compare_with_one_run_ticked_says_why(page, live_server, django_user_model):
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/sessions/demo-workflow-blog/")
    page.check("input[name=run][value=demo-wf-run-2]")
    page.click("#compare-form button[type=submit]")
    alert = page.wait_for_selector("[role=alert]", timeout=5000)
    assert "two" in alert.inner_text().lower()
    assert fits(page)
    assert problems_beyond(page, 400) == []


def test_a_score_without_a_value_says_why(page, live_server, django_user_model):
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-2/")
    page.select_option("#annotations select[name=kind]", "score")
    page.fill("#annotations input[name=name]", "helpfulness")
    page.click("#annotations form.annotation-form button[type=submit]")
    alert = page.wait_for_selector("[role=alert]", timeout=5000)
    assert "a score needs a value" in alert.inner_text()
    assert not models.Annotation.objects.exists()
    assert problems_beyond(page, 400) == []


def test_adding_an_unknown_member_says_why_beside_the_form(page, live_server, django_user_model):
    admin = django_user_model.objects.create_user("ada", password="ada-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=admin, role=models.Membership.ADMIN
    )
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "ada-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Sessions')")
    page.goto(f"{live_server.url}/p/default/settings/")
    page.fill("#members input[name=username]", "nobody-by-that-name")
    page.click("#members form.stacked button[type=submit]")
    error = page.wait_for_selector("#members .errorlist", timeout=5000)
    assert "There is no user with this name." in error.inner_text()
    # The form is still there, with what was typed.
    assert page.input_value("#members input[name=username]") == "nobody-by-that-name"
    assert fits(page)
    assert problems_beyond(page, 400) == []


def test_a_comment_typed_with_a_score_is_kept_and_fields_follow_the_kind(
    page, live_server, django_user_model
):
    load_demo()
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/demo-wf-run-2/")
    form = "#annotations form.annotation-form"
    page.select_option(f"{form} select[name=kind]", "comment")
    assert not page.is_visible(f"{form} input[name=value]") and not page.is_visible(
        f"{form} input[name=name]"
    )
    assert page.is_visible(f"{form} textarea[name=text]")
    page.select_option(f"{form} select[name=kind]", "label")
    assert page.is_visible(f"{form} input[name=name]") and not page.is_visible(f"{form} input[name=value]")
    page.select_option(f"{form} select[name=kind]", "score")
    assert page.is_visible(f"{form} input[name=value]")
    page.fill(f"{form} input[name=name]", "helpfulness")
    page.fill(f"{form} input[name=value]", "0.5")
    page.fill(f"{form} textarea[name=text]", "Half right: the dates are off.")
    page.click(f"{form} button[type=submit]")
    page.wait_for_selector("#annotations pre.comment")
    listed = page.inner_text("#annotations .annotation-list")
    assert "helpfulness: 0.5" in listed and "Half right: the dates are off." in listed
    kinds = sorted(models.Annotation.objects.values_list("kind", flat=True))
    assert kinds == ["comment", "score"]
    assert fits(page)
    assert page.problems == []


def test_a_failed_run_shows_its_error_on_the_first_screen(page, live_server, django_user_model):
    iterations = [
        {
            "index": n,
            "thought": "Thinking about it " * 30,
            "tool_calls": [{"tool": "search", "params": {"q": "x"}}],
        }
        for n in range(1, 7)
    ]
    ingestion.ingest_items(
        items=[
            native(
                "failed-1",
                "s-failed",
                agent_name="Support triage",
                status="failed",
                input="Find the order " * 40,
                error="ProviderError: 529 overloaded",
                started_at="2026-11-30T10:00:00Z",
                ended_at="2026-11-30T10:00:09Z",
                iterations=iterations,
            )
        ]
    )
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/runs/failed-1/")
    error = page.locator(".error-card")
    assert "ProviderError: 529 overloaded" in error.inner_text()
    top = error.evaluate("e => e.getBoundingClientRect().top")
    assert top < WIDTHS[page.width]["height"], top  # on the first screen, no scrolling
    # The first card is the error; the annotations come after the run's own content.
    first_card = page.locator("#transcript section.card").first
    assert "error-card" in first_card.get_attribute("class")
    order = page.evaluate(
        "() => Array.from(document.querySelectorAll('#transcript section.card')).map(s => s.id || s.className)"
    )
    assert order.index("annotations") > order.index("card error-card")
    assert fits(page)
    assert page.problems == []


BROKEN_WORDS = """(selector) => {
  // Words of at most 20 characters that the layout broke over two lines: in prose a
  // hyphen is a place to break ("gpt-4o-/mini" in an error message), in an id or a name
  // (code) it is not ("demo-/sql-30-run-/1").
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const words = node.parentElement.closest("code") ? /\\S+/g : /[^\\s-]+/g;
      let m;
      while ((m = words.exec(node.data))) {
        if (m[0].length > 20) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


def test_no_word_breaks_in_the_middle_at_desktop_width(page, live_server, django_user_model):
    if page.width != "desktop":
        pytest.skip("a phone's stacked cells break only what cannot fit its width")
    from django.core.management import call_command

    call_command("quickstart", "--no-serve", stdout=__import__("io").StringIO())
    log_in(page, live_server, django_user_model)
    for url in (
        "/p/default/",
        "/p/default/sessions/demo-workflow-blog/",
        "/p/default/stats/",
        "/p/default/receipts/",
    ):
        page.goto(live_server.url + url)
        assert page.evaluate(BROKEN_WORDS, "main td, main th, main h1, main dd") == [], url
    assert page.problems == []


def test_stats_scores_numbers_and_charts_at_each_width(page, live_server, django_user_model):
    from django.core.management import call_command

    from history_app.upkeep import annotations as annotation_store

    call_command("quickstart", "--no-serve", stdout=__import__("io").StringIO())
    run = models.Run.objects.get(run_id="demo-wf-run-3")
    annotation_store.add(
        run, annotation_store.parse({"kind": "score", "name": "correct", "value": 1}), author="t"
    )
    log_in(page, live_server, django_user_model)
    page.goto(f"{live_server.url}/p/default/stats/")
    assert page.title() == "Stats · Agent history"
    assert page.is_visible("#scores h2:has-text('Scores')") and "correct" in page.inner_text("#scores")
    # Round ticks with separators: every axis value is a multiple of its step.
    ticks = page.locator("svg.chart text.wf-axis[text-anchor=end]").all_text_contents()
    counts = [t for t in ticks if " " not in t]  # not the latency charts' durations ("2.5 s")
    assert counts and all(re.fullmatch(r"\$?\d{1,3}(,\d{3})*(\.\d+)?%?", t) for t in counts), ticks
    # The failure chart's caption opens the table it points to.
    page.click("text=runs per day as a table")
    assert page.is_visible("#runs-per-day-table")
    figure = page.locator(".figure.days").first
    scroll = figure.evaluate("f => [f.scrollWidth - f.clientWidth, f.scrollLeft]")
    if page.width == "phone":
        # Wider than the phone, it opens on the newest day (the right end): the last bar
        # is on screen.
        assert scroll[0] > 0, scroll
        box = figure.bounding_box()
        last_bar = page.locator(".figure.days").first.locator("rect.bar").last.bounding_box()
        assert box["x"] <= last_bar["x"] <= box["x"] + box["width"], (box, last_bar)
    else:
        assert scroll[0] == 0
    assert fits(page)
    assert page.problems == []


def test_a_new_token_is_shown_once_with_a_copy_button_after_a_redirect(page, live_server, django_user_model):
    admin = django_user_model.objects.create_user("ada", password="ada-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=admin, role=models.Membership.ADMIN
    )
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "ada-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Sessions')")
    page.goto(f"{live_server.url}/p/default/settings/")
    page.fill("#tokens input[name=name]", "evaluator")
    page.check("#tokens input[name=scopes][value=read]")
    page.click("#tokens form.stacked button[type=submit]")
    page.wait_for_selector("code.token")
    assert page.url.endswith("/p/default/settings/#tokens")  # not the POST address
    token = page.inner_text("code.token")
    page.click(".token-box button.copy")
    assert page.evaluate("navigator.clipboard.readText()") == token
    page.reload()
    assert page.locator("code.token").count() == 0  # shown only that once
    assert fits(page)
    assert page.problems == []


def test_search_hits_show_their_marked_passage(page, live_server, django_user_model):
    load_demo()
    log_in(page, live_server, django_user_model)
    page.fill("#q", "partitioning")
    page.wait_for_selector(".hits .snippet mark")
    assert page.inner_text(".hits .snippet mark >> nth=0").lower().startswith("partitioning")
    assert fits(page)
    assert page.problems == []
