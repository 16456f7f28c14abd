"""The progress bar the import commands share."""

from __future__ import annotations

import sys

from django.core.management.base import OutputWrapper


def show_progress(stream: OutputWrapper, number: int, total: int, label: str = "") -> None:
    """A bar redrawn in place on a terminal; an occasional plain line in a log."""
    filled = 30 * number // total
    line = f"[{'#' * filled}{'-' * (30 - filled)}] {number}/{total} {label[:40]}".rstrip()
    if sys.stderr.isatty():
        stream.write("\r" + line.ljust(80), ending="" if number < total else "\n")
    elif number == total or number % 50 == 1:
        stream.write(line)
