"""The context inspector: exact text, source links, rebuild check, re-render, delta."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import native

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"


@pytest.fixture
def workflow(ingest):
    assert ingest(json.loads((DEMO / "workflow_blog.json").read_text())).status_code == 200


def page_of(client, url, **params) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_run_page_lists_its_contexts_with_provenance(alice_client, workflow):
    page = page_of(alice_client, "/p/default/runs/demo-wf-run-3/")
    assert "What the model was told" in page
    assert 'href="/p/default/runs/demo-wf-run-3/context/1/"' in page
    assert ">reported<" in page and "2 source runs" in page
    # The iteration of the step the context was sent at links to it.
    draft = page[page.index('id="iteration-2"') :]
    assert "Inspect the workflow history sent at this step" in draft[: draft.index("</section>")]


def test_exact_text_with_each_run_entry_linked_to_its_source(alice_client, workflow):
    page = page_of(alice_client, "/p/default/runs/demo-wf-run-3/context/1/")
    text = re.search(r'<pre class="text context-text" id="context-text">(.*?)</pre>', page, re.S).group(1)
    assert (
        '<a class="src" href="/p/default/runs/demo-wf-run-1/" title="source run demo-wf-run-1">[run-1]</a>'
        in text
    )
    assert (
        '<a class="src" href="/p/default/runs/demo-wf-run-2/" title="source run demo-wf-run-2">[run-2]</a>'
        in text
    )
    # Apart from the links, the text is exactly what was sent (escaped once).
    from django.utils.html import escape

    from history_app import models

    sent = models.InjectedContext.objects.get(run__run_id="demo-wf-run-3").text
    assert re.sub(r"<a [^>]*>|</a>", "", text) == escape(sent)
    assert "reported by the agent" in page


def test_rebuild_check_and_rerender_with_other_settings(alice_client, workflow):
    page = page_of(alice_client, "/p/default/runs/demo-wf-run-3/context/1/")
    assert "✓ Identical" in page  # our renderer, from the linked runs, writes the same text
    assert "✓ The same text as was sent." in page  # defaults re-render the same
    fewer = page_of(alice_client, "/p/default/runs/demo-wf-run-3/context/1/", runs="1")
    assert "Difference from what was sent" in fewer
    assert '<span class="d-del">-[run-2]</span>' in fewer  # the older run drops out, renumbered
    stamped = page_of(alice_client, "/p/default/runs/demo-wf-run-3/context/1/", runs="2", timestamps="1")
    assert re.search(r'<span class="d-add">\+\[run-1\] \(2026-11-29 09:00:00\)</span>', stamped)
    # An htmx re-render gets just the result.
    fragment = alice_client.get(
        "/p/default/runs/demo-wf-run-3/context/1/", {"runs": "1"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert fragment.startswith('\n  <div id="rerender">') or fragment.lstrip().startswith(
        '<div id="rerender">'
    )
    assert "<html" not in fragment


def test_delta_from_the_previous_step(alice_client, workflow):
    page = page_of(alice_client, "/p/default/runs/demo-wf-run-3/context/1/")
    assert 'href="/p/default/runs/demo-wf-run-2/context/1/"' in page
    assert re.search(r'<span class="d-add">\+\[run-2\]</span>', page)
    assert "This is the first" not in page
    first = page_of(alice_client, "/p/default/runs/demo-wf-run-2/context/1/")
    assert "This is the first workflow history sent to system in this session." in first


@pytest.mark.parametrize(
    ("params", "field"), [({"runs": "many"}, "runs"), ({"runs": "-1"}, "runs"), ({"items": "1000"}, "items")]
)
def test_bad_settings_get_a_400_naming_them(alice_client, workflow, params, field):
    response = alice_client.get("/p/default/runs/demo-wf-run-3/context/1/", params)
    assert response.status_code == 400 and f"<code>{field}</code>" in response.content.decode()


def test_missing_context_is_404(alice_client, workflow):
    assert alice_client.get("/p/default/runs/demo-wf-run-3/context/9/").status_code == 404
    # Numbered from 1, as the README says "the n-th": there is no context 0.
    assert alice_client.get("/p/default/runs/demo-wf-run-3/context/0/").status_code == 404
    assert alice_client.get("/p/default/runs/nope/context/1/").status_code == 404


def test_team_member_entries_link_to_member_runs(alice_client, ingest):
    ingest(json.loads((DEMO / "team_research.json").read_text()))
    page = page_of(alice_client, "/p/default/runs/demo-team-member-2/context/1/")
    assert re.search(
        r'<a class="src" href="/p/default/runs/demo-team-member-1/"[^>]*>Member: Researcher</a>', page
    )
    assert "✓ Identical" in page


def test_cot_history_rerenders_with_other_detail_items(alice_client, ingest):
    entries = [{"goTo": f"step{i}", "intent": f"do {i}", "summary": f"result {i}"} for i in range(8)]
    ingest({"process_id": "p-1", "task": "plan", "history": entries})
    from history_app import models

    context = models.InjectedContext.objects.get(run__run_id="cot:p-1")
    url = f"/p/default/runs/cot:p-1/context/{context.number}/"
    page = page_of(alice_client, url)
    assert "reconstructed" in page and "✓ Identical" in page
    fewer = page_of(alice_client, url, items="2")
    assert "Difference from what was sent" in fewer and "d-del" in fewer


def test_free_text_contexts_are_shown_but_not_rerendered(alice_client, ingest):
    ingest(
        {
            "schema": "agent-history/v1",
            "run_id": "r",
            "session_id": "s",
            "injected_contexts": [{"text": "Be <b>brief</b>. [run-1]", "kind": "instructions"}],
        }
    )
    page = page_of(alice_client, "/p/default/runs/r/context/1/")
    assert "Be &lt;b&gt;brief&lt;/b&gt;. [run-1]" in page  # escaped, and no link without a source
    assert "only history blocks" in page


def test_inspector_query_count_is_bounded(alice_client, ingest, django_assert_num_queries):
    def workflow_runs(n):
        runs = []
        for i in range(n):
            history = "".join(f"[run-{j + 1}]\ninput: q{j}\noutput: a{j}\n\n" for j in range(i))
            runs.append(
                {
                    "schema": "agent-history/v1",
                    "run_id": f"w{i}",
                    "session_id": "big",
                    "kind": "workflow",
                    "input": f"q{i}",
                    "output": f"a{i}",
                    "started_at": f"2026-01-01T00:{i:02d}:00Z",
                    "injected_contexts": [
                        {
                            "kind": "workflow_history",
                            "text": f"<workflow_history_context>\n{history}</workflow_history_context>",
                            "settings": {"num_history_runs": 100},
                        }
                    ]
                    if i
                    else [],
                }
            )
        return runs

    ingest(workflow_runs(4))
    # session + user, project + role + the project menu, the context with its run, source runs, the pool, the previous context.
    with django_assert_num_queries(7):
        alice_client.get("/p/default/runs/w3/context/1/")
    ingest(workflow_runs(40))
    with django_assert_num_queries(7):
        page = page_of(alice_client, "/p/default/runs/w39/context/1/")
    assert page.count('class="src"') == 39 and "✓ Identical" in page


def test_hostile_text_in_a_context_is_shown_exactly_and_never_as_markup(alice_client, ingest):
    """The templates escape every piece of the text and of the diffs: content that looks
    like markup or like our own links stays text."""
    import html

    hostile = (
        '<team_history_context>\n[run-1]\ninput: <script>alert(1)</script>\nresponse: <a class="src" '
        'href="/evil">[run-1]</a> &amp; </pre>\n\n</team_history_context>\n'
    )
    run = {
        "schema": "agent-history/v1",
        "run_id": "m-1",
        "session_id": "s-x",
        "input": "task",
        "injected_contexts": [{"text": hostile, "kind": "team_history", "target": "user"}],
    }
    assert ingest(run).status_code == 200
    page = page_of(alice_client, "/p/default/runs/m-1/context/1/")
    shown = re.search(r'<pre class="text context-text" id="context-text">(.*?)</pre>', page, re.S).group(1)
    assert "<script>" not in page and 'href="/evil"' not in page
    assert html.unescape(shown) == hostile


def test_a_run_with_one_context_opens_it_as_context_1(alice_client, ingest):
    """Issue #17: the URL's number was 0-based, so /context/1/ was a 404 for a run with one
    context while the README says "the n-th". Numbered from 1 now, in every link."""
    ingest({**native("one", "s"), "injected_contexts": [{"kind": "custom", "text": "the only one"}]})
    run_page = alice_client.get("/p/default/runs/one/").content.decode()
    assert 'href="/p/default/runs/one/context/1/"' in run_page and "/context/0/" not in run_page
    page = alice_client.get("/p/default/runs/one/context/1/").content.decode()
    assert "the only one" in page and "<span>context 1</span>" in page
    assert alice_client.get("/p/default/runs/one/context/0/").status_code == 404
    assert alice_client.get("/p/default/runs/one/context/2/").status_code == 404
