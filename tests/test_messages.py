"""The library's reading of model-call messages from each source shape, kept as sent."""

from __future__ import annotations

import json

from history_app.agent_history import messages as wire
from history_app.agent_history.records import Run


def test_genai_parts_are_kept_in_order_and_unknown_ones_verbatim():
    blob = {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBO"}
    odd = {"type": "hologram", "depth": 3}
    message, reason = wire.genai_message(
        {
            "role": "user",
            "name": "ann",
            "parts": [
                {"type": "text", "content": "Look:"},
                blob,
                {"type": "reasoning", "content": "hm"},
                odd,
            ],
            "finish_reason": "stop",
        }
    )
    assert (message.role, message.name, reason) == ("user", "ann", "stop")
    assert message.parts == [
        {"type": "text", "text": "Look:"},
        blob,
        {"type": "reasoning", "text": "hm"},
        odd,
    ]
    assert message.content == "Look:"


def test_genai_tool_calls_and_their_answers():
    asked, _ = wire.genai_message(
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {}}]}
    )
    assert asked.content_null and asked.content == ""
    (request,) = asked.tool_calls
    # Empty arguments are "{}", not nothing; a JSON value is marked as re-encoded.
    assert (request.id, request.name, request.arguments, request.arguments_exact) == (
        "c1",
        "add",
        "{}",
        False,
    )
    answered, _ = wire.genai_message(
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"sum": 5}}]}
    )
    assert (answered.role, answered.tool_call_id, json.loads(answered.content)) == ("tool", "c1", {"sum": 5})


def test_genai_tool_results_are_one_message_each_where_the_wire_sends_them_so():
    results = {
        "role": "user",
        "parts": [
            {"type": "tool_call_response", "id": "c1", "name": "weather", "result": "Sunny in Paris"},
            {"type": "tool_call_response", "id": "c2", "name": "weather", "result": "Sunny in Lyon"},
            {"type": "text", "content": "Go on."},
        ],
    }
    split = wire.genai_messages(results, split_tool_results=True)
    assert [(m.tool_call_id, m.content) for m in split] == [
        ("c1", "Sunny in Paris"),
        ("c2", "Sunny in Lyon"),
        ("", "Go on."),
    ]
    # Anthropic's API takes them as blocks of one user message: one message, as reported.
    assert wire.one_message_per_tool_result("openai") and not wire.one_message_per_tool_result("anthropic")
    (kept,) = wire.genai_messages(results, split_tool_results=False)
    assert [p["type"] for p in kept.parts] == ["tool_call_response", "tool_call_response", "text"]


def test_openinference_flattened_messages_keep_calls_ids_names_and_parts():
    flat = {
        "llm.input_messages.0.message.role": "assistant",
        "llm.input_messages.0.message.tool_calls.0.tool_call.id": "c1",
        "llm.input_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
        "llm.input_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
        "llm.input_messages.0.message.tool_calls.1.tool_call.id": "c2",
        "llm.input_messages.0.message.tool_calls.1.tool_call.function.name": "now",
        "llm.input_messages.0.message.tool_calls.1.tool_call.function.arguments": "{}",
        "llm.input_messages.1.message.role": "tool",
        "llm.input_messages.1.message.tool_call_id": "c1",
        "llm.input_messages.1.message.name": "get_weather",
        "llm.input_messages.1.message.content": "sunny",
        "llm.input_messages.2.message.role": "user",
        "llm.input_messages.2.message.contents.0.message_content.type": "text",
        "llm.input_messages.2.message.contents.0.message_content.text": "Hi",
        "llm.input_messages.2.message.contents.1.message_content.type": "image",
        "llm.input_messages.2.message.contents.1.message_content.image.image.url": "https://x/y.png",
    }
    asked, tool, user = wire.openinference_messages(flat, "llm.input_messages.")
    assert [(r.id, r.name, r.arguments) for r in asked.tool_calls] == [
        ("c1", "get_weather", '{"city": "Paris"}'),
        ("c2", "now", "{}"),
    ]
    assert asked.content_null
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == ("tool", "c1", "get_weather", "sunny")
    assert user.parts == [
        {"type": "text", "text": "Hi"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
    ]


def test_openllmetry_prompts_keep_tool_calls():
    flat = {
        "gen_ai.prompt.0.role": "assistant",
        "gen_ai.prompt.0.tool_calls.0.id": "c1",
        "gen_ai.prompt.0.tool_calls.0.name": "add",
        "gen_ai.prompt.0.tool_calls.0.arguments": '{"a":1}',
        "gen_ai.prompt.1.role": "tool",
        "gen_ai.prompt.1.tool_call_id": "c1",
        "gen_ai.prompt.1.content": "1",
    }
    asked, tool = wire.openllmetry_messages(flat, "gen_ai.prompt.")
    assert asked.content_null and [(r.id, r.arguments) for r in asked.tool_calls] == [("c1", '{"a":1}')]
    assert (tool.tool_call_id, tool.content) == ("c1", "1")


def test_chat_messages_keep_what_no_field_holds():
    message = wire.chat_message({"role": "assistant", "content": "x", "refusal": None, "audio": {"id": "a1"}})
    assert message.extra == {"refusal": None, "audio": {"id": "a1"}}


def test_blocks_inside_messages_become_contexts_once_with_their_place():
    block = (
        "<team_history_context>\n[run-1]\ninput: Query 1\nresponse: Response 1\n\n</team_history_context>\n"
    )
    prefix = "You are a member.\n\n"
    data = {
        "run_id": "r",
        "session_id": "s",
        "model_calls": [
            {
                "messages": [
                    {"role": "system", "content": prefix + block},
                    {"role": "user", "content": "Task"},
                ]
            },
            {"messages": [{"role": "system", "content": prefix + block}]},
        ],
    }
    run = Run.from_dict(data)
    assert wire.find_contexts(run) == 1
    (context,) = run.injected_contexts
    assert (context.kind, context.text, context.target) == ("team_history", block, "system")
    assert context.settings["found_in"] == {"call": 0, "message": 0, "offset": len(prefix)}
    assert [c.messages[0].context for c in run.model_calls] == [0, 0]
    assert run.model_calls[0].messages[1].context is None
    assert wire.find_contexts(run) == 0  # idempotent
