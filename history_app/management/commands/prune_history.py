from __future__ import annotations

import getpass
import time

from django.core.management.base import BaseCommand, CommandError

from history_app.management.projects import project_named
from history_app.models import Project
from history_app.upkeep.retention import (
    MAX_PRUNE_DAYS,
    OPTIONAL_COUNT_KEYS,
    PREVIEW_SIZE,
    PRUNE_COUNT_KEYS,
    PruneResult,
    prune_sessions,
    retention_plan,
)


def noun(key: str, count: int) -> str:
    """A count key as words, singular for one: "sessions" → "1 session", "2 sessions"."""
    words = key.replace("_", " ")
    if count != 1:
        return words
    for plural, singular in (("entries", "entry"), ("batches", "batch")):
        if words.endswith(plural):
            return words[: -len(plural)] + singular
    return words[:-1]


def summary(result: PruneResult) -> str:
    verb = "Would remove" if result.dry_run else "Removed"
    # Provenance rows and kept spans are named only when there were any.
    parts = ", ".join(
        f"{result.counts[key]} {noun(key, result.counts[key])}"
        for key in PRUNE_COUNT_KEYS
        if key not in OPTIONAL_COUNT_KEYS or result.counts[key]
    )
    return f"{verb}: {parts}."


def counted(key: str, count: int) -> str:
    return f"{count} {noun(key, count)}"


def preview_lines(result: PruneResult) -> list[str]:
    """A dry run's detail: the pinned sessions it keeps, and the first sessions that would go
    (oldest first, as a prune takes them), then how many more."""
    lines = []
    if result.skipped_pinned:
        lines.append(f"Kept because pinned: {counted('sessions', result.skipped_pinned)}.")
    if result.preview:
        lines.append("Sessions that would go (oldest first): session id, agent, last activity, runs")
        lines.extend(
            f"  {s.session_id}  {s.agent_name or '-'}  {s.last_activity_at:%Y-%m-%d %H:%M}  "
            f"{counted('runs', s.run_count)}"
            for s in result.preview
        )
        if (more := result.counts["sessions"] - len(result.preview)) > 0:
            lines.append(f"  … and {more} more")
    return lines


class Command(BaseCommand):
    help = (
        "Delete sessions whose last activity is older than DAYS, with all their runs, in short "
        "batched transactions. Pinned sessions are never deleted. Safe to interrupt and re-run."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=float,
            metavar="DAYS",
            help="Last activity older than this. Without it, each project's own retention (its "
            "retention days, else HISTORY_RETENTION_DAYS); projects with none are left alone.",
        )
        parser.add_argument(
            "--project", metavar="SLUG", help="Only this project's sessions (default: every project)."
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what would go and delete nothing; the summary on stdout, then on stderr "
            f"the pinned sessions kept and the first {PREVIEW_SIZE} sessions that would go.",
        )
        parser.add_argument(
            "--batch-size", type=int, default=500, metavar="N", help="Sessions per transaction (500)."
        )
        parser.add_argument(
            "--status",
            action="append",
            default=[],
            help="Only sessions whose last run has this status (repeatable).",
        )
        parser.add_argument(
            "--agent",
            action="append",
            default=[],
            help="Only sessions of this agent, team or workflow (repeatable).",
        )

    def handle(
        self,
        *args,
        older_than: float | None,
        project: str | None,
        dry_run: bool,
        batch_size: int,
        status: list[str],
        agent: list[str],
        **options,
    ):
        if older_than is not None and not 0 <= older_than <= MAX_PRUNE_DAYS:  # NaN fails this too
            raise CommandError(f"--older-than must be a number of days from 0 to {MAX_PRUNE_DAYS}")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        started = time.perf_counter()

        def progress(result: PruneResult) -> None:
            self.stderr.write(
                f"batch {result.batches}: {counted('sessions', result.counts['sessions'])}, "
                f"{counted('rows', result.total_rows)} so far"
            )

        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = ""
        the_project = project_named(project) if project else None
        if older_than is not None:
            # Project by project even across them all: each project's log and audit
            # trail (which its admins read) hold its own prune.
            scopes = [the_project] if the_project else list(Project.objects.order_by("pk"))
            plan = [(scope, older_than) for scope in scopes]
        else:
            plan = [(p, days) for p, days in retention_plan() if the_project is None or p == the_project]
            if not plan:
                self.stdout.write(
                    "No retention is set (no project's, no HISTORY_RETENTION_DAYS): nothing to prune."
                )
                return
        for scope, days in plan:
            result = prune_sessions(
                project=scope,
                older_than_days=days,
                statuses=status,
                agents=agent,
                batch_size=batch_size,
                dry_run=dry_run,
                trigger="command",
                user=user,
                progress=progress,
                preview=PREVIEW_SIZE,
            )
            if len(plan) > 1 or older_than is None:
                self.stdout.write(f"Project {scope.slug} (idle more than {days:g} {noun('days', days)}):")
            self.stdout.write(summary(result))
            # The summary alone on stdout, as scripts read it; the detail for a person.
            for line in preview_lines(result):
                self.stderr.write(line, style_func=str)  # plain: it is no error
        elapsed = time.perf_counter() - started
        if not dry_run:
            self.stdout.write(
                f"{result.batches} batch(es) in {elapsed:.2f} s; longest transaction "
                f"{result.longest_transaction_s * 1000:.0f} ms."
            )
