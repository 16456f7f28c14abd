"""Every URL of the app is walked: a page answers 200 with HTML, its JSON twin answers 200
with JSON from the same view function, and anything else is named in ``NOT_PAGES`` with
why. A new URL with neither a case here nor a place in that list fails
``test_every_url_has_a_case``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from history_app import models
from history_app.demo.generate import sample_items

pytestmark = pytest.mark.django_db

# Endpoints that are no page (nor a page's twin), by their route, with why.
NOT_PAGES = {
    "api/v1/ingest": "ingestion (POST)",
    "v1/traces": "OTLP ingestion (POST)",
    "api/v1/runs/<id:run_id>/annotations": "annotations API (GET list, POST with a token)",
    "api/v1/runs/<id:run_id>/annotations/<int:pk>": "annotations API (DELETE with a token)",
    "p/<slug:project>/sessions/<id:session_id>/pin/": "a form's POST",
    "p/<slug:project>/runs/<id:run_id>/annotations/": "a form's POST",
    "p/<slug:project>/runs/<id:run_id>/annotations/<int:pk>/delete/": "a form's POST",
    "p/<slug:project>/settings/members/": "a form's POST",
    "p/<slug:project>/settings/members/<int:pk>/": "a form's POST",
    "p/<slug:project>/settings/tokens/": "a form's POST",
    "p/<slug:project>/connect/token/": "a form's POST",
    "p/<slug:project>/settings/tokens/<int:pk>/revoke/": "a form's POST",
    "p/<slug:project>/settings/retention/": "a form's POST",
    "": "a redirect into the project last opened",
    "switch/<slug:slug>/": "a redirect into another project",
    "sessions/<id:ident>/": "a redirect from an address before projects",
    "sessions/<id:ident>/<path:rest>": "a redirect from an address before projects",
    "runs/<id:ident>/": "a redirect from an address before projects",
    "runs/<id:ident>/<path:rest>": "a redirect from an address before projects",
    "stats/": "a redirect from an address before projects",
    "receipts/": "a redirect from an address before projects",
}
# Whole trees that are not ours: Django's login and logout, the admin.
NOT_OURS = ("accounts/", "admin/")

RUN, CALLS, WF, TEAM = "{run}", "{calls_run}", "demo-wf-run-3", "demo-team-research"

# Each page's route and the address walked (``{run}``: a demo run with iterations and tool
# calls, ``{calls_run}``: one with model calls), and what it answers.
PAGES = {
    "help/": "/help/",
    "help/<slug:page>/": "/help/ingestion/",
    "p/<slug:project>/": "/p/default/",
    "p/<slug:project>/sessions/<id:session_id>/": f"/p/default/sessions/{TEAM}/",
    "p/<slug:project>/sessions/<id:session_id>/delete/": f"/p/default/sessions/{TEAM}/delete/",
    "p/<slug:project>/runs/<id:run_id>/": f"/p/default/runs/{RUN}/",
    "p/<slug:project>/runs/<id:run_id>/iterations/": f"/p/default/runs/{RUN}/iterations/?start=1",
    "p/<slug:project>/runs/<id:run_id>/iterations/<int:position>/calls/": f"/p/default/runs/{RUN}/iterations/0/calls/",
    "p/<slug:project>/runs/<id:run_id>/contexts/": f"/p/default/runs/{WF}/contexts/",
    "p/<slug:project>/runs/<id:run_id>/model-calls/": f"/p/default/runs/{CALLS}/model-calls/",
    "p/<slug:project>/runs/<id:run_id>/model-calls/<int:number>/": f"/p/default/runs/{CALLS}/model-calls/1/",
    "p/<slug:project>/runs/<id:run_id>/context/<int:number>/": f"/p/default/runs/{WF}/context/1/",
    "p/<slug:project>/runs/<id:run_id>/context/<int:number>/text/": f"/p/default/runs/{WF}/context/1/text/",
    "p/<slug:project>/compare/": f"/p/default/compare/?a={WF}&b=demo-wf-run-2",
    "p/<slug:project>/receipts/": "/p/default/receipts/",
    "p/<slug:project>/stats/": "/p/default/stats/",
    "p/<slug:project>/settings/": "/p/default/settings/",
    "p/<slug:project>/connect/": "/p/default/connect/?framework=langgraph",
}
# Downloads: the address and the content type.
DOWNLOADS = {
    "p/<slug:project>/runs/<id:run_id>/export.<str:fmt>": (
        f"/p/default/runs/{RUN}/export.md",
        "text/markdown",
    ),
    "p/<slug:project>/sessions/<id:session_id>/export.<str:fmt>": (
        f"/p/default/sessions/{TEAM}/export.json",
        "application/json",
    ),
}
TWINS = {
    "api/v1/sessions": "/api/v1/sessions",
    "api/v1/sessions/<id:session_id>": f"/api/v1/sessions/{TEAM}",
    "api/v1/sessions/<id:session_id>/timeline": f"/api/v1/sessions/{TEAM}/timeline",
    "api/v1/runs/<id:run_id>": f"/api/v1/runs/{RUN}",
    "api/v1/runs/<id:run_id>/contexts/<int:number>": f"/api/v1/runs/{WF}/contexts/1",
    "api/v1/runs/<id:run_id>/model-calls/<int:number>": f"/api/v1/runs/{CALLS}/model-calls/1",
    "api/v1/receipts": "/api/v1/receipts",
    "api/v1/stats": "/api/v1/stats",
    "api/v1/compare": f"/api/v1/compare?a={WF}&b=demo-wf-run-2",
    "api/v1/connect": "/api/v1/connect?framework=agno",
}


def walk(resolvers=None, prefix: str = ""):
    """(route, pattern) for every URL pattern, nested includes followed; the trees in
    ``NOT_OURS`` are not entered."""
    for entry in get_resolver().url_patterns if resolvers is None else resolvers:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route not in NOT_OURS:
                yield from walk(entry.url_patterns, route)
        else:
            assert isinstance(entry, URLPattern)
            yield route, entry


def test_every_url_has_a_case():
    routes = [route for route, _ in walk()]
    assert len(routes) == len(set(routes))
    cases = set(NOT_PAGES) | set(PAGES) | set(DOWNLOADS) | set(TWINS)
    assert set(routes) - cases == set(), "a URL without a case in tests/test_every_url.py"
    assert cases - set(routes) == set(), "a case for a URL that is gone"


def test_each_twin_is_its_pages_own_view():
    """A twin is the page's view with ``as_json``, never a view of its own."""
    patterns = dict(walk())
    page_views = {patterns[route].callback for route in PAGES}
    for route in TWINS:
        twin = patterns[route]
        assert twin.default_args.get("as_json") is True, route
        assert twin.callback in page_views, f"{route} is not answered by a page's view"
    # And every page's view that has a twin: sessions, session, run, inspector, model
    # call, receipts, stats, compare, connect.
    assert len({patterns[route].callback for route in TWINS}) == 9


