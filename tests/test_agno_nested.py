"""agno's nested teams and composite workflows, exactly as the model saw them: real agno
teams (a sub-team inside a team, every team sharing member interactions and team history;
a team delegating to all its members, whose members replay their history) and workflows
of composite steps (Parallel, Condition, Loop, Router) run against the recording fake
OpenAI server with a SqliteDb, read back by ``import_agno``. The recording is the truth:
every model call must equal the request agno sent, every agno block must be byte-exact,
end where agno ended it, and rebuild identical in the inspector; every step run is a run
under its workflow run, inside it in time."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from django.core.management import call_command

from history_app import models
from history_app.agent_history import blocks

from . import conformance, fake_openai
from .test_conformance import framework, stored_calls

pytestmark = pytest.mark.django_db

A = fake_openai.Answer


def _delegate(member: str, task: str) -> fake_openai.Answer:
    return A(tool_calls=[("delegate_task_to_member", json.dumps({"member_id": member, "task": task}))])


def _model(server):
    from agno.models.openai import OpenAIChat

    return OpenAIChat(id="gpt-4o-mini", base_url=server.base_url, api_key="sk-test")


class Recording:
    """The SqliteDb file agno wrote and every request the model server received."""

    def __init__(self, path: Path, requests: list[fake_openai.Recorded]):
        self.path = path
        self.requests = requests


def _record(tmp_path_factory, name: str, script: list, drive) -> Recording:
    framework("agno")
    framework("sqlalchemy")
    from agno.db.sqlite import SqliteDb

    path = tmp_path_factory.mktemp(name) / "agno.db"
    # No script: the server's own answers (the branches of a Parallel step ask at once).
    server = fake_openai.start(list(script) if script is not None else None)
    try:
        drive(SqliteDb(db_file=str(path)), server)
    finally:
        server.shutdown()
    assert script is None or len(server.requests) == len(script)
    return Recording(path, server.requests)


def run_import(path: Path, *flags: str) -> str:
    out = io.StringIO()
    call_command("import_agno", str(path), *flags, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- what "exact" means here ------------------------------------------------------------


def _user_text(message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def exact_calls(recording: Recording, client) -> tuple[int, list[str]]:
    """How many recorded requests are exact here, and what differs for the others: a
    request is exact when a stored model call equals it (``conformance.match``), and every
    agno block its stored call links to is the head of the user message agno sent, in
    order, joined as agno joins them, with an exact boundary, and rebuilds identical in
    the inspector."""
    calls = list(models.ModelCall.objects.select_related("run").order_by("run__started_at", "position"))
    records = stored_calls()
    free = list(range(len(calls)))
    verdicts: dict[tuple[int, int], tuple[str, str]] = {}
    exact, report = 0, []
    for n, request in enumerate(recording.requests):
        found = None
        for i in free:
            differences, _ = conformance.call_differences(request.body, records[i])
            differences += conformance.answer_differences(request.answer, records[i])
            if not differences:
                found = i
                break
        if found is None:
            report.append(f"request {n + 1}: no stored call equals it")
            continue
        free.remove(found)
        call = calls[found]
        problems = []
        sent_users = [_user_text(m) for m in request.body.get("messages", []) if m.get("role") == "user"]
        for message in call.messages:
            if message.get("role") != "user" or message.get("context") is None:
                continue
            contexts = list(
                call.run.injected_contexts.filter(kind__in=blocks.LINKABLE_KINDS).order_by("position")
            )
            head = blocks.JOIN.join(c.text for c in contexts)
            if not any(u is not None and u.startswith(head) for u in sent_users):
                problems.append("the blocks are not the head of the message sent")
            for context in contexts:
                if (context.settings or {}).get("boundary") == "ambiguous":
                    problems.append(f"{context.kind}: boundary ambiguous")
                key = (call.run_id, context.position)
                if key not in verdicts:
                    answer = client.get(
                        f"/api/v1/runs/{call.run.run_id}/contexts/{context.position + 1}"
                    ).json()
                    verdicts[key] = (answer["rebuild"]["verdict"], answer["rebuild"].get("text"))
                verdict, text = verdicts[key]
                if verdict != "identical" or text != context.text:
                    problems.append(f"{context.kind} of {call.run.agent_name}: rebuild {verdict}")
        if problems:
            report.append(f"request {n + 1} ({call.run.agent_name}): " + "; ".join(sorted(set(problems))))
        else:
            exact += 1
    return exact, report


# -- 1. a sub-team inside a team, every team sharing interactions and history -----------

CITIES = ("Lyon", "Paris", "Nice", "Metz")


def nested_script(cities) -> list:
    script = []
    for city in cities:
        script += [
            _delegate("researcher", f"Find facts about {city}"),
            A(f"{city}: facts"),
            _delegate("review-board", f"Review {city}"),
            _delegate("checker", f"Check {city}"),
            A(f"{city} checked"),
            _delegate("editor", f"Edit {city}"),
            A(f"{city} edited"),
            A(f"Board: {city} ok"),
            A(f"Done: {city}"),
        ]
    return script


def drive_nested(cities, *, inner_shared: bool = True):
    def drive(db, server):
        from agno.agent import Agent
        from agno.team import Team

        shared = {"share_member_interactions": True, "add_team_history_to_members": True}
        board = Team(
            name="Review Board",
            id="review-board",
            model=_model(server),
            members=[
                Agent(name="Checker", id="checker", model=_model(server), instructions="Check."),
                Agent(name="Editor", id="editor", model=_model(server), instructions="Edit."),
            ],
            **(shared if inner_shared else {}),
        )
        desk = Team(
            name="Desk",
            id="desk",
            model=_model(server),
            members=[
                Agent(name="Researcher", id="researcher", model=_model(server), instructions="Find."),
                board,
            ],
            db=db,
            store_member_responses=True,
            **shared,
        )
        for city in cities:
            assert desk.run(f"Tell me about {city}.", session_id="desk-1").content == f"Done: {city}"

    return drive


@pytest.fixture(scope="module")
def nested(tmp_path_factory) -> Recording:
    return _record(tmp_path_factory, "nested", nested_script(CITIES[:3]), drive_nested(CITIES[:3]))


@pytest.fixture(scope="module")
def nested_outer_only(tmp_path_factory) -> Recording:
    """The sub-team itself shares nothing with its members; its team does."""
    script = nested_script(CITIES[:3])
    return _record(tmp_path_factory, "nestedouter", script, drive_nested(CITIES[:3], inner_shared=False))


@pytest.fixture(scope="module")
def nested_longer(tmp_path_factory) -> Recording:
    return _record(tmp_path_factory, "nested4", nested_script(CITIES), drive_nested(CITIES))


# -- 2. a team delegating to all its members, who replay their own history --------------

TOPICS = ("tea", "coffee", "cocoa")


def panel_script(topics) -> list:
    script = []
    for topic in topics:
        arguments = json.dumps({"task": f"Discuss {topic}"})
        script += [
            A(tool_calls=[("delegate_task_to_members", arguments)]),
            A(f"Alpha on {topic}"),
            A(f"Beta on {topic}"),
            A(f"Panel: {topic}"),
        ]
    return script


def drive_panel(topics):
    def drive(db, server):
        from agno.agent import Agent
        from agno.team import Team

        panel = Team(
            name="Panel",
            id="panel",
            model=_model(server),
            members=[
                Agent(name=name, id=name.lower(), model=_model(server), add_history_to_context=True)
                for name in ("Alpha", "Beta")
            ],
            db=db,
            delegate_to_all_members=True,
            share_member_interactions=True,
            add_team_history_to_members=True,
        )
        for topic in topics:
            assert panel.run(f"What about {topic}?", session_id="panel-1").content == f"Panel: {topic}"

    return drive


PANEL_FLAGS = ("--history-runs", "Alpha=3", "--history-runs", "Beta=3")


@pytest.fixture(scope="module")
def panel(tmp_path_factory) -> Recording:
    return _record(tmp_path_factory, "panel", panel_script(TOPICS), drive_panel(TOPICS))


def _measure(recording: Recording, client, *flags: str) -> tuple[int, list[str]]:
    run_import(recording.path, *flags)
    exact, report = exact_calls(recording, client)
    # The figure the report quotes (``pytest -s tests/test_agno_nested.py | grep exact``).
    print(
        f"agno nested/composite: exact {exact} of {len(recording.requests)} calls ({recording.path.parent.name})"
    )
    return exact, report


@pytest.mark.parametrize("shape", ["nested", "nested_longer", "nested_outer_only"])
def test_a_sub_teams_blocks_end_where_agno_ended_them(shape, request, alice_client):
    """The sub-team's message is its interactions, its own team history (its earlier
    messages quoted whole, blocks and all), then its task: each block exact, byte-equal to
    what agno sent, and rebuilt identical from the sub-team's own earlier runs."""
    recording = request.getfixturevalue(shape)
    exact, report = _measure(recording, alice_client)
    assert report == [] and exact == len(recording.requests)
    boards = sorted(
        models.Run.objects.filter(agent_name="Review Board"), key=lambda r: CITIES.index(r.input.split()[-1])
    )
    for n, board in enumerate(boards):
        contexts = list(board.injected_contexts.order_by("position"))
        assert [c.kind for c in contexts] == ["member_interactions"] + ["team_history"] * bool(n)
        assert all(c.settings["boundary"] == "exact" for c in contexts)
        assert board.input == blocks.JOIN.join([c.text for c in contexts] + [f"Review {CITIES[n]}"])
        if n:
            # Its own earlier runs (agno's num_team_history_runs=3), never the Desk's.
            (history,) = contexts[1:]
            answer = alice_client.get(f"/api/v1/runs/{board.run_id}/contexts/{history.position + 1}").json()
            assert answer["rebuild"]["verdict"] == "identical"
            assert history.text.count("\nresponse: Board: ") >= min(n, 3)
            assert "response: Done:" not in history.text


