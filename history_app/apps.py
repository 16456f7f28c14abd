from __future__ import annotations

from django.apps import AppConfig


class HistoryAppConfig(AppConfig):
    name = "history_app"
    verbose_name = "Agent history"
    default_auto_field = "django.db.models.BigAutoField"