@pytest.fixture
def demo(ingest, alice):
    """The demo's sample sessions, and alice an admin: she sees every page."""
    models.Membership.objects.filter(user=alice).update(role=models.Membership.ADMIN)
    for batch in sample_items(datetime.now(UTC)):
        assert ingest(batch).status_code == 200
    run = models.Run.objects.filter(tool_call_count__gt=0, iteration_count__gt=1).order_by("run_id").first()
    with_calls = models.Run.objects.filter(model_call_count__gt=0).order_by("run_id").first()
    return {"run": run.run_id, "calls_run": with_calls.run_id}


def test_every_page_answers_html_and_its_twin_json(alice_client, demo, auth_headers):
    for route, url in PAGES.items():
        response = alice_client.get(url.format(**demo))
        assert response.status_code == 200, (route, response.status_code)
        assert response["Content-Type"].startswith("text/html"), route
        assert b"<html" in response.content, route
    for route, (url, content_type) in DOWNLOADS.items():
        response = alice_client.get(url.format(**demo))
        assert response.status_code == 200 and response["Content-Type"].startswith(content_type), route
        # Read to its end: a stream left half read keeps its database cursor open (on
        # PostgreSQL a named one), to be closed later inside another test's transaction.
        assert b"".join(response.streaming_content), route
    for route, url in TWINS.items():
        # The twin answers a login and a bearer token alike.
        bearer = Client().get(url.format(**demo), **auth_headers)
        for answer in (alice_client.get(url.format(**demo)), bearer):
            assert answer.status_code == 200, (route, answer.status_code)
            assert answer["Content-Type"] == "application/json", route
            body = b"".join(answer.streaming_content) if answer.streaming else answer.content
            assert b'"ok": true' in body[:20] or b'"ok":true' in body[:20], route
