"""The audit trail: who did what to access or data, and when (``AuditEvent``)."""

from __future__ import annotations

from typing import Any

from . import models


def record(*, actor: str, action: str, target: str = "", **details: Any) -> models.AuditEvent:
    return models.AuditEvent.objects.create(
        actor=(actor or "unknown")[:150], action=action, target=target[:255], details=details
    )
