"""Markdown to safe HTML: Python-Markdown renders, nh3 (ammonia) sanitises.

Only structural tags survive; links keep http(s)/mailto targets only and get
``rel="noopener noreferrer nofollow"``; images are dropped so a stored answer can never
make the browser fetch a remote resource; no attribute that could run script or drive
htmx (``on*``, ``style``, ``hx-*``) survives.

Rendering is bounded, because every rendered text is attacker-controlled: a text that
nests lists or quotes more than ``MAX_NESTING`` deep, that recurses too deeply, or whose
rendering takes longer than ``HISTORY_MARKDOWN_BUDGET_MS`` is shown escaped, as
preformatted text under a note, and never lost. The budget is a deadline checked inside
Python-Markdown's own loops (each block processor test, each inline match, each stage),
not a signal: the server may render in a thread, and a thread cannot be interrupted.
Two parts of Python-Markdown are replaced because they are quadratic on runs of ``[``,
``[a](`` or ``<a href='``: the link patterns' bracket and parenthesis scans (by regular
expressions that nest at most ``MAX_NESTING`` pairs), and the raw HTML block
preprocessor (raw HTML is still passed through inline, then sanitised).

This module is the only producer of HTML outside the templates: Markdown becomes HTML
here (sanitised, or escaped under its note when it cannot be rendered), and the result
may be stored (``Run.output_html``). Everything else the pages show is markup written in
``templates/`` from data that Python gives them (``present``, ``help``, ``snippets``).
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from time import monotonic

import markdown
import nh3
from django.conf import settings
from markdown.extensions import Extension
from markdown.inlinepatterns import LinkInlineProcessor

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "dl", "dt", "em", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "s", "strong", "sub",
    "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "abbr": {"title"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}
EXTENSIONS = ["fenced_code", "tables", "sane_lists"]

# Deeper lists or quotes are shown escaped: Python-Markdown recurses once per level.
MAX_NESTING = 32
FALLBACK_CLASS = "markdown-fallback"

_MANY_REFERENCES = re.compile(r"(?:&[^<>&]*+){32}")
_CONTAINER_PREFIX = re.compile(r"^([ \t>]+)((?:[-*+]|\d{1,9}[.)])[ \t])?", re.MULTILINE)


@dataclass(frozen=True)
class Rendering:
    html: str
    fallback: str = ""  # why the text is shown escaped; empty when it was rendered


class _OverBudget(Exception):
    pass


def render_markdown(text: str | None, *, budget_ms: int | None = None) -> str:
    return render(text, budget_ms=budget_ms).html


def render(text: str | None, *, budget_ms: int | None = None) -> Rendering:
    """The text as sanitised HTML, or escaped under a note when it cannot be rendered
    safely within ``budget_ms`` (default ``HISTORY_MARKDOWN_BUDGET_MS``)."""
    if not text:
        return Rendering("")
    if budget_ms is None:
        budget_ms = settings.HISTORY_MARKDOWN_BUDGET_MS
    if nesting_depth(text) > MAX_NESTING:
        return _escaped(text, f"it nests lists or quotes more than {MAX_NESTING} levels deep")
    # A converter is built once per thread and reset after each text: building one (its
    # extensions registered, its parser made) cost most of a short answer's rendering.
    # It is taken while it converts, so a conversion that fails (over its budget, too
    # deep, anything) leaves no half-used converter behind: the next text builds a new one.
    converter, bounded = getattr(_converters, "pair", None) or _new_converter()
    _converters.pair = None
    # The budget is the conversion's alone: building the converter loads its extensions
    # (the first time in a process, Python-Markdown reads every installed package's entry
    # points, which took over 500 ms once in CI), a cost of the process, not of the text.
    bounded.deadline = monotonic() + budget_ms / 1000
    try:
        rendered = converter.convert(text)
    except _OverBudget:
        return _escaped(text, f"rendering it as Markdown would take longer than {budget_ms} ms")
    except RecursionError:
        return _escaped(text, "it nests too deeply to render as Markdown")
    converter.reset()
    _converters.pair = (converter, bounded)
    return Rendering(sanitize_html(rendered))


# Each thread's converter and its deadline check, between two conversions.
_converters = threading.local()


def _new_converter() -> tuple[markdown.Markdown, _Bounded]:
    bounded = _Bounded()
    return markdown.Markdown(extensions=[*EXTENSIONS, bounded]), bounded


def nesting_depth(text: str) -> int:
    """The deepest list or quote nesting of any line: each ``>`` counts one, and so does
    each four columns of indentation before a list marker."""
    deepest = 0
    for lead, marker in _CONTAINER_PREFIX.findall(text):
        depth = lead.count(">")
        if marker:
            depth += len(lead.expandtabs(4).replace(">", "")) // 4 + 1
        deepest = max(deepest, depth)
    return deepest


def plain_text(text: str | None, reason: str) -> Rendering:
    """The text escaped, as preformatted text under a note saying why it is not rendered."""
    return _escaped(text or "", reason)


def _escaped(text: str, reason: str) -> Rendering:
    note = f'<p class="{FALLBACK_CLASS}">Shown as plain text: {html.escape(reason)}.</p>'
    return Rendering(f"{note}<pre>{html.escape(text)}</pre>", fallback=reason)


def sanitize_html(dirty: str) -> str:
    # nh3 takes time quadratic in the character references of one text node (1.1 s for
    # 256 KB of "&amp;#"); an empty comment after every 32 of them splits the node, and
    # the comments are stripped, so the output is the same, in linear time.
    return nh3.clean(
        _MANY_REFERENCES.sub(r"\g<0><!---->", dirty),
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


class _Bounded(Extension):
    """Checks the deadline before every block test, inline match and processing stage,
    and bounds the link patterns' look-ahead. Registered last, so it sees every processor."""

    def __init__(self) -> None:
        super().__init__()
        self.deadline = float("inf")  # set once the converter is built

    def check(self) -> None:
        if monotonic() >= self.deadline:
            raise _OverBudget

    def guarded(self, method):
        @wraps(method)
        def call(*args, **kwargs):
            self.check()
            return method(*args, **kwargs)

        return call

    def extendMarkdown(self, md: markdown.Markdown) -> None:
        md.preprocessors.deregister("html_block")
        for processor in md.parser.blockprocessors:
            processor.test = self.guarded(processor.test)
        # A table's rows are split one by one inside one ``run``, and splitting one row
        # pairs every pipe with every backtick run (quadratic in the row's length): check
        # before each row, and leave rows longer than any real table's to the paragraph
        # processor (whose inline patterns are bounded).
        tables = md.parser.blockprocessors["table"]
        tables._split_row = self.guarded(tables._split_row)
        tables.test = _short_rows_only(tables.test)
        for stage in (md.preprocessors, md.treeprocessors, md.postprocessors):
            for processor in stage:
                processor.run = self.guarded(processor.run)
        # The fenced code preprocessor loops over the whole text inside one ``run``,
        # copying it once per block: check before each search for the next block.
        fenced = md.preprocessors["fenced_code_block"]
        fenced.FENCED_BLOCK_RE = _Searching(fenced.FENCED_BLOCK_RE, self.check)
        for pattern in md.inlinePatterns:
            pattern.handleMatch = self.guarded(pattern.handleMatch)
            if hasattr(pattern, "search"):
                # The emphasis processor pairs every delimiter of a text inside one
                # ``handleMatch``, calling ``search`` once per delimiter.
                pattern.search = self.guarded(pattern.search)
            if isinstance(pattern, LinkInlineProcessor):
                pattern.getText = _link_text
                pattern.getLink = _bounded_link(pattern.getLink)


