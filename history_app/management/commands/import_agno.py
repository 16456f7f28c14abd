from __future__ import annotations

import argparse
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from history_app.agent_history import redact
from history_app.agent_history.formats import agno, agno_compaction, agno_times
from history_app.agent_history.records import RecordError
from history_app.agent_history.text import value_text
from history_app.intake import ingestion
from history_app.management.progress import show_progress
from history_app.management.projects import add_project_argument, project_named

QUERY = (
    "SELECT r.run_data, r.session_id, r.parent_run_id, r.user_id, r.status, r.created_at "
    "FROM {schema}agno_runs r {where} ORDER BY r.created_at, r.run_index"
)


def read_sqlite(path: str, since: int | None) -> list[tuple]:
    """Rows of an agno SqliteDb, opened read-only through SQLite (never by copying the
    file: with WAL the newest runs live in the -wal file until a checkpoint)."""
    if not Path(path).exists():
        raise CommandError(f"{path}: no such file")
    uri = f"file:{Path(path).resolve()}?mode=ro"
    try:
        db = sqlite3.connect(uri, uri=True, timeout=10)
        db.execute("SELECT 1 FROM agno_runs LIMIT 1")
    except sqlite3.OperationalError as exc:
        raise CommandError(f"{path}: cannot read agno tables ({exc})") from None
    where, params = ("WHERE r.updated_at >= ? OR r.created_at >= ?", (since, since)) if since else ("", ())
    try:
        return db.execute(QUERY.format(schema="", where=where), params).fetchall()
    finally:
        db.close()


def read_postgres(url: str, schema: str, since: int | None) -> list[tuple]:
    import psycopg

    where, params = ("WHERE r.updated_at >= %s OR r.created_at >= %s", (since, since)) if since else ("", ())
    try:
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = on")
            rows = conn.execute(QUERY.format(schema=f'"{schema}".', where=where), params).fetchall()
    except psycopg.Error as exc:
        raise CommandError(f"cannot read agno tables in schema {schema!r}: {exc}") from None
    return [(json.dumps(r[0]) if not isinstance(r[0], str) else r[0], *r[1:]) for r in rows]


COMPACTIONS = (
    "SELECT compaction_id, session_id, run_id, first_kept_message_id, summary, archived_messages, "
    "messages_compacted, created_at FROM {schema}agno_compactions ORDER BY created_at"
)
COMPACTION_KEYS = (
    "compaction_id",
    "session_id",
    "run_id",
    "first_kept_message_id",
    "summary",
    "archived_messages",
    "messages_compacted",
    "created_at",
)


def read_compactions(source: str, schema: str) -> list[dict[str, Any]]:
    """The rows of agno's ``agno_compactions`` table (agno 3.1 compaction: one per fold);
    none when the database has no such table (an older agno, or compaction never used)."""
    if source.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        import psycopg

        try:
            with psycopg.connect(
                source.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
            ) as conn:
                conn.execute("SET default_transaction_read_only = on")
                found = conn.execute(COMPACTIONS.format(schema=f'"{schema}".')).fetchall()
        except psycopg.Error:
            return []
    else:
        db = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True, timeout=10)
        try:
            found = db.execute(COMPACTIONS.format(schema="")).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()
    return [dict(zip(COMPACTION_KEYS, row, strict=True)) for row in found]


