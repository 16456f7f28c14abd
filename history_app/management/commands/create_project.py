from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from history_app.access import audit
from history_app.models import Project


class Command(BaseCommand):
    help = (
        "Create a project (a team's own sessions, tokens, members and retention). Its slug is in "
        "every URL of the project and never changes."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug", help="Letters, digits, - and _, e.g. 'support-bots'.")
        parser.add_argument("--name", help="Shown in the header (default: the slug).")
        parser.add_argument(
            "--retention-days",
            type=int,
            metavar="DAYS",
            help="Prune its unpinned sessions idle longer than this (default: HISTORY_RETENTION_DAYS).",
        )

    def handle(self, *args, slug: str, name: str | None, retention_days: int | None, **options):
        if slugify(slug) != slug or len(slug) > 50:
            raise CommandError(
                f"{slug!r} is not a slug: use lower-case letters, digits, - and _ (at most 50)"
            )
        if retention_days is not None and not 1 <= retention_days <= 100_000:
            raise CommandError("--retention-days must be from 1 to 100000")
        project, created = Project.objects.get_or_create(
            slug=slug, defaults={"name": (name or slug)[:100], "retention_days": retention_days}
        )
        if not created:
            raise CommandError(f"project {slug!r} exists already")
        audit.record(actor="command: create_project", action="project_created", project=project, target=slug)
        self.stdout.write(f"Project {slug!r} created. Add members with `add_member {slug} USER ROLE`.")
