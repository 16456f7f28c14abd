from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from history_app import audit
from history_app.models import IngestToken


class Command(BaseCommand):
    help = (
        "Revoke a bearer token, named by its prefix (as list_tokens shows it). A revoked token stays revoked."
    )

    def add_arguments(self, parser):
        parser.add_argument("prefix", help="The token's first characters (aht_…), as list_tokens shows them.")

    def handle(self, *args, prefix: str, **options):
        prefix = prefix.rstrip("…")
        rows = (
            list(IngestToken.objects.filter(prefix__startswith=prefix, revoked=False))
            if len(prefix) >= 6
            else []
        )
        if len(rows) != 1:
            raise CommandError(
                f"{len(rows)} active tokens start with {prefix!r}; give the prefix list_tokens shows (12 characters)"
            )
        IngestToken.objects.filter(pk=rows[0].pk).update(revoked=True)
        audit.record(
            actor="command: revoke_token",
            action="token_revoked",
            target=f"{rows[0].name} ({rows[0].prefix}…)",
        )
        self.stdout.write(f"Token {rows[0].name!r} ({rows[0].prefix}…) revoked.")
