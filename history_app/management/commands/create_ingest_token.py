from __future__ import annotations

from django.core.management.base import BaseCommand

from history_app.access.auth import register_token
from history_app.management.projects import add_project_argument, project_named
from history_app.models import IngestToken


class Command(BaseCommand):
    help = (
        "Create a bearer token and print it once (only its hash is kept). Its scopes: ingest (POST "
        "/api/v1/ingest and /v1/traces; the default), read (the JSON API's reads), annotate."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="What the token is for, e.g. the agent or host that uses it.")
        parser.add_argument(
            "--scope",
            action="append",
            choices=IngestToken.SCOPES,
            dest="scopes",
            help="A scope the token has (repeat for several; default: ingest).",
        )
        add_project_argument(parser, "the token belongs to: where its runs go, what it reads")

    def handle(self, *args, name: str, scopes: list[str] | None, project: str, **options):
        row, token = register_token(
            name=name,
            scopes=scopes or [IngestToken.INGEST],
            actor="command: create_ingest_token",
            project=project_named(project),
        )
        self.stdout.write(token)
        self.stderr.write(
            f"Token {name!r} created in project {row.project.slug!r} with scopes {', '.join(row.scopes)}. "
            "It is shown only this once; store it now."
        )
