"""The admin, built for big tables: no full counts, related rows fetched in the same query,
raw id widgets, ingested data read-only; plus the retention page and audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.defaultfilters import pluralize
from django.template.loader import render_to_string
from django.urls import path
from django.utils.functional import cached_property

from history_app import models
from history_app.access import audit
from history_app.intake import ingestion
from history_app.templatetags.history_tags import money
from history_app.upkeep import annotations as annotation_store
from history_app.upkeep import retention

COUNT_CAP = 10_000


def _superusers_only(request: HttpRequest) -> bool:
    """Django's admin is for superusers, who see every project; project admins manage
    their projects on the app's own settings pages."""
    return request.user.is_active and request.user.is_superuser


admin.site.has_permission = _superusers_only


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP + 1 rows: a COUNT(*) over millions of runs would take
    seconds on every page of the admin; "10,000+" is as useful to a person."""

    @cached_property
    def count(self) -> int:
        return self.object_list[: COUNT_CAP + 1].count()


class BigTableAdmin(admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50


# A list must fit a 1280-pixel screen beside the admin's two sidebars (issue #17): ids and
# names longer than this are shortened in lists, the whole value in the cell's title. The
# columns showing them are named short_*, which admin.css lets break anywhere (an id has no
# spaces to wrap at).
CLIP_AT = 28


def _titled(text: str, *, title: str) -> str:
    """``text`` in a cell with ``title`` on hover (``admin/history_app/titled.html``)."""
    return render_to_string("admin/history_app/titled.html", {"text": text, "title": title})


def clipped(value: object, length: int = CLIP_AT) -> str | None:
    """``value``, or, when longer than ``length``, its start and end around an ellipsis:
    the ends are what tell ids apart ("…-attempt-2" from "…-attempt-3"), and both are
    kept; the whole value is the title (shown on hover). None for no value, which the
    admin shows as "-", as it does for an empty field."""
    text = "" if value is None else str(value)
    if len(text) <= length:
        return text or None
    tail = length // 3
    return _titled(f"{text[: length - tail - 1]}…{text[-tail:]}", title=text)


def clipped_column(path: str, description: str, *, ordering: str, length: int = CLIP_AT) -> Any:
    """A changelist column showing the attribute at ``path`` ("run.run_id") ``clipped``
    to ``length``, headed ``description`` and sorted by ``ordering``."""

    def column(admin_: admin.ModelAdmin, obj: object) -> str | None:
        value = obj
        for name in path.split("."):
            value = getattr(value, name, None)
        return clipped(value, length)

    return admin.display(description=description, ordering=ordering)(column)


def _counted(count: int, noun: str) -> str:
    """ "1 session", "2 sessions"; ``noun`` is the plural, with underscores for spaces."""
    words = noun.replace("_", " ")
    if count == 1:
        words = words[:-3] + "y" if words.endswith("ies") else words[:-1]
    return f"{count:,} {words}"


def _nonzero(counts: dict[str, int], order: tuple[str, ...]) -> list[tuple[str, int]]:
    """The counts that are not zero, in ``order`` (then any others by name): PostgreSQL's
    jsonb keeps a dict's keys in an order of its own."""
    keys = [*order, *sorted(counts.keys() - set(order))]
    return [(key, counts[key]) for key in keys if counts.get(key)]


def prune_counts_summary(counts: dict[str, int]) -> str:
    """A prune log's counts in a line a person reads at a glance, "2 sessions, 4 runs
    (36 rows in all)", every count that is not zero in the title."""
    total = sum(counts.values())
    shown = ", ".join(_counted(counts.get(key, 0), key) for key in ("sessions", "runs"))
    every = ", ".join(_counted(count, key) for key, count in _nonzero(counts, retention.PRUNE_COUNT_KEYS))
    return _titled(f"{shown} ({_counted(total, 'rows')} in all)", title=every or "nothing")


