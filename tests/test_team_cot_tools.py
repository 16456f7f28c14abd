"""Team history, CoT process history and the chat-history tools."""

from __future__ import annotations

import json

from history_app.agent_history import (
    CoTHistory,
    MemoryStore,
    Run,
    TeamHistory,
    get_chat_history,
    read_past_session,
    recording,
    search_past_sessions,
)


def team_run(run_id, input, output, status="completed", **extra):
    return Run(run_id=run_id, session_id="s", kind="team", input=input, output=output, status=status, **extra)


def test_team_history_only_completed_top_level_runs_and_num_runs():
    team = TeamHistory()
    team.add_run("s", team_run("t1", "q1", "a1"))
    team.add_run("s", team_run("t2", "q2", None, status="failed"))
    team.add_run("s", team_run("sub", "q3", "a3", parent_run_id="t1", team_id="sub-team"))
    team.add_run("s", team_run("t4", "q4", "a4"))
    assert [r.run_id for r in team.team_history("s")] == ["t1", "t4"]
    assert [r.run_id for r in team.team_history("s", 1)] == ["t4"]
    assert team.team_history("s", 0) == [] and team.team_history("s", -2) == []
    assert [r.run_id for r in team.team_history("s", team_id="sub-team")] == ["sub"]
    assert team.team_history("other") == []


def test_member_task_is_agnos_layout_and_is_recorded():
    team = TeamHistory()
    team.add_run("s", team_run("t1", "Research the Eiffel Tower", "Team answer"))
    team.add_interaction(
        "s", "t2", member="Researcher", task="Find facts", response="Facts found", member_run_id="m1"
    )
    current = Run(run_id="m2", session_id="s", kind="member")
    with recording(current):
        task = team.member_task("s", "t2", "Write the answer", member="Writer")
    assert task == (
        "<member_interaction_context>\nSee below interactions with other team members.\n"
        "Member: Researcher\nTask: Find facts\nResponse: Facts found\n\n</member_interaction_context>\n"
        "\n\n<team_history_context>\n[run-1]\ninput: Research the Eiffel Tower\nresponse: Team answer\n\n"
        "</team_history_context>\n\n\nWrite the answer"
    )
    kinds = [(c.kind, c.target, c.step, c.source_run_ids) for c in current.injected_contexts]
    assert kinds == [
        ("member_interactions", "user", "Writer", ["m1"]),
        ("team_history", "user", "Writer", ["t1"]),
    ]
    assert [i.task for i in team.history_for_member("s", "Researcher")] == ["Find facts"]
    assert team.member_task("s", "t9", "Just this", add_team_history_to_members=False) == "Just this"


def test_cot_history_limits_mirror_and_no_history():
    cot = CoTHistory(history_max_items=5, state_history_max_items=3, history_detail_items=2)
    for i in range(7):
        cot.add({"taskID": f"t{i}", "summary": f"s{i}"})
    assert [e["taskID"] for e in cot.history] == ["t2", "t3", "t4", "t5", "t6"]
    assert [e["taskID"] for e in cot.state["history"]] == ["t4", "t5", "t6"]
    assert cot.dropped == 2
    text = cot.render()
    assert text.startswith("1. t2 | s2") and "5. t6" in text
    assert cot.render(truncate_history=2).startswith("[3 earlier entries omitted]")
    current = Run(run_id="r", session_id="s")
    with recording(current):
        part = cot.prompt_part(step="plan")
    assert part.startswith("Actions taken so far") and current.injected_contexts[0].kind == "cot_history"
    assert CoTHistory(no_history=True).prompt_part() == ""


def test_cot_state_mirror_defaults_to_the_main_ceiling():
    cot = CoTHistory(history_max_items=4)
    for i in range(6):
        cot.add_history({"taskID": i})
    assert len(cot.state["history"]) == 4


def chat_store():
    store = MemoryStore()
    for s in range(3):
        store.get_or_create_session(f"s{s}")
        for r in range(4):
            store.save_run(
                f"s{s}",
                {
                    "run_id": f"{s}-{r}",
                    "input": f"u{s}{r} " + "x" * 300,
                    "output": f"a{s}{r}",
                    "status": "completed",
                },
            )
    return store


def test_get_chat_history_returns_the_last_messages():
    messages = json.loads(get_chat_history(chat_store(), "s1", num_chats=3))
    assert [m["role"] for m in messages] == ["assistant", "user", "assistant"]
    assert messages[-1]["content"] == "a13"
    assert len(json.loads(get_chat_history(chat_store(), "s1"))) == 8


def test_search_past_sessions_previews_newest_first_without_the_current_one():
    previews = json.loads(search_past_sessions(chat_store(), "s1", num_past_session_runs_in_search=2))
    assert [p["session_id"] for p in previews] == ["s2", "s0"]
    assert len(previews[0]["runs"]) == 2
    assert previews[0]["runs"][0]["user"] == "u22 " + "x" * 196 + "..."
    assert previews[0]["runs"][0]["assistant"] == "a22"
    assert len(json.loads(search_past_sessions(chat_store(), None, num_past_sessions_to_search=1))) == 1


def test_read_past_session_text_and_failures():
    text = read_past_session(chat_store(), "s0", num_runs=1)
    assert text.startswith("Session: s0\nCreated: ")
    assert text.endswith("\n\nUser: u03 " + "x" * 300 + "\n\nAssistant: a03\n")
    assert read_past_session(chat_store(), "nope") == "Session not found."
    assert read_past_session(None, "s0") == "No database configured."
