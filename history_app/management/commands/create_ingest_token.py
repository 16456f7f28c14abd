from __future__ import annotations

from django.core.management.base import BaseCommand

from history_app.auth import register_token


class Command(BaseCommand):
    help = "Create a bearer token for POST /api/v1/ingest and print it once (only its hash is kept)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="What the token is for, e.g. the agent or host that uses it.")

    def handle(self, *args, name: str, **options):
        _, token = register_token(name=name)
        self.stdout.write(token)
        self.stderr.write(f"Token {name!r} created. It is shown only this once; store it now.")
