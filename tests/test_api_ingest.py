"""POST /api/v1/ingest: every status code, idempotency, atomicity and server-side redaction."""

from __future__ import annotations

import json

import pytest
from django.db import DatabaseError
from django.test import override_settings

from history_app import models
from history_app.intake import bulk, ingestion, writer
from history_app.models import IngestToken

from .conftest import autourgos_logs, database_dump, load_jsonl, native

pytestmark = pytest.mark.django_db


def test_all_samples_are_created_then_duplicate(ingest):
    payload = [json.loads(p.read_text()) for p in autourgos_logs()]
    first = ingest(payload)
    assert first.status_code == 200
    assert [r["status"] for r in first.json()["results"]] == ["created"] * 11
    assert models.Run.objects.count() == 11
    again = ingest(payload)
    assert again.status_code == 200
    assert [r["status"] for r in again.json()["results"]] == ["duplicate"] * 11
    assert models.Run.objects.count() == 11
    assert models.Iteration.objects.count() == sum(len(p["iterations"]) for p in payload)


def test_changed_content_under_the_same_id_updates_the_run(ingest):
    ingest(native(input="one", iterations=[{"thought": "a"}, {"thought": "b"}]))
    response = ingest(native(input="two", iterations=[{"thought": "c"}]))
    assert response.json()["results"][0]["status"] == "updated"
    run = models.Run.objects.get(run_id="r-1")
    assert run.input == "two"
    assert list(run.iterations.values_list("thought", flat=True)) == ["c"]
    assert run.session.run_count == 1


def test_some_rejected_gives_207_with_paths(ingest):
    response = ingest([native(), {"iterations": "nope", "final_response": "x"}, 5])
    assert response.status_code == 207
    body = response.json()
    assert body["ok"] is False
    assert [r["status"] for r in body["results"]] == ["created", "rejected", "rejected"]
    assert body["results"][1]["errors"] == [{"path": "$.iterations", "message": "must be an array"}]
    assert body["results"][2]["errors"][0]["path"] == "$"


