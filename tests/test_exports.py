"""Exports: a run as autourgos Markdown and canonical JSON; a session as a JSON bundle and
as one offline HTML file."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from history_app.agent_history import parse
from history_app.agent_history.formats import autourgos

from .conftest import AUTOURGOS, load_jsonl, native
from .test_views import assert_inert

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(ingest):
    data = json.loads((AUTOURGOS / "Task_20261129_224355_551407_bc481e3f.json").read_text())
    result = ingest(data).json()["results"][0]
    return data, result["run_id"], result["session_id"]


def test_run_markdown_export_is_an_autourgos_log_that_parses_back(alice_client, stored):
    data, run_id, _ = stored
    response = alice_client.get(f"/p/default/runs/{run_id}/export.md")
    assert response["Content-Disposition"] == f'attachment; filename="{run_id}.md"'
    (back,) = autourgos.parse_markdown(response.getvalue().decode())
    original = parse(data)[0]
    assert [it.thought for it in back.iterations] == [it.thought for it in original.iterations]
    assert [[c.tool for c in it.tool_calls] for it in back.iterations] == [
        [c.tool for c in it.tool_calls] for it in original.iterations
    ]
    assert back.output == original.output


def test_run_json_export_is_the_canonical_record(alice_client, stored, ingest):
    _, run_id, _ = stored
    record = json.loads(alice_client.get(f"/p/default/runs/{run_id}/export.json").getvalue())
    assert record["schema"] == "agent-history/v1" and record["run_id"] == run_id
    assert ingest(record).json()["results"][0]["status"] == "duplicate"


def test_session_bundle(alice_client, stored):
    _, run_id, session_id = stored
    bundle = json.loads(alice_client.get(f"/p/default/sessions/{session_id}/export.json").getvalue())
    assert bundle["schema"] == "agent-history/session-bundle/v1"
    assert bundle["session"]["session_id"] == session_id
    assert [r["run_id"] for r in bundle["runs"]] == [run_id]


def test_offline_html_is_self_contained(alice_client, stored):
    _, _, session_id = stored
    html = alice_client.get(f"/p/default/sessions/{session_id}/export.html").getvalue().decode()
    assert "Compare Tokyo and Osaka" in html and "web_search" in html and "Tokyo (~37.4M metro)" in html
    assert "<style>" in html and "<script" not in html and "<link" not in html
    assert 'src="' not in html and "url(" not in html  # nothing for the browser to fetch


def test_exports_are_login_only_and_validate_the_format(client, stored, alice_client):
    _, run_id, session_id = stored
    anonymous = __import__("django.test", fromlist=["Client"]).Client()
    assert anonymous.get(f"/p/default/runs/{run_id}/export.md").status_code == 302
    assert alice_client.get(f"/p/default/runs/{run_id}/export.exe").status_code == 404
    assert alice_client.get(f"/p/default/sessions/{session_id}/export.pdf").status_code == 404
    assert alice_client.get("/p/default/sessions/nope/export.json").status_code == 404


def test_session_export_query_count_does_not_grow(alice_client, ingest, django_assert_num_queries):
    runs = [
        {
            "schema": "agent-history/v1",
            "run_id": f"r{i}",
            "session_id": "big",
            "iterations": [{"tool_calls": [{"tool": "t"}] * 3}] * 3,
        }
        for i in range(20)
    ]
    ingest(runs)
    # (session + user, project + role, then the session and its runs a table at a time)
    with django_assert_num_queries(10):
        alice_client.get("/p/default/sessions/big/export.html").getvalue()
    ingest([{**r, "run_id": f"x{r['run_id']}"} for r in runs])
    with django_assert_num_queries(11):  # and the runs' annotations
        alice_client.get("/p/default/sessions/big/export.json").getvalue()


def test_xss_payloads_are_inert_in_the_offline_file(alice_client, ingest):
    payloads = [e["payload"] for e in load_jsonl("xss.jsonl")]
    ingest(
        [
            {
                "schema": "agent-history/v1",
                "run_id": f"x{i}",
                "session_id": "xss",
                "input": p,
                "output": p,
                "iterations": [{"thought": p}],
            }
            for i, p in enumerate(payloads)
        ]
    )
    html = alice_client.get("/p/default/sessions/xss/export.html").getvalue().decode()
    # The file's own <style> sits in its head; everything from the runs is in the body.
    assert html.count("<style>") == 1 and html.index("<style>") < html.index("<body>")
    assert_inert(html.split("<body>", 1)[1], "offline export")


@pytest.mark.parametrize(
    "url, filename",
    [
        ("/p/default/runs/运行-東京-1/export.md", "运行-東京-1.md"),
        ("/p/default/runs/运行-東京-1/export.json", "运行-東京-1.json"),
        ("/p/default/sessions/会话-东京/export.json", "会话-东京.json"),
        ("/p/default/sessions/会话-东京/export.html", "会话-东京.html"),
    ],
)
def test_exports_name_ids_outside_latin_1_with_rfc_6266_filename_star(alice_client, ingest, url, filename):
    assert ingest(native("运行-東京-1", "会话-东京", input="hi", output="ok")).status_code == 200
    response = alice_client.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"] == f"attachment; filename*=utf-8''{quote(filename)}"


def test_the_offline_file_uses_the_kept_answers_and_bounds_new_rendering(alice_client, ingest, monkeypatch):
    from history_app import models
    from history_app.reading import transcripts, views

    assert (
        ingest([native(f"e{n}", "s-export", output=f"**answer {n}**") for n in range(5)]).status_code == 200
    )
    models.Run.objects.filter(run_id="e0").update(output_html="<p>KEPT-e0</p>")
    renders = []
    real = transcripts.render_markdown

    def counted(text, **kwargs):
        renders.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(transcripts, "render_markdown", counted)
    url = "/p/default/sessions/s-export/export.html"
    first = b"".join(alice_client.get(url).streaming_content).decode()
    assert "<p>KEPT-e0</p>" in first and "<strong>answer 4</strong>" in first
    assert len(renders) == 4  # the four never rendered, once each, then kept
    assert not models.Run.objects.filter(session__session_id="s-export", output_html__isnull=True).exists()
    second = b"".join(alice_client.get(url).streaming_content).decode()
    assert len(renders) == 4 and second.count("<strong>answer") == 4
    # New answers past the export's rendering time are plain text, and not kept.
    ingest([native(f"n{n}", "s-export", output=f"**late {n}**") for n in range(3)])
    monkeypatch.setattr(views, "EXPORT_RENDER_BUDGETS", 0)
    third = b"".join(alice_client.get(url).streaming_content).decode()
    assert len(renders) == 4 and third.count("rendering answers is spent") == 3
    assert "**late 2**" in third and "<strong>answer 3</strong>" in third
    assert models.Run.objects.filter(run_id__startswith="n", output_html__isnull=True).count() == 3