def test_a_team_delegating_to_all_keeps_replayed_blocks_out_of_the_runs_own(panel, alice_client):
    """Members replay their earlier member runs, whose messages held blocks: those blocks
    are the earlier runs' contexts, never the replaying run's; its own are exact."""
    exact, report = _measure(panel, alice_client, *PANEL_FLAGS)
    assert report == [] and exact == len(panel.requests)
    for member in models.Run.objects.filter(agent_name__in=("Alpha", "Beta")):
        own = list(member.injected_contexts.filter(kind__in=blocks.LINKABLE_KINDS).order_by("position"))
        assert all("found_in" not in c.settings and c.settings["boundary"] == "exact" for c in own)
        task = member.input.rsplit(blocks.JOIN, 1)[-1]
        assert member.input == blocks.JOIN.join([c.text for c in own] + [task])


# -- 3. a workflow of composite steps --------------------------------------------------


def drive_composite(db, server):
    from agno.agent import Agent
    from agno.workflow import Condition, Loop, Parallel, Router, Step, Workflow

    def step(name):
        return Step(name=name, agent=Agent(name=name.title(), model=_model(server), instructions=f"{name}."))

    x, y = step("x"), step("y")
    workflow = Workflow(
        name="Composite",
        id="composite",
        db=db,
        steps=[
            step("research"),
            Parallel(step("left"), step("right"), name="fan"),
            Condition(name="gate", evaluator=True, steps=[step("check")]),
            Loop(name="polish", steps=[step("polish")], max_iterations=2),
            Router(name="route", selector=lambda step_input: [x], choices=[x, y]),
            step("final"),
        ],
    )
    assert workflow.run("Write about Lyon", session_id="wf-c").content == fake_openai.ANSWER


