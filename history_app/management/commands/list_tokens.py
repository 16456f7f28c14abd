from __future__ import annotations

from django.core.management.base import BaseCommand

from history_app.models import IngestToken


class Command(BaseCommand):
    help = "List the bearer tokens: prefix, project, name, scopes, created, last used, revoked (never the tokens)."

    def add_arguments(self, parser):
        parser.add_argument("--project", metavar="SLUG", help="Only the tokens of this project.")

    def handle(self, *args, project: str | None = None, **options):
        rows = IngestToken.objects.select_related("project").order_by("created_at", "pk")
        if project:
            rows = rows.filter(project__slug=project)
        if not rows:
            self.stdout.write("No tokens.")
            return
        self.stdout.write(
            f"{'prefix':14} {'project':16} {'name':24} {'scopes':22} {'created':17} {'last used':17} state"
        )
        for row in rows:
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            self.stdout.write(
                f"{row.prefix + '…':14} {row.project.slug[:16]:16} {row.name[:24]:24} {','.join(row.scopes) or '-':22} "
                f"{row.created_at:%Y-%m-%d %H:%M} {used:17} {'revoked' if row.revoked else 'active'}"
            )
