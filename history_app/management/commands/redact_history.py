"""Re-apply the current redaction rules to everything already stored."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from history_app.upkeep.reredact import CHANGED_KEYS, RedactResult, redact_stored


class Command(BaseCommand):
    help = (
        "Re-apply the current redaction rules to every stored run (and its iterations, tool "
        "calls, interactions, contexts, search document, answer HTML and content hash), "
        "session and receipt, in batches. Run it after upgrading, and whenever a rule is "
        "added. Safe to interrupt and re-run."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would change; change nothing."
        )
        parser.add_argument(
            "--batch-size", type=int, default=200, metavar="N", help="Rows per transaction (200)."
        )

    def handle(self, *args, dry_run: bool, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")

        def progress(result: RedactResult) -> None:
            done = ", ".join(f"{result.changed[key]}/{result.scanned[key]} {key}" for key in CHANGED_KEYS)
            self.stderr.write(f"batch {result.batches}: changed {done} so far")

        result = redact_stored(batch_size=batch_size, dry_run=dry_run, progress=progress)
        verb = "Would change" if dry_run else "Changed"
        parts = ", ".join(f"{result.changed[key]} of {result.scanned[key]} {key}" for key in CHANGED_KEYS)
        self.stdout.write(f"{verb}: {parts}.")
        if result.rules:
            self.stdout.write("Per rule:")
            for rule, count in sorted(result.rules.items(), key=lambda item: (-item[1], item[0])):
                self.stdout.write(f"  {rule}: {count}")
        else:
            self.stdout.write("Nothing to redact.")
        if result.skipped:
            shown = ", ".join(result.skipped[:20]) + (" …" if len(result.skipped) > 20 else "")
            self.stderr.write(
                f"{len(result.skipped)} runs were left as they are: their stored record no longer "
                f"validates. Delete or re-import them: {shown}"
            )
