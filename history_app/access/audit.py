"""The audit trail: who did what to access or data, and when (``AuditEvent``)."""

from __future__ import annotations

from typing import Any

from history_app import models


def record(
    *, actor: str, action: str, target: str = "", project: models.Project | None = None, **details: Any
) -> models.AuditEvent:
    """Note an action, in ``project`` when it was one project's (its admins see it)."""
    return models.AuditEvent.objects.create(
        project=project, actor=(actor or "unknown")[:150], action=action, target=target[:255], details=details
    )
