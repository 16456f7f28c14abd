"""A run's member runs on a phone: the section reads at 390 px and its links open each
member's page, in a real browser, with no console error, CSP violation or request to
another host (``page.problems``)."""

from __future__ import annotations

import pytest

from history_app.intake import ingestion

from .conftest import native
from .test_browser import log_in, open_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def _handoff_session() -> None:
    """A top-level run that handed its work to three agents and did none itself, as an
    OpenAI Agents SDK run with handoffs arrives."""
    parent = native(
        "triage-run",
        "s-handoff",
        kind="team",
        agent_name="Triage agent",
        framework="openai-agents",
        input="What's the weather in Paris, and should I take an umbrella?",
        started_at="2026-11-30T10:00:00Z",
        ended_at="2026-11-30T10:00:09Z",
    )
    members = [
        native(
            f"member-{n}",
            "s-handoff",
            kind="member",
            parent_run_id="triage-run",
            agent_name=name,
            input=task,
            output="done",
            started_at=f"2026-11-30T10:00:0{n * 2}Z",
            ended_at=f"2026-11-30T10:00:0{n * 2 + 1}Z",
        )
        for n, (name, task) in enumerate(
            [
                ("Weather agent with a rather long name that must wrap", "Weather in Paris " + "today " * 40),
                ("Umbrella advisor", "Should they take an umbrella?"),
                ("Summariser", "Put it together"),
            ],
            start=1,
        )
    ]
    results = ingestion.ingest_items(items=[parent, *members])
    assert [r.status for r in results] == ["created"] * 4, results


def test_member_runs_read_on_a_phone_and_open_each_member(chromium, live_server, django_user_model):
    _handoff_session()
    page = open_page(chromium, live_server, viewport=PHONE)
    try:
        log_in(page, live_server, django_user_model)
        page.goto(f"{live_server.url}/p/default/runs/triage-run/")
        section = page.locator("#member-runs")
        section.wait_for()
        assert "This run's work was done by its members:" in section.inner_text()
        # Nothing is wider than the screen, and every row stacks into a card that fits it.
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        rows = section.locator("tbody tr")
        assert rows.count() == 3
        for i in range(3):
            box = rows.nth(i).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 0.5
        # A long input reads across the card, cut to its head.
        inputs = section.locator("td[data-label='Input']")
        assert inputs.first.bounding_box()["width"] > PHONE["width"] * 0.75
        assert inputs.first.inner_text().endswith("…")
        # Stacked cells say what they are ("Status", "Started"…), and the text is legible.
        label = page.eval_on_selector(
            "#member-runs td[data-label='Started']", "el => getComputedStyle(el, '::before').content"
        )
        assert label == '"Started"'
        smallest = page.eval_on_selector_all(
            "#member-runs td a, #member-runs td[data-label='Input']",
            "els => Math.min(...els.map(e => parseFloat(getComputedStyle(e).fontSize)))",
        )
        assert smallest >= 12
        names = section.locator("td.run-cell > a").all_inner_texts()
        assert names == [
            "Weather agent with a rather long name that must wrap",
            "Umbrella advisor",
            "Summariser",
        ]
        # The facts link down to the section; each member link opens its run page.
        page.click("a[href='#member-runs']")
        assert page.url.endswith("#member-runs")
        page.click("#member-runs a:has-text('Umbrella advisor')")
        page.wait_for_url("**/p/default/runs/member-2/")
        page.wait_for_selector("#transcript h1:has-text('Umbrella advisor')")
        # ... and links back to the run that started it.
        page.click("#transcript dd a[href='/p/default/runs/triage-run/']")
        page.wait_for_url("**/p/default/runs/triage-run/")
        page.wait_for_selector("#member-runs")
        assert page.problems == []
    finally:
        page.context.close()
