"""Every run agno ran is a run here: a real agno team (a member agent with a tool and a
sub-team of two members), and a workflow of two agent steps, all against the recording
fake OpenAI server with agno's own SqliteDb, read back by ``import_agno``.

What agno stores (checked on agno 3.1.10): the team run, its member runs and the sub-team
run as rows of their own (``parent_run_id``); the sub-team's members only inside the
sub-team's row (``member_responses``, kept when the team stores member responses); the
workflow run as one row holding its step runs (``step_executor_runs``). Every time in
whole seconds but the tools' timers."""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from history_app import models
from history_app.agent_history.formats import agno
from history_app.store import mapper

from . import conformance, fake_openai
from .conftest import FIXTURES, database_dump
from .test_conformance import framework

pytestmark = pytest.mark.django_db

FIXTURE_DB = FIXTURES / "agno" / "agno.db"
TEAM_QUESTION = "Tell me about Lyon."
WORKFLOW_INPUT = "Write about Lyon"


def _delegate(member_id: str, task: str) -> fake_openai.Answer:
    return fake_openai.Answer(
        tool_calls=[("delegate_task_to_member", json.dumps({"member_id": member_id, "task": task}))]
    )


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


# Who sends each request, in order: the answer the server gives it.
SCRIPT = [
    ("Desk", _delegate("researcher", "Find facts about Lyon")),
    ("Researcher", fake_openai.Answer(tool_calls=[("add", json.dumps({"a": 2, "b": 3}))])),
    ("Researcher", fake_openai.Answer("Lyon has 500,000 people.")),
    ("Desk", _delegate("review-board", "Review the facts")),
    ("Review Board", _delegate("checker", "Check the facts")),
    ("Checker", fake_openai.Answer("Checked.")),
    ("Review Board", _delegate("editor", "Edit the text")),
    ("Editor", fake_openai.Answer("Edited.")),
    ("Review Board", fake_openai.Answer("Board: reviewed.")),
    ("Desk", fake_openai.Answer("Lyon is big.")),
    ("WF Researcher", fake_openai.Answer("Research done.")),
    ("WF Writer", fake_openai.Answer("Post written.")),
]


@pytest.fixture(scope="module")
def agno_db(tmp_path_factory):
    """An agno SqliteDb after one team run and one workflow run, and the requests the
    recording server received."""
    framework("agno")
    framework("sqlalchemy")
    from agno.agent import Agent
    from agno.db.sqlite import SqliteDb
    from agno.models.openai import OpenAIChat
    from agno.team import Team
    from agno.workflow import Step, Workflow

    path = tmp_path_factory.mktemp("agno") / "agno.db"
    server = fake_openai.start([answer for _, answer in SCRIPT])
    try:
        db = SqliteDb(db_file=str(path))

        def model():
            return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

        researcher = Agent(
            name="Researcher", id="researcher", model=model(), tools=[add], instructions="Find facts."
        )
        checker = Agent(name="Checker", id="checker", model=model(), instructions="Check.")
        editor = Agent(name="Editor", id="editor", model=model(), instructions="Edit.")
        board = Team(
            name="Review Board",
            id="review-board",
            model=model(),
            members=[checker, editor],
            share_member_interactions=True,
        )
        # store_member_responses: agno writes a sub-team's member runs nowhere else.
        desk = Team(
            name="Desk",
            id="desk",
            model=model(),
            members=[researcher, board],
            db=db,
            store_member_responses=True,
            share_member_interactions=True,
        )
        assert desk.run(TEAM_QUESTION, session_id="team-1").content == "Lyon is big."
        workflow = Workflow(
            name="Blog",
            id="blog",
            db=db,
            steps=[
                Step(
                    name="research",
                    agent=Agent(name="WF Researcher", model=model(), instructions="Research."),
                ),
                Step(name="write", agent=Agent(name="WF Writer", model=model(), instructions="Write.")),
            ],
        )
        assert workflow.run(WORKFLOW_INPUT, session_id="wf-1").content == "Post written."
    finally:
        server.shutdown()
    assert len(server.requests) == len(SCRIPT)
    return path, server.requests


def agno_rows(path) -> list[dict]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT run_data FROM agno_runs ORDER BY created_at")]
    finally:
        db.close()


