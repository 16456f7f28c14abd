"""Projects and access (issue #16), tried as named users and tokens.

- alice: admin of A ("alpha"); bob: viewer of B ("beta"); carol: viewer of A and B;
  mallory: in no project; root: a superuser; dave: staff, in no project.
- Both projects hold a session called "default" with a run "r-1" (ids are unique within a
  project only), with different texts. A's run "r-2" carries a history block whose source
  is "b-only", a run that exists in B alone.

Every URL of the app is walked, the list generated from the URL configuration (a page
added later without an entry in ``ACCESS`` fails ``test_every_url_is_in_the_access_table``),
and the admin's pages from its registry.
"""

from __future__ import annotations

import json
import re

import pytest
from django.contrib import admin
from django.urls import URLPattern, URLResolver, get_resolver

from history_app import models
from history_app.access.auth import register_token

from .conftest import native

TOKENS = {
    ("alpha", "ingest"): "aht_alpha-ingest-0123456789abcdef",
    ("alpha", "read"): "aht_alpha-read-0123456789abcdefgh",
    ("alpha", "annotate"): "aht_alpha-annotate-0123456789abcd",
    ("beta", "ingest"): "aht_beta-ingest-0123456789abcdefg",
    ("beta", "read"): "aht_beta-read-0123456789abcdefghi",
}


