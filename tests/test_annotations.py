"""Annotations (issue #18): scores (numeric or categorical, each with a name), labels and
comments on a run or one iteration; editors write on the run page, tokens with the
``annotate`` scope through the JSON API; each records its author and time; shown on the
run page and the timeline; redacted like every stored text."""

from __future__ import annotations

import json
import math

import pytest
from django.db import connection
from django.test import Client, override_settings

from history_app import models
from history_app.access.auth import register_token
from history_app.intake import ingestion
from history_app.upkeep import retention

from .conftest import native

pytestmark = pytest.mark.django_db

SECRET = "sk-proj-FAKEc2LufYNuydk9sgEWl2agE4aE_Yhc3a_LcBf"
URL = "/api/v1/runs/r/annotations"


@pytest.fixture
def run(ingest):
    ingest(native("r", "s", input="2+2?", output="4", iterations=[{"index": 1}, {"index": 2}]))
    return models.Run.objects.get(run_id="r")


@pytest.fixture
def evaluator():
    _, token = register_token(name="evaluator", scopes=["annotate", "read"])
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def post(client: Client, body, headers: dict, url: str = URL):
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


def test_an_evaluator_scores_labels_and_comments_through_the_api(run, evaluator):
    client = Client()
    body = [
        {"kind": "score", "name": "correct", "value": 1},
        {"kind": "score", "name": "tone", "text": "formal"},
        {"kind": "label", "name": "needs-review", "iteration": 2},
        {"kind": "comment", "text": "Right, but terse."},
    ]
    response = post(client, body, evaluator)
    assert response.status_code == 201, response.json()
    created = response.json()["annotations"]
    assert [(a["kind"], a["name"], a["value"], a["text"], a["iteration"]) for a in created] == [
        ("score", "correct", 1.0, None, None),
        ("score", "tone", None, "formal", None),
        ("label", "needs-review", None, None, 2),
        ("comment", None, None, "Right, but terse.", None),
    ]
    assert {a["author"] for a in created} == {"token:evaluator"} and all(a["created_at"] for a in created)
    listed = client.get(URL, **evaluator).json()["annotations"]
    assert [a["id"] for a in listed] == [a["id"] for a in created]


def test_who_may_write(run, client, alice_client):
    body = {"kind": "label", "name": "x"}
    assert post(Client(), body, {}).status_code == 401
    _, reader = register_token(name="reader", scopes=["read"])
    refused = post(Client(), body, {"HTTP_AUTHORIZATION": f"Bearer {reader}"})
    assert refused.status_code == 403 and "'annotate' scope" in refused.json()["error"]
    # A logged-in user writes on the run page (an editor), not through the API.
    assert post(alice_client, body, {}).status_code == 401
    other = models.Project.objects.create(slug="other", name="Other")
    _, theirs = register_token(name="theirs", scopes=["annotate"], project=other)
    assert post(Client(), body, {"HTTP_AUTHORIZATION": f"Bearer {theirs}"}).status_code == 404
    assert models.Annotation.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"kind": "vote"}, "$.kind"),
        ({"kind": "score", "value": 1}, "$.name"),
        ({"kind": "score", "name": "correct"}, "$.value"),
        ({"kind": "score", "name": "correct", "value": True}, "$.value"),
        ({"kind": "score", "name": "correct", "value": "1"}, "$.value"),
        ({"kind": "score", "name": "correct", "value": 1, "text": "yes"}, "$.text"),
        ({"kind": "score", "name": "x" * 65, "value": 1}, "$.name"),
        ({"kind": "score", "name": "<b>", "value": 1}, "$.name"),
        ({"kind": "label", "name": "a", "value": 2}, "$.value"),
        ({"kind": "comment", "text": "   "}, "$.text"),
        ({"kind": "comment", "text": "x" * 10_001}, "$.text"),
        ({"kind": "comment", "name": "n", "text": "t"}, "$.name"),
        ({"kind": "label", "name": "a", "iteration": 9}, "$.iteration"),
        ({"kind": "label", "name": "a", "iteration": "2"}, "$.iteration"),
        ({"kind": "label", "name": "a", "colour": "red"}, "$.colour"),
        ([{"kind": "label", "name": "ok"}, {"kind": "label"}], "$[1].name"),
        ([], "$"),
        ([{"kind": "label", "name": "a"}] * 101, "$"),
        ("label", "$"),
    ],
)
def test_a_bad_annotation_is_a_400_naming_its_field_and_nothing_is_written(run, evaluator, body, path):
    response = post(Client(), body, evaluator)
    assert response.status_code == 400, response.json()
    assert response.json()["errors"][0]["path"] == path
    assert models.Annotation.objects.count() == 0