def folds_by_run(
    compactions: list[dict[str, Any]], payloads: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each fold a run made, by the run's id: its ``agno_compactions`` row, else the
    ``compaction`` the run stores (no ``archived_messages`` then). A fold made outside a
    run (``agent.compact()``, no ``run_id``) is not placed."""
    found: dict[str, dict[str, Any]] = {}
    for payload in payloads:
        record = agno_compaction.record_from(payload.get("compaction") or {})
        if record is not None and payload.get("run_id"):
            found[str(payload["run_id"])] = record
    for row in compactions:
        record = agno_compaction.record_from(row)
        if record is not None and record["run_id"]:
            found[record["run_id"]] = record
    return found


def delegations(rows: list[tuple]) -> dict[str, dict[str, Any]]:
    """Each team run's tool executions, by run id (read before any run is parsed: agno
    writes member rows before their team's), for ``agno.delegated_tasks`` to read a
    member's own tasks from."""
    teams: dict[str, dict[str, Any]] = {}
    for row in rows:
        try:
            payload = json.loads(row[0])
        except (TypeError, ValueError):
            continue
        if isinstance(payload, dict) and payload.get("run_id") and payload.get("tools"):
            teams[str(payload["run_id"])] = {"tools": payload["tools"]}
    return teams


def member_team_histories(rows: list[tuple]) -> dict[str, list[str]]:
    """The team history blocks each member run (an agent's or a sub-team's, a row with a
    ``parent_run_id``) may have been sent (``agno.team_history_blocks``), by its run id:
    rebuilt from the rows of its session before it, less the runs it ran under (in
    progress when it ran). They settle where its blocks end when a sub-team's history
    quotes its earlier messages, blocks and all."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    parents: dict[str, str] = {}
    found: dict[str, list[str]] = {}
    for payload in filter(None, map(row_payload, rows)):
        if payload.get("run_id") is None:
            continue
        run_id = str(payload["run_id"])
        earlier = sessions.setdefault(str(payload.get("session_id")), [])
        parent = payload.get("parent_run_id")
        if parent:
            parents[run_id] = str(parent)
            above = set()
            while parent and str(parent) not in above:
                above.add(str(parent))
                parent = parents.get(str(parent))
            previous = [p for p in earlier if str(p["run_id"]) not in above]
            member_team = payload.get("team_id") if not payload.get("agent_id") else None
            blocks = agno.team_history_blocks(previous, member_team)
            if blocks:
                found[run_id] = blocks
        earlier.append(payload)
    return found


def row_ids(source: str, schema: str) -> set[str]:
    """The run id of every row, whatever ``--since`` reads: a run embedded in another
    (``member_responses``) that is also a row of its own is imported from its row."""
    if source.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        import psycopg

        query = f'SELECT run_id FROM "{schema}".agno_runs'

        try:
            with psycopg.connect(
                source.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
            ) as conn:
                return {str(r[0]) for r in conn.execute(query).fetchall()}
        except psycopg.Error as exc:
            raise CommandError(f"cannot read agno tables in schema {schema!r}: {exc}") from None
    db = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True, timeout=10)
    try:
        return {str(r[0]) for r in db.execute("SELECT run_id FROM agno_runs").fetchall()}
    finally:
        db.close()


def member_rows(rows: list[tuple]) -> dict[str, list[dict[str, Any]]]:
    """Each run's member runs stored as rows of their own (``parent_run_id``), in the order
    they ran, by the parent's run id: what ``agno.link_members`` links delegations to."""
    children: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        try:
            payload = json.loads(row[0])
        except (TypeError, ValueError):
            continue
        parent = (payload.get("parent_run_id") if isinstance(payload, dict) else None) or row[2]
        if isinstance(payload, dict) and parent and payload.get("run_id") is not None:
            # Only what names the member: a whole run of every row would double the memory.
            children.setdefault(str(parent), []).append({key: payload.get(key) for key in MEMBER_KEYS})
    return children


MEMBER_KEYS = ("run_id", "agent_id", "team_id", "agent_name", "team_name")


def link_member_rows(run, payload: dict, children: dict[str, list[dict[str, Any]]]) -> None:
    """Link a team run's delegations to its member runs: the rows naming it as their
    parent, else the copies it embeds (``member_responses``)."""
    if run.kind != "team":
        return
    embedded = [m for m in payload.get("member_responses") or [] if isinstance(m, dict)]
    for interaction in run.member_interactions:
        interaction.member_run_id = None
    agno.link_members(run, children.get(run.run_id) or embedded)


def own_runs(runs: list, rows: set[str], emitted: set[str]) -> list:
    """The runs parsed from one row that this import stores: the row's own run, and the
    runs it embeds that are no row of their own and were not stored from another row
    (a nested team's members are embedded both in the sub-team's row and in its parent's)."""
    kept = []
    for n, run in enumerate(runs):
        if n and (run.run_id in rows or run.run_id in emitted):
            continue
        emitted.add(run.run_id)
        kept.append(run)
    return kept


def rebuild_workflow_history(run, previous: list[dict], num_history_runs: int) -> None:
    """Give each step of a workflow run that has no workflow history block (its message was
    not stored) the block agno sent, rebuilt from the earlier runs; steps that kept theirs
    keep them as reported."""
    have = {c.step for c in run.injected_contexts if c.kind == "workflow_history"}
    for iteration in run.iterations:
        if iteration.name in have:
            continue
        rebuilt = agno.reconstructed_workflow_history(previous, num_history_runs)
        if rebuilt is None:
            return
        rebuilt.step = iteration.name
        run.injected_contexts.append(rebuilt)


HISTORY_FLAGS = {
    "history_runs": "num_history_runs",
    "history_messages": "num_history_messages",
    "max_tool_calls_from_history": "max_tool_calls_from_history",
}


def history_flag(value: str) -> tuple[str, int]:
    """One ``--history-runs``/``--history-messages``/``--max-tool-calls-from-history``
    value: ``N`` for every agent and team, ``NAME=N`` for the one named (its name or id)."""
    name, _, number = value.rpartition("=")
    try:
        count = int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected N or NAME=N, N a whole number") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: N must be 0 or more")
    return name.strip(), count


