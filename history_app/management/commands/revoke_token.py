from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from history_app.access import audit
from history_app.access.auth import PREFIX_LENGTH
from history_app.models import IngestToken


class Command(BaseCommand):
    help = (
        "Revoke a bearer token, named by its prefix (as list_tokens shows it). A revoked token stays revoked."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "prefix", help=f"The token's first {PREFIX_LENGTH} characters (aht_…), as list_tokens shows them."
        )

    def handle(self, *args, prefix: str, **options):
        # The whole prefix list_tokens shows (or the token itself), compared exactly: case
        # counts (SQLite's LIKE would ignore it), and a few characters could name another.
        prefix = prefix.rstrip("…")[:PREFIX_LENGTH]
        if len(prefix) < PREFIX_LENGTH:
            raise CommandError(f"give the {PREFIX_LENGTH}-character prefix list_tokens shows, not {prefix!r}")
        rows = [
            row for row in IngestToken.objects.filter(prefix=prefix, revoked=False) if row.prefix == prefix
        ]
        if len(rows) != 1:
            raise CommandError(f"{len(rows)} active tokens have the prefix {prefix!r}")
        IngestToken.objects.filter(pk=rows[0].pk).update(revoked=True)
        audit.record(
            actor="command: revoke_token",
            action="token_revoked",
            target=f"{rows[0].name} ({rows[0].prefix}…)",
        )
        self.stdout.write(f"Token {rows[0].name!r} ({rows[0].prefix}…) revoked.")
