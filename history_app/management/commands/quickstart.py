from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.utils import timezone

from history_app.access.auth import register_token
from history_app.demo.generate import anchor_for, demo_batches
from history_app.intake.ingestion import ingest_items, record_receipt
from history_app.models import IngestToken, Project


class Command(BaseCommand):
    help = "Set up the dashboard (database, admin user, ingest token, demo data) and serve it."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument(
            "--no-serve", action="store_true", help="Set everything up but do not start the server."
        )

    def handle(self, *args, addrport: str, no_serve: bool, **options):
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(self.style.SUCCESS("Database ready: ") + str(settings.DATABASES["default"]["NAME"]))

        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            self.stdout.write("User 'admin' exists; its password is unchanged.")
        else:
            password = os.environ.get("HISTORY_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", email="", password=password)
            shown = "(from HISTORY_ADMIN_PASSWORD)" if os.environ.get("HISTORY_ADMIN_PASSWORD") else password
            self.stdout.write(self.style.SUCCESS("Created user 'admin' with password: ") + shown)

        project = Project.default()  # where the demo goes, and its token's runs
        row, token = register_token(
            project=project,
            name="quickstart",
            token=os.environ.get("HISTORY_INGEST_TOKEN") or None,
            scopes=[IngestToken.INGEST, IngestToken.READ],
            actor="command: quickstart",
        )
        if row.revoked:
            self.stdout.write(
                self.style.WARNING("The ingest token in HISTORY_INGEST_TOKEN was revoked and stays revoked")
                + " (ingestion with it answers 401). Unset HISTORY_INGEST_TOKEN or set a new value to"
                " register a new token, or run `python manage.py create_ingest_token NAME`."
            )
            token = "$TOKEN"
        else:
            self.stdout.write(self.style.SUCCESS("Ingest token: ") + token)

        # The demo sits in the weeks before its first load; a later load finds that moment
        # again from the runs it stored, so its records, times included, are the same ones.
        anchor = anchor_for(project_id=project.pk, now=timezone.now())
        results = []
        for items in demo_batches(anchor):
            results += ingest_items(items=items, project_id=project.pk)
        counts = record_receipt(
            source="quickstart", results=results, label="demo data", project_id=project.pk
        ).counts
        self.stdout.write(
            self.style.SUCCESS("Demo data: ")
            + f"{counts['created']} runs created, {counts['duplicate']} already there, {counts['rejected']} rejected."
        )

        host = addrport if ":" in addrport else f"127.0.0.1:{addrport}"
        url = f"http://{host}/"
        self.stdout.write("")
        self.stdout.write(f"Open {url} and log in as admin.")
        self.stdout.write("Send a run:")
        self.stdout.write(
            f"  curl -sS -X POST {url}api/v1/ingest -H 'Authorization: Bearer {token}' "
            "-H 'Content-Type: application/json' "
            """-d '{"query": "What is 6*7?", "agent_name": "Calculator", "start_time": "2026-11-30T10:00:00", """
            """"end_time": "2026-11-30T10:00:01", "iterations": [{"iteration": 1, "thought": "Multiply.", """
            """"tools": [], "observations": []}], "final_response": "42", "error": null}'"""
        )
        self.stdout.write("Or point any OpenTelemetry exporter (Pydantic AI, OpenInference, ...) at it:")
        self.stdout.write(
            f"  export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={url}v1/traces "
            f'OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20{token}"'
        )
        if no_serve:
            return
        self.stdout.write("")
        call_command("runserver", addrport, use_reloader=False)
