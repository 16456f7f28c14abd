"""Lists nested in a page stay bounded: a run's injected contexts (the run page shows the
first ``HISTORY_RUN_PAGE_CONTEXTS``, the rest a slice at a time) and the lists inside each
run's row of a session page (at most ``HISTORY_SESSION_PAGE_NESTED`` each, with totals).

Found by an outside audit: a run with 5,000 injected contexts made a page of all 5,000, and
a session page listed every member interaction and workflow step of every run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history_app import models

from .conftest import native

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run(ingest):
    """A run with one iteration, named "plan" (a workflow step), and one tool call."""
    payload = native("r-1", iterations=[{"name": "plan", "thought": "t", "tool_calls": [{"tool": "web"}]}])
    assert ingest(payload).status_code == 200
    return models.Run.objects.get(run_id="r-1")


def _add_contexts(run: models.Run, count: int, *, step: str = "") -> None:
    """``count`` more injected contexts, 1,000 characters each, at the next positions."""
    have = run.injected_contexts.count()
    models.InjectedContext.objects.bulk_create(
        models.InjectedContext(
            run=run,
            position=p,
            step=step,
            kind="workflow_history",
            text=f"[run-{p}] " + "x" * 990,
            source_run_ids=[f"src-{p}"],
        )
        for p in range(have, have + count)
    )


def _listed(html: str) -> list[int]:
    """Positions of the contexts in the list of contexts (not the per-step links): their
    URLs number them from 1."""
    return [
        int(p) - 1 for p in re.findall(r'<li>\s*<a href="/p/default/runs/r-1/context/(\d+)/"><strong>', html)
    ]


def _page(client, url: str, **headers) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


# -- the run page ---------------------------------------------------------------------------


def test_a_run_of_500_contexts_shows_the_first_and_links_the_rest(alice_client, run, settings):
    n = settings.HISTORY_RUN_PAGE_CONTEXTS
    _add_contexts(run, n)
    as_many_as_shown = len(_page(alice_client, "/p/default/runs/r-1/"))
    _add_contexts(run, 500 - n)
    page = _page(alice_client, "/p/default/runs/r-1/")
    assert _listed(page) == list(range(n))
    assert 'What the model was told <span class="muted">· 500 contexts</span>' in page
    assert f"({n} of 500 contexts shown)" in page
    # The page is as big as one with only the contexts it shows, plus the link and the total:
    # all 500 would be 25 times that list (each ~400 bytes), past 200 KB.
    assert len(page) - as_many_as_shown < 1_000
    assert page.count("<li>") < 30
    url = f"/p/default/runs/r-1/contexts/?start={n}"
    assert f'<a href="{url}" hx-get="{url}" hx-target="closest li"' in page
    # Without JavaScript the link is a page of its own with the next slice and a further link.
    plain = _page(alice_client, url)
    assert "<html" in plain and _listed(plain) == list(range(n, 2 * n))
    assert (
        f"/p/default/runs/r-1/contexts/?start={2 * n}" in plain
        and f"({2 * n} of 500 contexts shown)" in plain
    )
    # htmx gets only the list items, to put in place of the link's item.
    fragment = _page(alice_client, url, HTTP_HX_REQUEST="true")
    assert "<html" not in fragment and "<ul" not in fragment and _listed(fragment) == _listed(plain)
    assert f'hx-get="/p/default/runs/r-1/contexts/?start={2 * n}"' in fragment
    # The last slice has no link; a start past the end is an empty slice, not an error.
    last = _page(alice_client, "/p/default/runs/r-1/contexts/?start=490")
    assert _listed(last) == list(range(490, 500)) and "Show more contexts" not in last
    for start in (500, 10_000, 2**31 - 1):
        beyond = _page(alice_client, f"/p/default/runs/r-1/contexts/?start={start}")
        assert _listed(beyond) == [] and "No more contexts: this run has 500." in beyond
        assert (
            _listed(
                _page(alice_client, f"/p/default/runs/r-1/contexts/?start={start}", HTTP_HX_REQUEST="true")
            )
            == []
        )
    assert alice_client.get("/p/default/runs/nope/contexts/").status_code == 404
    assert alice_client.get("/p/default/runs/a%00b/contexts/").status_code == 404


def test_the_number_of_contexts_shown_is_a_setting(alice_client, run, settings):
    settings.HISTORY_RUN_PAGE_CONTEXTS = 7
    _add_contexts(run, 30)
    page = _page(alice_client, "/p/default/runs/r-1/")
    assert _listed(page) == list(range(7)) and "/p/default/runs/r-1/contexts/?start=7" in page
    assert _listed(_page(alice_client, "/p/default/runs/r-1/contexts/?start=7")) == list(range(7, 14))


def test_a_step_sent_thousands_of_contexts_links_the_first(alice_client, run, settings):
    n = settings.HISTORY_RUN_PAGE_CONTEXTS
    _add_contexts(run, 1_000, step="plan")
    for url in ("/p/default/runs/r-1/", "/p/default/runs/r-1/iterations/?start=0"):
        page = _page(alice_client, url)
        links = re.findall(
            r'<div class="step-context"><p><a href="/p/default/runs/r-1/context/(\d+)/">Inspect', page
        )
        assert links == [str(p + 1) for p in range(n)], url
        assert f"{1_000 - n} more contexts sent at this step" in page


@pytest.mark.parametrize(
    "start", ["-1", "²", "٣", "1e9", "1.5", "9" * 5000, "x", "", " 1", "\x00", "1\x00", str(2**31)]
)
def test_bad_context_starts_are_a_400(alice_client, run, start):
    _add_contexts(run, 3)
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        page = alice_client.get("/p/default/runs/r-1/contexts/", {"start": start}, **headers)
        assert page.status_code == 400 and "<code>start</code>" in page.content.decode()
        assert "is not a whole number from 0 to 2147483647" in page.content.decode()


def test_run_page_queries_do_not_grow_with_its_contexts(alice_client, run, django_assert_num_queries):
    urls = (
        "/p/default/runs/r-1/",
        "/p/default/runs/r-1/contexts/?start=1",
        "/p/default/runs/r-1/iterations/?start=0",
    )
    _add_contexts(run, 3, step="plan")
    _page(alice_client, urls[0])  # the first view keeps the answer's HTML (one UPDATE, once)
    counts = {}
    for url in urls:
        with CaptureQueriesContext(connection) as ctx:
            _page(alice_client, url)
        counts[url] = len(ctx.captured_queries)
    _add_contexts(run, 297, step="plan")
    for url in urls:
        with django_assert_num_queries(counts[url]):
            page = _page(alice_client, url)
        assert len(re.findall(r'href="/p/default/runs/r-1/context/\d+/"', page)) <= 40, url
    # session + user, project + role + the project menu, the run, its first iterations,
    # their first tool calls, the contexts sent at their steps, the run's contexts: how
    # many, then the first of them; the runs before and after it in its session (with the
    # nearest of the other group, timed or not); its annotations; the runs it started.
    assert counts["/p/default/runs/r-1/"] == 12


# -- the session page -----------------------------------------------------------------------


def _session(ingest, children: int) -> None:
    """Session "big": a team run with ``children`` member interactions, a member run under
    it and a workflow run of ``children`` steps."""
    team = native("team", "big", kind="team")
    team["member_interactions"] = [
        {"member": f"member-{i}", "task": f"task {i} " + "t" * 200, "response": "r" * 200}
        for i in range(children)
    ]
    member = native("member", "big", kind="member", parent_run_id="team")
    workflow = native(
        "flow", "big", kind="workflow", iterations=[{"name": f"step-{i}"} for i in range(children)]
    )
    assert ingest([team, member, workflow]).status_code == 200


def _members(html: str) -> list[str]:
    return re.findall(r"<li><strong>(member-\d+)</strong>", html)


def _steps(html: str) -> list[str]:
    return re.findall(r'<li><a href="/p/default/runs/flow/#iteration-\d+">(step-\d+)</a></li>', html)


def test_session_page_caps_each_runs_nested_lists(alice_client, ingest, settings):
    n = settings.HISTORY_SESSION_PAGE_NESTED
    _session(ingest, n)
    as_many_as_shown = len(_page(alice_client, "/p/default/sessions/big/"))
    _session(ingest, 60)
    page = _page(alice_client, "/p/default/sessions/big/")
    assert _members(page) == [f"member-{i}" for i in range(n)]
    assert _steps(page) == [f"step-{i}" for i in range(n)]
    assert "<summary>60 member interactions</summary>" in page and "<summary>60 steps</summary>" in page
    assert f"{n} of 60 member interactions shown" in page
    assert 'href="/p/default/runs/team/export.json"' in page
    assert f'{n} of 60 steps shown; the rest are on <a href="/p/default/runs/flow/">the run page</a>' in page
    # As big as a page of only what it shows, plus the two "N of M" lines.
    assert len(page) - as_many_as_shown < 1_000


def test_the_session_page_cap_is_a_setting(alice_client, ingest, settings):
    settings.HISTORY_SESSION_PAGE_NESTED = 3
    _session(ingest, 10)
    page = _page(alice_client, "/p/default/sessions/big/")
    assert _members(page) == ["member-0", "member-1", "member-2"]
    assert _steps(page) == ["step-0", "step-1", "step-2"]
    assert "3 of 10 steps shown" in page and "3 of 10 member interactions shown" in page


def test_session_page_queries_do_not_grow_with_nested_children(
    alice_client, ingest, django_assert_num_queries
):
    _session(ingest, 3)
    # session + user, project + role + the project menu, the session, its runs, member
    # interactions, workflow steps, the runs' annotations.
    with django_assert_num_queries(8):
        small = _page(alice_client, "/p/default/sessions/big/")
    assert "3 of 3" not in small and len(_members(small)) == 3
    _session(ingest, 60)
    with django_assert_num_queries(8):
        page = _page(alice_client, "/p/default/sessions/big/")
    assert len(_members(page)) == 20 and len(_steps(page)) == 20


# -- the settings --------------------------------------------------------------------------


def _settings_in_a_new_process(tmp_path, **variables) -> subprocess.CompletedProcess:
    keep = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.HISTORY_RUN_PAGE_CONTEXTS, settings.HISTORY_SESSION_PAGE_NESTED)"
    )
    env = {**keep, "DJANGO_SETTINGS_MODULE": "history_app.settings", "HISTORY_DATA_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, **variables}, capture_output=True, text=True
    )


def test_the_settings_come_from_the_environment(tmp_path):
    assert _settings_in_a_new_process(tmp_path).stdout.split() == ["20", "20"]
    chosen = _settings_in_a_new_process(
        tmp_path, HISTORY_RUN_PAGE_CONTEXTS="5", HISTORY_SESSION_PAGE_NESTED="7"
    )
    assert chosen.stdout.split() == ["5", "7"]
    for name in ("HISTORY_RUN_PAGE_CONTEXTS", "HISTORY_SESSION_PAGE_NESTED"):
        refused = _settings_in_a_new_process(tmp_path, **{name: "0"})
        assert refused.returncode != 0 and f"{name}='0' must be at least 1" in refused.stderr