def test_not_a_number_and_bad_json_are_refused(run, evaluator):
    nan = Client().post(
        URL, data='{"kind": "score", "name": "c", "value": NaN}', content_type="application/json", **evaluator
    )
    assert nan.status_code == 400 and nan.json()["errors"][0]["path"] == "$.value"
    assert math.isnan(json.loads('{"v": NaN}')["v"])  # what Python's JSON reader lets through
    broken = Client().post(URL, data="{broken", content_type="application/json", **evaluator)
    assert broken.status_code == 400
    assert (
        post(Client(), {"kind": "label", "name": "a"}, evaluator, "/api/v1/runs/nope/annotations").status_code
        == 404
    )


def test_comments_are_redacted_before_they_are_stored(run, evaluator, alice_client):
    response = post(Client(), {"kind": "comment", "text": f"the key was {SECRET}"}, evaluator)
    assert response.status_code == 201 and SECRET not in response.content.decode()
    assert SECRET not in models.Annotation.objects.get().text
    assert SECRET not in alice_client.get("/p/default/runs/r/").content.decode()


def test_an_editor_annotates_on_the_run_page_and_it_shows_on_the_timeline(run, alice_client):
    page = alice_client.get("/p/default/runs/r/").content.decode()
    assert '<form method="post" action="/p/default/runs/r/annotations/" class="annotation-form">' in page
    for data in (
        {"kind": "score", "name": "helpfulness", "value": "0.75"},
        {"kind": "score", "name": "verdict", "value": "pass"},
        {"kind": "label", "name": "golden", "iteration": "1"},
        {"kind": "comment", "text": "Good <b>answer</b>"},
    ):
        response = alice_client.post("/p/default/runs/r/annotations/", data)
        assert response.status_code == 302 and response["Location"] == "/p/default/runs/r/#annotations"
    page = alice_client.get("/p/default/runs/r/").content.decode()
    assert '<span class="tag note score">helpfulness: 0.75</span>' in page
    assert '<span class="tag note score">verdict: pass</span>' in page
    assert '<span class="tag note label">golden</span> on <a href="#iteration-1">iteration 1</a>' in page
    assert "Good &lt;b&gt;answer&lt;/b&gt;" in page and "by alice" in page
    timeline = alice_client.get("/p/default/sessions/s/").content.decode()
    assert ">helpfulness: 0.75</span>" in timeline and ">golden</span>" in timeline
    assert ">1 comment</span>" in timeline
    bad = alice_client.post("/p/default/runs/r/annotations/", {"kind": "score", "name": "x"})
    assert bad.status_code == 400 and "<code>value</code>" in bad.content.decode()


def test_a_viewer_sees_annotations_but_may_not_write(run, client, django_user_model):
    viewer = django_user_model.objects.create_user("vera", password="vera-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=viewer, role=models.Membership.VIEWER
    )
    client.force_login(viewer)
    page = client.get("/p/default/runs/r/").content.decode()
    assert "annotation-form" not in page and "Editors add them here" in page
    assert client.post("/p/default/runs/r/annotations/", {"kind": "label", "name": "x"}).status_code == 403
    assert models.Annotation.objects.count() == 0


def test_annotations_outlive_a_rewrite_and_go_with_their_session(run, evaluator, ingest):
    post(Client(), [{"kind": "label", "name": "kept", "iteration": 1}], evaluator)
    ingest(native("r", "s", input="2+2?", output="four", iterations=[{"index": 1}]))  # sent again, changed
    assert models.Run.objects.get(run_id="r").output == "four"
    assert list(models.Annotation.objects.values_list("name", "iteration_index")) == [("kept", 1)]
    result = retention.prune_sessions(session_ids=[run.session_id], trigger="test")
    assert result.counts["annotations"] == 1 and models.Annotation.objects.count() == 0


def test_pages_read_annotations_in_one_query_whatever_their_number(run, alice_client, evaluator):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            alice_client.get(url)
        return len(captured)

    alice_client.get("/p/default/runs/r/")  # the first view keeps the answer's HTML
    before = (count("/p/default/runs/r/"), count("/p/default/sessions/s/"))
    post(Client(), [{"kind": "comment", "text": f"note {n}"} for n in range(80)], evaluator)
    assert (count("/p/default/runs/r/"), count("/p/default/sessions/s/")) == before
    page = alice_client.get("/p/default/runs/r/").content.decode()
    assert page.count('<pre class="text comment">') == 50  # the latest 50 a page shows
    assert ingestion  # the module the fixtures ingest through


