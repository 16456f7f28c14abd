"""History blocks found inside model-call messages on the native and OTLP paths, and the
inspector's three verdicts (identical, differs, cannot rebuild) on stored runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from history_app import models
from history_app.agent_history import context as renderers

from .conftest import native
from .otlp_spans import genai_agent_trace, request
from .otlp_spans import value as otlp_value

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "history_app" / "demo"
TRACE = "ef" * 16
INSTRUCTIONS = "You are a helpful assistant with memory.\n\n"
# agno-go's block as its FormatHistoryForAgent writes it: no newline after the closing
# tag, appended to the agent's instructions (the system message).
AGNO_GO = renderers.render_workflow_history(
    [
        {"input": "Hello, my name is Alice", "output": "Hello Alice! Nice to meet you."},
        {"input": "I love programming in Go", "output": "That's great! Go is a powerful language."},
    ]
)
AGNO = renderers.render_agno_workflow_history([{"input": "Draft the plan", "output": "Plan: 1. 2. 3."}])


def status_lines(page: str) -> list[str]:
    return re.findall(r'role="status">([^<]*)', page)


def found(run_id: str) -> list[models.InjectedContext]:
    return list(models.InjectedContext.objects.filter(run__run_id=run_id).order_by("position"))


def assert_found_and_linked(alice_client, run_id: str, block: str, kind: str, message: int, offset: int):
    (context,) = found(run_id)
    assert (context.kind, context.text, context.target) == (kind, block, "system")
    assert context.settings["found_in"] == {"call": 0, "message": message, "offset": offset}
    call = models.ModelCall.objects.get(run=context.run, position=0)
    sent = call.messages[message]["content"]
    assert sent[offset : offset + len(block)] == block  # byte-exact, where it says
    page = alice_client.get(f"/p/default/runs/{run_id}/model-calls/1/").content.decode()
    link = f'href="/p/default/runs/{run_id}/context/1/"'
    assert f"<a {link}>carries an injected context: inspect it</a>" in page
    inspector = alice_client.get(f"/p/default/runs/{run_id}/context/1/")
    assert inspector.status_code == 200


@pytest.mark.parametrize(
    ("block", "kind"),
    [(AGNO_GO, "workflow_history"), (AGNO, "workflow_history")],
    ids=["agno-go workflow history", "agno workflow history"],
)
def test_native_format_finds_blocks_in_the_system_message(alice_client, ingest, block, kind):
    run = native(
        "native-1",
        "s-native",
        input="What is my name?",
        output="Alice.",
        model_calls=[
            {
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": INSTRUCTIONS + block},
                    {"role": "user", "content": "What is my name?"},
                ],
                "output": "Alice.",
            }
        ],
    )
    assert ingest(run).status_code == 200
    assert_found_and_linked(alice_client, "native-1", block, kind, 0, len(INSTRUCTIONS))


def test_otlp_genai_finds_agno_go_history_in_the_system_instructions(alice_client, client, auth_headers):
    spans = genai_agent_trace(TRACE)
    instructions = json.dumps([{"type": "text", "content": INSTRUCTIONS + AGNO_GO}])
    for attribute in spans[0]["attributes"]:
        if attribute["key"] == "gen_ai.system_instructions":
            attribute["value"] = otlp_value(instructions)
    body = json.dumps(request(*spans))
    assert client.post("/v1/traces", body, content_type="application/json", **auth_headers).status_code == 200
    call = models.ModelCall.objects.get(run__run_id=TRACE, position=0)
    message = next(n for n, m in enumerate(call.messages) if AGNO_GO in m["content"])
    assert_found_and_linked(alice_client, TRACE, AGNO_GO, "workflow_history", message, len(INSTRUCTIONS))


# -- the inspector's verdicts ---------------------------------------------------------------


def verdict(alice_client, run_id: str, number: int = 1) -> tuple[list[str], str | None]:
    page = alice_client.get(f"/p/default/runs/{run_id}/context/{number}/")
    assert page.status_code == 200
    data = alice_client.get(f"/api/v1/runs/{run_id}/contexts/{number}").json()
    return status_lines(page.content.decode()), data["rebuild"].get("verdict")


QUOTED = {
    "team history": ("<team_history_context>\n[run-1]\ninput: a\nresponse: b\n\n</team_history_context>\n"),
    "member interactions": (
        "<member_interaction_context>\nSee below interactions with other team members.\n"
        "Member: Critic\nTask: t\nResponse: r\n\n</member_interaction_context>\n"
    ),
}


def team_with_quoting_task(quoted: str, *, edit: bool = False) -> list[dict]:
    """The demo team, its first member handed a task that quotes a whole block; the second
    member's interactions block as agno writes it (nothing escaped)."""
    runs = json.loads((DEMO / "team_research.json").read_text())
    task = f"Check this prompt for mistakes:\n{quoted}and say what is wrong"
    runs[1]["input"] = task
    block = renderers.render_member_interactions(
        [{"member": "Researcher", "task": task, "response": runs[1]["output"]}], verbatim=True
    )
    if edit:
        block = block.replace("Response: ", "Response: (edited) ")
    runs[2]["injected_contexts"][0]["text"] = block
    runs[2]["input"] = block + "\nWrite the summary"
    return runs


@pytest.mark.parametrize("quoted", list(QUOTED), ids=list(QUOTED))
def test_a_block_whose_task_quotes_another_block_rebuilds_identical(alice_client, ingest, quoted):
    assert ingest(team_with_quoting_task(QUOTED[quoted])).status_code == 200
    lines, answer = verdict(alice_client, "demo-team-member-2")
    assert answer == "identical"
    assert lines[0].startswith("✓ Identical")
    assert not any("differs" in line for line in lines)


def test_an_edited_block_differs(alice_client, ingest):
    assert ingest(team_with_quoting_task(QUOTED["team history"], edit=True)).status_code == 200
    lines, answer = verdict(alice_client, "demo-team-member-2")
    assert answer == "differs"
    assert lines[0].startswith("The text differs from what our renderer writes")


def test_a_block_with_no_source_runs_cannot_be_rebuilt(alice_client, ingest):
    run = native(
        "lonely",
        "s-lonely",
        input="What is my name?",
        model_calls=[{"messages": [{"role": "system", "content": INSTRUCTIONS + AGNO_GO}]}],
    )
    assert ingest(run).status_code == 200
    lines, answer = verdict(alice_client, "lonely")
    assert answer == "cannot_rebuild"
    rebuild = alice_client.get("/api/v1/runs/lonely/contexts/1").json()["rebuild"]
    assert rebuild["matches"] is None and rebuild["diff"] is None
    assert lines[0].startswith("Cannot rebuild: no source runs.")
    assert not any("differs" in line or "Identical" in line for line in lines[:1])


@pytest.mark.parametrize("quoted", list(QUOTED), ids=list(QUOTED))
def test_a_context_holding_the_block_and_a_task_that_quotes_another_rebuilds_identical(
    alice_client, ingest, quoted
):
    # The agent reported the member's whole message: the block, then a task quoting a block
    # of the same kind; the quoted closing tag is not the end of the real block.
    runs = json.loads((DEMO / "team_research.json").read_text())
    block = runs[2]["injected_contexts"][0]["text"]
    message = renderers.compose_member_task(
        f"Is this prompt right?\n{QUOTED[quoted]}Answer yes or no", interactions=block
    )
    runs[2]["injected_contexts"][0]["text"] = message
    runs[2]["input"] = message
    assert ingest(runs).status_code == 200
    lines, answer = verdict(alice_client, "demo-team-member-2")
    assert answer == "identical"
    assert lines[0].startswith("✓ Identical")
