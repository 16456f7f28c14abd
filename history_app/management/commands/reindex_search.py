"""Rebuild the search index from the stored runs (after upgrading from a version without
search, or to repair it)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from history_app import models
from history_app.store import search


class Command(BaseCommand):
    help = "Rebuild the full-text search index of every stored run from the runs' rows, in batches."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=500)

    def handle(self, *args, batch_size: int, **options):
        search.clear_index()
        done, last_pk = 0, 0
        while True:
            pks = list(
                models.Run.objects.filter(pk__gt=last_pk)
                .order_by("pk")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not pks:
                break
            with transaction.atomic():
                search.index_runs(search.documents_from_rows(pks, models))
            done += len(pks)
            last_pk = pks[-1]
        self.stdout.write(f"Indexed {done} runs.")