def test_the_session_bundle_carries_the_annotations(run, evaluator, alice_client, ingest):
    """The session's JSON bundle lists its runs' annotations; a run's own export stays its
    canonical record (re-ingesting it is still a duplicate), its annotations a GET away."""
    post(
        Client(),
        [{"kind": "score", "name": "correct", "value": 0}, {"kind": "comment", "text": "wrong"}],
        evaluator,
    )
    bundle = json.loads(b"".join(alice_client.get("/p/default/sessions/s/export.json").streaming_content))
    assert [(a["run_id"], a["kind"], a["name"], a["value"]) for a in bundle["annotations"]] == [
        ("r", "score", "correct", 0.0),
        ("r", "comment", None, None),
    ]
    data = json.loads(b"".join(alice_client.get("/p/default/runs/r/export.json").streaming_content))
    assert "annotations" not in data
    assert ingest(data).json()["results"][0]["status"] == "duplicate"


def test_the_sessions_list_filters_on_annotations(run, evaluator, alice_client, ingest):
    ingest([native("r2", "s2"), native("r3", "s3")])
    post(Client(), [{"kind": "score", "name": "correct", "value": 1}], evaluator)
    post(Client(), [{"kind": "label", "name": "golden"}], evaluator, "/api/v1/runs/r2/annotations")
    post(Client(), [{"kind": "comment", "text": "hm"}], evaluator, "/api/v1/runs/r3/annotations")

    def listed(**params) -> list[str]:
        return [s["session_id"] for s in alice_client.get("/api/v1/sessions", params).json()["sessions"]]

    assert listed(annotated="correct") == ["s"]
    assert listed(annotated="golden") == ["s2"]
    assert listed(annotated="comment") == ["s3"]
    assert listed(annotated="nothing") == []
    page = alice_client.get("/p/default/", {"annotated": "golden"}).content.decode()
    assert '<p class="total" id="total">1 session matches</p>' in page
    assert 'name="annotated" value="golden"' in page
    # A run moved to another session takes its annotations' facets along.
    ingest(native("r2", "s3"))
    assert listed(annotated="golden") == ["s3"]


def test_stats_aggregate_scores_per_name_day_and_agent(alice_client, evaluator, ingest):
    from django.utils import timezone

    today = timezone.now().replace(hour=0, minute=0, second=1, microsecond=0)
    for n, (agent, score, verdict) in enumerate(
        [("Calc", 1, "pass"), ("Calc", 0, "fail"), ("Poet", 0.5, "pass")]
    ):
        ingest(native(f"st-{n}", f"ss-{n}", agent_name=agent, started_at=today.isoformat()))
        body = [
            {"kind": "score", "name": "correct", "value": score},
            {"kind": "score", "name": "verdict", "text": verdict},
        ]
        post(Client(), body, evaluator, f"/api/v1/runs/st-{n}/annotations")
    numbers = alice_client.get("/api/v1/stats?days=7").json()["scores"]
    names = {row["name"]: row for row in numbers["names"]}
    assert names["correct"]["count"] == 3 and names["correct"]["mean"] == pytest.approx(0.5)
    assert names["verdict"]["categories"] == {"pass": 2, "fail": 1} and names["verdict"]["mean"] is None
    assert [(r["name"], r["count"], r["mean"]) for r in numbers["per_day"]] == [
        ("correct", 3, pytest.approx(0.5))
    ]
    agents = {(r["agent"], r["name"]): r["mean"] for r in numbers["per_agent"]}
    assert agents == {("Calc", "correct"): pytest.approx(0.5), ("Poet", "correct"): pytest.approx(0.5)}
    page = alice_client.get("/p/default/stats/?days=7").content.decode()
    assert '<a href="/p/default/?annotated=correct"><code>correct</code></a>' in page
    assert '<td class="num" data-label="Mean">0.500</td>' in page
    assert '<span class="tag">pass × 2</span>' in page