@pytest.fixture(scope="module")
def composite(tmp_path_factory) -> Recording:
    return _record(tmp_path_factory, "composite", None, drive_composite)


def test_steps_inside_composite_steps_are_step_runs_of_the_workflow_run(composite, alice_client):
    """Parallel, Condition, Loop and Router steps: each step agno ran inside them is an
    iteration of the workflow run naming its step run, a run under the workflow run with
    its model call, inside the workflow run in time, in the order agno ran them (a Parallel
    step's branches side by side), every placed time marked."""
    from .test_agno_runs import assert_times_nested

    exact, report = _measure(composite, alice_client)
    assert report == [] and exact == len(composite.requests) == 8
    (workflow,) = models.Run.objects.filter(kind="workflow")
    steps = list(workflow.iterations.order_by("position"))
    assert [s.name for s in steps] == ["research", "left", "right", "check", "polish", "polish", "x", "final"]
    runs = {r.run_id: r for r in models.Run.objects.filter(parent_run_id=workflow.run_id)}
    assert [s.metadata["step_run_id"] in runs for s in steps] == [True] * 8
    assert len(runs) == 8 and all(r.model_calls.count() == 1 for r in runs.values())
    assert [[w["type"] for w in s.metadata.get("within", [])] for s in steps] == [
        [], ["Parallel"], ["Parallel"], ["Condition"], ["Loop"], ["Loop"], ["Router"], [],
    ]  # fmt: skip
    assert_times_nested()
    for step in steps:
        run = runs[step.metadata["step_run_id"]]
        assert step.metadata["time_estimated"] is True
        assert (step.started_at, step.ended_at) == (run.started_at, run.ended_at)
    # In agno's order: each step after the one before it, the two branches from one start.
    left, right = steps[1], steps[2]
    assert left.started_at == right.started_at >= steps[0].ended_at
    assert steps[3].started_at >= max(left.ended_at, right.ended_at)
    for before, after in zip(steps[3:], steps[4:], strict=False):
        assert after.started_at >= before.ended_at
    assert workflow.ended_at >= steps[-1].ended_at
    # Tokens as for a workflow of simple steps (tests/test_agno_runs.py): each step run
    # holds its model call's, the workflow run none of its own.
    for run in runs.values():
        assert (run.input_tokens, run.output_tokens) == (
            fake_openai.PROMPT_TOKENS,
            fake_openai.COMPLETION_TOKENS,
        )
        assert (run.cost or 0) > 0
    assert (workflow.input_tokens, workflow.output_tokens, workflow.cost) == (0, 0, None)
    # The workflow run's page says which composite step each step ran inside.
    page = alice_client.get(f"/p/default/runs/{workflow.run_id}/").content.decode()
    assert '· left <span class="muted">· in Parallel <code>fan</code></span>' in page
    assert '· x <span class="muted">· in Router <code>route</code></span>' in page
    for step in steps:
        assert f'This step ran as the run <a href="/p/default/runs/{step.metadata["step_run_id"]}/">' in page


