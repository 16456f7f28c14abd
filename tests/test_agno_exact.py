"""agno's replayed history, exactly as the model saw it: real agno agents and a team (its
leader with ``add_history_to_context``) run against the recording fake OpenAI server with a
SqliteDb, ``import_agno`` reads that file with the settings they ran with, and every model
call's received messages must equal the recorded request body (``tests/conformance.py``),
every agno block must rebuild byte-exact in the inspector, and importing again must change
nothing."""

from __future__ import annotations

import copy
import io
import json
import sqlite3
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from history_app import models

from . import conformance, fake_openai
from .conftest import database_dump
from .test_conformance import framework, stored_calls

pytestmark = pytest.mark.django_db


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def _delegate(member: str, task: str) -> fake_openai.Answer:
    arguments = json.dumps({"member_id": member, "task": task})
    return fake_openai.Answer(tool_calls=[("delegate_task_to_member", arguments)])


# The team's script: run 1 asks the researcher then the writer (given the researcher's
# interaction), run 2 the same, each member now also given the team's history, so the
# writer's interaction block quotes the researcher's task with its history block.
TEAM_SCRIPT = [
    _delegate("researcher", "Find facts about Lyon"),
    fake_openai.Answer("Lyon: 500k people"),
    _delegate("writer", "Write about Lyon"),
    fake_openai.Answer("Lyon is big."),
    fake_openai.Answer("Done: Lyon"),
    _delegate("researcher", "Find facts about Paris"),
    fake_openai.Answer("Paris: 2M people"),
    _delegate("writer", "Write about Paris"),
    fake_openai.Answer("Paris is bigger."),
    fake_openai.Answer("Done: Paris"),
]


AGENTS: dict[str, dict[str, int]]


class Recording:
    """The SqliteDb file agno wrote and every request the model server received."""

    def __init__(self, path: Path):
        self.path = path
        self.requests: list[fake_openai.Recorded] = []


def _drive_agent(db, server, name: str, **history) -> None:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    agent = Agent(
        name=name,
        id=name.lower(),
        model=OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test"),
        tools=[add],
        instructions="You add numbers.",
        db=db,
        add_history_to_context=True,
        **history,
    )
    for question in ("What is 2+3?", "And 4+4?", "And 5+6?", "And 1+1?"):
        agent.run(question, session_id=f"{name.lower()}-1")


def _drive_team(db, server) -> None:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    def model():
        return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

    team = Team(
        name="Desk",
        id="desk",
        model=model(),
        members=[
            # A member with history: the leader hands it its earlier member runs.
            Agent(
                name="Researcher",
                id="researcher",
                model=model(),
                instructions="You find facts.",
                add_history_to_context=True,
            ),
            Agent(name="Writer", id="writer", model=model(), instructions="You write."),
        ],
        db=db,
        add_history_to_context=True,
        num_history_runs=1,
        share_member_interactions=True,
        add_team_history_to_members=True,
    )
    for question in ("Tell me about Lyon.", "And Paris?"):
        team.run(question, session_id="desk-1")


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Recording:
    framework("agno")
    pytest.importorskip("sqlalchemy", reason="agno's SqliteDb needs sqlalchemy (the test extra pins it)")
    from agno.db.sqlite import SqliteDb

    found = Recording(tmp_path_factory.mktemp("agno") / "agno.db")
    db = SqliteDb(db_file=str(found.path))
    for name, history in AGENTS.items():
        server = fake_openai.start()
        try:
            _drive_agent(db, server, name, **history)
        finally:
            server.shutdown()
        found.requests += server.requests
    server = fake_openai.start(list(TEAM_SCRIPT))
    try:
        _drive_team(db, server)
    finally:
        server.shutdown()
    found.requests += server.requests
    return found


# Three agents, each with other history settings (agno's default num_history_runs is 3).
AGENTS = {
    "Runs": {"num_history_runs": 2},
    "Messages": {"num_history_messages": 5},
    "Tools": {"max_tool_calls_from_history": 1},
    # agno stores this one's replay with each run: never added a second time.
    "Stored": {"num_history_runs": 1, "store_history_messages": True},
}
# What they ran with, told to the importer: 3 for all, and what differs by name.
FLAGS = [
    "--history-runs", "3",
    "--history-runs", "Runs=2",
    "--history-messages", "Messages=5",
    "--max-tool-calls-from-history", "Tools=1",
    "--history-runs", "Desk=1",
    "--history-runs", "Researcher=3",
]  # fmt: skip


