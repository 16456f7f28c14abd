"""The reference pages (``history_app/docs/*.md``) and the README, inside the dashboard.

Rendered by the app's own Markdown pipeline (``rendering.render``: bounded, nh3-sanitised),
with an anchor on every heading, named as GitHub names them, so that a link written for
the repository (``ingestion.md#limits``, ``../../README.md#configuration``) is rewritten
to the dashboard's address of the same place (``/help/ingestion/#limits``, ``/help/#configuration``).

Only the Markdown files directly in ``docs/`` are pages: a name is looked up in that
list, never joined to a path, so no request can read another file (``pending/`` holds
drafts and is not served).
"""

from __future__ import annotations

import html
import importlib.metadata
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.urls import reverse

from history_app.reading.rendering import render

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
README = "README.md"
DISTRIBUTION = "agent-history-dashboard"
# Our own files, not a stored answer: a wider budget than an answer's, still bounded.
RENDER_BUDGET_MS = 20_000

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK_TARGET = re.compile(r"\]\(([^()\s]+)\)")
# A link (not an image) to a file of the repository that is no page: ``[text](tests/x.py)``.
_FILE_LINK = re.compile(r"(?<![!\]])\[([^\[\]]*)\]\(([^()\s]+)\)")
_HTML_HEADING = re.compile(r"<h([1-6])>(.*?)</h\1>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    slug: str


@dataclass(frozen=True)
class Section:
    """A stretch of a page: sanitised HTML (``html``), then the heading that ends it, if
    any, as its sanitised inner HTML (``heading_html``). The template writes the heading's
    element, its id and its anchor link."""

    html: str
    heading: Heading | None = None
    heading_html: str = ""


@dataclass(frozen=True)
class Page:
    name: str  # "" for the index (the README)
    title: str
    body: tuple[Section, ...]
    headings: tuple[Heading, ...]


def slugify(text: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped (letters,
    digits, ``-`` and ``_`` kept, in any script), each space a hyphen."""
    text = unicodedata.normalize("NFC", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def heading_text(markdown_text: str) -> str:
    """The text a heading shows: links by their text, code spans and emphasis unmarked."""
    text = _MD_LINK.sub(r"\1", markdown_text)
    return text.replace("`", "").replace("**", "").replace("*", "")


class _Slugs:
    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def next(self, text: str) -> str:
        base = slugify(text)
        count = self.seen.get(base, 0)
        self.seen[base] = count + 1
        return base if count == 0 else f"{base}-{count}"


def headings(markdown: str) -> list[Heading]:
    """Every ATX heading outside fenced code, with its GitHub anchor."""
    found, fenced, slugs = [], False, _Slugs()
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            text = heading_text(match.group(2))
            found.append(Heading(len(match.group(1)), text, slugs.next(text)))
    return found


def page_names() -> list[str]:
    """The pages: the Markdown files directly in docs/, by name without ``.md``."""
    return sorted(p.stem for p in DOCS_DIR.glob("*.md") if p.is_file())


def page_title(markdown: str, fallback: str) -> str:
    first = next((h for h in headings(markdown) if h.level == 1), None)
    return first.text if first else fallback


def readme_text() -> str | None:
    """The README: the checkout's, else the one the installed distribution carries as its
    description (pyproject's ``readme``), so an installed app has its index too."""
    path = Path(settings.BASE_DIR) / README
    if path.is_file():
        return path.read_text(encoding="utf-8")
    try:
        return importlib.metadata.metadata(DISTRIBUTION).get_payload() or None
    except importlib.metadata.PackageNotFoundError:
        return None


def rewrite_links(markdown: str, *, in_readme: bool) -> str:
    """Links between the pages and to the README's anchors, as dashboard addresses; a link
    to another file of the repository (a test, a screenshot) becomes its text."""
    names = set(page_names())
    index = reverse("history_app:help")

    def target(match: re.Match) -> str:
        url = match.group(1)
        path, _, fragment = url.partition("#")
        anchor = f"#{fragment}" if fragment else ""
        if "://" in url or url.startswith(("mailto:", "/")) or not path:
            return match.group(0)
        name = path.rsplit("/", 1)[-1]
        if name == README and path in (README, f"../../{README}", f"../{README}"):
            new = f"{index}{anchor}"
        elif name.endswith(".md") and name[:-3] in names:
            expected = f"history_app/docs/{name}" if in_readme else name
            if path not in (expected, f"./{name}"):
                return match.group(0)
            new = reverse("history_app:help_page", args=[name[:-3]]) + anchor
        else:
            return match.group(0)
        return f"]({new})"

    def file_link(match: re.Match) -> str:
        url = match.group(2)
        path = url.partition("#")[0]
        if "://" in url or url.startswith(("mailto:", "/", "#")) or not path or path.endswith(".md"):
            return match.group(0)
        return match.group(1)  # the dashboard serves no repository files: the text alone

    return _LINK_TARGET.sub(target, _FILE_LINK.sub(file_link, markdown))


def _sections(rendered: str) -> tuple[Section, ...]:
    """The sanitised HTML cut at its headings, each heading named by its anchor (given
    after nh3, which keeps no ``id``: the slug is ours, made of letters, digits, ``-`` and
    ``_`` only)."""
    slugs, sections, start = _Slugs(), [], 0
    for match in _HTML_HEADING.finditer(rendered):
        level, inner = int(match.group(1)), match.group(2)
        text = html.unescape(_TAG.sub("", inner))
        sections.append(
            Section(rendered[start : match.start()], Heading(level, text, slugs.next(text)), inner)
        )
        start = match.end()
    sections.append(Section(rendered[start:]))
    return tuple(sections)


def _render(name: str, markdown: str, fallback_title: str) -> Page:
    rendering = render(rewrite_links(markdown, in_readme=not name), budget_ms=RENDER_BUDGET_MS)
    body = _sections(rendering.html)
    found = tuple(section.heading for section in body if section.heading)
    return Page(name, page_title(markdown, fallback_title), body, found)


_cache: dict[str, tuple[tuple[str, tuple[str, ...]], Page]] = {}


def _cached(name: str, markdown: str, fallback_title: str) -> Page:
    """The rendered page, kept while what it was rendered from stays the same: its Markdown
    and the pages there are (a link to a page that exists becomes a dashboard address, so
    a page rendered with other pages present links otherwise)."""
    key = (markdown, tuple(page_names()))
    hit = _cache.get(name)
    if hit and hit[0] == key:
        return hit[1]
    page = _render(name, markdown, fallback_title)
    _cache[name] = (key, page)
    return page


def page(name: str) -> Page | None:
    """The page ``name`` (one of ``page_names()``), or None."""
    if name not in page_names():
        return None
    return _cached(name, (DOCS_DIR / f"{name}.md").read_text(encoding="utf-8"), name)


def index() -> Page:
    """The README, or where it cannot be found, the list of pages."""
    markdown = readme_text()
    if markdown is None:
        markdown = "# Help\n\n" + "\n".join(f"- [{n}]({n}.md)" for n in page_names())
        return _render("index", markdown, "Help")
    return _cached("", markdown, "Help")


def contents() -> list[tuple[str, str]]:
    """The help's table of contents: each page's name and title, in the README's order
    where the README links it, the rest after."""
    names = page_names()
    titles = {}
    for name in names:
        titles[name] = page_title((DOCS_DIR / f"{name}.md").read_text(encoding="utf-8"), name)
    readme = readme_text() or ""
    order = [
        n for n in dict.fromkeys(re.findall(r"history_app/docs/([a-z0-9-]+)\.md", readme)) if n in titles
    ]
    return [(n, titles[n]) for n in order + [n for n in names if n not in order]]