def test_the_sessions_list_sorts_by_annotations(run, evaluator, alice_client, ingest):
    ingest([native("r2", "s2"), native("r3", "s3")])
    post(
        Client(),
        [{"kind": "comment", "text": f"n{n}"} for n in range(3)],
        evaluator,
        "/api/v1/runs/r2/annotations",
    )
    post(Client(), [{"kind": "label", "name": "x"}], evaluator)
    listed = alice_client.get("/api/v1/sessions", {"sort": "annotations"}).json()["sessions"]
    assert [(s["session_id"], s["annotation_count"]) for s in listed] == [("s2", 3), ("s", 1), ("s3", 0)]
    page = alice_client.get("/p/default/", {"sort": "annotations"}).content.decode()
    assert '<option value="annotations" selected>Most annotated</option>' in page
    assert ">3 annotations</span>" in page and ">1 annotation</span>" in page
    # A run that moves takes its annotations to its new session's count.
    ingest(native("r2", "s3"))
    counts = {
        s["session_id"]: s["annotation_count"]
        for s in alice_client.get("/api/v1/sessions").json()["sessions"]
    }
    assert counts["s3"] == 3 and counts.get("s2", 0) == 0


def test_the_timeline_twin_carries_each_runs_annotations(run, evaluator, alice_client):
    post(Client(), [{"kind": "score", "name": "correct", "value": 1}], evaluator)
    rows = alice_client.get("/api/v1/sessions/s/timeline").json()["rows"]
    (row,) = [r for r in rows if r["type"] == "run"]
    assert [(a["name"], a["value"], a["author"]) for a in row["annotations"]] == [
        ("correct", 1.0, "token:evaluator")
    ]


def test_listing_a_runs_annotations_reads_the_same_whatever_their_number(
    run, evaluator, django_assert_num_queries
):
    client = Client()
    post(client, [{"kind": "label", "name": "a"}], evaluator)
    # The token (its use was just noted by the POST), the run, its annotations.
    with django_assert_num_queries(3):
        client.get(URL, **evaluator)
    post(client, [{"kind": "comment", "text": f"c{n}"} for n in range(60)], evaluator)
    with django_assert_num_queries(3):
        assert len(client.get(URL, **evaluator).json()["annotations"]) == 61


def test_unstorable_characters_and_huge_numbers_never_reach_the_database_as_they_are(run, evaluator):
    """Found on a last read: a NUL or a lone surrogate (JSON's "\\ud800") in a comment or a
    category is no text PostgreSQL (or UTF-8) stores, and 10**400 is no float: each was a
    500. Now U+FFFD, and a 400 naming the value."""
    body = '[{"kind": "comment", "text": "a\\u0000b\\ud800c"}, {"kind": "score", "name": "tone", "text": "x\\u0000"}]'
    response = Client().post(URL, data=body, content_type="application/json", **evaluator)
    assert response.status_code == 201, response.content
    assert sorted(models.Annotation.objects.values_list("text", flat=True)) == ["a\ufffdb\ufffdc", "x\ufffd"]
    huge = Client().post(
        URL,
        data='{"kind": "score", "name": "n", "value": 1' + "0" * 400 + "}",
        content_type="application/json",
        **evaluator,
    )
    assert huge.status_code == 400 and huge.json()["errors"][0]["path"] == "$.value"


def _counted() -> dict[tuple, tuple[int, float]]:
    """The daily score rollup, as (day, agent, name, category) -> (count, total)."""
    return {
        (row.day, row.agent, row.name, row.category): (row.count, row.total)
        for row in models.DailyScore.objects.all()
    }


def _recounted() -> dict[tuple, tuple[int, float]]:
    """What the rollup should hold: the stored scores counted anew."""
    expected: dict[tuple, list] = {}
    for a in models.Annotation.objects.filter(kind="score"):
        row = expected.setdefault((a.day, a.agent, a.name, "" if a.value is not None else a.text), [0, 0.0])
        row[0] += 1
        row[1] += a.value or 0.0
    return {key: (count, pytest.approx(total)) for key, (count, total) in expected.items()}


