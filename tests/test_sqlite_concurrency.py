"""Concurrent writers on the default SQLite file never see "database is locked".

Runs real processes against a real file (the test database is in memory), each ingesting
runs into the same sessions at the same time.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from .conftest import copy_migrated

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import os, sys, django
django.setup()
from history_app.intake import ingestion
worker = int(sys.argv[1])
errors = 0
for i in range(40):
    runs = [{"schema": "agent-history/v1", "run_id": f"w{worker}-{i}-{k}", "session_id": f"shared-{k}",
             "input": "x" * 2000, "iterations": [{"tool_calls": [{"tool": "t", "params": {"i": i}}]}]} for k in range(3)]
    for result in ingestion.ingest_items(items=runs):
        if result.status != "created":
            errors += 1
            print(result.errors, file=sys.stderr)
print(errors)
"""


@pytest.mark.skipif(connection.vendor != "sqlite", reason="exercises the SQLite file settings")
@pytest.mark.parametrize("named", [False, True], ids=["default-path", "DATABASE_URL"])
def test_four_processes_write_at_once_without_lock_errors(tmp_path, named, migrated_sqlite_file):
    """The same for the default file and for a SQLite file named in DATABASE_URL.

    The file starts as a copy of the process's migrated file (``migrated_sqlite_file``:
    one ``manage.py migrate`` a test process, not one a test), put back in SQLite's default
    rollback-journal mode: the writers' own connections must turn write-ahead logging on,
    as ``manage.py migrate`` did when each test migrated its own file."""
    env = {**os.environ, "HISTORY_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "history_app.settings"}
    env.pop("DATABASE_URL", None)
    database = tmp_path / ("named.sqlite3" if named else "history.sqlite3")
    if named:
        env["DATABASE_URL"] = f"sqlite:///{database}"
    copy_migrated(migrated_sqlite_file, database)
    with contextlib.closing(sqlite3.connect(database)) as db:
        assert db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(n)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    outputs = [w.communicate(timeout=120) for w in writers]
    for (out, err), writer in zip(outputs, writers, strict=True):
        assert writer.returncode == 0, err
        assert out.strip() == "0", err
        assert "locked" not in err
    db = sqlite3.connect(database)
    assert db.execute("SELECT COUNT(*) FROM history_app_run").fetchone()[0] == 4 * 40 * 3
    assert db.execute("SELECT SUM(run_count) FROM history_app_session").fetchone()[0] == 480
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
