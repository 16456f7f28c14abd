"""Bounded line diffs: the inspector's and the compare page's (``history_app.reading.diffs``)."""

from __future__ import annotations

import difflib
import random

import pytest

from history_app.reading import diffs

from .conftest import native


def lines_of(seed: int, size: int) -> str:
    """About ``size`` characters of lines drawn from 101 short values, cycling through
    them in an order fixed by ``seed`` (a stride through the 101): every line has many
    equal lines on the other side and no two runs of them agree for long, and no value is
    common enough for difflib to set aside as junk. difflib's matcher grows cubically on
    such pairs (2.6-3.2 s at 24 KB, eight times that at twice the size)."""
    stride = 1 + (seed * 36) % 100
    values = [f"v{(n * stride) % 101}" for n in range(101)]
    lines: list[str] = []
    while len(lines) * 4 < size:
        lines.extend(values)
    return "\n".join(lines)


def patched(before: list[str], diff: diffs.LineDiff) -> list[str]:
    """``before`` with the diff's hunks applied (what a patch tool would do)."""
    out, position = [], 0
    for line in diff.lines:
        if line.css == "hunk":
            start = int(line.text.split()[1][1:].split(",")[0])
            start = (
                start - 1
                if "," not in line.text.split()[1] or not line.text.split()[1].endswith(",0")
                else start
            )
            out += before[position:start]
            position = start
        elif line.css == "ctx":
            assert before[position] == line.text[1:]
            out.append(line.text[1:])
            position += 1
        elif line.css == "del":
            assert before[position] == line.text[1:]
            position += 1
        elif line.css == "add":
            out.append(line.text[1:])
    return out + before[position:]


def test_diffs_of_ordinary_texts_apply_and_mostly_read_as_difflib_s():
    rng = random.Random(7)
    same_as_difflib = 0
    for _ in range(400):
        values = [f"v{n}" for n in range(rng.randint(1, 6))]
        a = [rng.choice(values) for _ in range(rng.randint(0, 20))]
        b = [rng.choice(values) for _ in range(rng.randint(0, 20))]
        diff = diffs.line_diff("\n".join(a), "\n".join(b), "a", "b")
        assert not diff.fallback
        assert patched(a, diff) == b
        reference = list(difflib.unified_diff(a, b, "a", "b", lineterm="", n=2))
        same_as_difflib += [line.text for line in diff.lines] == reference
    assert same_as_difflib > 150
    base = [f"line {n}" for n in range(300)]
    edited = base[:40] + ["changed"] + base[41:200] + base[205:] + ["the end"]
    diff = diffs.line_diff("\n".join(base), "\n".join(edited), "a", "b")
    assert [line.text for line in diff.lines] == list(
        difflib.unified_diff(base, edited, "a", "b", lineterm="", n=2)
    )


def test_a_hostile_pair_takes_a_bounded_number_of_steps_whatever_its_size():
    small = diffs.line_diff(lines_of(1, 24_000), lines_of(2, 24_000), "a", "b")
    large = diffs.line_diff(lines_of(1, 36_000), lines_of(2, 36_000), "a", "b")
    for diff in (small, large):
        assert diff.fallback.startswith("Too different to diff line by line") and not diff.lines
        assert diff.steps <= diffs.DIFF_STEPS + diffs.MAX_LINES
    huge = diffs.line_diff("x\n" * 20_000, "y\n" * 20_000, "a", "b")
    assert huge.fallback.startswith("Too large to diff line by line") and huge.steps == 0


def test_a_page_s_diffs_share_one_budget():
    budget = diffs.Budget()
    results = [
        diffs.line_diff(lines_of(n, 15_000), lines_of(n + 10, 15_000), "a", "b", budget) for n in range(7)
    ]
    assert budget.spent <= diffs.PAGE_STEPS + diffs.MAX_LINES
    assert all(r.fallback for r in results)
    # Once the budget is spent, even a small diff is not worked on: the page says so.
    late = diffs.line_diff("a\nb\nc", "a\nB\nc", "a", "b", budget)
    assert late.fallback and budget.spent <= diffs.PAGE_STEPS + diffs.MAX_LINES


@pytest.mark.django_db
def test_the_inspector_falls_back_on_a_hostile_pair_and_says_so(alice_client, ingest, monkeypatch):
    first, second = lines_of(1, 24_000), lines_of(2, 24_000)
    contexts = [{"kind": "custom", "text": first}, {"kind": "custom", "text": second}]
    assert ingest({**native("r", "s"), "injected_contexts": contexts}).status_code == 200
    spent = []
    real = diffs._opcodes

    def counted(a, b, limit):
        codes, steps = real(a, b, limit)
        spent.append(steps)
        return codes, steps

    monkeypatch.setattr(diffs, "_opcodes", counted)
    page = alice_client.get("/p/default/runs/r/context/2/").content.decode()
    assert "Too different to diff line by line" in page and "showing both sides" in page
    assert page.count("value 17") >= first.count("value 17") + second.count("value 17")
    assert sum(spent) <= diffs.PAGE_STEPS + diffs.MAX_LINES
    body = alice_client.get("/api/v1/runs/r/contexts/2").json()
    assert body["previous"]["diff"] == [] and "Too different" in body["previous"]["diff_fallback"]
    assert sum(spent) <= 2 * (diffs.PAGE_STEPS + diffs.MAX_LINES)


@pytest.mark.django_db
def test_the_compare_page_bounds_all_its_diffs_together(alice_client, ingest, monkeypatch):
    def run(run_id: str, seed: int) -> dict:
        texts = [lines_of(seed * 10 + n, 15_000) for n in range(7)]
        return {
            **native(run_id, "s"),
            "input": texts[0],
            "output": texts[1],
            "error": texts[2],
            "metadata": {"notes": texts[3]},
            "iterations": [{"index": n, "thought": texts[4 + n]} for n in range(3)],
        }

    assert ingest([run("a", 1), run("b", 2)]).status_code == 200
    spent = []
    real = diffs._opcodes

    def counted(a, b, limit):
        codes, steps = real(a, b, limit)
        spent.append(steps)
        return codes, steps

    monkeypatch.setattr(diffs, "_opcodes", counted)
    page = alice_client.get("/p/default/compare/", {"a": "a", "b": "b"}).content.decode()
    assert "Too different to diff line by line within this page" in page
    assert sum(spent) <= diffs.PAGE_STEPS + diffs.MAX_LINES
    body = alice_client.get("/api/v1/compare", {"a": "a", "b": "b"}).json()
    assert body["input"]["diff_fallback"] and body["iterations"][2]["thought"]["diff_fallback"]