def runs_agno_ran(path) -> dict[str, dict]:
    """Every run in agno's database by id: the rows, and the runs they hold (member runs
    of nested teams, workflow step runs), at any depth."""
    found: dict[str, dict] = {}
    pending = list(agno_rows(path))
    while pending:
        run = pending.pop(0)
        found.setdefault(run["run_id"], run)
        pending += [r for r in run.get("member_responses") or [] if isinstance(r, dict)]
        pending += [r for r in run.get("step_executor_runs") or [] if isinstance(r, dict)]
    return found


def run_import(path) -> str:
    out = io.StringIO()
    call_command("import_agno", str(path), stdout=out, stderr=io.StringIO())
    return out.getvalue()


def calls_of(run: models.Run) -> list[dict]:
    return [mapper.model_call_record(c).to_dict() for c in run.model_calls.order_by("position")]


def test_every_run_agno_ran_is_a_run_with_the_calls_the_server_got(agno_db):
    path, requests = agno_db
    ran = runs_agno_ran(path)
    rows = agno_rows(path)
    # 4 rows (Researcher, Desk, Review Board, Blog), the sub-team's 2 members, 2 steps.
    assert (len(rows), len(ran)) == (4, 8)
    assert "8 created, 0 updated, 0 duplicate, 0 rejected" in run_import(path)
    assert set(models.Run.objects.values_list("run_id", flat=True)) == set(ran)
    named = {r.agent_name: r for r in models.Run.objects.all()}
    assert set(named) == {name for name, _ in SCRIPT} | {"Blog"}

    # Each run's model calls are exactly the requests its agent sent, message for message
    # (agno sends its system message as "developer" and stores it as "system": the roles
    # as agno stored them are a note, everything else must be equal).
    for name, run in named.items():
        sent = [request for (who, _), request in zip(SCRIPT, requests, strict=True) if who == name]
        stored = calls_of(run)
        assert len(stored) == len(sent), name
        for request, call in zip(sent, stored, strict=True):
            differences, _ = conformance.call_differences(request.body, call)
            differences = [d for d in differences if not d.endswith("role 'developer' stored as 'system'")]
            differences += conformance.answer_differences(request.answer, call)
            assert differences == [], f"{name}: {differences}"
        tokens = (fake_openai.PROMPT_TOKENS * len(sent), fake_openai.COMPLETION_TOKENS * len(sent))
        assert (run.input_tokens, run.output_tokens) == tokens, name
        assert (run.cost or 0) > 0 if sent else run.cost is None, name

    # The steps: each a run under the workflow with its output, its model call and the
    # message it was sent; the workflow's iterations name the step runs.
    blog = named["Blog"]
    steps = {r.agent_name: r for r in models.Run.objects.filter(parent_run_id=blog.run_id)}
    assert {name: r.output for name, r in steps.items()} == {
        "WF Researcher": "Research done.",
        "WF Writer": "Post written.",
    }
    assert [it.metadata["step_run_id"] for it in blog.iterations.order_by("position")] == [
        steps["WF Researcher"].run_id,
        steps["WF Writer"].run_id,
    ]
    assert calls_of(steps["WF Writer"])[0]["messages"][-1]["content"] == "Research done."
    # The tool the researcher called is a tool call of its run, with its result.
    (tool,) = models.ToolCall.objects.filter(iteration__run=named["Researcher"])
    assert (tool.tool, tool.result) == ("add", "5")


def test_delegations_link_the_member_runs_agno_recorded(agno_db):
    path, _ = agno_db
    run_import(path)
    by_name = {r.agent_name: r for r in models.Run.objects.all()}
    desk, board = by_name["Desk"], by_name["Review Board"]
    links = {
        team.agent_name: [
            (mi.member, mi.member_run_id) for mi in team.member_interactions.order_by("position")
        ]
        for team in (desk, board)
    }
    assert links == {
        "Desk": [("Researcher", by_name["Researcher"].run_id), ("Review Board", board.run_id)],
        "Review Board": [("Checker", by_name["Checker"].run_id), ("Editor", by_name["Editor"].run_id)],
    }
    # The links are agno's own: each member run names its team run as its parent.
    for team in (desk, board):
        for mi in team.member_interactions.all():
            assert models.Run.objects.get(run_id=mi.member_run_id).parent_run_id == team.run_id
    # The sub-team's members are members, with the interactions agno gave them.
    checker, editor = by_name["Checker"], by_name["Editor"]
    assert (checker.kind, editor.kind, board.kind) == ("member", "member", "team")
    (context,) = editor.injected_contexts.filter(kind="member_interactions")
    assert context.text.endswith(
        "Member: Checker\nTask: Check the facts\nResponse: Checked.\n\n</member_interaction_context>\n"
    )
    first = editor.model_calls.order_by("position").first()
    (user,) = [m for m in first.messages if m["role"] == "user"]
    assert user["content"].startswith(context.text) and user["context"] == context.position
    (context,) = board.injected_contexts.filter(kind="member_interactions")
    assert (
        "Member: Researcher\nTask: Find facts about Lyon\nResponse: Lyon has 500,000 people." in context.text
    )


