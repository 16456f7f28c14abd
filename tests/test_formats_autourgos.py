"""The autourgos-history parsers against the real package's output (tests/fixtures)."""

from __future__ import annotations

import json

import pytest

from history_app.agent_history import RecordError, parse
from history_app.agent_history.formats import autourgos, detect

from .conftest import AUTOURGOS, autourgos_logs, manifest


def load(name: str) -> dict:
    return json.loads((AUTOURGOS / name).read_text())


@pytest.mark.parametrize("path", autourgos_logs(), ids=lambda p: p.stem)
def test_every_sample_parses_with_the_expected_shape(path):
    data = json.loads(path.read_text())
    assert detect(data) == "autourgos"
    (run,) = parse(data)
    expect = manifest()[path.name]["expect"]
    if "iterations" in expect:
        assert len(run.iterations) == expect["iterations"]
    if "tools_per_iteration" in expect:
        assert [len(it.tool_calls) for it in run.iterations] == expect["tools_per_iteration"]
    assert run.agent_name == data["agent_name"]
    assert run.framework == "autourgos"
    assert run.status == ("failed" if data["error"] else "completed")


def test_run_id_is_stable_and_content_derived():
    data = load("Task_20261129_224355_551407_bc481e3f.json")
    assert parse(data)[0].run_id == parse(json.loads(json.dumps(data)))[0].run_id
    changed = dict(data, final_response="something else")
    assert parse(changed)[0].run_id != parse(data)[0].run_id


def test_ids_written_by_our_middleware_are_used_as_they_are():
    data = dict(load("named_run_custom.json"), run_id="run-42", session_id="sess-7")
    (run,) = parse(data)
    assert (run.run_id, run.session_id) == ("run-42", "sess-7")


def test_list_thought_and_raw_json_thought():
    (run,) = parse(load("Task_20261129_224355_652377_a4cbe24d.json"))
    assert run.iterations[1].thought == "step 1: search\nstep 2: answer"
    assert run.iterations[2].thought.startswith('{"thought": null')


def test_dict_thought_is_kept_as_json():
    data = {"iterations": [{"iteration": 1, "thought": {"plan": ["a", "b"]}}], "final_response": "ok"}
    assert json.loads(parse(data)[0].iterations[0].thought) == {"plan": ["a", "b"]}


def test_redacted_strings_in_place_of_lists_are_marked_not_fatal():
    (run,) = parse(load("Task_20261129_224355_642462_8e53e6b0.json"))
    first = run.iterations[0]
    assert first.tool_calls == []
    assert first.metadata == {"tools_redacted_by_source": True, "observations_redacted_by_source": True}
    assert run.output == "[REDACTED]"


def test_more_observations_than_tools_keeps_every_observation():
    data = {
        "iterations": [
            {
                "iteration": 1,
                "tools": [{"tool": "search", "params": {"q": "a"}}],
                "observations": [{"tool": "search", "result": "A"}, {"tool": "search", "result": "B"}],
            }
        ],
        "final_response": "done",
    }
    calls = parse(data)[0].iterations[0].tool_calls
    assert [(c.tool, c.params, c.result) for c in calls] == [
        ("search", {"q": "a"}, "A"),
        ("search", None, "B"),
    ]


def test_tool_errors_reported_through_on_tool_end_become_errors():
    (run,) = parse(load("Task_20261129_224355_594659_a6355812.json"))
    calls = run.iterations[0].tool_calls
    assert len(calls) == 4
    assert all(c.error and c.result is None for c in calls)
    assert "No such file or directory" in calls[0].error


def test_escaped_unicode_is_decoded():
    (run,) = parse(load("Task_20261129_224355_620801_0417a5f5.json"))
    assert run.agent_name == "翻訳エージェント 🤖"
    assert "العربية" in run.input


def test_agent_error_gives_a_failed_run_with_no_output():
    (run,) = parse(load("Task_20261129_224355_610116_7bfd7d3a.json"))
    assert run.status == "failed"
    assert run.output is None
    assert "HTTP 502" in run.error


def test_bad_shapes_are_reported_with_paths():
    with pytest.raises(RecordError) as caught:
        parse(
            {
                "iterations": [{"tools": "oops", "observations": [3]}, 7],
                "final_response": None,
                "start_time": "x",
            }
        )
    paths = {p for p, _ in caught.value.errors}
    assert paths == {
        "$.iterations[0].tools",
        "$.iterations[0].observations[0]",
        "$.iterations[1]",
        "$.start_time",
    }


def test_payload_of_no_known_format_lists_the_accepted_ones():
    with pytest.raises(RecordError) as caught:
        parse({"hello": "world"})
    assert "native" in str(caught.value) and "autourgos" in str(caught.value)


@pytest.mark.parametrize("path", autourgos_logs(), ids=lambda p: p.stem)
def test_markdown_fallback_agrees_with_the_json(path):
    json_run = parse(json.loads(path.read_text()))[0]
    (md_run,) = autourgos.parse_markdown(path.with_suffix(".md").read_text())
    assert md_run.metadata["imported_from"] == "markdown"
    assert md_run.status == json_run.status
    assert md_run.output == json_run.output
    assert len(md_run.iterations) == len(json_run.iterations)
    for md_it, js_it in zip(md_run.iterations, json_run.iterations, strict=True):
        assert [c.tool for c in md_it.tool_calls] == [c.tool for c in js_it.tool_calls] or js_it.metadata


def test_markdown_thought_with_fake_headings_stays_one_iteration():
    text = (
        '# Task Session: Agent\n**Started At:** 2026-11-29 22:43:55\n\n## Initial Query\n"q"\n\n---\n\n'
        "## Iteration 1\n\n### Thought\nI will write:\n## Iteration 2\n## Final Answer\n### Thought\nnot real\n\n"
        '---\n\n## Final Answer\n"real answer"\n'
    )
    (run,) = autourgos.parse_markdown(text)
    assert len(run.iterations) == 1
    assert "## Iteration 2" in run.iterations[0].thought
    assert "not real" in run.iterations[0].thought
    assert run.output == "real answer"


def test_markdown_that_is_not_a_log_is_refused():
    with pytest.raises(RecordError):
        autourgos.parse_markdown("# Notes\nnothing here")