def history_settings(options: dict[str, Any], payload: dict[str, Any]) -> dict[str, int | None] | None:
    """The history settings an agent or team leader ran with, from the flags (agno stores
    none of them): the values given for its name or id over those given for all; None
    when neither ``--history-runs`` nor ``--history-messages`` covers it (it replayed
    nothing). As in agno, a number of runs wins over a number of messages, except that a
    number of messages given for this one by name replaces a number of runs given for all."""
    names = {value_text(payload.get(key)) for key in ("agent_name", "agent_id", "team_name", "team_id")} - {
        None
    }
    found: dict[str, int | None] = {}
    named: set[str] = set()
    for flag, setting in HISTORY_FLAGS.items():
        for name, count in options.get(flag) or []:
            if not name:
                found.setdefault(setting, count)
            elif name in names:
                found[setting] = count
                named.add(setting)
    if "num_history_messages" in named and "num_history_runs" not in named:
        found.pop("num_history_runs", None)
    if found.get("num_history_runs") is None and found.get("num_history_messages") is None:
        return None
    if found.get("num_history_runs") is not None:
        found.pop("num_history_messages", None)
    return {setting: found.get(setting) for setting in HISTORY_FLAGS.values()}


def row_payload(row: tuple) -> dict[str, Any] | None:
    """A row's ``run_data`` with the row's columns where it leaves a field out; None when
    it is no JSON object (the import loop reports that)."""
    run_data, session_id, parent_run_id, user_id, status, created_at = row
    try:
        payload = json.loads(run_data)
    except (TypeError, ValueError):
        return None
    if not isinstance(payload, dict):
        return None
    for key, value in (("session_id", session_id), ("user_id", user_id), ("status", status)):
        payload.setdefault(key, value)
    payload.setdefault("created_at", created_at)
    if parent_run_id:
        payload.setdefault("parent_run_id", parent_run_id)
    return payload


def add_summary_calls(pending: list[tuple[int, list, str, list | None]], rows: list[tuple]) -> None:
    """Each agent or team-leader run after which agno made a follow-up suggestions call or a
    session-summary call gets it, rebuilt (``agno.followup_call``; ``agno.summary_call`` from
    the session's runs so far), as a call of the run's own after its last part, at the run's
    end (agno stores no time for either)."""
    earlier: dict[str, list[dict[str, Any]]] = {}
    previous_of: dict[str, list[dict[str, Any]]] = {}
    for payload in (p for p in map(row_payload, rows) if p is not None and p.get("run_id")):
        if replays_history(payload):
            previous = earlier.setdefault(str(payload.get("session_id")), [])
            previous_of[str(payload["run_id"])] = list(previous)
            previous.append(payload)
    for _, items, _, runs in pending:
        if not runs or not items or str(items[0].get("run_id")) not in previous_of:
            continue
        calls = [
            agno.followup_call(items[0]),
            agno.summary_call(items[0], previous_of[str(items[0]["run_id"])]),
        ]
        for call in calls:
            if call is not None:
                call.started_at = call.ended_at = runs[0].ended_at
                call.metadata["time_estimated"] = True
                runs[0].model_calls.append(call)


