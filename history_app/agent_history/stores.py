"""Per-session run history stores: ``MemoryStore`` (bounded) and ``SQLiteStore``.

Both follow agno-go's ``WorkflowStorage`` contract and fix its two known bugs: the
bounded memory store drops a deleted session from its eviction order too (agno-go's
grew past its bound), and ``stats()`` counts a cancelled run as cancelled, not failed.

One rule for windows everywhere: ``num_runs <= 0`` means every finished run.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .context import render_workflow_history
from .records import FINISHED_STATUSES, Run, parse_time


def _now() -> datetime:
    return datetime.now(UTC)


def as_run(session_id: str, run: Run | Mapping[str, Any]) -> Run:
    """A ``Run`` from a record or a plain dict with the canonical keys."""
    if isinstance(run, Run):
        if not run.session_id:
            run.session_id = session_id
        return run
    data = dict(run)
    data.setdefault("session_id", session_id)
    if not data.get("run_id"):
        import uuid

        data["run_id"] = str(uuid.uuid4())
    return Run.from_dict(data)


@dataclass
class WorkflowSession:
    """A session's runs, oldest first, with agno-go's history and count helpers."""

    session_id: str
    workflow_id: str = ""
    user_id: str = ""
    runs: list[Run] = field(default_factory=list)
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_history(self, num_runs: int = 0) -> list[Run]:
        """The last ``num_runs`` finished runs (completed, failed or cancelled), oldest first.

        Pending and running runs are never history. ``num_runs <= 0`` gives all of them.
        """
        finished = [run for run in self.runs if run.status in FINISHED_STATUSES]
        return finished if num_runs <= 0 else finished[-num_runs:]

    def get_history_context(self, num_runs: int = 0, **options: Any) -> str:
        return render_workflow_history(self.get_history(num_runs), **options)

    def get_history_messages(self, num_runs: int = 0) -> list[dict[str, str]]:
        """History as chat messages: the user's input, then the output where there is one."""
        messages = []
        for run in self.get_history(num_runs):
            if run.input:
                messages.append({"role": "user", "content": run.input})
            if run.output:
                messages.append({"role": "assistant", "content": run.output})
        return messages

    def count_runs(self) -> int:
        return len(self.runs)

    def count_completed_runs(self) -> int:
        """Finished runs: completed, failed or cancelled."""
        return sum(1 for run in self.runs if run.status in FINISHED_STATUSES)

    def count_successful_runs(self) -> int:
        return sum(1 for run in self.runs if run.status == "completed")

    def count_failed_runs(self) -> int:
        return sum(1 for run in self.runs if run.status == "failed")


def _stats(sessions: list[WorkflowSession]) -> dict[str, Any]:
    runs = [run for session in sessions for run in session.runs]
    durations = [run.duration_ms for run in runs if run.duration_ms is not None]
    return {
        "total_sessions": len(sessions),
        "total_runs": len(runs),
        "completed_runs": sum(1 for r in runs if r.status in FINISHED_STATUSES),
        "successful_runs": sum(1 for r in runs if r.status == "completed"),
        "failed_runs": sum(1 for r in runs if r.status == "failed"),
        "cancelled_runs": sum(1 for r in runs if r.status == "cancelled"),
        "average_duration_ms": (sum(durations) / len(durations)) if durations else 0.0,
    }


def _page(
    sessions: list[WorkflowSession], workflow_id: str | None, user_id: str | None, limit: int, offset: int
):
    chosen = [
        s
        for s in sessions
        if (workflow_id is None or s.workflow_id == workflow_id) and (user_id is None or s.user_id == user_id)
    ]
    chosen.sort(key=lambda s: (s.updated_at, s.session_id), reverse=True)
    chosen = chosen[offset:]
    return chosen[:limit] if limit > 0 else chosen


