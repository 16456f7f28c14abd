"""One form per page for its query string: the only place query parameters are read.

Each page binds its form to ``request.GET``; a value the page cannot use is a
``BadParameter`` naming the field, which the views answer with a 400 (a page) or the JSON
error shape (under ``/api/``), never a 500.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from history_app.agent_history.records import RUN_STATUSES
from history_app.reading.paging import BadParameter

FIRST_DAY, LAST_DAY = date(1, 1, 2), date(9999, 12, 30)
# Sort name of the session list -> (field, descending).
SESSION_SORTS = {
    "recent": ("last_activity_at", True),
    "oldest": ("last_activity_at", False),
    "runs": ("run_count", True),
    "failures": ("failed_count", True),
    "annotations": ("annotation_count", True),
    # By the mean of the numeric score named in ``annotated`` (sessions without it left out).
    "score_low": ("score_mean", False),
    "score_high": ("score_mean", True),
}
SCORE_SORTS = ("score_low", "score_high")
TRUE_VALUES = {"1", "on", "true"}


class WholeNumberField(forms.Field):
    """A number written in ASCII digits from ``low`` to ``high``: a sign, a decimal point,
    "²", "٣" or thousands of digits are refused before ``int`` sees them."""

    def __init__(
        self,
        *,
        low: int,
        high: int,
        default: int | None = None,
        blank_is_default: bool = False,
        **kwargs: Any,
    ):
        super().__init__(required=False, **kwargs)
        self.low, self.high, self.default, self.blank_is_default = low, high, default, blank_is_default

    def clean(self, value: Any) -> int | None:
        # Absent means the default; present but empty only where a form sends it so (the
        # inspector's number boxes), elsewhere it is a mistake worth a 400.
        if value is None or (value == "" and self.blank_is_default):
            return self.default
        value = str(value)
        if not (value.isascii() and value.isdigit() and len(value) <= 12) or not (
            self.low <= int(value) <= self.high
        ):
            shown = value if len(value) <= 40 else value[:40] + "…"
            raise ValidationError(f"{shown!r} is not a whole number from {self.low} to {self.high}")
        return int(value)


class QueryText(forms.Field):
    """Text from a query string: trimmed, without NUL (PostgreSQL refuses it in any text),
    at most ``max_chars`` characters (longer is refused, or cut with ``cut``)."""

    def __init__(self, *, max_chars: int = 255, cut: bool = False, choices: Any = None, **kwargs: Any):
        super().__init__(required=False, **kwargs)
        self.max_chars, self.cut, self.choices = max_chars, cut, choices

    def clean(self, value: Any) -> str:
        value = ("" if value is None else str(value)).strip()
        if len(value) > self.max_chars and not self.cut:
            raise ValidationError(f"at most {self.max_chars} characters")
        if "\x00" in value:
            raise ValidationError("contains a NUL character")
        if value and self.choices is not None and value not in self.choices:
            raise ValidationError(f"must be one of {', '.join(self.choices)}")
        return value[: self.max_chars]


class DayField(QueryText):
    """A day (YYYY-MM-DD) away from both ends of the calendar: the filters use the day after
    "to", and a day's start moved to UTC must still be a date."""

    def clean(self, value: Any) -> date | None:  # type: ignore[override]
        text = super().clean(value)
        if not text:
            return None
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise ValidationError(f"{text!r} is not a date (YYYY-MM-DD)") from None
        if not FIRST_DAY <= day <= LAST_DAY:
            raise ValidationError(f"must be between {FIRST_DAY} and {LAST_DAY}")
        return day


class FlagField(forms.Field):
    def __init__(self, **kwargs: Any):
        super().__init__(required=False, **kwargs)

    def clean(self, value: Any) -> bool:
        return value in TRUE_VALUES


class QueryForm(forms.Form):
    """A query-string form whose errors are ``BadParameter``: ``read`` gives the cleaned
    values or raises for the first bad field, in the form's field order."""

    @classmethod
    def read(cls, params: Any, **kwargs: Any) -> dict[str, Any]:
        form = cls(params, **kwargs)
        if not form.is_valid():
            name, messages = next(iter(form.errors.items()))
            raise BadParameter(name if name != "__all__" else cls.whole_form_field, messages[0])
        return form.cleaned_data

    whole_form_field = "$"


class SessionFilterForm(QueryForm):
    """The session list (and its JSON twin): search, filters and sort."""

    whole_form_field = "to"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # "from" is a Python keyword: declared here, not as a class attribute.
        self.fields["q"] = QueryText(max_chars=500, cut=True)
        for name in ("framework", "agent"):
            self.fields[name] = QueryText()
        self.fields["status"] = QueryText(choices=RUN_STATUSES)
        for name in ("user", "tool", "annotated"):
            self.fields[name] = QueryText()
        self.fields["from"] = DayField()
        self.fields["to"] = DayField()
        self.fields["errors"] = FlagField()
        self.fields["sort"] = QueryText(choices=tuple(SESSION_SORTS))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("from") and data.get("to") and data["from"] > data["to"]:
            raise ValidationError("the end of the date range is before its start")
        data["sort"] = data.get("sort") or "recent"
        if data["sort"] in SCORE_SORTS and data.get("annotated", "") in ("", "comment"):
            self.add_error(
                "sort", "sorting by a score needs the score's name in annotated (annotated=correct)"
            )
        return data


class SliceForm(QueryForm):
    """The next slice of a run page's list (iterations, tool calls, contexts)."""

    def __init__(self, *args: Any, high: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["start"] = WholeNumberField(low=0, high=high, default=0)


class ModelCallForm(QueryForm):
    """A model call's page: ``full`` is the message shown whole (counted from 0)."""

    full = WholeNumberField(low=0, high=2**31 - 1, blank_is_default=True)


class StatsForm(QueryForm):
    days = WholeNumberField(low=1, high=365, default=30)


class InspectorForm(QueryForm):
    """Re-render settings of the context inspector; unset ones keep the context's own."""

    def __init__(self, *args: Any, max_runs: int, max_items: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["runs"] = WholeNumberField(low=0, high=max_runs, blank_is_default=True)
        self.fields["items"] = WholeNumberField(low=0, high=max_items, blank_is_default=True)
        self.fields["timestamps"] = FlagField()


# -- the project settings page's forms (POST) ---------------------------------------------


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="User name")
    role = forms.ChoiceField(choices=[("viewer", "viewer"), ("editor", "editor"), ("admin", "admin")])


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. the agent that sends runs.")
    scopes = forms.MultipleChoiceField(
        choices=[
            ("ingest", "ingest: write runs and spans"),
            ("read", "read: the JSON API"),
            ("annotate", "annotate: scores and comments"),
        ],
        widget=forms.CheckboxSelectMultiple,
        initial=["ingest"],
    )


class RetentionDaysForm(forms.Form):
    retention_days = WholeNumberField(
        low=1, high=100_000, blank_is_default=True, label="Keep idle sessions for (days)"
    )
