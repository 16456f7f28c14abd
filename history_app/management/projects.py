"""The ``--project`` option the commands share."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from history_app.models import Project


def add_project_argument(parser: Any, what: str) -> None:
    parser.add_argument(
        "--project",
        default=Project.DEFAULT_SLUG,
        metavar="SLUG",
        help=f"The project {what} (default: {Project.DEFAULT_SLUG!r}).",
    )


def project_named(slug: str) -> Project:
    """The project ``slug``; the default project is created when missing, any other must
    exist."""
    if slug == Project.DEFAULT_SLUG:
        return Project.default()
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        known = ", ".join(Project.objects.order_by("slug").values_list("slug", flat=True)[:20])
        raise CommandError(f"no project {slug!r} (projects: {known}); create it with `create_project {slug}`")
    return project