class ReadOnlyAdmin(BigTableAdmin):
    """Records are read, never written, in the admin. Ingested data is what the agent
    reported; nor is it deleted piecemeal: a run or a call deleted on its own would leave
    its search document, its session's counts and the daily rollups behind; data goes with
    its session (the sessions' batched delete, retention), which is audited. Logs (prunes,
    receipts, the audit trail) are not for editing."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(models.Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "retention_days", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}

    def get_readonly_fields(self, request: HttpRequest, obj: models.Project | None = None):
        return ["slug"] if obj is not None else []  # in every URL: never changed

    def save_model(self, request: HttpRequest, obj: models.Project, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        actor = request.user.get_username()
        if not change:
            audit.record(actor=actor, action="project_created", project=obj, target=obj.slug)
        elif "retention_days" in form.changed_data:
            audit.record(
                actor=actor, action="retention_changed", project=obj, target=obj.slug, days=obj.retention_days
            )


@admin.register(models.Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["project", "role"]
    list_select_related = ["project", "user"]
    raw_id_fields = ["user"]

    def save_model(self, request: HttpRequest, obj: models.Membership, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change or "role" in form.changed_data:
            audit.record(
                actor=request.user.get_username(),
                action="role_changed" if change else "member_added",
                project=obj.project,
                target=obj.user.get_username(),
                role=obj.role,
            )

    def delete_model(self, request: HttpRequest, obj: models.Membership) -> None:
        super().delete_model(request, obj)
        audit.record(
            actor=request.user.get_username(),
            action="member_removed",
            project=obj.project,
            target=obj.user.get_username(),
            role=obj.role,
        )

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # one by one, each audited
        return actions


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "project", "short_actor", "action", "short_target"]
    list_filter = ["project", "action"]
    list_select_related = ["project"]
    search_fields = ["actor", "target"]
    readonly_fields = ["at", "project", "actor", "action", "target", "details"]

    short_actor = clipped_column("actor", "actor", ordering="actor")
    short_target = clipped_column("target", "target", ordering="target")


@admin.register(models.IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    list_display = [
        "short_name",
        "project",
        "prefix",
        "shown_scopes",
        "created_at",
        "last_used_at",
        "revoked",
    ]
    list_filter = ["project", "revoked"]
    list_select_related = ["project"]
    readonly_fields = ["project", "token_hash", "prefix", "scopes", "created_at", "last_used_at"]
    fields = ["name", "revoked", *readonly_fields]

    short_name = clipped_column("name", "name", ordering="name")

    @admin.display(description="scopes")
    def shown_scopes(self, token: models.IngestToken) -> str:
        return ", ".join(token.scopes)  # not the list's repr, "['ingest', 'read']"

    def get_readonly_fields(self, request: HttpRequest, obj: models.IngestToken | None = None):
        # A revoked token stays revoked.
        return [*self.readonly_fields, "revoked"] if obj is not None and obj.revoked else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: models.IngestToken, form, change: bool) -> None:
        revoking = change and obj.revoked and "revoked" in form.changed_data
        super().save_model(request, obj, form, change)
        if revoking:
            audit.record(
                actor=request.user.get_username(),
                action="token_revoked",
                project=obj.project,
                target=str(obj),
            )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are created by `create_ingest_token`, which shows them once

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # Revoked, never deleted: the kept hash is what keeps a revoked token revoked
        # (quickstart registering the same token again finds it).
        return False


class RetentionForm(forms.Form):
    older_than_days = forms.FloatField(
        min_value=0, max_value=retention.MAX_PRUNE_DAYS, initial=90, label="Last activity older than (days)"
    )
    status = forms.MultipleChoiceField(
        required=False,
        choices=[(s, s) for s in ("pending", "running", "completed", "failed", "cancelled")],
        widget=forms.CheckboxSelectMultiple,
        help_text="Only sessions whose last run has one of these statuses (none: any).",
    )
    agent = forms.CharField(required=False, help_text="Only sessions of this agent, team or workflow.")
    batch_size = forms.IntegerField(
        min_value=1, max_value=10_000, initial=500, label="Sessions per transaction"
    )

    def prune_kwargs(self) -> dict[str, object]:
        data = self.cleaned_data
        return {
            "older_than_days": data["older_than_days"],
            "statuses": data["status"],
            "agents": [data["agent"]] if data["agent"] else [],
            "batch_size": data["batch_size"],
        }


def with_id_prefix(sessions: QuerySet, prefix: str) -> QuerySet:
    """The sessions whose id starts with ``prefix``, found through an index on either
    database (see ``SessionAdmin.get_search_results``)."""
    if connection.vendor == "sqlite":
        # Ids compare byte by byte (SQLite's BINARY collation): the prefix's range is exact.
        return sessions.filter(session_id__gte=prefix, session_id__lt=prefix + "\U0010ffff")
    return sessions.filter(session_id__startswith=prefix)


@admin.register(models.Session)
class SessionAdmin(BigTableAdmin):
    list_display = [
        "short_session_id",
        "project",
        "short_agent_name",
        "framework",
        "run_count",
        "last_status",
        "last_activity",
        "pinned",
    ]
    list_filter = ["project", "pinned", "framework", "last_status"]
    list_select_related = ["project"]
    search_fields = ["=session_id", "=user_id", "agent_name"]
    search_help_text = (
        "A session id or its beginning (2026-11-08 finds every session whose id starts so), "
        "a user id, or part of an agent name."
    )
    readonly_fields = [f.name for f in models.Session._meta.fields if f.name != "pinned"]
    actions = ["pin_sessions", "unpin_sessions", "prune_selected"]
    change_list_template = "admin/history_app/session/change_list.html"

    short_session_id = clipped_column("session_id", "session", ordering="session_id")
    short_agent_name = clipped_column("agent_name", "agent", ordering="agent_name")

    @admin.display(description="last activity", ordering="last_activity_at")
    def last_activity(self, session: models.Session) -> datetime:
        return session.last_activity_at  # formatted by the admin, as a date field is

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        """Also the sessions whose id starts with what was typed (ids often start with a
        date or a prefix of their own), through an index on both databases: a range on
        SQLite, whose LIKE ignores case and so no index; ``LIKE 'x%'`` on PostgreSQL, which
        the column's ``varchar_pattern_ops`` index (migration 0001) answers."""
        results, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            results = results | with_id_prefix(queryset, term)
        return results, duplicates

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        # Django's own bulk delete loads every related row into memory first; ours is batched.
        actions.pop("delete_selected", None)
        return actions

    def has_delete_permission(self, request: HttpRequest, obj: models.Session | None = None) -> bool:
        # A pinned session is on legal hold: unpin it first (which is audited).
        if obj is not None and obj.pinned:
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(self, objs, request: HttpRequest):
        # A session's runs and calls go with it (delete_model): that their own admins
        # refuse deleting them one by one does not stop deleting the session.
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def save_model(self, request: HttpRequest, obj: models.Session, form, change: bool) -> None:
        # Only "pinned" can change here: it goes through the audited path.
        retention.set_pinned(
            models.Session.objects.filter(pk=obj.pk), pinned=obj.pinned, actor=request.user.get_username()
        )

    def delete_model(self, request: HttpRequest, obj: models.Session) -> None:
        retention.delete_session(obj, actor=request.user.get_username())

    @admin.action(description="Pin (legal hold: never pruned)", permissions=["change"])
    def pin_sessions(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = retention.set_pinned(queryset, pinned=True, actor=request.user.get_username())
        self.message_user(request, f"Pinned {count} session(s).")

    @admin.action(description="Unpin", permissions=["change"])
    def unpin_sessions(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = retention.set_pinned(queryset, pinned=False, actor=request.user.get_username())
        self.message_user(request, f"Unpinned {count} session(s).")

    @admin.action(
        description="Delete selected sessions (batched; pinned ones are kept)", permissions=["delete"]
    )
    def prune_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """A confirmation page first (what would go, and which are kept because pinned),
        as Django's own delete action has; the batched delete once confirmed."""
        if request.POST.get("confirm") != "yes":
            shown = list(queryset.select_related("project").order_by("-last_activity_at")[:100])
            context = {
                **self.admin_site.each_context(request),
                "title": "Delete the selected sessions?",
                "opts": self.model._meta,
                "sessions": shown,
                "total": queryset.count(),
                "pinned": queryset.filter(pinned=True).count(),
                "runs": models.Run.objects.filter(session__in=queryset.filter(pinned=False)).count(),
                "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                "select_across": request.POST.get("select_across", "0"),
            }
            return render(request, "admin/history_app/session/delete_selected.html", context)
        ids = list(queryset.values_list("pk", flat=True))
        result = retention.prune_each_project(
            session_ids=ids, trigger="action", user=request.user.get_username()
        )
        deleted, rows = result.counts["sessions"], result.total_rows - result.counts["sessions"]
        text = f"Deleted {deleted} session{pluralize(deleted)} and {rows} related row{pluralize(rows)}."
        if result.skipped_pinned:
            text += f" Kept {result.skipped_pinned} pinned session{pluralize(result.skipped_pinned)}."
        self.message_user(request, text, messages.SUCCESS)

    def get_urls(self):
        return [
            path(
                "retention/",
                self.admin_site.admin_view(self.retention_view),
                name="history_app_session_retention",
            ),
            *super().get_urls(),
        ]

    def retention_view(self, request: HttpRequest) -> HttpResponse:
        """Criteria → dry-run preview with exact counts → confirmation → the prune."""
        if not self.has_delete_permission(request):
            return HttpResponse("You may not delete sessions.", status=403)
        form = RetentionForm(request.POST or None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Retention: prune old sessions",
            "form": form,
            "opts": self.model._meta,
        }
        if request.method == "POST" and form.is_valid():
            kwargs = form.prune_kwargs()
            user = request.user.get_username()
            if "confirm" in request.POST:
                progress: list[str] = []
                result = retention.prune_each_project(
                    **kwargs,
                    trigger="admin",
                    user=user,
                    progress=lambda r: progress.append(
                        f"Batch {r.batches}: {r.counts['sessions']} session{pluralize(r.counts['sessions'])}, "
                        f"{r.total_rows} row{pluralize(r.total_rows)}"
                    ),
                )
                context.update(result=result, progress=progress, done=True)
            else:
                result = retention.prune_each_project(
                    **kwargs, dry_run=True, trigger="admin", user=user, preview=retention.PREVIEW_SIZE
                )
                context.update(
                    result=result,
                    preview=True,
                    more=result.counts["sessions"] - len(result.preview),
                    all_url=retention.candidates_admin_url(
                        cutoff=result.cutoff, statuses=kwargs["statuses"], agents=kwargs["agents"]
                    ),
                )
        return render(request, "admin/history_app/session/retention.html", context)


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "short_run_id",
        "project",
        "short_session",
        "short_agent_name",
        "status",
        "kind",
        "started_at",
        "iteration_count",
        "tool_call_count",
    ]
    list_filter = ["project", "status", "kind", "framework"]
    search_fields = ["=run_id", "=session__session_id", "agent_name", "=user_id"]
    list_select_related = ["session", "project"]
    raw_id_fields = ["session"]

    short_run_id = clipped_column("run_id", "run", ordering="run_id")
    short_session = clipped_column("session.session_id", "session", ordering="session")
    short_agent_name = clipped_column("agent_name", "agent", ordering="agent_name")


@admin.register(models.Iteration)
class IterationAdmin(ReadOnlyAdmin):
    list_display = ["short_run", "index", "short_name", "started_at"]
    search_fields = ["=run__run_id"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]

    short_run = clipped_column("run.run_id", "run", ordering="run")
    short_name = clipped_column("name", "name", ordering="name")


@admin.register(models.ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["short_tool", "short_run", "iteration", "position", "started_at"]
    search_fields = ["=run__run_id", "=tool"]
    list_select_related = ["run", "iteration"]
    raw_id_fields = ["run", "iteration"]

    short_tool = clipped_column("tool", "tool", ordering="tool")
    short_run = clipped_column("run.run_id", "run", ordering="run")


@admin.register(models.ModelCall)
class ModelCallAdmin(ReadOnlyAdmin):
    list_display = [
        "short_run",
        "position",
        "short_model",
        "short_provider",
        "input_tokens",
        "output_tokens",
        "shown_cost",
        "cost_source",
    ]
    list_filter = ["cost_source"]
    search_fields = ["=run__run_id", "=model"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "iteration"]

    short_run = clipped_column("run.run_id", "run", ordering="run")
    short_model = clipped_column("model", "model", ordering="model")
    short_provider = clipped_column("provider", "provider", ordering="provider", length=16)

    @admin.display(description="cost", ordering="cost")
    def shown_cost(self, call: models.ModelCall) -> str:
        return money(call.cost)  # as the site writes it, not 0.0074999999


@admin.register(models.MemberInteraction)
class MemberInteractionAdmin(ReadOnlyAdmin):
    list_display = ["short_member", "short_run", "short_member_run_id"]
    search_fields = ["=run__run_id", "member", "=member_run_id"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]

    short_member = clipped_column("member", "member", ordering="member")
    short_run = clipped_column("run.run_id", "run", ordering="run")
    short_member_run_id = clipped_column("member_run_id", "member run id", ordering="member_run_id")


@admin.register(models.InjectedContext)
class InjectedContextAdmin(ReadOnlyAdmin):
    list_display = ["kind", "target", "short_step", "short_run", "reported"]
    list_filter = ["kind", "target", "reported"]
    search_fields = ["=run__run_id", "step"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]

    short_step = clipped_column("step", "step", ordering="step")
    short_run = clipped_column("run.run_id", "run", ordering="run")


@admin.register(models.Annotation)
class AnnotationAdmin(BigTableAdmin):
    """Annotations as written (scores, labels, comments): superusers may delete one, not
    edit it (its author and time are its record)."""

    list_display = [
        "kind",
        "short_name",
        "value",
        "short_run",
        "iteration_index",
        "short_author",
        "created_at",
    ]
    list_filter = ["project", "kind"]
    search_fields = ["=run__run_id", "name", "=author"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    readonly_fields = [f.name for f in models.Annotation._meta.fields]

    short_name = clipped_column("name", "name", ordering="name")
    short_run = clipped_column("run.run_id", "run", ordering="run")
    short_author = clipped_column("author", "author", ordering="author")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    # Deleted as the API deletes them: the session's count and facets and the daily scores follow.
    def delete_model(self, request: HttpRequest, obj: models.Annotation) -> None:
        annotation_store.delete(
            models.Annotation.objects.filter(pk=obj.pk), actor=request.user.get_username()
        )

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        annotation_store.delete(queryset, actor=request.user.get_username())


@admin.register(models.PruneLog)
class PruneLogAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "project",
        "trigger",
        "short_user",
        "dry_run",
        "batches",
        "longest_transaction",
        "shown_counts",
    ]
    list_filter = ["project", "trigger", "dry_run"]
    list_select_related = ["project"]

    short_user = clipped_column("user", "user", ordering="user", length=20)

    @admin.display(description="longest transaction", ordering="longest_transaction_ms")
    def longest_transaction(self, log: models.PruneLog) -> str:
        return f"{log.longest_transaction_ms:,} ms"

    @admin.display(description="counts")
    def shown_counts(self, log: models.PruneLog) -> str:
        return prune_counts_summary(log.counts)


@admin.register(models.IngestReceipt)
class IngestReceiptAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "project",
        "source",
        "short_token",
        "short_label",
        "shown_state",
        "shown_counts",
    ]
    list_filter = ["project", "source", "state"]
    list_select_related = ["token", "project"]
    raw_id_fields = ["token"]

    short_token = clipped_column("token", "token", ordering="token")
    short_label = clipped_column("label", "label", ordering="label")

    @admin.display(description="counts")
    def shown_counts(self, receipt: models.IngestReceipt) -> str:
        # "3 created, 1 rejected": the counts that are not zero, not the stored dict.
        counts = _nonzero(receipt.counts, ingestion.RECEIPT_COUNT_KEYS)
        return ", ".join(f"{count:,} {key}" for key, count in counts) or "nothing"

    @admin.display(description="state")
    def shown_state(self, receipt: models.IngestReceipt) -> str:
        return receipt.shown_state