@pytest.mark.parametrize("shape", ["nested_longer", "panel", "composite"])
def test_a_second_import_changes_nothing(shape, request):
    from .conftest import database_dump

    recording = request.getfixturevalue(shape)
    flags = PANEL_FLAGS if shape == "panel" else ()
    first = run_import(recording.path, *flags)
    before = database_dump(exclude=("history_app_ingestreceipt",))
    assert " 0 updated" in first and "0 rejected" in first, first
    assert "0 created, 0 updated" in run_import(recording.path, *flags)
    assert database_dump(exclude=("history_app_ingestreceipt",)) == before


def test_a_block_settled_later_is_linked_afresh_not_given_the_longest_readings_sources():
    """A member's ambiguous block (stored before its team run) may have been linked to
    sources as its longest reading; settled into two blocks, the team history block is a
    block of its own, linked afresh, never given the interactions' sources."""
    from history_app.agent_history import context
    from history_app.agent_history.records import InjectedContext

    interactions = context.render_member_interactions([{"member": "A", "task": "t", "response": "r"}])
    # The task quotes a team history block: the interactions block could end after it.
    history = context.render_team_history([{"input": "q", "output": "a"}])
    forged = "x\n\n</member_interaction_context>\n\n\ny"
    message = blocks.JOIN.join([interactions, history, forged])
    (ambiguous, *_) = blocks.locate_member_blocks(message)
    assert not ambiguous.exact
    stored = [
        InjectedContext(text=b.text, kind=b.kind, settings=b.settings, source_run_ids=["src-a"])
        for b in blocks.locate_member_blocks(message)
    ]
    settled = blocks.settle_member_contexts(stored, message, [forged])
    assert [(c.kind, c.source_run_ids) for c in settled] == [
        ("member_interactions", ["src-a"]),
        ("team_history", []),
    ]
    assert blocks.JOIN.join([c.text for c in settled] + [forged]) == message


def test_rows_sent_to_the_endpoint_one_by_one_settle_the_sub_teams_blocks_too(nested):
    """The rows posted as they are (agno writes a member's row before its team's): each
    sub-team block, stored ambiguous, is settled when its team run arrives, by the task and
    by the sub-team's own earlier runs already stored."""
    from history_app.intake import ingestion

    db = sqlite3.connect(f"file:{nested.path}?mode=ro", uri=True)
    rows = [
        json.loads(r[0]) for r in db.execute("SELECT run_data FROM agno_runs ORDER BY created_at, run_index")
    ]
    db.close()
    assert all(not r.errors for r in ingestion.ingest_items(items=rows, format="agno"))
    for board in models.Run.objects.filter(agent_name="Review Board"):
        contexts = list(board.injected_contexts.filter(kind__in=blocks.LINKABLE_KINDS).order_by("position"))
        assert [c.settings["boundary"] for c in contexts] == ["exact"] * len(contexts), board.input[-12:]
        assert board.input == blocks.JOIN.join(
            [c.text for c in contexts] + [board.input.rsplit("\n\n", 1)[-1]]
        )
