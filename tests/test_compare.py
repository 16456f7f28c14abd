"""Compare two runs side by side (issue #18): facts, input, settings, iterations aligned
with their tool calls, model calls, injected contexts and answers, what differs marked;
reached from the session timeline (tick two) and from an address that can be shared; a
JSON twin."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from history_app import models
from history_app.access.auth import register_token
from history_app.intake import ingestion

from .conftest import native

pytestmark = pytest.mark.django_db


def agent_run(run_id: str, *, prompt: str = "Be brief.", query: str = "2+2?", answer: str = "4", tool_q: str = "2+2",
              model: str = "gpt-4o", iterations: int = 2, temperature: float = 0.2) -> dict:  # fmt: skip
    return native(
        run_id,
        "s",
        agent_name="Calc",
        input=query,
        output=answer,
        metadata={"temperature": temperature},
        started_at="2026-11-30T10:00:00Z",
        injected_contexts=[{"kind": "instructions", "text": prompt}],
        iterations=[
            {
                "index": n + 1,
                "thought": f"Step {n + 1}: use the calculator",
                "tool_calls": [{"tool": "calculator", "params": {"q": tool_q}, "result": "4"}],
                "model_calls": [{"model": model, "input_tokens": 100 + n, "output_tokens": 10}],
            }
            for n in range(iterations)
        ],
    )


def page_of(client, **params) -> str:
    response = client.get("/p/default/compare/", params)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def test_what_differs_is_marked_and_diffed(alice_client, ingest):
    ingest([agent_run("before"), agent_run("after", prompt="Be brief. Show your work.", tool_q="2 + 2",
                                                 model="gpt-4o-mini", iterations=3, temperature=0.7, answer="4.")])  # fmt: skip
    page = page_of(alice_client, a="before", b="after")
    assert '<a href="/p/default/runs/before/"><code>before</code></a>' in page
    assert '<a href="/p/default/runs/after/"><code>after</code></a>' in page
    # Facts: what differs is marked, what is the same is not.
    rows = re.findall(
        r'<tr class="(differs)?"><td>([^<]+?)(?: <span class="visually-hidden">\(differs\)</span>)?</td>',
        page,
    )
    marked = {label for flag, label in rows if flag}
    assert {"Iterations", "Tool calls", "Model calls", "Models"} <= marked
    assert "Agent" not in marked and "Status" not in marked
    # The settings (temperature), the context sent and the answer differ, with line diffs.
    assert re.search(r'<section class="card compare-text differs" id="settings">', page)
    assert '<span class="d-del">-  &quot;temperature&quot;: 0.2</span>' in page
    assert '<span class="d-add">+  &quot;temperature&quot;: 0.7</span>' in page
    assert '<span class="d-add">+Be brief. Show your work.</span>' in page
    assert '<span class="d-add">+4.</span>' in page
    assert re.search(
        r'<section class="card compare-text" id="input">\s*<h2>Input</h2>\s*<p class="muted">The same in both',
        page,
    )
    # Iterations aligned: the third is B's alone; the tool calls' parameters differ.
    assert "A has no iteration 3." in page
    # Both sides of the two aligned calls, and B's call in the iteration A does not have.
    assert page.count('class="params mark"') == 5
    assert page.count('<div class="compare-iteration differs"') == 3
    # Model calls, each linked to its page.
    assert 'href="/p/default/runs/after/model-calls/3/">gpt-4o-mini</a>' in page
    assert "Swap A and B" in page and 'href="?a=after&amp;b=before"' in page


def test_the_same_run_twice_has_no_difference(alice_client, ingest):
    ingest(agent_run("one"))
    page = page_of(alice_client, a="one", b="one")
    assert "No difference in what is compared." in page and "differs-key" not in page


def test_two_ticked_runs_redirect_to_an_address_to_share(alice_client, ingest):
    ingest([agent_run("x"), agent_run("y")])
    timeline = alice_client.get("/p/default/sessions/s/").content.decode()
    assert (
        '<form id="compare-form" class="compare-pick" method="get" action="/p/default/compare/">' in timeline
    )
    assert timeline.count('<input type="checkbox" name="run" value="') == 2
    response = alice_client.get("/p/default/compare/?run=x&run=y")
    assert response.status_code == 302 and response["Location"] == "/p/default/compare/?a=x&b=y"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("run=x", "run"),
        ("run=x&run=y&run=z", "run"),
        ("a=x", "b"),
        ("b=y", "a"),
        ("a=" + "x" * 300 + "&b=y", "a"),
    ],
)
def test_a_bad_pick_is_a_400_naming_it(alice_client, ingest, query, field):
    ingest([agent_run("x"), agent_run("y")])
    response = alice_client.get("/p/default/compare/?" + query)
    assert response.status_code == 400 and f"<code>{field}</code>" in response.content.decode()
    api = alice_client.get("/api/v1/compare?" + query)
    assert api.status_code == 400 and api.json()["parameter"] == field


def test_a_run_of_another_project_is_not_found(alice_client, ingest):
    other = models.Project.objects.create(slug="other", name="Other")
    ingest(agent_run("mine"))
    ingestion.ingest_items(items=[agent_run("theirs")], project_id=other.pk)
    assert alice_client.get("/p/default/compare/?a=mine&b=theirs").status_code == 404
    assert alice_client.get("/p/default/compare/?a=mine&b=nope").status_code == 404
    assert alice_client.get("/api/v1/compare?a=mine&b=theirs").status_code == 404


def test_the_json_twin(alice_client, ingest):
    ingest([agent_run("before"), agent_run("after", answer="5", iterations=1)])
    body = alice_client.get("/api/v1/compare", {"a": "before", "b": "after"}).json()
    assert body["ok"] and (body["a"], body["b"]) == ("before", "after")
    assert body["output"] == {
        "a": "4",
        "b": "5",
        "same": False,
        "diff": body["output"]["diff"],
        "diff_cut": False,
        "diff_fallback": None,
    }
    assert "-4" in body["output"]["diff"] and "+5" in body["output"]["diff"]
    assert [i["b"] is None for i in body["iterations"]] == [False, True]
    assert body["iterations"][0]["tool_calls"][0]["a"]["params"] == {"q": "2+2"}
    assert body["model_calls"][0]["same"] and not body["model_calls"][1]["same"]
    assert body["contexts"][0]["same"] and body["contexts"][0]["a"]["characters"] == len("Be brief.")
    facts = {f["key"]: f for f in body["facts"]}
    assert facts["iteration_count"] == {
        "key": "iteration_count",
        "label": "Iterations",
        "a": 2,
        "b": 1,
        "same": False,
    }
    client = Client()  # not logged in: the token alone
    assert client.get("/api/v1/compare?a=before&b=after").status_code == 401
    _, reader = register_token(name="reader", scopes=["read"])
    assert (
        client.get("/api/v1/compare?a=before&b=after", HTTP_AUTHORIZATION=f"Bearer {reader}").status_code
        == 200
    )
    _, ingest_only = register_token(name="agent", scopes=["ingest"])
    assert (
        client.get("/api/v1/compare?a=before&b=after", HTTP_AUTHORIZATION=f"Bearer {ingest_only}").status_code
        == 403
    )


def test_queries_do_not_grow_with_the_runs(alice_client, ingest):
    ingest([agent_run("s1"), agent_run("s2")])
    ingest([agent_run("b1", iterations=40), agent_run("b2", iterations=45)])

    def queries(a: str, b: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            page_of(alice_client, a=a, b=b)
        return len(captured)

    # session + user, project + role + the project menu; the two runs, their iterations,
    # tool calls, model calls and contexts.
    assert queries("s1", "s2") == queries("b1", "b2") == 8


def test_the_comparison_is_bounded(alice_client, ingest, settings):
    settings.HISTORY_COMPARE_ITERATIONS = 3
    ingest([agent_run("b1", iterations=10), agent_run("b2", iterations=12, answer="x" * 30_000)])
    page = page_of(alice_client, a="b1", b="b2")
    assert page.count('class="compare-iteration') == 3 and "aligned by position, the first 3" in page
    assert "The diff reads the first 20,000 characters of each." in page
