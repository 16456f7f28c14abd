"""agno 3.x: run rows from a real SqliteDb, run outputs, import_agno, provenance."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from history_app import models
from history_app.agent_history.formats import agno, detect

from .conftest import FIXTURES, database_dump

AGNO = FIXTURES / "agno"
DB = AGNO / "agno.db"


def rows() -> list[dict]:
    db = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    data = [
        json.loads(r[0]) for r in db.execute("SELECT run_data FROM agno_runs ORDER BY created_at, run_index")
    ]
    db.close()
    return data


def by_id(run_id: str) -> dict:
    return next(r for r in rows() if r["run_id"] == run_id)


def test_every_stored_run_is_detected_as_agno():
    assert {detect(r) for r in rows()} == {"agno"}
    for name in ("agent_sess-agent-travel_run3", "team_run2", "workflow_run2"):
        assert detect(json.loads((AGNO / "run_outputs" / f"{name}.json").read_text())) == "agno"


def test_agent_run_tool_calls_results_errors_and_timings():
    (run,) = agno.parse(by_id("15d365cc-a557-46f4-abf6-a3be909f379d"))
    call = run.iterations[0].tool_calls[0]
    assert (call.tool, call.params, call.call_id) == (
        "book_hotel",
        {"city": "Kyoto", "nights": 2},
        "call_0003",
    )
    assert call.error == "Booking API unavailable for Kyoto (HTTP 503)" and call.result is None
    assert call.started_at and call.ended_at and call.ended_at > call.started_at
    assert run.iterations[0].thought == "Let me try to book that."
    assert run.output.endswith("Please try again later.")  # agno stores the turns joined
    assert run.metrics["total_tokens"] > 0


def test_error_run_is_failed_with_its_message():
    (run,) = agno.parse(by_id("9b152d81-afa3-482c-b02b-6cbbf1825074"))
    assert run.status == "failed" and "HTTP 503" in run.error and run.output is None


def test_team_run_delegations_and_interactions():
    (team,) = agno.parse(by_id("efba06f0-4d46-4339-917b-45c5e456ed15"), include_members=False)
    assert team.kind == "team" and team.agent_name == "Research Team"
    delegations = [c for it in team.iterations for c in it.tool_calls]
    assert [c.params["member_id"] for c in delegations] == ["researcher", "writer"]
    assert [(m.member, m.task) for m in team.member_interactions] == [
        ("Researcher", "Find key facts for: Now do the same for the Tokyo Tower."),
        (
            "Writer",
            "Write the answer for: Now do the same for the Tokyo Tower. using the researcher's facts.",
        ),
    ]


def test_what_a_delegation_call_is_is_decided_once():
    """``records.is_delegation``, which the agno reader and the run page both ask: agno's
    tool and the names its older releases use, or any call naming a ``member_id``. A
    delegation to one member becomes a member interaction; agno's delegation to every
    member (no ``member_id``) does not, and a call that merely starts with "delegate" is
    no delegation."""
    from history_app.agent_history.records import is_delegation

    assert is_delegation("delegate_task_to_member", {"member_id": "w", "task": "t"})
    assert is_delegation("transfer_task_to_member", "not a dict")
    assert is_delegation("ask_expert", {"member_id": "w"})
    assert not is_delegation("delegate_budget", {"amount": 3})
    assert not is_delegation("web_search", ["member_id"])
    payload = json.loads(
        json.dumps(by_id("efba06f0-4d46-4339-917b-45c5e456ed15"))
        .replace(
            '"delegate_task_to_member", "arguments": "{\\"member_id\\": \\"writer\\", ',
            '"delegate_task_to_members", "arguments": "{',
        )
        .replace(
            '"tool_name": "delegate_task_to_member", "tool_args": {"member_id": "writer", ',
            '"tool_name": "delegate_task_to_members", "tool_args": {',
        )
        .replace('delegate_task_to_member"', 'transfer_task_to_member"')
    )
    calls = [c for message in payload["messages"] for c in message.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["transfer_task_to_member", "delegate_task_to_members"]
    (team,) = agno.parse(payload, include_members=False)
    assert [(m.member, m.task) for m in team.member_interactions] == [
        ("Researcher", "Find key facts for: Now do the same for the Tokyo Tower.")
    ]
    budget = {"tool_name": "delegate_budget", "tool_args": {"task": "Not a member's task."}}
    assert agno.delegated_tasks({"tools": [*payload["tools"], budget]}) == [
        "Find key facts for: Now do the same for the Tokyo Tower.",
        "Write the answer for: Now do the same for the Tokyo Tower. using the researcher's facts.",
    ]


def test_workflow_run_has_one_iteration_per_step_and_the_history_it_was_given():
    run, *steps = agno.parse(by_id("98b70dc5-6b30-4b80-863c-1766f8ab5360"))
    assert [it.name for it in run.iterations] == ["research", "write"]
    # Each step ran as a run of its own, under the workflow run.
    assert [it.metadata["step_run_id"] for it in run.iterations] == [s.run_id for s in steps]
    assert all(s.parent_run_id == run.run_id and s.all_model_calls() for s in steps)
    assert run.iterations[1].metadata["output"].startswith("# Blog post")
    prompt = json.loads((AGNO / "prompts" / "050_workflow_run3_wf_researcher.json").read_text())["messages"][
        0
    ]["content"]
    research = next(c for c in run.injected_contexts if c.step == "research")
    assert prompt == research.text + run.input


def test_run_outputs_keep_replayed_history_and_member_responses():
    (agent,) = agno.parse(
        json.loads((AGNO / "run_outputs" / "agent_sess-agent-travel_run3.json").read_text())
    )
    replay = agent.injected_contexts[0]
    assert replay.kind == "chat_history" and replay.settings["messages"] == 7
    assert replay.text.startswith("user: What's the weather in Tokyo")
    team, *members = agno.parse(json.loads((AGNO / "run_outputs" / "team_run2.json").read_text()))
    assert [m.kind for m in members] == ["member", "member"]
    assert all(m.parent_run_id == team.run_id for m in members)
    assert [i.member_run_id for i in team.member_interactions] == [m.run_id for m in members]


def run_import(*args) -> str:
    out = io.StringIO()
    call_command("import_agno", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_import_agno_stores_everything_once_with_provenance():
    # 30 rows, and the 2 step runs each of the 3 workflow runs holds.
    assert "36 created, 0 updated, 0 duplicate, 0 rejected" in run_import(str(DB))
    assert models.Session.objects.count() == 6
    assert models.Run.objects.count() == 36
    kinds = dict(
        models.Run.objects.values_list("kind").annotate(
            n=__import__("django.db.models", fromlist=["Count"]).Count("id")
        )
    )
    assert kinds == {"agent": 18, "member": 10, "team": 5, "workflow": 3}
    assert models.Run.objects.filter(status="failed").count() == 1
    # Every member run hangs under a stored team run.
    for member in models.Run.objects.filter(kind="member"):
        assert models.Run.objects.get(run_id=member.parent_run_id).kind == "team"
    assert models.ToolCall.objects.filter(tool="delegate_task_to_member").count() == 10

    # The writer of team run 2 carries exactly the blocks agno sent it (prompt 023).
    prompt = json.loads((AGNO / "prompts" / "023_team_run2_writer.json").read_text())
    sent = [m["content"] for m in prompt["messages"] if m["role"] == "user"][1]
    writer = models.Run.objects.get(run_id="ea48ea88-ac2b-4fff-9e76-b28df69faa69")
    contexts = {c.kind: c for c in writer.injected_contexts.all()}
    assert contexts["member_interactions"].text in sent and contexts["team_history"].text in sent
    assert (
        sent
        == contexts["member_interactions"].text
        + "\n\n"
        + contexts["team_history"].text
        + "\n\n"
        + prompt["messages"][-1]["content"].split("\n\n\n")[-1]
    )
    # [run-1] is team run 1; the interaction is the researcher's run in the same team run.
    assert contexts["team_history"].source_run_ids == ["c7a9f27c-3ca9-4aef-962c-0d917cefd7d1"]
    assert contexts["member_interactions"].source_run_ids == ["bcd7e747-1e84-4dc2-97cb-f1f6df76cafe"]

    # Every assistant message of a run is a model call with its tokens; the writer's first
    # call received the blocks in its user message, linked to both contexts it carries.
    assert models.ModelCall.objects.filter(input_tokens__isnull=False).count() >= 30
    first_call = writer.model_calls.order_by("position").first()
    received = first_call.messages
    (user,) = [m for m in received if m["part"] == "input"]
    positions = {c.position for c in writer.injected_contexts.all()}
    assert user["content"] == sent and user["context"] in positions
    assert writer.input_tokens == sum(c.input_tokens or 0 for c in writer.model_calls.all()) > 0

    # The planted secrets are gone.
    dump = database_dump()
    assert "sk-FAKE1234567890abcdef" not in dump and "FAKE-eyJhbGciOi.not-a-real-token" not in dump

    # A second import changes nothing but the log of imports.
    before = database_dump(exclude=("history_app_ingestreceipt",))
    assert "0 created, 0 updated, 36 duplicate" in run_import(str(DB))
    assert database_dump(exclude=("history_app_ingestreceipt",)) == before
    assert [r.counts["duplicate"] for r in models.IngestReceipt.objects.all()] == [36, 0]


@pytest.mark.django_db
def test_import_agno_since_and_errors(tmp_path):
    assert "Read 0 agno run(s)" in run_import(str(DB), "--since", "2100-01-01")
    assert "Read 30 agno run(s)" in run_import(str(DB), "--since", "0")
    with pytest.raises(CommandError, match="no such file"):
        run_import(str(tmp_path / "missing.db"))
    (tmp_path / "other.db").write_bytes(b"")
    with pytest.raises(CommandError, match="cannot read agno tables"):
        run_import(str(tmp_path / "other.db"))
    with pytest.raises(CommandError, match="--since"):
        run_import(str(DB), "--since", "soon")


@pytest.mark.django_db
def test_run_outputs_through_the_endpoint(ingest):
    payload = json.loads((AGNO / "run_outputs" / "team_run2.json").read_text())
    response = ingest(payload)
    assert response.status_code == 200
    assert models.Run.objects.count() == 3
    assert ingest(payload).json()["results"][0]["status"] == "duplicate"
    named = ingest(
        json.loads((AGNO / "run_outputs" / "workflow_run2.json").read_text()), QUERY_STRING="format=agno"
    )
    assert named.status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="reads an agno PostgresDb, which needs PostgreSQL"
)
def test_import_agno_from_postgres():
    source = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    data = source.execute(
        "SELECT run_id, session_id, run_type, agent_id, team_id, workflow_id, user_id, parent_run_id, status, run_index, run_data, created_at, updated_at FROM agno_runs"
    ).fetchall()
    source.close()
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA IF NOT EXISTS agnotest")
        cursor.execute(
            "CREATE TABLE agnotest.agno_runs (run_id text primary key, session_id text, run_type text, agent_id text, team_id text, "
            "workflow_id text, user_id text, parent_run_id text, status text, run_index int, run_data jsonb, created_at bigint, updated_at bigint)"
        )
        cursor.executemany(
            "INSERT INTO agnotest.agno_runs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", data
        )
    settings = connection.settings_dict
    url = f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    try:
        assert "36 created" in run_import(url, "--schema", "agnotest")
        assert models.Run.objects.count() == 36
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA agnotest CASCADE")


@pytest.mark.django_db
def test_history_agno_did_not_store_is_reconstructed_and_marked():
    run_import(str(DB), "--history-runs", "3")
    fifth = models.Run.objects.get(run_id="d73d0369-28e8-4c4a-b311-27d660080309")
    (context,) = fifth.injected_contexts.filter(kind="chat_history")
    assert context.reported is False and context.settings["num_history_runs"] == 3
    assert context.source_run_ids == [
        "f6bdb6b8-cfe2-4933-8ccd-8db6ff474b0e",
        "15d365cc-a557-46f4-abf6-a3be909f379d",
        "5a9c0417-27e8-4d27-8b36-48bc82a70380",
    ]
    # Exactly what agno sent (prompt 007), rebuilt from what agno stored.
    sent = [
        m
        for m in json.loads(
            (AGNO / "prompts" / "007_agent_sess-agent-travel_run5_assistant.json").read_text()
        )["messages"]
        if m.get("from_history")
    ]
    assert context.text == agno.replay_text(sent)
    # And for run 3, it matches what agno's own run output reported.
    (reported_run,) = agno.parse(
        json.loads((AGNO / "run_outputs" / "agent_sess-agent-travel_run3.json").read_text())
    )
    third = models.Run.objects.get(run_id=reported_run.run_id).injected_contexts.get(kind="chat_history")
    assert third.text == reported_run.injected_contexts[0].text
    assert not models.Run.objects.get(
        run_id="3d7a2aec-12ca-4c3f-b808-01929e1287b5"
    ).injected_contexts.exists()
