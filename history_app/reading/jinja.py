"""The Jinja2 environment of the templates drawn once per line of a JSON tree
(``templates/jinja2/history_app/``): Django's template engine takes 30–125 µs to draw a
line of a tree, and a run page holds thousands of them; Jinja2 compiles a template to
Python and draws the same line several times faster.

It is Django's own Jinja2 backend, the second engine of ``settings.TEMPLATES``, reading
only ``templates/jinja2/`` (no Django template is ever parsed by it, and the Django
engine, first in the list, answers every other name). Autoescaping is on, and every value
is escaped as Django escapes it (``&quot;`` and ``&#x27;``, where MarkupSafe alone writes
``&#34;`` and ``&#39;``), so a tree drawn here is byte for byte the tree a Django template
drew from the same data.
"""

from __future__ import annotations

import html
from typing import Any

import jinja2
from django.utils.html import strip_spaces_between_tags
from markupsafe import Markup

from history_app.templatetags.history_tags import thousands


def environment(**options: Any) -> jinja2.Environment:
    """The environment ``settings.TEMPLATES`` names: autoescaping (the backend's default,
    kept), Django's escaping of each value, and an undefined name an error rather than
    empty text, so that a misspelt field fails the tests instead of drawing nothing."""
    options["undefined"] = jinja2.StrictUndefined
    env = jinja2.Environment(finalize=escape_as_django, **options)
    env.filters["thousands"] = thousands
    env.filters["spaceless"] = spaceless
    return env


def escape_as_django(value: Any) -> Any:
    """``value`` as Django's ``conditional_escape`` would write it, for autoescaping to
    finish: markup (a macro's output) as it is; text with a quote escaped here, since
    Django writes ``&quot;`` and ``&#x27;`` where MarkupSafe writes ``&#34;`` and ``&#39;``;
    any other text as it is, for autoescaping to escape its ``&``, ``<`` and ``>`` exactly
    as Django does. Jinja2 calls it on each ``{{ value }}``, before autoescaping. Not
    Django's own function: its lazy-text wrapper and a marked-safe string for every value
    doubled the time of a tree."""
    if hasattr(value, "__html__"):
        return value
    text = str(value)
    if '"' in text or "'" in text:
        return Markup(html.escape(text))  # noqa: S704 - escaped here, as Django's escape()
    return text


def spaceless(markup: Markup) -> Markup:
    """Django's ``{% spaceless %}`` as a filter, ``{% filter spaceless %}…{% endfilter %}``:
    the whitespace between two tags removed, and at both ends."""
    return Markup(strip_spaces_between_tags(markup.strip()))  # noqa: S704 - markup in, markup out
