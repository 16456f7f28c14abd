"""The library's one entry point for a body in any accepted format: the endpoint, the
import commands and agent code read bodies with it, so they agree on every format."""

from __future__ import annotations

import json

import pytest

from history_app.agent_history import formats

from .conftest import AUTOURGOS, autourgos_logs, native


def test_json_object_array_and_ndjson_give_the_same_runs():
    one, two = native("a", input="a"), native("b", input="b")
    as_array = formats.parse_body(json.dumps([one, two]))
    as_lines = formats.parse_body("\n".join(map(json.dumps, [one, two])), "application/x-ndjson")
    assert [item.format for item in as_array] == ["native", "native"]
    assert [i.runs for i in as_array] == [i.runs for i in as_lines]
    assert [run.input for item in as_array for run in item.runs] == ["a", "b"]


def test_every_item_says_its_own_format_or_its_errors():
    log = json.loads(autourgos_logs()[0].read_text())
    items = formats.parse_body(json.dumps([log, native("x"), native("y", iterations="no"), 5]))
    assert [item.format for item in items] == ["autourgos", "native", None, None]
    assert items[2].errors and items[2].errors[0][0] == "$.iterations"
    assert items[3].errors == [("$", "must be an object, not int")]


def test_a_bad_ndjson_line_is_an_error_at_its_index_only():
    body = "\n".join([json.dumps(native("a")), "{broken", "", json.dumps(native("b"))])
    items = formats.parse_body(body.encode(), "application/x-ndjson; charset=utf-8")
    assert [bool(item.runs) for item in items] == [True, False, True]
    path, message = items[1].errors[0]
    assert path == "$[1]" and message.startswith("line 2: invalid JSON")


def test_markdown_is_read_by_its_own_reader_and_named_so():
    path = AUTOURGOS / "Task_20261129_224355_610116_7bfd7d3a.md"
    (item,) = formats.parse_body(path.read_bytes(), "text/markdown")
    assert item.format == formats.MARKDOWN_FORMAT
    (twin,) = formats.parse_body(path.with_suffix(".json").read_bytes())
    assert twin.format == "autourgos"
    assert item.runs[0].agent_name == twin.runs[0].agent_name
    assert len(item.runs[0].iterations) == len(twin.runs[0].iterations) == 3


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"\xff\xfe", "application/json", "the body is not UTF-8 (byte 0)"),
        ("5", "application/json", "the body must be a JSON object or an array of objects"),
        ("{}", "text/csv", "unsupported content type 'text/csv'"),
        ('{"a": NaN}', "application/json", "invalid JSON: NaN is not a JSON number"),
    ],
)
def test_unreadable_bodies_say_why(body, content_type, message):
    with pytest.raises(formats.BodyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        formats.read_body(body, content_type)


def test_suffixes_name_content_types():
    assert formats.SUFFIX_TYPES[".md"] in formats.CONTENT_TYPES
    assert formats.SUFFIX_TYPES[".ndjson"] in formats.CONTENT_TYPES
