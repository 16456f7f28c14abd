"""Django's admin (issue #17): every history_app list fits a 1280-pixel screen, and dates
read as on the rest of the site ("2026-11-30 22:00:00", not "Nov. 30, 2026, 10 p.m.")."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from history_app import models
from history_app.access import audit
from history_app.access.auth import register_token
from history_app.intake import ingestion
from history_app.upkeep import annotations as annotation_store
from history_app.upkeep import retention

from .conftest import native

try:
    # test_browser skips itself where there is no Chromium or Playwright: that skips the
    # browser test here, not this whole module.
    from .test_browser import browser_page, log_in, shot  # noqa: F401 (browser_page is a fixture)
except pytest.skip.Exception:
    browser_page = log_in = shot = None

pytestmark = pytest.mark.django_db

# Ids as long as real ones get: autourgos names its sessions after the agent and the day,
# OpenTelemetry and most SDKs use 32-hex or UUID ids, and some agents append both.
LONG_SESSION = "autourgos:ResearchAndSummariseBot:2026-11-29T22:43:55.551407+00:00:bc481e3f9a7d4c21"
LONG_RUN = "run-4f9c2d3e-8b5a-4789-abcd-ef0123456789-attempt-0003-of-the-nightly-batch"
LONG_AGENT = "Quarterly-Report-Research-and-Summarisation-Workflow (team: analysts-emea-north)"
LONG_MODEL = "anthropic.claude-3-5-sonnet-20241022-v2:0@us-east-1.bedrock.amazonaws.com"

# Every history_app list, and whether it has a date column.
ADMIN_LISTS = {
    "/admin/history_app/project/": True,
    "/admin/history_app/membership/": True,
    "/admin/history_app/session/": True,
    "/admin/history_app/run/": True,
    "/admin/history_app/iteration/": True,
    "/admin/history_app/toolcall/": True,
    "/admin/history_app/modelcall/": False,
    "/admin/history_app/memberinteraction/": False,
    "/admin/history_app/injectedcontext/": False,
    "/admin/history_app/ingesttoken/": True,
    "/admin/history_app/auditevent/": True,
    "/admin/history_app/prunelog/": True,
    "/admin/history_app/ingestreceipt/": True,
    "/admin/history_app/annotation/": True,
}
SITE_DATETIME = re.compile(r"\b20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\b")
# Django's own en-us formats: "Nov. 30, 2026, 10 p.m.", "Nov. 30, 2026", "10:00 p.m.".
LOCALE_DATE = re.compile(
    r"\b(Jan|Feb|March|April|May|June|July|Aug|Sept|Oct|Nov|Dec)\.? \d{1,2}, 20\d\d\b|\b[ap]\.m\."
)


def _model_call(position: int) -> dict:
    return {
        "model": LONG_MODEL,
        "provider": "amazon-bedrock-cross-region-inference",
        "messages": [{"role": "user", "content": "Summarise the quarter.", "part": "input"}],
        "output": "Done.",
        "input_tokens": 123_456_789 + position,
        "output_tokens": 98_765_432,
        "cost": 1234.567891,
        "started_at": "2026-11-30T22:00:00Z",
        "ended_at": "2026-11-30T22:00:01Z",
    }


def load_admin_data() -> None:
    """A row of every kind the admin lists, with values as wide as they come: long ids and
    names, a prune log of every count, a receipt, a token, audit events."""
    items = [
        native(
            f"{LONG_RUN}-{i}",
            f"{LONG_SESSION}-{i % 2}",
            agent_name=LONG_AGENT,
            kind="workflow",
            status="cancelled",
            input="Summarise the quarter.",
            output="Done.",
            started_at="2026-11-30T22:00:00Z",
            ended_at="2026-11-30T22:00:05Z",
            iterations=[
                {
                    "index": 1,
                    "name": "gather-sources-from-the-quarterly-filings-and-press-releases",
                    "started_at": "2026-11-30T22:00:00Z",
                    "thought": "t",
                    "tool_calls": [
                        {
                            "tool": "search_the_internal_knowledge_base_for_documents",
                            "params": {},
                            "started_at": "2026-11-30T22:00:01Z",
                        },
                    ],
                    "model_calls": [_model_call(i)],
                }
            ],
            member_interactions=[
                {
                    "member": "Senior-Financial-Analyst-Agent",
                    "task": "t",
                    "response": "r",
                    "member_run_id": LONG_RUN,
                }
            ],
            injected_contexts=[{"text": "ctx", "kind": "custom", "step": "summarise-each-filing-step"}],
        )
        for i in range(3)
    ]
    results = ingestion.ingest_items(items=items)
    assert {r.status for r in results} == {"created"}, results
    token, _ = register_token(
        name="nightly-batch-importer-for-the-emea-north-analysts", scopes=["ingest", "read"]
    )
    ingestion.record_receipt(
        source="import_history",
        results=results,
        token=token,
        label="/var/lib/agents/exports/2026/11/30/nightly-batch/research-and-summarisation/",
    )
    models.Session.objects.filter(session_id=f"{LONG_SESSION}-0").update(
        pinned=True, last_activity_at=timezone.now() - timedelta(days=400)
    )
    retention.set_pinned(
        models.Session.objects.filter(session_id=f"{LONG_SESSION}-1"), pinned=True, actor="a-long-user-name"
    )
    retention.set_pinned(
        models.Session.objects.filter(session_id=f"{LONG_SESSION}-1"), pinned=False, actor="a-long-user-name"
    )
    for run in models.Run.objects.all():
        annotation_store.add(
            run,
            annotation_store.parse(
                [
                    {"kind": "score", "name": "faithfulness-to-the-retrieved-sources", "value": 0.75},
                    {"kind": "comment", "text": "A long comment " * 20},
                ]
            ),
            author="token:nightly-batch-importer-for-the-emea-north-analysts",
        )
    # A dry run over everything: a prune log with every count, none of them zero.
    retention.prune_each_project(older_than_days=0, dry_run=True, trigger="admin", user="a-long-user-name")
    audit.record(
        actor="a-long-user-name",
        action="retention_changed",
        project=models.Project.default(),
        target=LONG_SESSION,
    )


@pytest.fixture
def admin_data(db, django_user_model):
    load_admin_data()
    member = django_user_model.objects.create_user("a-member-with-a-long-name", password="member-password-1")
    models.Membership.objects.create(
        project=models.Project.default(), user=member, role=models.Membership.EDITOR
    )


def text_of(response) -> str:
    return response.content.decode()


@pytest.mark.parametrize(("url", "has_dates"), ADMIN_LISTS.items())
def test_every_admin_list_shows_dates_as_the_site_does(admin_data, admin_client, url, has_dates):
    response = admin_client.get(url)
    assert response.status_code == 200
    page = text_of(response)
    assert 'id="result_list"' in page  # a row of each kind is there
    assert bool(SITE_DATETIME.search(page)) == has_dates
    assert not LOCALE_DATE.search(page), LOCALE_DATE.search(page)


def test_sessions_list_and_session_page_show_last_activity_as_the_site_does(admin_data, admin_client):
    page = text_of(admin_client.get("/admin/history_app/session/"))
    assert ">Last activity<" in page
    assert "2026-11-30 22:00:05" in page  # the run's end, to the second
    session = models.Session.objects.get(session_id=f"{LONG_SESSION}-1")
    page = text_of(admin_client.get(f"/admin/history_app/session/{session.pk}/change/"))
    assert "2026-11-30 22:00:00" in page and "2026-11-30 22:00:05" in page  # first start, last activity
    assert not LOCALE_DATE.search(page)


def test_prune_log_list_shows_counts_in_words_not_the_stored_dict(admin_data, admin_client):
    page = text_of(admin_client.get("/admin/history_app/prunelog/"))
    log = models.PruneLog.objects.get()
    assert log.counts["sessions"] == 1 and log.counts["runs"] == 1
    total = sum(log.counts.values())
    assert f"1 session, 1 run ({total} rows in all)" in page
    assert (
        'title="1 session, 1 run, 1 iteration, 1 tool call, 1 model call, 1 member interaction, '
        "1 injected context, 1 search document" in page
    )
    assert (
        "&#x27;sessions&#x27;" not in page
        and "{" not in page.split('id="result_list"')[1].split("</table>")[0]
    )
    assert ">0 ms<" in page


def test_long_ids_are_shortened_with_the_whole_id_in_the_title(admin_data, admin_client):
    page = text_of(admin_client.get("/admin/history_app/run/"))
    for i in range(3):
        assert f'title="{LONG_RUN}-{i}"' in page
        assert f">{LONG_RUN}-{i}<" not in page  # not shown whole
    assert "run-4f9c2d3e-8b5a-…y-batch-0" in page  # its start and its end, which tell runs apart
    assert f'title="{LONG_SESSION}-0"' in page and "autourgos:Research…a7d4c21-0" in page
    # A short value is shown whole, with no title.
    page = text_of(admin_client.get("/admin/history_app/prunelog/"))
    assert ">a-long-user-name</td>" in page


def test_receipts_and_tokens_show_counts_and_scopes_as_words(admin_data, admin_client):
    page = text_of(admin_client.get("/admin/history_app/ingestreceipt/"))
    assert ">3 created<" in page and "{" not in page.split('id="result_list"')[1].split("</table>")[0]
    page = text_of(admin_client.get("/admin/history_app/ingesttoken/"))
    assert ">ingest, read<" in page and "[&#x27;ingest&#x27;" not in page


def test_admin_lists_keep_their_query_counts(admin_data, admin_client, django_assert_max_num_queries):
    """The shortened columns read what list_select_related fetched: no query per row."""
    for url in ADMIN_LISTS:
        with django_assert_max_num_queries(12):
            assert admin_client.get(url).status_code == 200


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(browser_page is None, reason="no Chromium or Playwright (see test_browser.py)")
def test_every_admin_list_fits_a_1280_by_800_screen(browser_page, live_server, django_user_model):
    """Nothing clipped (issue #17): no list's table is wider than its box, the page does
    not scroll sideways, and the columns people missed are on screen."""
    load_admin_data()
    page = browser_page
    log_in(page, live_server, django_user_model)
    django_user_model.objects.filter(username="alice").update(is_staff=True, is_superuser=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    must_show = {
        "/admin/history_app/session/": ["Last activity", "Pinned"],
        "/admin/history_app/prunelog/": ["Counts", "Longest transaction"],
    }
    for url in ADMIN_LISTS:
        page.goto(f"{live_server.url}{url}")
        table = page.locator("#result_list")
        table.wait_for()
        widths = page.evaluate(
            "[document.querySelector('#result_list').scrollWidth,"
            " document.querySelector('#changelist-form .results').clientWidth,"
            " document.documentElement.scrollWidth]"
        )
        assert widths[0] <= widths[1] and widths[2] <= 1280, (url, widths)
        for heading in must_show.get(url, []):
            cell = page.locator("#result_list thead th", has_text=heading)
            box = cell.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1280, (url, heading, box)
            assert cell.is_visible()
        shot(page, "admin-" + url.split("/")[3])
    assert page.problems == []
