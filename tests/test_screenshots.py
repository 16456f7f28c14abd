"""Every page of the dashboard with the quickstart demo, at desktop and phone width, light
and dark: the walk that makes the README's screenshots (``test-output/shots/``; copied to
``.docs/screenshots/`` by hand) and fails on any console error, CSP violation, request
to another host or page wider than the screen."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from history_app import models
from history_app.upkeep import annotations as annotation_store

from .test_browser import OUTPUT, open_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWS = {
    "desktop": {"viewport": {"width": 1280, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "color_scheme": "dark"},
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_every_page_with_the_demo(chromium, live_server, django_user_model, view):
    call_command("quickstart", "--no-serve", stdout=io.StringIO())
    owner = django_user_model.objects.create_user("owner", password="owner-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=owner, role=models.Membership.ADMIN
    )
    wf = models.Run.objects.get(run_id="demo-wf-run-3")
    annotation_store.add(
        wf,
        annotation_store.parse(
            [
                {"kind": "score", "name": "correct", "value": 1},
                {"kind": "score", "name": "tone", "text": "formal"},
                {"kind": "label", "name": "golden", "iteration": 1},
                {
                    "kind": "comment",
                    "text": "Cites both earlier posts; the comparison is what readers asked for.",
                },
            ]
        ),
        author="token:evaluator",
    )
    run = (
        models.Run.objects.filter(session__session_id__startswith="demo-", model_call_count__gt=1)
        .order_by("-started_at")
        .first()
    )
    pages = [
        ("01-sessions", "/p/default/", "#session-rows"),
        ("06-search", "/p/default/?q=partitioning", ".hits"),
        ("02-session-workflow", "/p/default/sessions/demo-workflow-blog/", "#timeline"),
        ("03-run", "/p/default/runs/demo-wf-run-3/", "#transcript"),
        ("07-context", "/p/default/runs/demo-wf-run-3/context/1/", "#context-text"),
        ("08-context-rerendered", "/p/default/runs/demo-wf-run-3/context/1/?runs=1", "#rerender pre.diff"),
        ("09-stats", "/p/default/stats/?days=30", "svg.chart"),
        ("05-receipts", "/p/default/receipts/", "table.receipts"),
        ("11-run-model-calls", run.get_absolute_url(), "#model-calls"),
        ("12-model-call", run.get_absolute_url() + "model-calls/1/", ".messages"),
        ("13-team-run", "/p/default/runs/demo-team-run-1/", "p.delegation"),
        ("14-settings", "/p/default/settings/", "h1"),
        ("15-not-found", "/p/default/runs/no-such-run/", "h1"),
        ("19-compare", "/p/default/compare/?a=demo-wf-run-2&b=demo-wf-run-3", "#compare-summary"),
    ]
    shots = OUTPUT / "shots"
    shots.mkdir(parents=True, exist_ok=True)
    page = open_page(chromium, live_server, **VIEWS[view])
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "owner")
    page.fill("#id_password", "owner-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector("#session-rows")
    width = VIEWS[view]["viewport"]["width"]
    for name, url, ready in pages:
        page.goto(live_server.url + url)
        page.wait_for_selector(ready)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, url
        if name == "03-run" and view == "desktop":
            page.locator("#annotations").screenshot(path=str(shots / "20-annotations.png"))
        if name == "03-run":  # a context opened in place
            page.click(".context-list details.inplace > summary")
            page.wait_for_selector(".context-list .context-sent")
        # The top of the page as a reader first sees it (a phone's screen; 1,400 px
        # of a desktop page).
        height = min(page.evaluate("document.documentElement.scrollHeight"), 1400)
        clip = {"x": 0, "y": 0, "width": width, "height": height if view == "desktop" else 844}
        path = shots / f"{name}{'' if view == 'desktop' else '-phone'}.png"
        page.screenshot(path=str(path), full_page=True, clip=clip)
    page.context.close()
    not_found = [p for p in page.problems if re.search(r"status of 404 \(Not Found\)", p)]
    assert len(not_found) == 1 and page.problems == not_found