def run_of(name: str, asked: str) -> models.Run:
    """The run of an agent or team that was asked ``asked`` (the end of its input: a
    member's message may begin with history blocks). Found by what it was asked, never by
    its start: runs of one second are placed within it, not necessarily in order."""
    return models.Run.objects.get(agent_name=name, input__endswith=asked)


def run_import(*args: str) -> str:
    out = io.StringIO()
    call_command("import_agno", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def assert_every_call_exact(recording: Recording) -> None:
    exact, report, notes = conformance.match(recording.requests, stored_calls())
    assert report == [], "\n".join(report)
    assert exact == len(recording.requests) == 42 and notes == []


@pytest.fixture(scope="class")
def imported(recording, django_db_setup, django_db_blocker) -> str:
    """The recording imported with the settings agno ran with, once for the tests of the
    class below, which read what it stored (the second-import test imports again, inside
    its own transaction): each test's transaction is a savepoint inside the one opened
    here, rolled back after the test; this one is rolled back at the class's end. The
    import's output is what it yields."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield run_import(str(recording.path), *FLAGS)
        transaction.set_rollback(True)


class TestOneImportWithTheSettings:
    def test_every_model_call_received_what_agno_sent(self, recording, imported):
        assert "22 created, 0 updated" in imported
        assert_every_call_exact(recording)
        # The third run of "Runs" received its instructions, runs 1 and 2 (each a question, a
        # tool request, its result and an answer) and its question: ten messages.
        third = run_of("Runs", "And 5+6?")
        first_call = third.model_calls.order_by("position").first()
        assert [m["role"] for m in first_call.messages] == [
            "developer",
            *["user", "assistant", "tool", "assistant"] * 2,
            "user",
        ]
        assert [m["part"] for m in first_call.messages][1:-1] == ["history"] * 8
        assert first_call.messages[2]["tool_calls"][0]["name"] == "add"
        assert first_call.metadata["reconstructed_history"]["num_history_runs"] == 2
        assert first_call.metadata["roles_mapped"]["map"] == {"system": "developer"}

    def test_the_replay_is_a_context_marked_reconstructed_with_its_settings(self, imported, alice_client):
        third = run_of("Runs", "And 5+6?")
        earlier = [run_of("Runs", "What is 2+3?"), run_of("Runs", "And 4+4?")]
        (replay,) = third.injected_contexts.filter(kind="chat_history")
        assert replay.reported is False
        assert replay.source_run_ids == [run.run_id for run in earlier]
        assert replay.settings["num_history_runs"] == 2 and replay.settings["messages"] == 8
        # Every request and result is in its text, not an empty "assistant: ".
        lines = replay.text.splitlines()
        assert lines[0] == "user: What is 2+3?" and lines[1].startswith(
            'assistant calls add({"a": 2, "b": 3}) · '
        )
        assert lines[2].startswith("tool (") and lines[2].endswith("): 5")
        assert "assistant: " not in lines[1]
        # Each replayed message of the call is linked to it; its page names its sources.
        first = third.model_calls.order_by("position").first()
        assert [m.get("context") for m in first.messages if m["part"] == "history"] == [replay.position] * 8
        body = alice_client.get(f"/api/v1/runs/{third.run_id}/contexts/{replay.position + 1}").json()
        assert body["context"]["reported"] is False and "replayed from earlier runs" in body["notes"][0]
        assert [s["run_id"] for s in body["sources"] if s["stored"]] == replay.source_run_ids
        # The model-call page says what was rebuilt, from which settings, and whose roles.
        call = third.model_calls.order_by("position").first()
        page = alice_client.get(f"/p/default/runs/{third.run_id}/model-calls/{call.number}/").content.decode()
        assert 'What it received <span class="muted">· 10 messages' in page
        assert "8 replayed messages were rebuilt by the importer" in page
        assert "num_history_runs=2" in page
        assert "stored as <code>system</code>, sent as <code>developer</code>" in page
        # The leader of the team: its second run's calls received its first run (num_history_runs=1):
        # the question, two delegations with their results, and the answer.
        leader = run_of("Desk", "And Paris?")
        for call in leader.model_calls.all():
            assert call.metadata["reconstructed_history"]["num_history_runs"] == 1
            assert sum(m["part"] == "history" for m in call.messages) == 6

    def test_every_agno_block_rebuilds_byte_exact_in_the_inspector(self, imported, alice_client):
        blocks = models.InjectedContext.objects.filter(
            kind__in=("team_history", "member_interactions")
        ).select_related("run")
        assert {c.kind for c in blocks} == {"team_history", "member_interactions"}
        # The researcher of run 2 was given the team's history before its task: the writer's
        # interactions after it quote the task alone (what the rebuild must draw from).
        researcher = run_of("Researcher", "Find facts about Paris")
        assert researcher.input.startswith("<team_history_context>\n[run-1]")
        for context in blocks:
            answer = alice_client.get(
                f"/api/v1/runs/{context.run.run_id}/contexts/{context.position + 1}"
            ).json()
            assert answer["rebuild"]["verdict"] == "identical", (context.kind, answer["rebuild"]["diff"])
            assert answer["rebuild"]["text"] == context.text

    def test_a_second_import_changes_nothing(self, recording, imported):
        before = database_dump(exclude=("history_app_ingestreceipt",))
        assert "0 created, 0 updated, 22 duplicate" in run_import(str(recording.path), *FLAGS)
        assert database_dump(exclude=("history_app_ingestreceipt",)) == before

    def test_a_member_with_history_received_its_earlier_member_runs(self, imported):
        second = run_of("Researcher", "Find facts about Paris")
        call = second.model_calls.get()
        assert [(m["role"], m["part"]) for m in call.messages] == [
            ("developer", "instructions"),
            ("user", "history"),
            ("assistant", "history"),
            ("user", "input"),
        ]
        assert call.messages[1]["content"] == "Find facts about Lyon"
        assert call.metadata["reconstructed_history"]["num_history_runs"] == 3
        # The writer, whom no flag names, replayed nothing.
        for writer in models.Run.objects.filter(agent_name="Writer"):
            assert not writer.injected_contexts.filter(kind="chat_history").exists()

    def test_a_replay_agno_stored_is_kept_as_stored(self, imported):
        last = run_of("Stored", "And 1+1?")
        call = last.model_calls.order_by("position").first()
        # num_history_runs=1 as agno ran it, although --history-runs 3 covers it: one run replayed.
        assert sum(m["part"] == "history" for m in call.messages) == 4
        assert "reconstructed_history" not in call.metadata
        (replay,) = last.injected_contexts.filter(kind="chat_history")
        assert replay.reported is True


def test_importing_again_with_the_settings_brings_an_older_import_up_to_date(recording):
    run_import(str(recording.path))
    third = run_of("Runs", "And 5+6?")
    assert third.model_calls.order_by("position").first().message_count == 2
    assert "0 created, 11 updated, 11 duplicate" in run_import(str(recording.path), *FLAGS)
    assert_every_call_exact(recording)
    assert third.model_calls.order_by("position").first().message_count == 10


def test_with_since_a_newer_run_still_replays_the_runs_before_it(recording, tmp_path):
    # Every run but the last of each session is made a day older: --since reads only those.
    copy = tmp_path / "agno.db"
    # Through SQLite's backup: the newest rows may still be in the -wal file beside it.
    source = sqlite3.connect(recording.path)
    db = sqlite3.connect(copy)
    source.backup(db)
    source.close()
    last = {}
    for run_id, session_id in db.execute(
        "SELECT run_id, session_id FROM agno_runs WHERE parent_run_id IS NULL ORDER BY created_at, run_index"
    ):
        last[session_id] = run_id
    with db:
        db.execute(
            "UPDATE agno_runs SET created_at = created_at - 86400, updated_at = updated_at - 86400 "
            f"WHERE run_id NOT IN ({', '.join('?' * len(last))})",
            list(last.values()),
        )
    (since,) = db.execute(
        "SELECT MIN(created_at) FROM agno_runs WHERE run_id = ?", [next(iter(last.values()))]
    ).fetchone()
    db.close()
    assert "5 created, 0 updated" in run_import(str(copy), *FLAGS, "--since", str(since - 3600))
    # Each call of the five runs read is one the model received, history and all.
    calls = stored_calls()
    assert len(calls) == 4 * 2 + 3
    exact, _, _ = conformance.match(recording.requests, calls)
    assert exact == len(calls)


def test_a_bad_history_flag_is_a_clear_error(recording):
    with pytest.raises(CommandError, match="--history-runs: 'Runs=two': expected N or NAME=N"):
        run_import(str(recording.path), "--history-runs", "Runs=two")
    with pytest.raises(CommandError, match="N must be 0 or more"):
        run_import(str(recording.path), "--history-messages", "-1")


def _stored_runs(path: Path) -> dict[str, list[dict]]:
    """Each session's top-level run rows, oldest first."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sessions: dict[str, list[dict]] = {}
    for (data,) in db.execute(
        "SELECT run_data FROM agno_runs WHERE parent_run_id IS NULL ORDER BY created_at, run_index"
    ):
        run = json.loads(data)
        sessions.setdefault(run["session_id"], []).append(run)
    db.close()
    return sessions


@pytest.mark.parametrize("runs", [None, 0, 1, 2, 5])
@pytest.mark.parametrize("limit", [None, 0, 1, 3, 6])
@pytest.mark.parametrize("max_tool_calls", [None, 0, 1])
def test_the_window_is_agnos_own(recording, runs, limit, max_tool_calls):
    """The replay rebuilt from stored runs is the one agno's own ``get_messages`` and
    ``filter_tool_calls`` pick from the same runs, message for message, whatever the bounds."""
    from agno.run.agent import RunOutput
    from agno.run.team import TeamRunOutput
    from agno.session.agent import AgentSession
    from agno.session.team import TeamSession
    from agno.utils.message import copy_history_message, filter_tool_calls

    from history_app.agent_history.formats import agno

    for session_id, stored in _stored_runs(recording.path).items():
        team = "team_id" in stored[0] and not stored[0].get("agent_id")
        for n in range(len(stored) + 1):
            earlier = stored[:n]
            if team:
                session = TeamSession(
                    session_id=session_id, runs=[TeamRunOutput.from_dict(copy.deepcopy(r)) for r in earlier]
                )
            else:
                session = AgentSession(
                    session_id=session_id, runs=[RunOutput.from_dict(copy.deepcopy(r)) for r in earlier]
                )
            theirs = [
                copy_history_message(m)
                for m in session.get_messages(last_n_runs=runs, limit=limit, skip_roles=["system"])
            ]
            if max_tool_calls is not None:
                filter_tool_calls(theirs, max_tool_calls)
            settings = {
                "num_history_runs": runs,
                "num_history_messages": limit,
                "max_tool_calls_from_history": max_tool_calls,
            }
            ours = agno.replayed_history(earlier, settings)["messages"]
            assert [(m["id"], [c["id"] for c in m.get("tool_calls") or []]) for m in ours] == [
                (m.id, [c["id"] for c in m.tool_calls or []]) for m in theirs
            ], (session_id, n)


@pytest.mark.parametrize("status", ["ERROR", "CANCELLED", "PAUSED", "REGENERATED", "RUNNING"])
def test_runs_agno_skips_are_skipped_and_the_others_kept(recording, status):
    from agno.run.agent import RunOutput
    from agno.session.agent import AgentSession

    from history_app.agent_history.formats import agno

    stored = _stored_runs(recording.path)["runs-1"]
    stored[1]["status"] = status
    session = AgentSession(session_id="runs-1", runs=[RunOutput.from_dict(copy.deepcopy(r)) for r in stored])
    for runs in (None, 2, 3):
        theirs = [m.id for m in session.get_messages(last_n_runs=runs, skip_roles=["system"])]
        replay = agno.replayed_history(stored, {"num_history_runs": runs})
        assert [m["id"] for m in replay["messages"]] == theirs
    # Over every run: the second is left out for the statuses agno skips.
    assert (stored[1]["run_id"] in replay["source_run_ids"]) is (status == "RUNNING")
