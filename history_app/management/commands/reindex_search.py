"""Rebuild every run's search document (after upgrading from a version without search)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from history_app import mapper, models, search


class Command(BaseCommand):
    help = "Rebuild the full-text search document of every stored run, in batches."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=200)

    def handle(self, *args, batch_size: int, **options):
        done, last_pk = 0, 0
        while True:
            batch = list(mapper.transcript_queryset().filter(pk__gt=last_pk).order_by("pk")[:batch_size])
            if not batch:
                break
            with transaction.atomic():
                for run in batch:
                    document = search.document_for(mapper.run_record(run))
                    models.RunSearch.objects.update_or_create(run=run, defaults={"document": document})
            done += len(batch)
            last_pk = batch[-1].pk
        self.stdout.write(f"Indexed {done} runs.")