def test_none_accepted_gives_400(ingest):
    response = ingest({"hello": "world"})
    assert response.status_code == 400
    assert (
        "accepted formats: native, autourgos, agno-go, agno, cot"
        in response.json()["results"][0]["errors"][0]["message"]
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[]", "no runs"),
        ('"a string"', "JSON object or an array"),
        ('{"x": NaN}', "NaN is not a JSON number"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_bodies_give_400_with_a_message(ingest, body, message):
    response = ingest(body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert response.json()["status"] == 400


def test_ndjson_lines_are_items_and_a_bad_line_is_rejected_alone(ingest):
    body = "\n".join([json.dumps(native("a")), "{broken", "", json.dumps(native("b"))])
    response = ingest(body, content_type="application/x-ndjson")
    assert response.status_code == 207
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["created", "rejected", "created"]
    assert results[1]["errors"][0]["path"] == "$[1]"
    assert "line 2" in results[1]["errors"][0]["message"]


def test_explicit_format_parameter(ingest, client, auth_headers):
    response = client.post(
        "/api/v1/ingest?format=autourgos",
        json.dumps({"iterations": [], "final_response": "hi"}),
        content_type="application/json",
        **auth_headers,
    )
    assert response.status_code == 200
    unknown = client.post("/api/v1/ingest?format=zork", "{}", content_type="application/json", **auth_headers)
    assert unknown.status_code == 400
    assert "accepted: native, autourgos, agno-go, agno, cot" in unknown.json()["error"]


def test_missing_or_wrong_token_gives_401(client, token):
    body = json.dumps(native())
    assert client.post("/api/v1/ingest", body, content_type="application/json").status_code == 401
    wrong = client.post(
        "/api/v1/ingest", body, content_type="application/json", HTTP_AUTHORIZATION="Bearer aht_nope"
    )
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    IngestToken.objects.update(revoked=True)
    revoked = client.post(
        "/api/v1/ingest", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert revoked.status_code == 401
    assert models.Run.objects.count() == 0


def test_a_logged_in_user_cannot_ingest_without_a_token(alice_client):
    response = alice_client.post("/api/v1/ingest", json.dumps(native()), content_type="application/json")
    assert response.status_code == 401


def test_tokens_are_stored_only_as_hashes(token):
    assert token not in database_dump()
    assert IngestToken.objects.get().token_hash == IngestToken.hash(token)


def test_wrong_content_type_gives_415(ingest):
    response = ingest("run_id=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]


@override_settings(HISTORY_MAX_BODY_BYTES=2048)
def test_body_over_the_limit_gives_413_and_stores_nothing(ingest):
    response = ingest(native(input="x" * 4000))
    assert response.status_code == 413
    assert models.Run.objects.count() == 0


def test_get_is_not_allowed(client, auth_headers):
    assert client.get("/api/v1/ingest", **auth_headers).status_code == 405


def test_a_run_is_stored_whole_or_not_at_all(ingest, monkeypatch):
    def explode(pairs):
        models.Iteration.objects.create(run=pairs[0][0], position=0, index=1)
        raise DatabaseError("disk full")

    real_insert = bulk.insert_runs

    def explode_in_bulk(runs, session_pks, now, project_id):
        real_insert(runs, session_pks, now, project_id)  # the runs and children written, then the failure
        raise DatabaseError("disk full")

    # Both ways a run is written: in bulk (new plain runs) and one by one (the rest, and
    # the bulk's items again after it failed).
    monkeypatch.setattr(bulk, "insert_runs", explode_in_bulk)
    monkeypatch.setattr(writer, "write_children", explode)
    response = ingest(native(iterations=[{"thought": "a"}]))
    assert response.status_code == 400
    # The message names no database internals (issue #10, item 4); the log has them.
    assert response.json()["results"][0]["errors"][0]["message"] == "the database refused this run"
    assert models.Run.objects.count() == 0
    assert models.Iteration.objects.count() == 0
    assert models.Session.objects.count() == 0


def test_nul_characters_and_huge_values_do_not_break_storage(ingest):
    response = ingest(native(input="a\x00b", output="y" * 300_000, metadata={"k\x00": "v\x00"}))
    assert response.status_code == 200
    run = models.Run.objects.get()
    assert run.input == "a\ufffdb"
    assert len(run.output) < 300_000 and "[TRUNCATED" in run.output
    assert run.redactions["truncated"] == 1


def test_session_counts_follow_the_runs(ingest):
    ingest([native("a", status="completed"), native("b", status="failed"), native("c", session_id="other")])
    session = models.Session.objects.get(session_id="s-1")
    assert (session.run_count, session.failed_count) == (2, 1)


SECRETS = load_jsonl("secrets.jsonl")


@pytest.mark.parametrize("entry", SECRETS, ids=lambda e: e["kind"])
def test_no_secret_reaches_the_database_in_any_placement(ingest, alice_client, entry):
    runs = []
    for i, placement in enumerate(entry["placements"]):
        secret_bearing = placement.get("text") or placement.get("params")
        runs.append(
            native(
                f"{entry['kind']}-{i}",
                input=json.dumps(secret_bearing) if placement.get("params") else secret_bearing,
                output=placement.get("text") or "done",
                error=placement.get("text"),
                iterations=[
                    {
                        "thought": placement.get("text"),
                        "tool_calls": [
                            {
                                "tool": "fetch",
                                "params": placement.get("params"),
                                "result": placement.get("text"),
                            }
                        ],
                    }
                ],
                metadata={"placement": placement, "seen": {entry["secret"]: i}},
                metrics={"details": placement.get("params")},
                # A client cannot store a value as a rule name in the redactions map.
                redactions={entry["secret"]: 1, "openai": 1},
            )
        )
    # And the same secrets in an autourgos log, the way a real agent would leak them.
    runs.append(
        {
            "query": f"use {entry['secret']}",
            "iterations": [
                {
                    "iteration": 1,
                    "thought": entry["secret"],
                    "tools": [{"tool": "t", "params": {"v": entry["secret"], entry["secret"]: "as a key"}}],
                    "observations": [{"tool": "t", "result": entry["secret"]}],
                }
            ],
            "final_response": entry["secret"],
            "error": None,
        }
    )
    response = ingest(runs)
    assert response.status_code == 200, response.json()
    leftovers = [entry["secret"], *entry.get("fragments", [])]
    dump = database_dump()
    for leftover in leftovers:
        assert leftover not in dump
    # Every run's page and twin, and its session's page: most runs share one session, whose
    # page is read once (a second GET of the same page answers the same bytes). The runs
    # are read once, with their projects (their links need them); a page's views keep
    # its answer's HTML, never its redactions.
    stored = list(models.Run.objects.select_related("project", "session__project"))
    urls = {
        url: None
        for run in stored
        for url in (run.get_absolute_url(), f"/api/v1/runs/{run.run_id}", run.session.get_absolute_url())
    }
    for url in urls:
        page = alice_client.get(url).getvalue().decode()
        escaped = json.dumps(page)
        for leftover in leftovers:
            assert leftover not in page
            assert leftover not in escaped
    assert all(run.redactions for run in stored)
    for receipt in models.IngestReceipt.objects.all():
        assert all(leftover not in json.dumps(receipt.changed_fields) for leftover in leftovers)
    # The redactions map holds rule names only.
    rule_names = ingestion.server_redactor().rule_names
    assert all(set(run.redactions) <= rule_names for run in stored)


INNOCUOUS = load_jsonl("innocuous.jsonl")


def test_innocuous_values_are_stored_unchanged_in_every_placement(ingest):
    texts = [e["text"] for e in INNOCUOUS if "text" in e]
    keyed = {e["key"]: e["value"] for e in INNOCUOUS if "key" in e}
    runs = [
        native(
            f"innocuous-{i}",
            input=text,
            output=text,
            iterations=[
                {
                    "thought": text,
                    "tool_calls": [{"tool": "t", "params": {"q": text, **keyed}, "result": text}],
                }
            ],
            metadata={"note": text, **keyed},
        )
        for i, text in enumerate(texts)
    ]
    assert ingest(runs).status_code == 200
    for i, text in enumerate(texts):
        run = models.Run.objects.get(run_id=f"innocuous-{i}")
        call = run.tool_calls.get()
        assert (run.input, run.output, run.iterations.get().thought, call.result) == (text, text, text, text)
        assert call.params == {"q": text, **keyed}
        assert run.metadata == {"note": text, **keyed}
        assert run.redactions == {}


def test_a_run_sent_again_changed_is_found_by_its_new_words_only(ingest, client, auth_headers, monkeypatch):
    """New plain runs are written in bulk and indexed; sent again changed, the old words
    find nothing and the new ones find the run's session."""
    one_by_one = []
    real = writer._write_one
    monkeypatch.setattr(
        writer, "_write_one", lambda item, project_id: one_by_one.append(1) or real(item, project_id)
    )
    first = [native(f"idx-{n}", f"idx-s{n}", input=f"quokka{n} first words") for n in range(3)]
    assert ingest(first).status_code == 200
    assert one_by_one == []  # plain new runs: all in bulk
    assert ingest([{**first[0], "input": "wombat second words"}]).json()["results"][0]["status"] == "updated"

    def found(word):
        response = client.get("/api/v1/sessions", {"q": word}, **auth_headers)
        return [s["session_id"] for s in response.json()["sessions"]]

    assert found("quokka0") == []
    assert found("wombat") == ["idx-s0"]
    assert found("quokka1") == ["idx-s1"]