def history_replays(
    rows: list[tuple], options: dict[str, Any], compactions: list[dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The replay agno sent each agent or team-leader run the flags cover, by run id
    (``agno.replayed_history``), rebuilt from the earlier runs of its session among
    ``rows`` (oldest first). A run whose replay agno stored (``store_history_messages``)
    has none here: it is never added twice."""
    earlier: dict[str, list[dict[str, Any]]] = {}
    by_agent: dict[tuple[str, str], list[dict[str, Any]]] = {}
    payloads = [p for p in map(row_payload, rows) if p is not None and p.get("run_id")]
    # agno writes a member's row before its team's: the leaders are known first.
    teams = {str(p["run_id"]): p for p in payloads if p.get("team_id") and not p.get("agent_id")}
    folds = folds_by_run(compactions or [], payloads)
    folded = {str(p.get("session_id")) for p in payloads if str(p.get("run_id")) in folds}
    found: dict[str, dict[str, Any]] = {}
    for payload in payloads:
        session = str(payload.get("session_id"))
        replay = None
        if replays_history(payload):
            previous = earlier.setdefault(session, [])
            if session in folded:
                replay = compacted_replay(payload, previous, history_settings(options, payload), folds)
            else:
                replay = _replay(payload, previous, history_settings(options, payload))
            previous.append(payload)
        if is_member_run(payload):
            own = by_agent.setdefault((session, str(payload["agent_id"])), [])
            team = teams.get(str(payload.get("parent_run_id")), {})
            settings = member_history_settings(options, payload, team)
            replay = _replay(payload, own, settings, member_runs=True)
            own.append(payload)
        if replay is not None:
            found[str(payload["run_id"])] = replay
    return found


def _replay(
    payload: dict[str, Any], previous: list[dict], settings: dict | None, *, member_runs: bool = False
) -> dict[str, Any] | None:
    """The replay a run was sent, if it replayed any and agno did not store it."""
    if settings is None or agno.has_stored_replay(payload):
        return None
    replay = agno.replayed_history(previous, settings, member_runs=member_runs)
    return replay if replay["messages"] else None


def compacted_replay(
    payload: dict[str, Any], previous: list[dict], settings: dict | None, folds: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The replay a run of a session agno compacted was sent (``_history_for_run``,
    ``apply_compaction``): every earlier run (agno's planner window; the fold, not
    ``num_history_runs``, bounds it), from the anchor of the fold in force when that is
    older; ``max_tool_calls_from_history`` applied; then the fold the run made, else the
    one in force, as ``agno_compaction.view``: the summary and the messages from its anchor
    on. A fold proves the run replayed history, so no flag is needed. The fold the run made
    comes back as ``compaction`` (with the one before it and the history it folded), for its
    compaction model call."""
    if agno.has_stored_replay(payload):
        return None
    settings = dict(settings or {})
    window = agno_compaction.PLANNER_WINDOW_RUNS
    settings["num_history_runs"] = max(settings.get("num_history_runs") or 0, window)
    settings.pop("num_history_messages", None)
    history, _ = agno.history_messages(previous, num_history_runs=window)
    earlier = next((folds[str(p["run_id"])] for p in reversed(previous) if str(p["run_id"]) in folds), None)
    anchor = earlier["first_kept_message_id"] if earlier is not None else None
    if anchor and not any(m.get("id") == anchor for m in history):
        everything, _ = agno.history_messages(previous)
        start = next((n for n, m in enumerate(everything) if m.get("id") == anchor), None)
        if start is not None:
            history = everything[start:]
    if settings.get("max_tool_calls_from_history") is not None:
        history = agno.filter_tool_calls(history, settings["max_tool_calls_from_history"])
    own = folds.get(str(payload.get("run_id")))
    sent = agno_compaction.view(history, own) if own is not None else None
    in_force = own if sent is not None else earlier
    if sent is None:
        sent = agno_compaction.view(history, earlier)
    if sent is None:
        sent, in_force = history, None
    run_of = {
        str(m.get("id")): str(p["run_id"])
        for p in previous
        for m in p.get("messages") or []
        if isinstance(m, dict) and m.get("id")
    }
    kept = {run_of.get(str(m.get("id"))) for m in sent}
    if in_force is not None:
        settings["compaction_id"] = in_force["id"]
    replay: dict[str, Any] = {
        "messages": sent,
        "source_run_ids": [str(p["run_id"]) for p in previous if str(p["run_id"]) in kept],
        "settings": {key: value for key, value in settings.items() if value is not None},
    }
    if own is not None:
        replay["compaction"] = (own, earlier, history)
    return replay if sent or own is not None else None


def add_compaction_calls(pending: list[tuple[int, list, str, list | None]], replays: dict[str, Any]) -> None:
    """Each run that made a fold gets its compaction model call, rebuilt
    (``agno_compaction.compaction_call``), at the run's start: agno folds before the run's
    first model call and stores no time for it."""
    for _, items, _, runs in pending:
        if not runs or not items:
            continue
        replay = replays.get(str(items[0].get("run_id"))) or {}
        if "compaction" not in replay:
            continue
        own, earlier, history = replay["compaction"]
        call = agno_compaction.compaction_call(items[0], own, earlier, history)
        call.started_at = call.ended_at = runs[0].started_at
        call.metadata["time_estimated"] = True
        runs[0].model_calls.insert(0, call)


def is_member_run(payload: dict[str, Any]) -> bool:
    """An agent's run as a member of a team (not a workflow step's)."""
    return bool(payload.get("parent_run_id") and payload.get("agent_id") and not payload.get("workflow_id"))


def member_history_settings(
    options: dict[str, Any], payload: dict[str, Any], team: dict[str, Any]
) -> dict[str, int | None] | None:
    """The history a team member with ``add_history_to_context`` was handed by its leader
    (agno's ``_get_history_for_member_agent``): its earlier member runs of the session,
    ``num_history_runs`` its own, else (when it set ``num_history_messages``) its team's,
    else agno's 3; ``num_history_messages`` its own; ``max_tool_calls_from_history`` not
    applied. Only flags given for the member by name count: a number given for all is the
    leader's, and most members replay nothing."""
    named = {flag: [(n, c) for n, c in options.get(flag) or [] if n] for flag in HISTORY_FLAGS}
    own = history_settings(named, payload)
    if own is None:
        return None
    if not own["num_history_runs"]:
        leader = history_settings(options, team) if team else None
        own["num_history_runs"] = (leader or {}).get("num_history_runs") or 3
    own["max_tool_calls_from_history"] = None
    return own


def read_rows(source: str, schema: str, since: int | None) -> list[tuple]:
    if source.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        return read_postgres(source, schema, since)
    return read_sqlite(source, since)


def history_rows(source: str, schema: str, since: int | None, rows: list[tuple]) -> list[tuple]:
    """The rows replays are rebuilt from: every row, also with ``--since`` (a newer run
    replays older ones, which that import does not read again)."""
    return rows if since is None else read_rows(source, schema, None)


def replays_history(payload: dict[str, Any]) -> bool:
    """Whether a run is an agent's or a team leader's own (not a member's, nor a
    workflow's): the runs agno replays history to, and from."""
    if payload.get("parent_run_id") or payload.get("step_results") is not None:
        return False
    return bool(payload.get("agent_id") or payload.get("team_id")) and not payload.get("workflow_id")


def parse_since(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(float(value))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError("--since takes epoch seconds or an ISO date/time") from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())


class Command(BaseCommand):
    help = "Import the sessions and runs of an agno SqliteDb file or PostgresDb (agno 3.x)."

    def add_arguments(self, parser):
        parser.add_argument("source", help="An agno SQLite file, or a postgresql:// URL.")
        add_project_argument(parser, "the runs go into")
        parser.add_argument("--since", help="Only runs created or updated since (epoch seconds or ISO date).")
        parser.add_argument(
            "--schema", default="ai", help="PostgreSQL schema of the agno tables (agno's default: ai)."
        )
        parser.add_argument(
            "--history-runs",
            type=history_flag,
            action="append",
            metavar="[NAME=]N",
            help="The agents and team leaders ran with add_history_to_context and num_history_runs=N (agno's "
            "default 3); NAME=N for one agent or team (its name or id), repeatable: rebuild the messages agno "
            "replayed to each of their model calls from the stored runs (agno does not store them), marked "
            "as reconstructed. 0: replayed nothing.",
        )
        parser.add_argument(
            "--history-messages",
            type=history_flag,
            action="append",
            metavar="[NAME=]N",
            help="As --history-runs, for num_history_messages=N (the last N messages of the session).",
        )
        parser.add_argument(
            "--max-tool-calls-from-history",
            type=history_flag,
            action="append",
            metavar="[NAME=]N",
            help="With --history-runs or --history-messages: the agents ran with max_tool_calls_from_history=N.",
        )
        parser.add_argument(
            "--workflow-history-runs",
            type=int,
            default=None,
            metavar="N",
            help="The workflows ran with add_workflow_history_to_steps (steps' num_history_runs=N, agno's "
            "default 3): where a step's message was not stored, rebuild its workflow history block from the "
            "session's earlier workflow runs, marked as reconstructed.",
        )

    def handle(
        self,
        *args,
        source: str,
        since: str | None,
        schema: str,
        history_runs: list[tuple[str, int]] | None = None,
        workflow_history_runs: int | None = None,
        project: str = "default",
        **options,
    ):
        project_id = project_named(project).pk
        since_epoch = parse_since(since)
        rows = read_rows(source, schema, since_epoch)
        problems: list[str] = []
        all_results: list[ingestion.ItemResult] = []
        history = {
            "history_runs": history_runs,
            "history_messages": options.get("history_messages"),
            "max_tool_calls_from_history": options.get("max_tool_calls_from_history"),
        }
        compactions = read_compactions(source, schema)
        replays = {}
        if history["history_runs"] or history["history_messages"] or compactions:
            replays = history_replays(history_rows(source, schema, since_epoch, rows), history, compactions)
        earlier_workflows: dict[str, list[dict]] = {}
        # Member runs are rows of their own, written before their team's row; the tasks the
        # team delegated to each member settle where the blocks in its message end.
        teams = delegations(rows)
        team_histories = member_team_histories(history_rows(source, schema, since_epoch, rows))
        children = member_rows(rows)
        stored_ids = row_ids(source, schema)
        emitted: set[str] = set()
        # Every row is read before any is stored: a run's times are placed with its
        # member and step runs, which other rows may hold.
        pending: list[tuple[int, list, str, list | None]] = []
        for number, (run_data, session_id, parent_run_id, user_id, status, created_at) in enumerate(
            rows, start=1
        ):
            show_progress(self.stderr, number, len(rows))
            try:
                payload = json.loads(run_data)
            except (TypeError, ValueError) as exc:
                problems.append(f"row {number}: run_data is not JSON ({exc})")
                all_results.append(
                    ingestion.ItemResult(
                        index=number - 1, errors=[{"path": "$", "message": f"run_data is not JSON ({exc})"}]
                    )
                )
                continue
            # The row's columns are the truth where run_data leaves a field out.
            payload.setdefault("session_id", session_id)
            payload.setdefault("user_id", user_id)
            payload.setdefault("status", status)
            payload.setdefault("created_at", created_at)
            if parent_run_id:
                payload.setdefault("parent_run_id", parent_run_id)
            items, format_name = [payload], "agno"
            replay = replays.get(str(payload.get("run_id")))
            if replay is not None:
                payload = agno.with_replay(payload, replay["messages"])
            try:
                team = teams.get(str(payload.get("parent_run_id")))
                # A member agent is named by its agent id, a sub-team by its team id.
                member_id = payload.get("agent_id") or (
                    payload.get("team_id") if payload.get("parent_run_id") else None
                )
                tasks = agno.delegated_tasks(team, member_id) if team and member_id else []
                known = team_histories.get(str(payload.get("run_id")), [])
                runs = own_runs(
                    agno.parse(payload, tasks=tasks, known=known, order_times=False), stored_ids, emitted
                )
                link_member_rows(runs[0], payload, children)
            except RecordError:
                runs = None  # sent as it is: ingestion reports what is wrong, with its path
            if runs is not None:
                if replay is not None:
                    agno.mark_reconstructed(runs[0], replay)
                if runs[0].kind == "workflow" and workflow_history_runs is not None:
                    previous = earlier_workflows.setdefault(str(payload.get("session_id")), [])
                    rebuild_workflow_history(runs[0], previous, workflow_history_runs)
                    previous.append(payload)
                format_name = "native"
            pending.append((number, items, format_name, runs))
        agno_times.place_times(run for _, _, _, runs in pending for run in runs or ())
        add_summary_calls(pending, history_rows(source, schema, since_epoch, rows))
        add_compaction_calls(pending, replays)
        for number, items, format_name, runs in pending:
            if runs is not None:
                items = [run.to_dict() for run in runs]
            for result in ingestion.ingest_items(
                items=items, format=format_name, source_format="agno", project_id=project_id
            ):
                result.index = number - 1
                all_results.append(result)
                problems.extend(f"{result.run_id}: {e['path']}: {e['message']}" for e in result.errors)
        # A PostgreSQL URL can carry a password: the receipt keeps the redacted form.
        totals = ingestion.record_receipt(
            source="import_agno", results=all_results, label=redact(source), project_id=project_id
        ).counts
        self.stdout.write(
            f"Read {len(rows)} agno run(s): {totals['created']} created, {totals['updated']} updated, "
            f"{totals['duplicate']} duplicate, {totals['rejected']} rejected."
        )
        for problem in problems:
            self.stdout.write(f"  rejected {problem}")