def test_scores_are_counted_by_day_and_agent_as_they_are_written_and_deleted(
    run, evaluator, alice_client, ingest
):
    """The stats page reads the scores from a daily rollup kept as they are written and
    taken back (through the API, the run page and the admin), so that it reads a row per
    day, agent and score whatever their number."""
    from django.utils import timezone

    ingest(native("r2", "s2", agent_name="Poet"))
    body = [
        {"kind": "score", "name": "correct", "value": 1},
        {"kind": "score", "name": "correct", "value": 0.25},
        {"kind": "score", "name": "tone", "text": "formal"},
        {"kind": "label", "name": "golden"},
    ]
    mine = post(Client(), body, evaluator).json()["annotations"]
    post(
        Client(),
        [{"kind": "score", "name": "correct", "value": -2}],
        evaluator,
        "/api/v1/runs/r2/annotations",
    )
    first, second = models.Run.objects.get(run_id="r"), models.Run.objects.get(run_id="r2")
    day = timezone.localtime(first.started_at or first.received_at).date()
    other_day = timezone.localtime(second.started_at or second.received_at).date()
    assert _counted() == _recounted()
    assert _counted()[day, "", "correct", ""] == (2, 1.25)
    assert _counted()[day, "", "tone", "formal"] == (1, 0.0)
    assert _counted()[other_day, "Poet", "correct", ""] == (1, -2.0)

    # A token takes back its own score; another evaluator's token may not; an unknown one is a 404.
    client = Client()
    url = f"/api/v1/runs/r/annotations/{mine[0]['id']}"
    _, other = register_token(name="other-evaluator", scopes=["annotate"])
    refused = client.delete(url, HTTP_AUTHORIZATION=f"Bearer {other}")
    assert refused.status_code == 403 and "token:evaluator" in refused.json()["error"]
    # Names repeat (a new token may take a revoked one's): the token itself is the author.
    _, twin = register_token(name="evaluator", scopes=["annotate"])
    assert client.delete(url, HTTP_AUTHORIZATION=f"Bearer {twin}").status_code == 403
    _, reader = register_token(name="reader", scopes=["read"])
    assert client.delete(url, HTTP_AUTHORIZATION=f"Bearer {reader}").status_code == 403
    assert client.get(url, **evaluator).status_code == 405
    assert client.delete(url, **evaluator).json() == {"ok": True, "deleted": mine[0]["id"]}
    assert client.delete(url, **evaluator).status_code == 404
    assert _counted()[day, "", "correct", ""] == (1, 0.25) and _counted() == _recounted()
    event = models.AuditEvent.objects.get(action="annotation_deleted")
    assert (event.actor, event.target, event.details["name"], event.details["value"]) == (
        "token:evaluator",
        "run r",
        "correct",
        1.0,
    )

    # An editor takes back any author's annotation on the run page; the session's count
    # and its ``annotated`` facet follow.
    page = alice_client.get("/p/default/runs/r/").content.decode()
    delete_url = f"/p/default/runs/r/annotations/{mine[2]['id']}/delete/"
    assert f'action="{delete_url}"' in page
    response = alice_client.post(delete_url)
    assert response.status_code == 302 and response["Location"].endswith("/runs/r/#annotations")
    assert (day, "", "tone", "formal") not in _counted() and _counted() == _recounted()
    again = alice_client.post(delete_url)  # sent twice: deleted once, back to the run
    assert (
        again.status_code == 302
        and models.AuditEvent.objects.filter(action="annotation_deleted").count() == 2
    )
    assert models.Session.objects.get(session_id="s").annotation_count == 2
    listed = alice_client.get("/api/v1/sessions", {"annotated": "tone"}).json()["sessions"]
    assert listed == []
    stats = alice_client.get("/api/v1/stats?days=30").json()["scores"]
    assert {row["name"]: (row["count"], row["mean"]) for row in stats["names"]} == {
        "correct": (2, pytest.approx((0.25 - 2) / 2))
    }


def test_a_viewer_may_not_delete_an_annotation(run, evaluator, client, django_user_model):
    created = post(Client(), [{"kind": "label", "name": "kept"}], evaluator).json()["annotations"]
    viewer = django_user_model.objects.create_user("vera", password="vera-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=viewer, role=models.Membership.VIEWER
    )
    client.force_login(viewer)
    assert (
        "annotations/" + str(created[0]["id"]) + "/delete/"
        not in client.get("/p/default/runs/r/").content.decode()
    )
    assert client.post(f"/p/default/runs/r/annotations/{created[0]['id']}/delete/").status_code == 403
    assert models.Annotation.objects.count() == 1


def test_deleting_in_the_admin_keeps_the_counts(run, evaluator, admin_client):
    created = post(
        Client(),
        [{"kind": "score", "name": "correct", "value": 1}, {"kind": "label", "name": "golden"}],
        evaluator,
    ).json()["annotations"]
    response = admin_client.post(
        "/admin/history_app/annotation/",
        {"action": "delete_selected", "_selected_action": [a["id"] for a in created], "post": "yes"},
    )
    assert response.status_code == 302 and not models.Annotation.objects.exists()
    assert not models.DailyScore.objects.exists()
    assert models.Session.objects.get(session_id="s").annotation_count == 0
    assert not models.SessionFacet.objects.filter(facet="annotation").exists()
    assert models.AuditEvent.objects.filter(action="annotation_deleted", actor="admin").count() == 2