def bearer(project: str, scope: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {TOKENS[project, scope]}"}


def post_runs(client, project: str, runs: list[dict]):
    return client.post(
        "/api/v1/ingest", json.dumps(runs), content_type="application/json", **bearer(project, "ingest")
    )


def full_run(text: str, *, tool: str, **fields) -> dict:
    """Run "r-1" of session "default", with something behind every page of a run: an
    iteration with a tool call and a model call, and an injected context."""
    return native(
        "r-1",
        "default",
        input=text,
        output=f"answer: {text}",
        iterations=[
            {
                "thought": text,
                "tool_calls": [{"tool": tool, "params": {"q": text}, "result": text}],
                "model_calls": [{"model": "gpt-4o", "input_tokens": 10, "output_tokens": 5, "output": text}],
            }
        ],
        injected_contexts=[{"step": "plan", "kind": "instructions", "text": f"instructions: {text}"}],
        **fields,
    )


def body(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.fixture
def world(db, client, django_user_model):
    alpha = models.Project.objects.create(slug="alpha", name="Alpha")
    beta = models.Project.objects.create(slug="beta", name="Beta")
    users = {
        name: django_user_model.objects.create_user(name, password=f"{name}-pw-1")
        for name in ("alice", "bob", "carol", "mallory")
    }
    users["root"] = django_user_model.objects.create_superuser("root", password="root-pw-1")
    users["dave"] = django_user_model.objects.create_user("dave", password="dave-pw-1", is_staff=True)
    for project, user, role in (
        (alpha, "alice", "admin"),
        (beta, "bob", "viewer"),
        (alpha, "carol", "viewer"),
        (beta, "carol", "viewer"),
    ):
        models.Membership.objects.create(project=project, user=users[user], role=role)
    for (slug, scope), token in TOKENS.items():
        register_token(
            name=f"{slug}-{scope}", token=token, scopes=[scope], project=alpha if slug == "alpha" else beta
        )
    alpha_runs = [
        full_run("alpha words about lighthouses", tool="calculator", status="failed", error="alpha broke"),
        native(
            "r-2",
            "default",
            input="second alpha question",
            injected_contexts=[
                {
                    "step": "plan",
                    "kind": "chat_history",
                    "text": "[run-1] earlier",
                    "source_run_ids": ["b-only"],
                }
            ],
        ),
    ]
    assert post_runs(client, "alpha", alpha_runs).status_code == 200
    beta_runs = [
        full_run("beta words about submarines", tool="sonar"),
        native("b-only", "default", input="beta only"),
    ]
    assert post_runs(client, "beta", beta_runs).status_code == 200
    return {"alpha": alpha, "beta": beta, "users": users}


def as_user(client, world, name: str):
    client.logout()
    if name != "anonymous":
        client.force_login(world["users"][name])
    return client


# -- the URL walk --------------------------------------------------------------------------


def _patterns(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern


def app_routes() -> list[str]:
    """Every route of the app (Django's admin and the login pages are walked apart)."""
    return [
        route
        for route, _ in _patterns(get_resolver().url_patterns)
        if not route.startswith(("admin/", "accounts/"))
    ]


# What each route needs: "read", "export", "pin", "annotate", "delete", "manage" (a project's pages by
# role), "post:<action>" (a POST-only action), and the routes outside projects.
ACCESS = {
    "": "home",
    "p/<slug:project>/": "read",
    "p/<slug:project>/sessions/<id:session_id>/": "read",
    "p/<slug:project>/sessions/<id:session_id>/pin/": "post:pin",
    "p/<slug:project>/sessions/<id:session_id>/delete/": "delete",
    "p/<slug:project>/runs/<id:run_id>/": "read",
    "p/<slug:project>/runs/<id:run_id>/iterations/": "read",
    "p/<slug:project>/runs/<id:run_id>/iterations/<int:position>/calls/": "read",
    "p/<slug:project>/runs/<id:run_id>/contexts/": "read",
    "p/<slug:project>/runs/<id:run_id>/model-calls/": "read",
    "p/<slug:project>/runs/<id:run_id>/model-calls/<int:number>/": "read",
    "p/<slug:project>/runs/<id:run_id>/context/<int:number>/": "read",
    "p/<slug:project>/runs/<id:run_id>/context/<int:number>/text/": "read",
    "p/<slug:project>/compare/": "read",
    "p/<slug:project>/runs/<id:run_id>/annotations/": "post:annotate",
    "p/<slug:project>/runs/<id:run_id>/annotations/<int:pk>/delete/": "post:annotate",
    "p/<slug:project>/runs/<id:run_id>/export.<str:fmt>": "export",
    "p/<slug:project>/sessions/<id:session_id>/export.<str:fmt>": "export",
    "p/<slug:project>/receipts/": "read",
    "p/<slug:project>/stats/": "read",
    "p/<slug:project>/connect/": "read",
    "p/<slug:project>/connect/token/": "post:manage",
    "p/<slug:project>/settings/": "manage",
    "p/<slug:project>/settings/members/": "post:manage",
    "p/<slug:project>/settings/members/<int:pk>/": "post:manage",
    "p/<slug:project>/settings/tokens/": "post:manage",
    "p/<slug:project>/settings/tokens/<int:pk>/revoke/": "post:manage",
    "p/<slug:project>/settings/retention/": "post:manage",
    "switch/<slug:slug>/": "switch",
    # The reference pages: anyone, logged in or not (they hold no data; test_help.py).
    "help/": "public",
    "help/<slug:page>/": "public",
    "sessions/<id:ident>/": "legacy",
    "sessions/<id:ident>/<path:rest>": "legacy",
    "runs/<id:ident>/": "legacy",
    "runs/<id:ident>/<path:rest>": "legacy",
    "stats/": "legacy-page",
    "receipts/": "legacy-page",
    "api/v1/receipts": "api",
    "api/v1/ingest": "api-ingest",
    "v1/traces": "api-ingest",
    "api/v1/sessions": "api",
    "api/v1/sessions/<id:session_id>": "api",
    "api/v1/runs/<id:run_id>": "api",
    "api/v1/sessions/<id:session_id>/timeline": "api",
    "api/v1/stats": "api",
    "api/v1/compare": "api",
    "api/v1/connect": "api",
    "api/v1/runs/<id:run_id>/annotations": "api",
    "api/v1/runs/<id:run_id>/annotations/<int:pk>": "api",
    "api/v1/runs/<id:run_id>/contexts/<int:number>": "api",
    "api/v1/runs/<id:run_id>/model-calls/<int:number>": "api",
}

ROLES = {
    "alice": {"alpha": "admin"},
    "bob": {"beta": "viewer"},
    "carol": {"alpha": "viewer", "beta": "viewer"},
}
RANK = {"viewer": 1, "editor": 2, "admin": 3}
NEEDS = {
    "read": "viewer",
    "export": "editor",
    "pin": "editor",
    "annotate": "editor",
    "delete": "admin",
    "manage": "admin",
}


def test_every_url_is_in_the_access_table():
    routes = app_routes()
    assert len(routes) >= 30
    assert set(routes) == set(ACCESS), "a URL was added or removed: say who may use it in ACCESS"


def _fill(route: str, slug: str) -> str:
    project = models.Project.objects.get(slug=slug)
    member = models.Membership.objects.filter(project=project).order_by("pk").first()
    token = models.IngestToken.objects.filter(project=project).order_by("pk").first()
    values = {
        "project": slug,
        "slug": slug,
        "session_id": "default",
        "run_id": "r-1",
        "ident": "r-1",
        "rest": "",
        "position": "0",
        "number": "1",
        "fmt": "json",
        "pk": str(member.pk if "members" in route else token.pk),
    }
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)


def _expected(user: str, slug: str, kind: str) -> int | str:
    """The status ``user`` gets on a page of project ``slug`` needing ``kind``."""
    role = "admin" if user == "root" else ROLES.get(user, {}).get(slug)
    if role is None:
        return 404
    return "ok" if RANK[role] >= RANK[NEEDS[kind]] else 403


@pytest.mark.parametrize("user", ["alice", "bob", "carol", "mallory", "root", "dave", "anonymous"])
def test_every_project_page_as_each_user(client, world, user):
    """Each project page, for A and for B: 404 where the user is in no such project (the
    same as for a project that does not exist), 403 where the role is too low, and the
    page otherwise; the login page for someone not logged in."""
    client = as_user(client, world, user)
    checked = 0
    for route, kind in ACCESS.items():
        if not route.startswith("p/"):
            continue
        method, _, kind = kind.rpartition(":")
        for slug in ("alpha", "beta", "no-such-project"):
            url = _fill(route, slug if slug != "no-such-project" else "alpha").replace(
                "/p/alpha/", f"/p/{slug}/", 1
            )
            response = client.post(url) if method == "post" else client.get(url)
            text = body(response)  # read to its end: a streamed export holds a cursor until then
            checked += 1
            if user == "anonymous":
                assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
                continue
            expected = 404 if slug == "no-such-project" else _expected(user, slug, kind)
            if expected == "ok":
                assert response.status_code in (200, 302, 400), (user, url, response.status_code)
            else:
                assert response.status_code == expected, (user, url, response.status_code)
                # Neither page names what it hides.
                assert "words about" not in text, url
    assert checked == 3 * sum(1 for route in ACCESS if route.startswith("p/"))


def test_each_user_reads_their_own_project_and_only_it(client, world):
    """What each page shows: A's run where A is asked for, B's where B is."""
    for user, slug, words, other in (
        ("alice", "alpha", "lighthouses", "submarines"),
        ("carol", "alpha", "lighthouses", "submarines"),
        ("carol", "beta", "submarines", "lighthouses"),
        ("bob", "beta", "submarines", "lighthouses"),
    ):
        client = as_user(client, world, user)
        for page in ("sessions/default/", "runs/r-1/", "runs/r-1/context/1/", "runs/r-1/model-calls/1/", "?q=words", "?q=" + other):  # fmt: skip
            text = client.get(f"/p/{slug}/{page}").content.decode()
            assert f"words about {other}" not in text, (user, slug, page)
            if "q=" + other not in page:
                assert words in text, (user, slug, page)


def test_search_stats_receipts_and_exports_hold_only_the_project(client, world):
    client = as_user(client, world, "alice")
    hits = client.get("/p/alpha/?q=submarines").content.decode()
    assert "No sessions" in hits or "/p/alpha/sessions/default/" not in hits
    stats = client.get("/p/alpha/stats/").content.decode()
    # A holds 2 runs (1 failed), a calculator call; B's 2 runs are not counted.
    assert re.search(r"<dt>Runs</dt><dd>2</dd>", stats) and "calculator" in stats
    assert "50.0%" in stats or "50%" in stats
    receipts = client.get("/api/v1/receipts?project=alpha").json()["receipts"]
    assert receipts and all(r["token"].startswith("alpha-") for r in receipts)
    bundle = json.loads(b"".join(client.get("/p/alpha/sessions/default/export.json").streaming_content))
    assert {run["run_id"] for run in bundle["runs"]} == {"r-1", "r-2"}
    assert "submarines" not in json.dumps(bundle)
    root = as_user(client, world, "root")
    beta_stats = root.get("/p/beta/stats/").content.decode()
    assert re.search(r"<dt>Runs</dt><dd>2</dd>", beta_stats) and "calculator" not in beta_stats


def test_a_provenance_link_never_points_into_another_project(client, world):
    """A's context names "b-only" as its source, a run that exists only in B: the
    inspector shows the id as not stored, links nothing, and says nothing of B's run."""
    client = as_user(client, world, "carol")  # she may read both projects, and still
    page = client.get("/p/alpha/runs/r-2/context/1/").content.decode()
    assert "b-only" in page and "beta only" not in page
    assert "/runs/b-only/" not in page and "/p/beta/" not in page.split("switcher-menu")[-1]
    assert client.get("/p/alpha/runs/b-only/").status_code == 404
    assert client.get("/p/beta/runs/b-only/").status_code == 200


def test_the_json_api_as_tokens_of_each_scope(client, world):
    client.logout()
    for slug, words in (("alpha", "lighthouses"), ("beta", "submarines")):
        read = bearer(slug, "read")
        sessions = client.get("/api/v1/sessions", **read).json()["sessions"]
        assert [s["session_id"] for s in sessions] == ["default"]
        assert words in body(client.get("/api/v1/runs/r-1", **read))
        assert client.get("/api/v1/sessions/default", **read).json()["session"]["run_count"] == 2
        assert client.get("/api/v1/receipts", **read).status_code == 200
        other = "beta" if slug == "alpha" else "alpha"
        # A token reads nothing of another project, even when asked by name.
        response = client.get(f"/api/v1/sessions?project={other}", **read)
        assert response.status_code == 404 and response.json()["parameter"] == "project"
        # An ingest-only token writes and reads nothing.
        for url in ("/api/v1/sessions", "/api/v1/runs/r-1", "/api/v1/receipts", "/api/v1/sessions/default"):
            assert client.get(url, **bearer(slug, "ingest")).status_code == 403
    assert client.get("/api/v1/runs/b-only", **bearer("alpha", "read")).status_code == 404
    annotate = bearer("alpha", "annotate")
    assert client.get("/api/v1/sessions", **annotate).status_code == 403
    payload = json.dumps([native("r-9", "x")])
    assert (
        client.post("/api/v1/ingest", payload, content_type="application/json", **annotate).status_code == 403
    )
    assert client.post("/v1/traces", b"{}", content_type="application/json", **annotate).status_code == 403
    assert (
        client.post(
            "/api/v1/ingest", payload, content_type="application/json", **bearer("alpha", "read")
        ).status_code
        == 403
    )


def test_the_json_api_as_users(client, world):
    carol = as_user(client, world, "carol")
    assert "submarines" in body(carol.get("/api/v1/runs/r-1?project=beta"))
    assert "lighthouses" in body(carol.get("/api/v1/runs/r-1?project=alpha"))
    alice = as_user(client, world, "alice")
    assert alice.get("/api/v1/runs/r-1?project=beta").status_code == 404
    assert alice.get("/api/v1/runs/r-1?project=nope").status_code == 404
    assert "lighthouses" in body(alice.get("/api/v1/runs/r-1"))  # her only project
    mallory = as_user(client, world, "mallory")
    for url in ("/api/v1/sessions", "/api/v1/runs/r-1", "/api/v1/runs/r-1?project=alpha", "/api/v1/receipts"):
        assert mallory.get(url).status_code == 404


def test_a_token_writes_only_into_its_project(client, world):
    """Whatever the payload says, runs go into the token's project: a session id that
    exists in B is a new session of A, and B is untouched."""
    client.logout()
    before = models.Run.objects.filter(project=world["beta"]).count()
    payload = native("b-only", "default", input="sent with A's token", metadata={"project": "beta"})
    assert post_runs(client, "alpha", [{**payload, "project": "beta"}]).status_code in (200, 400)
    assert models.Run.objects.filter(project=world["beta"]).count() == before
    assert models.Run.objects.get(project=world["beta"], run_id="b-only").input == "beta only"
    stored = models.Run.objects.filter(project=world["alpha"], run_id="b-only").first()
    assert stored is None or stored.input == "sent with A's token"


def test_old_addresses_redirect_where_they_are_unambiguous(client, world):
    alice = as_user(client, world, "alice")
    response = alice.get("/runs/r-1/context/1/?diff=1")
    assert response.status_code == 302 and response["Location"] == "/p/alpha/runs/r-1/context/1/?diff=1"
    assert alice.get("/sessions/default/").headers["Location"] == "/p/alpha/sessions/default/"
    assert alice.get("/runs/b-only/").status_code == 404  # B's, and she is not in B
    assert alice.get("/stats/").headers["Location"] == "/p/alpha/stats/"
    assert alice.get("/?q=lighthouses").headers["Location"] == "/p/alpha/?q=lighthouses"
    carol = as_user(client, world, "carol")
    choice = carol.get("/runs/r-1/")
    assert choice.status_code == 200
    assert (
        'href="/p/alpha/runs/r-1/"' in choice.content.decode()
        and 'href="/p/beta/runs/r-1/"' in choice.content.decode()
    )
    assert carol.get("/runs/b-only/").headers["Location"] == "/p/beta/runs/b-only/"
    mallory = as_user(client, world, "mallory")
    assert mallory.get("/runs/r-1/").status_code == 404
    page = mallory.get("/")
    assert page.status_code == 200 and "not in any project" in page.content.decode()
    assert mallory.get("/switch/alpha/").status_code == 404


def test_switching_project_keeps_the_page_and_the_search(client, world):
    carol = as_user(client, world, "carol")
    response = carol.get(
        "/switch/beta/", HTTP_REFERER="http://testserver/p/alpha/?q=words&sort=runs&_next=abc"
    )
    assert response["Location"] == "/p/beta/?q=words&sort=runs"
    assert (
        carol.get("/switch/alpha/", HTTP_REFERER="http://testserver/p/beta/stats/?days=7")["Location"]
        == "/p/alpha/stats/?days=7"
    )
    # A detail page has no twin in the other project: the switch lands on its list.
    assert (
        carol.get("/switch/beta/", HTTP_REFERER="http://testserver/p/alpha/runs/r-2/")["Location"]
        == "/p/beta/"
    )
    # Remembered: the next visit to / opens the project switched to.
    assert carol.get("/")["Location"] == "/p/beta/"
    header = carol.get("/p/alpha/").content.decode()
    assert 'href="/switch/beta/"' in header and 'href="/switch/alpha/"' not in header


def test_the_admin_is_for_superusers_and_lists_every_project(client, world):
    urls = [f"/admin/{model._meta.app_label}/{model._meta.model_name}/" for model in admin.site._registry]
    assert "/admin/history_app/project/" in urls and "/admin/history_app/membership/" in urls
    for name in ("alice", "bob", "carol", "mallory", "dave"):
        user = as_user(client, world, name)
        for url in ["/admin/", *urls]:
            response = user.get(url)
            assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), (
                name,
                url,
            )
    root = as_user(client, world, "root")
    for url in urls:
        assert root.get(url).status_code == 200, url
    sessions = root.get("/admin/history_app/session/").content.decode()
    assert sessions.count(">default</a>") == 2 and "Alpha" in sessions and "Beta" in sessions


# -- what project admins do on the app's own pages -------------------------------------------


def test_an_admin_manages_members_and_every_change_is_audited(client, world):
    alice = as_user(client, world, "alice")
    assert alice.post("/p/alpha/settings/members/", {"username": "bob", "role": "viewer"}).status_code == 302
    bob_in_alpha = models.Membership.objects.get(project=world["alpha"], user__username="bob")
    assert alice.post(f"/p/alpha/settings/members/{bob_in_alpha.pk}/", {"role": "editor"}).status_code == 302
    bob_in_alpha.refresh_from_db()
    assert bob_in_alpha.role == "editor"
    # The project keeps an admin: alice may not demote or remove herself while she is the only one.
    own = models.Membership.objects.get(project=world["alpha"], user__username="alice")
    response = alice.post(f"/p/alpha/settings/members/{own.pk}/", {"remove": "1"})
    assert response.status_code == 400 and "only admin" in response.content.decode()
    response = alice.post("/p/alpha/settings/members/", {"username": "nobody", "role": "viewer"})
    assert response.status_code == 400 and "There is no user with this name." in response.content.decode()
    assert alice.post("/p/alpha/settings/members/", {"username": "bob", "role": "owner"}).status_code == 400
    # A membership of another project is not hers to change.
    bob_in_beta = models.Membership.objects.get(project=world["beta"], user__username="bob")
    assert alice.post(f"/p/alpha/settings/members/{bob_in_beta.pk}/", {"remove": "1"}).status_code == 404
    assert alice.post(f"/p/alpha/settings/members/{bob_in_alpha.pk}/", {"remove": "1"}).status_code == 302
    actions = list(
        models.AuditEvent.objects.filter(project=world["alpha"], target="bob")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["member_added", "role_changed", "member_removed"]
    page = alice.get("/p/alpha/settings/").content.decode()
    assert "member removed" in page and "role changed" in page
    # Audit events of B are not on A's page.
    assert "beta-read" not in page


def test_an_admin_creates_and_revokes_tokens_of_the_project(client, world):
    alice = as_user(client, world, "alice")
    posted = alice.post("/p/alpha/settings/tokens/", {"name": "evaluator", "scopes": ["read"]})
    # Post/redirect/get: the page leaves the POST address; the token is shown once, there.
    assert posted.status_code == 302 and posted["Location"] == "/p/alpha/settings/#tokens"
    response = alice.get("/p/alpha/settings/")
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    token = re.search(r'<code class="token">(aht_[^<]+)</code>', response.content.decode()).group(1)
    assert f'data-copy="{token}"' in response.content.decode()  # its copy button
    again = alice.get("/p/alpha/settings/").content.decode()
    assert token not in again and "shown only this once" not in again
    client.logout()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert "lighthouses" in body(client.get("/api/v1/runs/r-1", **headers))
    assert client.get("/api/v1/runs/b-only", **headers).status_code == 404
    row = models.IngestToken.objects.get(name="evaluator")
    assert row.project == world["alpha"] and row.scopes == ["read"] and row.last_used_at is not None
    alice = as_user(client, world, "alice")
    assert alice.post("/p/alpha/settings/tokens/", {"name": "", "scopes": []}).status_code == 400
    beta_token = models.IngestToken.objects.filter(project=world["beta"]).first()
    assert alice.post(f"/p/alpha/settings/tokens/{beta_token.pk}/revoke/").status_code == 404
    assert alice.post(f"/p/alpha/settings/tokens/{row.pk}/revoke/").status_code == 302
    client.logout()
    assert client.get("/api/v1/runs/r-1", **headers).status_code == 401
    events = models.AuditEvent.objects.filter(
        project=world["alpha"], action__in=["token_created", "token_revoked"]
    )
    assert {e.action for e in events if "evaluator" in e.target} == {"token_created", "token_revoked"}


def test_an_editor_pins_and_an_admin_deletes(client, world):
    models.Membership.objects.filter(user__username="carol", project=world["alpha"]).update(role="editor")
    carol = as_user(client, world, "carol")
    assert carol.post("/p/alpha/sessions/default/pin/", {"pinned": "1"}).status_code == 302
    assert models.Session.objects.get(project=world["alpha"]).pinned
    assert not models.Session.objects.get(project=world["beta"]).pinned
    assert carol.get("/p/alpha/sessions/default/delete/").status_code == 403
    assert carol.post("/p/beta/sessions/default/pin/", {"pinned": "1"}).status_code == 403  # a viewer there
    alice = as_user(client, world, "alice")
    refused = alice.post("/p/alpha/sessions/default/delete/")
    assert refused.status_code == 409 and models.Session.objects.filter(project=world["alpha"]).exists()
    assert alice.post("/p/alpha/sessions/default/pin/", {"pinned": "0"}).status_code == 302
    assert "cannot be undone" in alice.get("/p/alpha/sessions/default/delete/").content.decode()
    assert alice.post("/p/alpha/sessions/default/delete/").status_code == 200
    assert not models.Session.objects.filter(project=world["alpha"]).exists()
    assert models.Session.objects.filter(project=world["beta"]).exists()
    assert alice.get("/p/alpha/stats/").content.decode().count("<dt>Runs</dt><dd>0</dd>") == 1
    actions = set(models.AuditEvent.objects.filter(project=world["alpha"]).values_list("action", flat=True))
    assert {"pinned", "unpinned", "session_deleted"} <= actions


def test_retention_is_set_per_project(client, world, settings):
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    long_ago = timezone.now() - timedelta(days=40)
    models.Session.objects.update(last_activity_at=long_ago)
    settings.HISTORY_RETENTION_DAYS = None
    alice = as_user(client, world, "alice")
    preview = alice.post("/p/alpha/settings/retention/", {"retention_days": "30", "preview": "1"})
    assert "would remove: 1 session, 2 runs" in preview.content.decode()
    assert (
        alice.post("/p/alpha/settings/retention/", {"retention_days": "30", "save": "1"}).status_code == 302
    )
    assert (
        alice.post("/p/alpha/settings/retention/", {"retention_days": "-1", "save": "1"}).status_code == 400
    )
    world["alpha"].refresh_from_db()
    assert world["alpha"].retention_days == 30
    # The command applies each project's own retention; B has none (and no default is set).
    call_command("prune_history")
    assert not models.Session.objects.filter(project=world["alpha"]).exists()
    assert models.Session.objects.filter(project=world["beta"]).count() == 1
    # The server's default applies to projects without their own.
    settings.HISTORY_RETENTION_DAYS = 30
    call_command("prune_history", "--dry-run")
    assert models.Session.objects.filter(project=world["beta"]).count() == 1
    call_command("prune_history", "--project", "beta")
    assert not models.Session.objects.filter(project=world["beta"]).exists()
    assert models.AuditEvent.objects.filter(project=world["alpha"], action="retention_changed").exists()
    assert set(models.PruneLog.objects.values_list("project__slug", flat=True)) >= {"alpha", "beta"}


def test_commands_create_projects_members_and_project_tokens(db, django_user_model, capsys):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    django_user_model.objects.create_user("erin")
    call_command("create_project", "support-bots", "--name", "Support bots", "--retention-days", "14")
    project = models.Project.objects.get(slug="support-bots")
    assert project.name == "Support bots" and project.retention_days == 14
    with pytest.raises(CommandError):
        call_command("create_project", "Not A Slug")
    with pytest.raises(CommandError):
        call_command("create_project", "support-bots")
    call_command("add_member", "support-bots", "erin", "editor")
    call_command("add_member", "support-bots", "erin", "admin")
    assert models.Membership.objects.get(project=project).role == "admin"
    with pytest.raises(CommandError):
        call_command("add_member", "nowhere", "erin", "viewer")
    call_command(
        "create_ingest_token", "bot", "--project", "support-bots", "--scope", "ingest", "--scope", "read"
    )
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert models.IngestToken.objects.get(token_hash=models.IngestToken.hash(token)).project == project
    call_command("list_tokens", "--project", "support-bots")
    assert "support-bots" in capsys.readouterr().out
    call_command("add_member", "support-bots", "erin", "--remove")
    assert not models.Membership.objects.filter(project=project).exists()
    assert list(
        models.AuditEvent.objects.filter(project=project).order_by("pk").values_list("action", flat=True)
    ) == ["project_created", "member_added", "role_changed", "token_created", "member_removed"]


# -- the migration ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_data_from_before_projects_moves_into_the_default_project(client, django_user_model):
    """A database at the schema before this issue's migrations, with data, migrated: every
    row is the default project's, the users who read everything keep reading it, and the
    pages show it."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    call_command("migrate", "history_app", "0014", verbosity=0)
    state = MigrationExecutor(connection).loader.project_state(("history_app", "0014_audit_events"))
    old = state.apps.get_model
    now = timezone.now()
    session = old("history_app", "Session").objects.create(
        session_id="legacy", last_activity_at=now, run_count=1
    )
    old("history_app", "Run").objects.create(
        run_id="legacy-run", session=session, content_hash="x", input="from before projects", started_at=now
    )
    old("history_app", "IngestToken").objects.create(
        name="old", token_hash="h" * 64, prefix="aht_old", scopes=["ingest", "read"]
    )
    old("history_app", "IngestReceipt").objects.create(source="api", counts={"created": 1})
    old("history_app", "DailyStat").objects.create(day=now.date(), tool="", runs=1)
    django_user_model.objects.create_user("reader")
    django_user_model.objects.create_user("operator", is_staff=True)
    call_command("migrate", "history_app", verbosity=0)
    default = models.Project.objects.get(slug="default")
    for model in (models.Session, models.Run, models.IngestToken, models.IngestReceipt, models.DailyStat):
        assert set(model.objects.values_list("project_id", flat=True)) == {default.pk}, model
    roles = dict(models.Membership.objects.values_list("user__username", "role"))
    assert roles == {"reader": "editor", "operator": "admin"}
    client.force_login(django_user_model.objects.get(username="reader"))
    assert client.get("/")["Location"] == "/p/default/"
    assert "legacy" in client.get("/p/default/").content.decode()
    assert "from before projects" in client.get("/p/default/runs/legacy-run/").content.decode()
    assert client.get("/sessions/legacy/")["Location"] == "/p/default/sessions/legacy/"
    assert re.search(r"<dt>Runs</dt><dd>1</dd>", client.get("/p/default/stats/").content.decode())


def test_error_pages_have_the_site_layout_and_a_way_back(client, world):
    carol = as_user(client, world, "carol")
    missing = carol.get("/p/alpha/runs/no-such-run/")
    page = missing.content.decode()
    assert (
        missing.status_code == 404
        and 'class="topbar"' in page
        and 'href="/p/alpha/">Back to the sessions of Alpha' in page
    )
    denied = carol.get("/p/alpha/runs/r-1/export.json")
    page = denied.content.decode()
    assert denied.status_code == 403 and "does not allow this (export)" in page
    assert "Your role in Alpha is <strong>viewer</strong>" in page
    mallory = as_user(client, world, "mallory")
    hidden = mallory.get("/p/alpha/runs/r-1/")
    page = hidden.content.decode()
    assert hidden.status_code == 404 and 'href="/">Back to your sessions' in page
    assert "Alpha" not in page and "lighthouses" not in page


def test_a_project_parameter_that_is_no_slug_is_not_found(client, world):
    """Found from outside: ``?project=`` with a NUL was a 500 on PostgreSQL (it refuses
    NUL in a query) and a 404 on SQLite; it is a 404 on both, like any unknown project."""
    carol = as_user(client, world, "carol")
    for url in ("/api/v1/sessions", "/api/v1/runs/r-1", "/api/v1/sessions/default", "/api/v1/receipts"):
        for bad in ("be%00ta", "beta%00", "b%C3%A9ta", "..%2Fbeta", "%20beta"):
            response = carol.get(f"{url}?project={bad}")
            assert response.status_code == 404 and response.json()["parameter"] == "project", (url, bad)
    client.logout()
    assert client.get("/api/v1/sessions?project=be%00ta", **bearer("beta", "read")).status_code == 404
