from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.template.loader import get_template
from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.html import escape
from django.utils.safestring import mark_safe

from history_app.agent_history import jsonstream
from history_app.reading import present

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """JSON with indentation; escaped by the template like any other text."""
    if value is None:
        return "null"
    return jsonstream.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def duration(ms: int | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def thousands(number: int | None) -> str:
    """5000 as "5,000"."""
    return f"{number:,}" if isinstance(number, int) else ""


@register.filter
def redaction_items(redactions: dict[str, int] | None) -> list[tuple[str, int]]:
    return sorted((redactions or {}).items(), key=lambda item: (-item[1], item[0]))


@register.filter
def get_item(mapping: dict | None, key: Any) -> Any:
    """``mapping[key]`` in a template, or None."""
    return (mapping or {}).get(key)


@register.simple_tag
def json_tree(view: present.JsonView) -> str:
    """A ``present.JsonView`` drawn: ``{% json_tree view %}``. The markup is the Jinja2
    template ``templates/jinja2/history_app/json.html`` (a tree has thousands of lines,
    which Django's engine draws several times slower)."""
    html = get_template("history_app/json.html", using="jinja2").render({"view": view})
    # Jinja2 escaped every value as it drew (autoescaping, with Django's escaping:
    # history_app/reading/jinja.py), so its output is markup; marked safe here, once, so
    # that the Django template it goes into does not escape it again.
    return mark_safe(html)  # noqa: S308


@register.simple_tag
def json_text_tree(text: str) -> str:
    """Stored JSON text as collapsible, highlighted JSON: ``{% json_text_tree text %}``."""
    return json_tree(present.json_text_view(text))


@register.simple_tag
def observation(text: str | None) -> str:
    """An observation, as a JSON tree when it is an object or array, else folded text."""
    return json_tree(present.observation_view(text))


@register.inclusion_tag("history_app/includes/fold.html")
def folded(text: str | None) -> dict[str, Any]:
    """Text escaped, its rest past ``present.FOLD_TEXT_CHARS`` behind "show all"."""
    return {"fold": present.fold_text(text)}


@register.filter
def linebreaks_count(text: str | None) -> int:
    return (text or "").count("\n") + 1 if text else 0


@register.filter
def money(cost: float | None) -> str:
    """A cost in US dollars: "$0.0075", "$12.40"; "no price" when none is known."""
    if cost is None:
        return "no price"
    if abs(cost) < 5e-10:  # nothing, or what float sums taken back down leave
        return "$0"
    if cost < 0.9999995:
        # Six decimals below a cent (model calls cost fractions of one), four above.
        text = f"{cost:.6f}" if cost < 0.01 else f"{cost:.4f}"
        text = text.rstrip("0")
        if text in ("0.", "-0."):
            return "<$0.000001"
        return f"${text}" if text != "1." else "$1.00"
    return f"${cost:,.2f}"


@register.filter
def part_label(part: str) -> str:
    """What a message a model received was, in words."""
    return {
        "instructions": "instructions",
        "history": "history",
        "context": "injected context",
        "input": "new input",
        "run": "this run so far",
    }.get(part, "")


def ago(moment: datetime, now: datetime | None = None) -> str:
    """``moment`` relative to now, short: "just now", "5 min ago", "3 h ago", "2 days ago";
    beyond 30 days (or in the future) its date."""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 0 or seconds >= 30 * 86400:
        return format_date(timezone.localtime(moment), "Y-m-d")
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


@register.inclusion_tag("history_app/includes/when.html")
def when(moment: datetime | None) -> dict[str, Any]:
    """A time as a user reads it in a list: relative ("3 h ago"), the exact time on hover
    and in the ``datetime`` attribute; "—" for none."""
    if moment is None:
        return {"moment": None}
    exact = format_date(timezone.localtime(moment), "Y-m-d H:i:s")
    return {"moment": moment, "iso": moment.isoformat(), "exact": exact, "ago": ago(moment)}


@register.filter
def keep_cr(text: str | None) -> str:
    """``text`` escaped, each carriage return written as ``&#13;``: an HTML parser turns a
    literal CR or CRLF into LF (in text and in attribute values alike), a character
    reference it keeps, so what a copy button copies is the text exactly as sent."""
    return mark_safe(escape(text or "").replace("\r", "&#13;"))  # noqa: S308 - escaped first


@register.filter
def comment_count(notes: list | None) -> int:
    """How many of a run's annotations are comments."""
    return sum(1 for note in notes or () if note.kind == "comment")
