"""What a newcomer trips on in the first hour, in a real browser with JavaScript on, at
1280 px and 390 px: refused forms say why, a comment typed with a score is kept, a failed
run shows its error first.

Every test ends with no console error (beyond the refused requests' own status line), no
CSP violation and no request to another host (``page.problems``).
"""

from __future__ import annotations

import pytest

from history_app import ingestion, models

from .conftest import native
from .test_browser import launch, load_demo, log_in, open_page, sync_api

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=sorted(WIDTHS))
def page(request, live_server):
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        page = open_page(browser, live_server, viewport=WIDTHS[request.param])
        page.width = request.param
        yield page
        page.context.close()
        browser.close()


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