def test_scores_leave_the_rollup_with_their_pruned_runs_and_follow_redaction(run, evaluator, ingest):
    from history_app.upkeep import reredact

    post(Client(), [{"kind": "score", "name": "correct", "value": 1}], evaluator)
    # A score stored under older rules: its category and its run's agent held a secret.
    models.Annotation.objects.create(
        project_id=run.project_id,
        run=run,
        kind="score",
        name="leak",
        text=SECRET[:40],
        agent=SECRET,
        day=models.Annotation.objects.get().day,
        author="old",
    )
    from history_app.store import rollups

    rollups.count_scores(models.Annotation.objects.filter(name="leak"), 1)
    assert reredact.redact_stored().changed["annotations"] == 1
    assert _counted() == _recounted()
    assert not [row for row in _counted() if any(SECRET[:20] in part for part in map(str, row))]
    retention.prune_sessions(session_ids=[run.session_id], trigger="test")
    assert not models.DailyScore.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_scores_already_stored(ingest):
    """Annotations written before the daily score rollup are given their run's day and
    agent, and counted."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    ingest(native("old", "s-old", agent_name="Calc"))
    call_command("migrate", "history_app", "0017", verbosity=0)
    state = MigrationExecutor(connection).loader.project_state(
        ("history_app", "0017_session_annotation_count")
    )
    Annotation = state.apps.get_model("history_app", "Annotation")
    run = models.Run.objects.get(run_id="old")
    for kind, name, value, text in [
        ("score", "correct", 1.0, ""),
        ("score", "correct", 0.0, ""),
        ("score", "tone", None, "formal"),
        ("comment", "", None, "hm"),
    ]:
        Annotation.objects.create(
            project_id=run.project_id, run_id=run.pk, kind=kind, name=name, value=value, text=text, author="x"
        )
    call_command("migrate", "history_app", verbosity=0)
    day = timezone.localtime(run.started_at).date()
    assert set(models.Annotation.objects.values_list("day", "agent")) == {(day, "Calc")}
    assert _counted() == {
        (day, "Calc", "correct", ""): (2, 1.0),
        (day, "Calc", "tone", "formal"): (1, 0.0),
    }


def test_the_sessions_list_sorts_by_a_scores_mean(evaluator, alice_client, ingest):
    """``sort=score_low`` / ``score_high`` with ``annotated=<score name>``: the sessions
    that have that numeric score, by its mean over their runs, paged by cursor; the
    session's mean shows beside its title and in the twin."""
    scores = {"s-a": [1, 0], "s-b": [0.25], "s-c": [1], "s-d": [], "s-e": [0.75, 0.75]}
    for sid, values in scores.items():
        for n, value in enumerate([*values, None]):
            ingest(native(f"{sid}-{n}", sid))
            if value is not None:
                body = [{"kind": "score", "name": "correct", "value": value}]
                post(Client(), body, evaluator, f"/api/v1/runs/{sid}-{n}/annotations")
    # A label of the same name, and a categorical score, are not numeric scores.
    post(Client(), [{"kind": "label", "name": "correct"}], evaluator, "/api/v1/runs/s-d-0/annotations")
    post(
        Client(),
        [{"kind": "score", "name": "correct", "text": "yes"}],
        evaluator,
        "/api/v1/runs/s-d-0/annotations",
    )

    def listed(sort: str, **more) -> list[tuple[str, float, int]]:
        rows = alice_client.get("/api/v1/sessions", {"annotated": "correct", "sort": sort, **more}).json()
        return [(s["session_id"], s["score"]["mean"], s["score"]["count"]) for s in rows["sessions"]]

    low = [("s-b", 0.25, 1), ("s-a", 0.5, 2), ("s-e", 0.75, 2), ("s-c", 1.0, 1)]
    assert listed("score_low") == low
    assert listed("score_high") == low[::-1]
    # Paged: the cursor carries the mean.
    with override_settings(HISTORY_PAGE_SIZE=2):
        query = {"annotated": "correct", "sort": "score_low"}
        first = alice_client.get("/api/v1/sessions", query).json()
        assert [s["session_id"] for s in first["sessions"]] == ["s-b", "s-a"]
        rest = alice_client.get("/api/v1/sessions", {**query, "_next": first["next"]}).json()
        assert [s["session_id"] for s in rest["sessions"]] == ["s-e", "s-c"] and rest["next"] is None
        forged = alice_client.get("/api/v1/sessions", {**query, "_next": "WyJ4IiwgMV0"})
        assert forged.status_code == 400 and forged.json()["parameter"] == "_next"
    page = alice_client.get("/p/default/", {"annotated": "correct", "sort": "score_low"}).content.decode()
    rows = [page.index(f'href="/p/default/sessions/{sid}/"') for sid in ("s-b", "s-a", "s-e", "s-c")]
    assert rows == sorted(rows) and 'href="/p/default/sessions/s-d/"' not in page
    assert "correct: 0.500 (mean of 2)</span>" in page and "correct: 0.250</span>" in page
    assert '<p class="total" id="total">4 sessions match</p>' in page
    assert '<option value="score_low" selected>' in page
    # Without a score's name, it is a 400 naming the parameter.
    refused = alice_client.get("/api/v1/sessions", {"sort": "score_low"})
    assert refused.status_code == 400 and refused.json()["parameter"] == "sort"
    assert alice_client.get("/p/default/", {"sort": "score_high", "annotated": "comment"}).status_code == 400
    # A score taken back moves its session.
    taken = models.Annotation.objects.get(run__run_id="s-a-1")
    assert Client().delete(f"/api/v1/runs/s-a-1/annotations/{taken.pk}", **evaluator).status_code == 200
    assert listed("score_low")[:2] == [("s-b", 0.25, 1), ("s-e", 0.75, 2)]
    assert ("s-a", 1.0, 1) in listed("score_low")
    # A run sent again into another session takes its score along.
    ingest(native("s-e-0", "s-b"))
    assert listed("score_low")[:2] == [("s-b", 0.5, 2), ("s-e", 0.75, 1)]

    # The list sorted by a score reads as many queries as any list, whatever it holds.
    from django.test.utils import CaptureQueriesContext

    def count(sort: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            alice_client.get("/p/default/", {"annotated": "correct", "sort": sort})
        return len(captured)

    # The login session (2), the project with its menu (one query), the page, its titles,
    # its total and the framework menu: as the unsorted list (no facet probe: the scores
    # are joined).
    before = count("score_low")
    assert before == 7
    # Filtered by a name alone: one probe more (is the facet common?), made once for the
    # page and its total.
    assert count("annotations") == 8
    for n in range(30):
        ingest(native(f"more-{n}", f"s-more-{n}"))
        post(
            Client(),
            [{"kind": "score", "name": "correct", "value": n}],
            evaluator,
            f"/api/v1/runs/more-{n}/annotations",
        )
    assert count("score_low") == before == count("score_high")
    retention.prune_sessions(
        session_ids=list(models.Session.objects.values_list("pk", flat=True)), trigger="test"
    )
    assert not models.SessionScore.objects.exists() and not models.DailyScore.objects.exists()


@pytest.mark.parametrize(
    ("value", "accepted"), [(1e9, True), (-1e9, True), (1e9 + 1, False), (-1e20, False), (1e308, False)]
)
def test_a_score_is_at_most_a_billion_so_its_sums_never_overflow(run, evaluator, value, accepted):
    """Scores of 1e308 made every sum (the daily rollup, PostgreSQL's AVG of squares)
    overflow: 500s on PostgreSQL, ``Infinity`` in the JSON on SQLite."""
    response = post(Client(), [{"kind": "score", "name": "x", "value": value}] * 2, evaluator)
    if accepted:
        assert response.status_code == 201 and _counted() == _recounted()
    else:
        assert response.status_code == 400 and response.json()["errors"][0]["path"] == "$[0].value"
        assert not models.Annotation.objects.exists()


def test_a_name_or_category_lengthened_by_redaction_is_cut_to_its_column(run, evaluator, alice_client):
    name = "a" * 43 + " AKIAABCDEFGHIJKLMNOP"  # 64 characters, redacted to more
    body = [{"kind": "score", "name": name, "value": 1}, {"kind": "label", "name": name}]
    assert post(Client(), body, evaluator).status_code == 201
    page = alice_client.post("/p/default/runs/r/annotations/", {"kind": "label", "name": name})
    assert page.status_code == 302
    names = list(models.Annotation.objects.values_list("name", flat=True))
    assert len(names) == 3 and all(len(n) <= 64 and "AKIA" not in n for n in names)
    assert _counted() == _recounted()


def test_deleting_audits_what_the_annotation_said_under_the_current_rules(run, alice_client):
    stored = models.Annotation.objects.create(
        project_id=run.project_id, run=run, kind="comment", text=f"key: {SECRET}", author="old"
    )
    alice_client.post(f"/p/default/runs/r/annotations/{stored.pk}/delete/")
    (event,) = models.AuditEvent.objects.filter(action="annotation_deleted")
    assert SECRET not in json.dumps(event.details) and "[REDACTED" in event.details["text"]


def test_a_run_moved_while_it_is_scored_is_counted_in_its_new_session(ingest, evaluator):
    from history_app.upkeep import annotations as annotation_store

    ingest(native("r", "s1"))
    ingest(native("other", "s2"))
    read = models.Run.objects.get(run_id="r")  # what the view read, before the run moved
    ingest(native("r", "s2", output="moved"))
    annotation_store.add(read, annotation_store.parse({"kind": "score", "name": "x", "value": 1}), author="t")
    counts = dict(models.Session.objects.values_list("session_id", "annotation_count"))
    assert counts == {"s2": 1}  # s1, left without runs by the move, is gone
    assert list(models.SessionScore.objects.values_list("session__session_id", "name")) == [("s2", "x")]
    facets = models.SessionFacet.objects.filter(facet="annotation")
    assert list(facets.values_list("session__session_id", "value")) == [("s2", "name:x")]


def _at_once(*functions) -> list:
    """Run ``functions`` in threads started together; what each raised (None: nothing)."""
    import threading

    barrier = threading.Barrier(len(functions))
    raised: list = [None] * len(functions)

    def call(n, function):
        try:
            barrier.wait()
            function()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            raised[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(n, f)) for n, f in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return raised


needs_row_locks = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="row locks and deadlocks are PostgreSQL's (SQLite has one writer at a time)",
)


