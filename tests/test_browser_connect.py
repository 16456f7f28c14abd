"""The connect page in a real browser, at a phone's width: pick a framework (htmx swaps the
recipe in and the address follows), make a token, copy the script; nothing wider than the
screen, no CSP violation, no console error."""

from __future__ import annotations

import pytest

from history_app import models
from history_app.reading import connect

from .test_browser import open_page, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def test_the_connect_page_on_a_phone(chromium, live_server, django_user_model):
    user = django_user_model.objects.create_user("ada", password="ada-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=user, role=models.Membership.ADMIN
    )
    page = open_page(chromium, live_server, viewport=PHONE)
    page.goto(f"{live_server.url}/p/default/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "ada-password-1")
    page.click("button[type=submit]")
    page.click("text=Connect your agent's framework")
    page.wait_for_selector("h2:has-text('OpenAI Agents SDK')")
    page.click("nav[aria-label=Frameworks] >> text=LangGraph and LangChain")
    page.wait_for_selector("h2:has-text('LangGraph and LangChain')")
    assert page.url.endswith("/p/default/connect/?framework=langgraph")
    script = page.inner_text("#script pre")
    assert f'endpoint="{live_server.url}/v1/traces"' in script and "thread_id" in script
    assert page.is_visible("#script button.copy")  # shown by our script only
    assert not models.IngestToken.objects.exists()
    page.click("text=Make an ingest token for LangGraph and LangChain")
    page.wait_for_selector("text=shown only this once")
    token = page.inner_text("#token-line pre").removeprefix("export TOKEN=").strip()
    (row,) = models.IngestToken.objects.all()
    assert models.IngestToken.hash(token) == row.token_hash
    width = page.evaluate("() => document.documentElement.scrollWidth")
    shot(page, "connect-phone")
    assert width <= PHONE["width"], f"the page is {width} px wide"
    # The framework links stay on the screen, each one tappable.
    for recipe in connect.RECIPES:
        box = page.locator(f"nav[aria-label=Frameworks] a[href='?framework={recipe.key}']").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] and box["height"] >= 24
    assert page.problems == []
    page.context.close()
