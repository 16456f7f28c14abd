"""Markdown to safe HTML: Python-Markdown renders, nh3 (ammonia) sanitises.

Only structural tags survive; links keep http(s)/mailto targets only and get
``rel="noopener noreferrer nofollow"``; images are dropped so a stored answer can never
make the browser fetch a remote resource; no attribute that could run script or drive
htmx (``on*``, ``style``, ``hx-*``) survives.
"""

from __future__ import annotations

import markdown
import nh3

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "dl", "dt", "em", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "s", "strong", "sub",
    "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "abbr": {"title"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str | None) -> str:
    if not text:
        return ""
    html = markdown.markdown(text, extensions=["fenced_code", "tables", "sane_lists"], output_format="html")
    return sanitize_html(html)


def sanitize_html(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
