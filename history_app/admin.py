from __future__ import annotations

from django.contrib import admin

from . import models


@admin.register(models.IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "created_at", "last_used_at", "revoked"]
    readonly_fields = ["token_hash", "prefix", "created_at", "last_used_at"]
    fields = ["name", "revoked", *readonly_fields]

    def has_add_permission(self, request):  # noqa: ARG002 — tokens come from the command
        return False


@admin.register(models.Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = [
        "session_id",
        "agent_name",
        "framework",
        "run_count",
        "last_status",
        "last_activity_at",
        "pinned",
    ]
    list_filter = ["pinned", "framework", "last_status"]
    search_fields = ["=session_id", "=user_id", "agent_name"]
    show_full_result_count = False
    readonly_fields = [f.name for f in models.Session._meta.fields if f.name != "pinned"]


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "run_id",
        "agent_name",
        "status",
        "kind",
        "started_at",
        "iteration_count",
        "tool_call_count",
    ]
    list_filter = ["status", "kind", "framework"]
    search_fields = ["=run_id", "=session__session_id", "agent_name", "=user_id"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]
    show_full_result_count = False

    def has_change_permission(self, request, obj=None):  # noqa: ARG002 — ingested data is read-only
        return False