class MemoryStore:
    """Sessions in memory; with ``max_sessions > 0`` the least recently used is evicted."""

    def __init__(self, max_sessions: int = 0):
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, WorkflowSession] = OrderedDict()
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._sessions)

    def get_or_create_session(
        self, session_id: str, workflow_id: str = "", user_id: str | None = None
    ) -> WorkflowSession:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = WorkflowSession(
                    session_id=session_id, workflow_id=workflow_id, user_id=user_id or ""
                )
                self._sessions[session_id] = session
                self._evict()
            else:
                self._sessions.move_to_end(session_id)
            return session

    def get_session(self, session_id: str) -> WorkflowSession | None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                self._sessions.move_to_end(session_id)
            return session

    def save_run(self, session_id: str, run: Run | Mapping[str, Any]) -> Run:
        record = as_run(session_id, run)
        with self._lock:
            session = self.get_or_create_session(session_id)
            for i, existing in enumerate(session.runs):
                if existing.run_id == record.run_id:
                    session.runs[i] = record
                    break
            else:
                session.runs.append(record)
            session.updated_at = _now()
        return record

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            # One structure holds both the sessions and their eviction order, so a deleted
            # session can never linger in the order (agno-go's store grew past its bound).
            return self._sessions.pop(session_id, None) is not None

    def list_sessions(
        self, *, workflow_id: str | None = None, user_id: str | None = None, limit: int = 0, offset: int = 0
    ) -> list[WorkflowSession]:
        with self._lock:
            return _page(list(self._sessions.values()), workflow_id, user_id, limit, offset)

    def clear(self, older_than: timedelta) -> int:
        """Remove sessions not updated within ``older_than``; returns how many."""
        cutoff = _now() - older_than
        with self._lock:
            stale = [sid for sid, s in self._sessions.items() if s.updated_at < cutoff]
            for sid in stale:
                del self._sessions[sid]
            return len(stale)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return _stats(list(self._sessions.values()))

    def _evict(self) -> None:
        while self.max_sessions > 0 and len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS history_sessions (
    session_id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL DEFAULT '',
    user_id TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS history_sessions_updated ON history_sessions (updated_at);
CREATE TABLE IF NOT EXISTS history_runs (
    session_id TEXT NOT NULL REFERENCES history_sessions (session_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    input TEXT NOT NULL DEFAULT '',
    output TEXT,
    error TEXT,
    started_at TEXT,
    ended_at TEXT,
    duration_ms INTEGER,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
_RUN_COLUMNS = "run_id, status, input, output, error, started_at, ended_at"


class SQLiteStore:
    """Sessions in a SQLite file (WAL), safe to share between threads.

    History reads select only the columns a history needs, so loading 100 runs does not
    decode 100 full records; ``get_run`` returns a complete record when one is needed.
    """

    def __init__(self, path: str = ":memory:"):
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA foreign_keys=ON")
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def get_or_create_session(
        self, session_id: str, workflow_id: str = "", user_id: str | None = None
    ) -> WorkflowSession:
        now = _now().isoformat()
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO history_sessions (session_id, workflow_id, user_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                (session_id, workflow_id, user_id or "", now, now),
            )
            session = self.get_session(session_id)
        assert session is not None
        return session

    def get_session(self, session_id: str) -> WorkflowSession | None:
        with self._lock:
            row = self._db.execute(
                "SELECT session_id, workflow_id, user_id, created_at, updated_at, metadata FROM history_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            runs = self._db.execute(
                f"SELECT {_RUN_COLUMNS} FROM history_runs WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        return WorkflowSession(
            session_id=row[0],
            workflow_id=row[1],
            user_id=row[2],
            created_at=datetime.fromisoformat(row[3]),
            updated_at=datetime.fromisoformat(row[4]),
            metadata=json.loads(row[5]),
            runs=[self._light_run(session_id, r) for r in runs],
        )

    def get_history(self, session_id: str, num_runs: int = 0) -> list[Run]:
        """The last ``num_runs`` finished runs straight from the index, oldest first."""
        limit = num_runs if num_runs > 0 else -1
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_RUN_COLUMNS} FROM history_runs WHERE session_id = ? AND status IN (?, ?, ?) ORDER BY seq DESC LIMIT ?",
                (session_id, *FINISHED_STATUSES, limit),
            ).fetchall()
        return [self._light_run(session_id, r) for r in reversed(rows)]

    def get_run(self, run_id: str) -> Run | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM history_runs WHERE run_id = ?", (run_id,)).fetchone()
        return Run.from_dict(json.loads(row[0])) if row else None

    def save_run(self, session_id: str, run: Run | Mapping[str, Any]) -> Run:
        record = as_run(session_id, run)
        now = _now().isoformat()
        values = (
            record.status,
            record.input or "",
            record.output,
            record.error,
            record.started_at.isoformat() if record.started_at else None,
            record.ended_at.isoformat() if record.ended_at else None,
            record.duration_ms,
            record.to_json(),
        )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR IGNORE INTO history_sessions (session_id, created_at, updated_at) VALUES (?, ?, ?)",
                    (session_id, now, now),
                )
                updated = self._db.execute(
                    "UPDATE history_runs SET status=?, input=?, output=?, error=?, started_at=?, ended_at=?, duration_ms=?, record=? "
                    "WHERE run_id=?",
                    (*values, record.run_id),
                ).rowcount
                if not updated:
                    self._db.execute(
                        "INSERT INTO history_runs (session_id, seq, run_id, status, input, output, error, started_at, ended_at, "
                        "duration_ms, record) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM history_runs "
                        "WHERE session_id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (session_id, session_id, record.run_id, *values),
                    )
                self._db.execute(
                    "UPDATE history_sessions SET updated_at = ? WHERE session_id = ?", (now, session_id)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return record

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            return (
                self._db.execute("DELETE FROM history_sessions WHERE session_id = ?", (session_id,)).rowcount
                > 0
            )

    def list_sessions(
        self, *, workflow_id: str | None = None, user_id: str | None = None, limit: int = 0, offset: int = 0
    ) -> list[WorkflowSession]:
        clauses, params = [], []
        if workflow_id is not None:
            clauses.append("workflow_id = ?")
            params.append(workflow_id)
        if user_id is not None:
            clauses.append("user_id = ?")
            params.append(user_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            ids = [
                row[0]
                for row in self._db.execute(
                    f"SELECT session_id FROM history_sessions {where} ORDER BY updated_at DESC, session_id DESC LIMIT ? OFFSET ?",
                    (*params, limit if limit > 0 else -1, max(offset, 0)),
                )
            ]
            return [s for s in (self.get_session(sid) for sid in ids) if s is not None]

    def clear(self, older_than: timedelta) -> int:
        cutoff = (_now() - older_than).isoformat()
        with self._lock:
            return self._db.execute("DELETE FROM history_sessions WHERE updated_at < ?", (cutoff,)).rowcount

    def stats(self) -> dict[str, Any]:
        with self._lock:
            sessions = self._db.execute("SELECT COUNT(*) FROM history_sessions").fetchone()[0]
            row = self._db.execute(
                "SELECT COUNT(*), "
                "SUM(status IN ('completed', 'failed', 'cancelled')), SUM(status = 'completed'), "
                "SUM(status = 'failed'), SUM(status = 'cancelled'), AVG(duration_ms) FROM history_runs"
            ).fetchone()
        return {
            "total_sessions": sessions,
            "total_runs": row[0],
            "completed_runs": row[1] or 0,
            "successful_runs": row[2] or 0,
            "failed_runs": row[3] or 0,
            "cancelled_runs": row[4] or 0,
            "average_duration_ms": row[5] or 0.0,
        }

    @staticmethod
    def _light_run(session_id: str, row: tuple[Any, ...]) -> Run:
        return Run(
            run_id=row[0],
            session_id=session_id,
            status=row[1],
            input=row[2],
            output=row[3],
            error=row[4],
            started_at=parse_time(row[5]) if row[5] else None,
            ended_at=parse_time(row[6]) if row[6] else None,
        )