@needs_row_locks
@pytest.mark.django_db(transaction=True)
def test_writing_and_taking_back_at_once_never_deadlocks_nor_counts_twice(ingest):
    """PostgreSQL: the same annotation taken back twice at once is counted off once (and
    audited once); a score written while another of the session is taken back, and a run
    pruned while it is scored, each leave the counts equal to a recount."""
    from history_app.store import rollups
    from history_app.upkeep import annotations as annotation_store

    for n in range(3):
        ingest(native(f"r{n}", "s"))
    runs = list(models.Run.objects.order_by("run_id"))

    def score(run, value):
        return lambda: annotation_store.add(
            models.Run.objects.get(pk=run.pk),
            annotation_store.parse({"kind": "score", "name": "x", "value": value}),
            author="t",
        )

    def take_back(pk):
        return lambda: annotation_store.delete(models.Annotation.objects.filter(pk=pk), actor="t")

    for run in runs:
        score(run, 1)()
    for round_ in range(5):
        first = models.Annotation.objects.order_by("pk").first().pk
        assert _at_once(take_back(first), take_back(first)) == [None, None]
        assert models.AuditEvent.objects.filter(action="annotation_deleted").count() == 2 * round_ + 1
        victim = models.Annotation.objects.order_by("pk").first().pk
        assert _at_once(score(runs[0], round_), take_back(victim)) == [None, None]
        score(runs[1], 2)()
        score(runs[2], 3)()
        assert _counted() == _recounted()
        recount = {}
        for a in models.Annotation.objects.filter(kind="score"):
            recount[a.name] = recount.get(a.name, 0) + 1
        assert list(models.SessionScore.objects.values_list("name", "count")) == list(recount.items())
        assert models.Session.objects.get().annotation_count == models.Annotation.objects.count()

    # A score written while the session is being pruned: written before the prune reads
    # the session's scores (then counted off with it) or refused, never left behind.
    original = rollups.take_off_stored

    def slow(pks):
        original(pks)
        import time

        time.sleep(0.3)  # the score's writer is waiting for the run meanwhile

    session = models.Session.objects.get()
    import unittest.mock

    with unittest.mock.patch.object(rollups, "take_off_stored", slow):
        raised = _at_once(
            lambda: retention.prune_sessions(session_ids=[session.pk], trigger="test"), score(runs[0], 5)
        )
    assert raised[0] is None and (raised[1] is None or type(raised[1]).__name__ == "Gone")
    assert _counted() == _recounted() == {}