def _inside(child_start, child_end, start, end, what):
    assert start <= child_start <= child_end <= end, (
        f"{what}: {child_start}–{child_end} outside {start}–{end}"
    )


def assert_times_nested() -> dict[str, models.Run]:
    """Every stored run, model call, tool call and step lies inside its parent; returns
    the runs by id."""
    runs = {r.run_id: r for r in models.Run.objects.all()}
    for run in runs.values():
        assert run.started_at and run.ended_at, run.agent_name
        assert run.metadata["time_estimated"] is True
        parent = runs.get(run.parent_run_id)
        if parent is not None:
            _inside(run.started_at, run.ended_at, parent.started_at, parent.ended_at, run.agent_name)
        for call in run.model_calls.all():
            _inside(call.started_at, call.ended_at, run.started_at, run.ended_at, f"{run.agent_name} call")
            assert call.metadata["time_estimated"] is True
        for tool in models.ToolCall.objects.filter(iteration__run=run):
            _inside(
                tool.started_at, tool.ended_at, run.started_at, run.ended_at, f"{run.agent_name} {tool.tool}"
            )
        for step in run.iterations.exclude(started_at=None):
            _inside(step.started_at, step.ended_at, run.started_at, run.ended_at, f"step {step.name}")
    return runs


def test_no_time_sits_outside_its_parent_and_placed_times_are_marked(agno_db):
    path, _ = agno_db
    run_import(path)
    runs = assert_times_nested()
    # A delegation spans the member run it started.
    for team in (r for r in runs.values() if r.kind == "team"):
        delegations = models.ToolCall.objects.filter(iteration__run=team, tool="delegate_task_to_member")
        for call, mi in zip(
            delegations.order_by("iteration__position", "position"),
            team.member_interactions.order_by("position"),
            strict=True,
        ):
            member = runs[mi.member_run_id]
            _inside(member.started_at, member.ended_at, call.started_at, call.ended_at, mi.member)
    # The tool agno timed to the microsecond keeps its time; the delegations, whose timers
    # measured only the team's handling of the answer, are marked as placed.
    (row,) = [r for r in agno_rows(path) if r.get("agent_id") == "researcher"]
    timer = row["tools"][0]["metrics"]
    (tool,) = models.ToolCall.objects.filter(tool="add")
    assert tool.started_at.timestamp() == pytest.approx(timer["start_time"], abs=1e-6)
    assert tool.ended_at.timestamp() == pytest.approx(timer["end_time"], abs=1e-6)
    desk = next(r for r in runs.values() if r.agent_name == "Desk")
    assert len(desk.metadata["estimated_tool_times"]) == 2
    # And nothing starts before the whole second agno stored for it.
    for payload in agno_rows(path):
        start = runs[payload["run_id"]].started_at
        assert start >= datetime.fromtimestamp(payload["created_at"], tz=start.tzinfo)


def test_a_second_import_changes_nothing(agno_db):
    path, _ = agno_db
    run_import(path)
    before = database_dump(exclude=("history_app_ingestreceipt",))
    assert "0 created, 0 updated, 8 duplicate, 0 rejected" in run_import(path)
    assert database_dump(exclude=("history_app_ingestreceipt",)) == before


def test_an_import_of_part_of_the_database_is_completed_without_duplicates(agno_db):
    """The workflow first (``--since`` its second), then everything: the runs already
    there are left as they are, the others are added, each run once."""
    path, _ = agno_db
    (workflow,) = [r for r in agno_rows(path) if r.get("workflow_id")]
    out = io.StringIO()
    call_command(
        "import_agno", str(path), "--since", str(workflow["created_at"]), stdout=out, stderr=io.StringIO()
    )
    assert models.Run.objects.filter(parent_run_id=workflow["run_id"]).count() == 2
    assert "Read 4 agno run(s)" in run_import(path)
    assert models.Run.objects.count() == len(runs_agno_ran(path)) == 8
    assert "0 created, 0 updated, 8 duplicate" in run_import(path)


