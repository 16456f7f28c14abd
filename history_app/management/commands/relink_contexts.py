"""Fill the provenance tables of a database written before them, and link its contexts."""

from __future__ import annotations

from collections import Counter

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from history_app import models
from history_app.store import provenance


class Command(BaseCommand):
    help = (
        "Fingerprint every stored run and the entries of every history block whose sources "
        "the server finds, and link them (one transaction per session, the session locked). "
        "Run it once after upgrading to migration 0007; running it again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--all",
            action="store_true",
            dest="everything",
            help="Also re-link history blocks that already have sources: those the agent "
            "reported and those found by the marker matching of earlier versions (both "
            "are replaced by what the fingerprints settle).",
        )
        parser.add_argument("--batch-size", type=int, default=100, help="Sessions read per batch.")

    def handle(self, *args, everything: bool, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        totals: Counter[str] = Counter()
        last_pk = 0
        while batch := list(
            models.Session.objects.filter(pk__gt=last_pk)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        ):
            for pk in batch:
                with transaction.atomic():
                    session = models.Session.objects.select_for_update().filter(pk=pk).first()
                    if session is None:  # pruned meanwhile
                        continue
                    totals.update(provenance.relink_session(session, everything=everything))
                    totals["sessions"] += 1
            last_pk = batch[-1]
        self.stdout.write(
            f"Relinked {totals['sessions']} sessions: {totals['runs']} runs "
            f"({totals['fingerprints']} fingerprints), {totals['entries']} entries, "
            f"{totals['linked']} linked, {totals['contexts_changed']} contexts changed."
        )
