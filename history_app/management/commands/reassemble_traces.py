"""Assemble the kept OpenTelemetry traces into runs again, after the mapping changed."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from history_app import models
from history_app.intake import spans


class Command(BaseCommand):
    help = (
        "Assemble every kept OpenTelemetry trace into runs again from its kept spans, with "
        "the mapping of this version (issue #33: a LangGraph invocation is one run, an "
        "Agents SDK Runner.run one run, sessions per span, the user's text as input and "
        "output). Runs keep their ids; those an earlier version made and this one does "
        "not are deleted. Running it again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--project", help="A project's slug (default: every project).")
        parser.add_argument("--batch-size", type=int, default=100, help="Traces per transaction.")

    def handle(self, *args, project: str | None, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        projects = models.Project.objects.order_by("pk")
        if project:
            projects = projects.filter(slug=project)
            if not projects.exists():
                raise CommandError(f"no project {project!r}")
        traces = deleted = 0
        for each in projects:
            found, gone = spans.reassemble_traces(each.pk, batch=batch_size)
            traces, deleted = traces + found, deleted + gone
        self.stdout.write(f"Assembled {traces} traces again; {deleted} runs an earlier version made deleted.")