def test_runs_stored_earlier_another_way_are_brought_up_to_date_not_duplicated(agno_db):
    """Each row sent to the endpoint on its own first (no member rows to link, times placed
    row by row), then the import: no run is added twice, every run ends as a fresh import
    stores it, and a further import changes nothing."""
    from history_app.intake import ingestion

    path, _ = agno_db
    results = ingestion.ingest_items(items=agno_rows(path), format="agno")
    assert all(not r.errors for r in results)
    assert models.Run.objects.count() == 8
    out = run_import(path)
    assert "0 created" in out and "0 rejected" in out, out
    updated = {r.run_id: r.content_hash for r in models.Run.objects.all()}
    assert set(updated) == set(runs_agno_ran(path))
    assert "0 created, 0 updated, 8 duplicate" in run_import(path)
    models.Session.objects.all().delete()
    assert "8 created" in run_import(path)
    assert {r.run_id: r.content_hash for r in models.Run.objects.all()} == updated


def test_the_session_pages_show_the_nested_runs_and_their_links(agno_db, alice_client):
    path, _ = agno_db
    run_import(path)
    by_name = {r.agent_name: r for r in models.Run.objects.all()}
    rows = alice_client.get("/api/v1/sessions/team-1/timeline").json()["rows"]
    shown = [(row["number"], row["run"]["agent_name"]) for row in rows if row["type"] == "run"]
    assert shown == [
        ("1", "Desk"),
        ("1.1", "Researcher"),
        ("1.2", "Review Board"),
        ("1.2.1", "Checker"),
        ("1.2.2", "Editor"),
    ]
    desk_row = rows[0]
    assert [(mi["member"], mi["member_run_id"]) for mi in desk_row["member_interactions"]] == [
        ("Researcher", by_name["Researcher"].run_id),
        ("Review Board", by_name["Review Board"].run_id),
    ]
    page = alice_client.get("/p/default/sessions/wf-1/").content.decode()
    for name in ("WF Researcher", "WF Writer"):
        assert f'/p/default/runs/{by_name[name].run_id}/"' in page
    # The team run's page links each delegation to the member run it started, by name.
    desk_page = alice_client.get(f"/p/default/runs/{by_name['Desk'].run_id}/").content.decode()
    assert "Started the member run of <strong>Review Board</strong>" in desk_page
    assert f"/p/default/runs/{by_name['Review Board'].run_id}/" in desk_page
    assert "times estimated" in desk_page
    # The workflow run's page says which run each step ran as, and what it answered; its
    # waterfall marks the times that were placed.
    blog_page = alice_client.get(f"/p/default/runs/{by_name['Blog'].run_id}/").content.decode()
    for name, output in (("WF Researcher", "Research done."), ("WF Writer", "Post written.")):
        assert f'This step ran as the run <a href="/p/default/runs/{by_name[name].run_id}/">' in blog_page
        assert output in blog_page
    assert "(time estimated)" in blog_page and "(time estimated)" in desk_page
    # A step run's page has its model call, its tokens and its cost.
    step_page = alice_client.get(f"/p/default/runs/{by_name['WF Researcher'].run_id}/").content.decode()
    assert "Model call 1" in step_page and "100 / 20" in step_page


def test_a_run_output_read_alone_holds_its_nested_members_and_steps(agno_db):
    """The library reads the same structure from a single run dict (a run output, or one
    row): a team row's nested members at any depth, a workflow row's step runs."""
    path, _ = agno_db
    (board,) = [r for r in agno_rows(path) if r.get("team_id") == "review-board"]
    team, *members = agno.parse(board)
    assert [(m.agent_name, m.parent_run_id) for m in members] == [
        ("Checker", team.run_id),
        ("Editor", team.run_id),
    ]
    assert [i.member_run_id for i in team.member_interactions] == [m.run_id for m in members]
    (workflow_row,) = [r for r in agno_rows(path) if r.get("workflow_id")]
    workflow, *steps = agno.parse(workflow_row)
    assert [s.agent_name for s in steps] == ["WF Researcher", "WF Writer"]
    assert all(workflow.started_at <= s.started_at <= s.ended_at <= workflow.ended_at for s in steps)


