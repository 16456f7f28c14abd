from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, register_converter

from history_app.access import project_pages
from history_app.intake import api, traces
from history_app.reading import annotations_api, views


class IdConverter:
    """A run or session id in a URL: any text but "/" and NUL. Stored ids never hold a NUL
    (it becomes U+FFFD at ingestion), and PostgreSQL refuses one in a query, so such a URL
    is simply not found, the same on both databases."""

    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(IdConverter, "id")

app_name = "history_app"

# A project's pages: /p/<slug>/… (``access.project_view`` reads the slug).
project_patterns = [
    path("", views.session_list, name="session_list"),
    path("sessions/<id:session_id>/", views.session_detail, name="session_detail"),
    path("sessions/<id:session_id>/pin/", project_pages.session_pin, name="session_pin"),
    path("sessions/<id:session_id>/delete/", project_pages.session_delete, name="session_delete"),
    path("runs/<id:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<id:run_id>/iterations/", views.run_iterations, name="run_iterations"),
    path("runs/<id:run_id>/iterations/<int:position>/calls/", views.run_tool_calls, name="run_tool_calls"),
    path("runs/<id:run_id>/contexts/", views.run_contexts, name="run_contexts"),
    path("runs/<id:run_id>/model-calls/", views.run_model_calls, name="run_model_calls"),
    path("runs/<id:run_id>/model-calls/<int:number>/", views.model_call_detail, name="model_call_detail"),
    path("runs/<id:run_id>/context/<int:number>/", views.context_detail, name="context_detail"),
    path("runs/<id:run_id>/context/<int:number>/text/", views.context_text, name="context_text"),
    path("runs/<id:run_id>/export.<str:fmt>", views.run_export, name="run_export"),
    path("runs/<id:run_id>/annotations/", project_pages.annotation_add, name="annotation_add"),
    path(
        "runs/<id:run_id>/annotations/<int:pk>/delete/",
        project_pages.annotation_delete,
        name="annotation_delete",
    ),
    path("sessions/<id:session_id>/export.<str:fmt>", views.session_export, name="session_export"),
    path("compare/", views.compare_runs, name="compare"),
    path("receipts/", views.receipt_list, name="receipt_list"),
    path("stats/", views.stats, name="stats"),
    path("connect/", views.connect_page, name="connect"),
    path("connect/token/", project_pages.connect_token, name="connect_token"),
    path("settings/", project_pages.project_settings, name="project_settings"),
    path("settings/members/", project_pages.member_add, name="member_add"),
    path("settings/members/<int:pk>/", project_pages.member_change, name="member_change"),
    path("settings/tokens/", project_pages.token_create, name="token_create"),
    path("settings/tokens/<int:pk>/revoke/", project_pages.token_revoke, name="token_revoke"),
    path("settings/retention/", project_pages.retention_settings, name="retention_settings"),
]

history_patterns = [
    path("", project_pages.home, name="home"),
    path("p/<slug:project>/", include(project_patterns)),
    path("switch/<slug:slug>/", project_pages.switch_project, name="switch_project"),
    # The reference pages (history_app/docs/): no login, they hold no data.
    path("help/", views.help_index, name="help"),
    path("help/<slug:page>/", views.help_page, name="help_page"),
    # The addresses from before projects: redirected into the one project the user sees
    # that holds the id (a choice when several do, 404 when none).
    path("sessions/<id:ident>/", project_pages.legacy, {"kind": "session"}, name="legacy_session"),
    path("sessions/<id:ident>/<path:rest>", project_pages.legacy, {"kind": "session"}),
    path("runs/<id:ident>/", project_pages.legacy, {"kind": "run"}, name="legacy_run"),
    path("runs/<id:ident>/<path:rest>", project_pages.legacy, {"kind": "run"}),
    path("stats/", project_pages.legacy, {"kind": "page"}),
    path("receipts/", project_pages.legacy, {"kind": "page"}),
    path("api/v1/ingest", api.ingest, name="api_ingest"),
    path("v1/traces", traces.traces, name="otlp_traces"),
    # The pages' JSON twins: the pages' own views, answering their data (``as_json``).
    path("api/v1/receipts", views.receipt_list, {"as_json": True}, name="api_receipts"),
    path("api/v1/sessions", views.session_list, {"as_json": True}, name="api_sessions"),
    path(
        "api/v1/sessions/<id:session_id>",
        views.session_detail,
        {"as_json": True, "shape": "runs"},
        name="api_session_detail",
    ),
    path(
        "api/v1/sessions/<id:session_id>/timeline",
        views.session_detail,
        {"as_json": True},
        name="api_session_timeline",
    ),
    path("api/v1/runs/<id:run_id>", views.run_detail, {"as_json": True}, name="api_run_detail"),
    path("api/v1/runs/<id:run_id>/annotations", annotations_api.run_annotations, name="api_run_annotations"),
    path(
        "api/v1/runs/<id:run_id>/annotations/<int:pk>",
        annotations_api.run_annotation,
        name="api_run_annotation",
    ),
    path("api/v1/stats", views.stats, {"as_json": True}, name="api_stats"),
    path("api/v1/connect", views.connect_page, {"as_json": True}, name="api_connect"),
    path("api/v1/compare", views.compare_runs, {"as_json": True}, name="api_compare"),
    path(
        "api/v1/runs/<id:run_id>/contexts/<int:number>",
        views.context_detail,
        {"as_json": True},
        name="api_context_detail",
    ),
    path(
        "api/v1/runs/<id:run_id>/model-calls/<int:number>",
        views.model_call_detail,
        {"as_json": True},
        name="api_model_call_detail",
    ),
]

urlpatterns = [
    path("", include((history_patterns, "history_app"))),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]

handler400 = "history_app.errors.bad_request"
handler403 = "history_app.errors.permission_denied"
handler404 = "history_app.errors.page_not_found"
handler500 = "history_app.errors.server_error"
