"""Every link in the Markdown files (the README, the reference pages, the design notes
kept in the repository) leads somewhere: a relative link to a file that exists, an
``#anchor`` to a heading of the file it names, as GitHub makes heading anchors."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from history_app.reading import help

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")


def markdown_files() -> list[Path]:
    """The repository's Markdown files (tracked or new, not ignored), drafts excluded."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / name for name in listed if "/pending/" not in name and (ROOT / name).is_file())


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside fenced code and code spans."""
    found, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            found += LINK.findall(CODE_SPAN.sub("", line))
    return found


def anchors(path: Path) -> set[str]:
    return {h.slug for h in help.headings(path.read_text(encoding="utf-8"))}


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor in {linked.name}")
    return broken


def test_the_markdown_files_include_the_readme_and_every_page():
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert "README.md" in names
    assert {f"history_app/docs/{n}.md" for n in help.page_names()} <= names
    assert len(help.page_names()) >= 10


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_broken_link(path):
    assert broken_links(path) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A title\n\n## Second `part`\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#second-part) [ok](#here) [bad](a.md#nowhere) [gone](c.md)\n"
        "## Here\n```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)`\n"
    )
    assert broken_links(page) == [
        "a.md#nowhere: no heading with that anchor in a.md",
        "c.md: no such file",
    ]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [  # anchors GitHub gave the README's headings
        ("### Install it on its own: `agent-history-lib`", "install-it-on-its-own-agent-history-lib"),
        (
            "### Record an agent: a drop-in for autourgos-history",
            "record-an-agent-a-drop-in-for-autourgos-history",
        ),
        ("### Upgrading: `redact_history`", "upgrading-redact_history"),
        ("## Model calls, tokens and cost", "model-calls-tokens-and-cost"),
        ("### Set-up: Pydantic AI (GenAI conventions)", "set-up-pydantic-ai-genai-conventions"),
        ("## Sessions: 東京 & search", "sessions-東京--search"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading, slug):
    assert help.headings(heading)[0].slug == slug


def test_a_repeated_heading_gets_a_numbered_anchor():
    assert [h.slug for h in help.headings("## Set-up\n### Set-up\n## Set-up\n")] == [
        "set-up",
        "set-up-1",
        "set-up-2",
    ]