def test_the_sample_database_of_every_kind_of_run_nests_its_times_too():
    """agno's own sample database (agents with history, teams whose member runs are rows,
    workflows, a failed run): every time inside its parent, every delegation linked."""
    run_import(FIXTURE_DB)
    runs = assert_times_nested()
    for team in (r for r in runs.values() if r.kind == "team"):
        for mi in team.member_interactions.all():
            member = runs[mi.member_run_id]
            assert (member.parent_run_id, member.agent_name) == (team.run_id, mi.member)


def test_times_that_cannot_be_placed_in_range_are_left_as_agno_gave_them(ingest):
    """A run stored ten seconds before the end of the range every store holds, whose model
    call lasted longer than that: placing the call after the run's start would leave the
    range, so the run keeps agno's own times, unmarked, and is stored (never a server
    error)."""
    late = int(datetime(9999, 12, 30, 23, 59, 49, tzinfo=UTC).timestamp())
    payload = {
        "run_id": "late",
        "agent_id": "a",
        "session_id": "late-1",
        "created_at": late,
        "metrics": {"duration": 5},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "x", "created_at": late, "metrics": {"duration": 10**6}},
        ],
    }
    assert ingest(payload).status_code == 200
    run = models.Run.objects.get(run_id="late")
    assert run.started_at.timestamp() == late and "time_estimated" not in run.metadata
    assert "time_estimated" not in run.model_calls.get().metadata


def test_a_delegation_no_run_answers_names_the_member_as_the_roster_does(agno_db):
    """Without stored member responses agno keeps a sub-team's member runs nowhere: the
    sub-team's delegations then name each member as the team's roster does (its name),
    not by the id the model wrote, and link to no run."""
    path, _ = agno_db
    (board,) = [r for r in agno_rows(path) if r.get("team_id") == "review-board"]
    (team,) = agno.parse({**board, "member_responses": []})
    assert [(i.member, i.member_run_id) for i in team.member_interactions] == [
        ("Checker", None),
        ("Editor", None),
    ]


def test_a_workflow_step_run_by_a_team_brings_its_member_once(tmp_path):
    """A team as a workflow step: agno lists its member's run both among the step runs
    and inside the team run; here it is one member run under the team's step run."""
    framework("agno")
    framework("sqlalchemy")
    from agno.agent import Agent
    from agno.db.sqlite import SqliteDb
    from agno.models.openai import OpenAIChat
    from agno.team import Team
    from agno.workflow import Step, Workflow

    script = [
        ("Review", _delegate("checker", "Check it")),
        ("Checker", fake_openai.Answer("Checked.")),
        ("Review", fake_openai.Answer("Team says ok.")),
        ("Writer", fake_openai.Answer("Written.")),
    ]
    server = fake_openai.start([answer for _, answer in script])
    try:

        def model():
            return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")

        team = Team(
            name="Review",
            id="review",
            model=model(),
            members=[Agent(name="Checker", id="checker", model=model(), instructions="Check.")],
        )
        workflow = Workflow(
            name="Flow",
            id="flow",
            db=SqliteDb(db_file=str(tmp_path / "agno.db")),
            steps=[
                Step(name="review", team=team),
                Step(name="write", agent=Agent(name="Writer", model=model())),
            ],
        )
        assert workflow.run("Go", session_id="wf-2").content == "Written."
    finally:
        server.shutdown()
    assert "4 created" in run_import(tmp_path / "agno.db")
    assert set(models.Run.objects.values_list("run_id", flat=True)) == set(
        runs_agno_ran(tmp_path / "agno.db")
    )
    runs = assert_times_nested()
    by_name = {r.agent_name: r for r in runs.values()}
    assert by_name["Checker"].parent_run_id == by_name["Review"].run_id
    assert by_name["Review"].parent_run_id == by_name["Flow"].run_id
    (interaction,) = by_name["Review"].member_interactions.all()
    assert (interaction.member, interaction.member_run_id) == ("Checker", by_name["Checker"].run_id)
    for name, run in by_name.items():
        sent = [request for (who, _), request in zip(script, server.requests, strict=True) if who == name]
        assert [c["output"] for c in calls_of(run)] == [r.answer["content"] for r in sent], name