MAX_TABLE_ROW = 2_000


def _short_rows_only(test):
    @wraps(test)
    def call(parent, block: str) -> bool:
        return all(len(row) <= MAX_TABLE_ROW for row in block.split("\n")) and test(parent, block)

    return call


@dataclass(frozen=True)
class _Searching:
    pattern: re.Pattern[str]
    check: Callable[[], None]

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self.check()
        return self.pattern.search(text, pos)


def _balanced(opening: str, closing: str, depth: int) -> re.Pattern[str]:
    """Text up to the ``closing`` matching an ``opening`` just before, nesting at most
    ``depth`` pairs inside. Possessive quantifiers never backtrack, so one match costs
    at most the length it scans, and a character is scanned by at most ``depth + 1``
    openers: linear in all."""
    other = f"[^\\{opening}\\{closing}]*+"
    inner = other
    for _ in range(depth):
        inner = f"{other}(?:\\{opening}{inner}\\{closing}{other})*+"
    return re.compile(f"({inner})\\{closing}")


_LINK_TEXT = _balanced("[", "]", MAX_NESTING)
_LINK_TARGET = _balanced("(", ")", MAX_NESTING)


def _link_text(data: str, index: int) -> tuple[str, int, bool]:
    """Python-Markdown's ``getText`` (the text up to the ``]`` matching the ``[`` just
    before ``index``), without its character-by-character scan to the end of the text
    for every unmatched ``[``."""
    match = _LINK_TEXT.match(data, index)
    if match is None:
        return "", index, False
    return match.group(1), match.end(), True


def _bounded_link(get_link):
    """Python-Markdown's ``getLink`` scans to the end of the text for every unclosed
    ``(``; call it only when the ``(`` at ``index`` is closed."""

    @wraps(get_link)
    def bounded(data: str, index: int) -> tuple[str, str | None, int, bool]:
        if data.startswith("(", index) and _LINK_TARGET.match(data, index + 1):
            return get_link(data, index)
        return "", None, index, False

    return bounded
