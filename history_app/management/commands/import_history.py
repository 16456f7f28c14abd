from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from history_app.agent_history import formats
from history_app.intake import ingestion
from history_app.management.progress import show_progress
from history_app.management.projects import add_project_argument, project_named

SUFFIXES = {".json", ".jsonl", ".ndjson", ".md"}


def collect_files(paths: list[str]) -> list[Path]:
    """Files to import, in a stable order; a ``.md`` log only where no ``.json`` twin exists."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix.lower() in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise CommandError(f"{raw}: no such file or folder")
    chosen = []
    for path in found:
        if path.suffix.lower() == ".md" and path.with_suffix(".json").exists():
            continue
        chosen.append(path)
    return chosen


def read_items(path: Path) -> list[object]:
    """The items in a file, read by the library as the endpoint reads a body of the content
    type its suffix names (a bad NDJSON line is a ``BodyError`` item, reported at its index)."""
    content_type = formats.SUFFIX_TYPES.get(path.suffix.lower(), "application/json")
    return formats.read_body(path.read_bytes(), content_type, max_depth=settings.HISTORY_MAX_DEPTH)


class Command(BaseCommand):
    help = "Import agent history files (autourgos .json logs, .md logs without a .json, native JSON/NDJSON)."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH", help="Files or folders to import.")
        add_project_argument(parser, "the runs go into")

    def handle(self, *args, paths: list[str], project: str, **options):
        project_id = project_named(project).pk
        files = collect_files(paths)
        if not files:
            raise CommandError("no .json, .jsonl, .ndjson or .md files found")
        problems: list[str] = []
        skipped: list[str] = []
        all_results: list[ingestion.ItemResult] = []
        for number, path in enumerate(files, start=1):
            show_progress(self.stderr, number, len(files), path.name)
            try:
                items = read_items(path)
            except (formats.BodyError, OSError) as exc:
                problems.append(f"{path}: {exc}")
                all_results.append(
                    ingestion.ItemResult(
                        index=len(all_results), errors=[{"path": str(path), "message": str(exc)}]
                    )
                )
                continue
            if not any(isinstance(item, formats.MarkdownLog) or formats.detect(item) for item in items):
                # A folder of logs often holds other JSON (a manifest, a config): say so
                # instead of counting each of its objects as a rejected run.
                skipped.append(f"{path}: not a history file (matches no accepted format)")
                continue
            for result in ingestion.ingest_items(items=items, project_id=project_id):
                all_results.append(result)
                for error in result.errors:
                    where = f"[{result.index}]" if len(items) > 1 else ""
                    problems.append(f"{path}{where}: {error['path']}: {error['message']}")
        totals = ingestion.record_receipt(
            source="import_history", results=all_results, label=", ".join(paths), project_id=project_id
        ).counts
        self.stdout.write(
            f"Imported {len(files)} file(s): {totals['created']} created, {totals['updated']} updated, "
            f"{totals['duplicate']} duplicate, {totals['rejected']} rejected, {len(skipped)} file(s) skipped."
        )
        for line in skipped:
            self.stdout.write(f"  skipped {line}")
        for problem in problems:
            self.stdout.write(f"  rejected {problem}")
