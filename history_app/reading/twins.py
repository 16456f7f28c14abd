"""The JSON twins of the pages: each page's data, serialised in one place per page.

A page's view builds one context and answers HTML or JSON from it (``views``); the
functions here turn that context into the twin's body. The twins keep the ``/api/v1/…``
contracts: ``{"ok": true, …}``, a list page's ``next`` the ``_next`` of the next page.
"""

from __future__ import annotations

from typing import Any

from history_app import models
from history_app.reading import compare, inspector, listing, model_calls, stats, timeline, transcripts
from history_app.reading.diffs import LineDiff
from history_app.upkeep import annotations as annotation_store


def sessions(context: dict[str, Any]) -> dict[str, Any]:
    """The sessions page: a page of sessions, and a search's notice as a warning."""
    data: dict[str, Any] = {
        "ok": True,
        "sessions": [listing.session_summary(s) for s in context["sessions"]],
        "next": context["next_cursor"],
    }
    notice = context["filters"].search_notice
    if notice:
        data["warnings"] = [{"parameter": "q", "message": notice}]
    return data


def session_timeline(context: dict[str, Any]) -> dict[str, Any]:
    """The session page's timeline: its rows (runs in their tree, idle gaps), each run
    with its latest annotations, the whole session's counts on the first page."""
    notes = context["notes"]
    rows = []
    for row in context["rows"]:
        summary = timeline.row_summary(row)
        if summary["type"] == "run":
            summary["annotations"] = [annotation_store.summary(a) for a in notes.get(row.run.pk, [])]
        rows.append(summary)
    return {
        "ok": True,
        "session": listing.session_summary(context["session"]),
        "counts": context["counts"],
        "rows": rows,
        "next": context["next_cursor"],
    }


def session_runs(context: dict[str, Any]) -> dict[str, Any]:
    """The session page's runs, flat: the runs of its page in the page's order."""
    return {
        "ok": True,
        "session": listing.session_summary(context["session"]),
        "runs": [listing.run_summary(row.run) for row in context["rows"] if row.run is not None],
        "next": context["next_cursor"],
    }


def child_runs(children: transcripts.ChildRuns) -> dict[str, Any]:
    """The runs a run started, as its page lists them: the first ones in the order they
    started, how many there are (``total``, exact when ``counted_all``) and how many are
    not listed (``more``: all of them are in the session timeline)."""
    return {
        "runs": [transcripts.child_summary(child) for child in children.runs],
        "total": children.total,
        "counted_all": children.counted_all,
        "more": children.more,
    }


def receipts(context: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": True,
        "receipts": [listing.receipt_summary(r) for r in context["receipts"]],
        "next": context["next_cursor"],
    }


def project_stats(context: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, **stats.summary(context["numbers"])}


def model_call(context: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "model_call": model_calls.call_data(context["call"])}


def comparison(context: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, **compare.summary(context["c"])}


def annotations(run: models.Run, rows: list[models.Annotation]) -> dict[str, Any]:
    return {"ok": True, "run_id": run.run_id, "annotations": [annotation_store.summary(a) for a in rows]}


def inspection(context: dict[str, Any]) -> dict[str, Any]:
    """The context inspector: the exact text, the runs and entries it came from, the
    rebuild check, the re-render and the delta from the step before."""
    i: inspector.Inspection = context["i"]
    injected = i.context
    entries, offset = [], 0
    for segment in i.linked_text:
        if segment.source is not None:
            entries.append(
                {
                    "header": segment.text,
                    "start": offset,
                    "end": offset + len(segment.text),
                    "run_id": segment.source,
                }
            )
        offset += len(segment.text)
    previous = i.previous
    return {
        "ok": True,
        "run_id": i.run.run_id,
        "session_id": i.run.session.session_id,
        "context": {
            "number": injected.number,
            "step": injected.step,
            "target": injected.target,
            "kind": injected.kind,
            "reported": injected.reported,
            "settings": injected.settings,
            "source_run_ids": injected.source_run_ids,
            "text": injected.text,
        },
        "sources": [
            {"run_id": source_id, "stored": run is not None, "run": _source_run(run)}
            for source_id, run in i.sources
        ],
        "entries": entries,
        "rebuild": None
        if injected.kind in inspector.AGNO_STATE_BLOCKS
        else {
            "matches": None if i.rebuilt is None else i.rebuilt == injected.text,
            "verdict": i.verdict,
            "text": i.rebuilt,
            "diff": _diff(i.rebuilt_diff),
            "diff_fallback": _fallback(i.rebuilt_diff),
        },
        "rerender": None
        if not i.rerenderable
        else {
            "defaults": _settings(i.defaults),
            "settings": _settings(i.settings),
            "text": i.rerendered,
            "diff": _diff(i.rerendered_diff),
            "diff_fallback": _fallback(i.rerendered_diff),
        },
        "previous": None
        if previous is None
        else {
            "run_id": previous.run.run_id,
            "number": previous.number,
            "diff": _diff(i.previous_diff),
            "diff_fallback": _fallback(i.previous_diff),
        },
        "notes": i.notes,
    }


def _diff(diff: LineDiff | None) -> list[str] | None:
    return [line.text for line in diff] if diff is not None else None


def _fallback(diff: LineDiff | None) -> str | None:
    """Why a diff that differs has no lines (too large, too different): None otherwise."""
    return diff.fallback or None if diff is not None else None


def _source_run(run: models.Run | None) -> dict[str, Any] | None:
    if run is None:
        return None
    started = run.started_at.isoformat() if run.started_at else None
    return {"kind": run.kind, "status": run.status, "agent_name": run.agent_name, "started_at": started}


def _settings(chosen: inspector.Settings) -> dict[str, Any]:
    return {"runs": chosen.history_runs, "items": chosen.detail_items, "timestamps": chosen.timestamps}


def connect(context: dict[str, Any]) -> dict[str, Any]:
    """The connect page: the recipes, and the chosen one's script with this server's
    addresses (never a token: the page makes one on a POST)."""
    chosen = context["recipe"]
    return {
        "ok": True,
        "frameworks": [{"framework": r.key, "title": r.title} for r in context["recipes"]],
        "recipe": {
            "framework": chosen.key,
            "title": chosen.title,
            "install": chosen.install,
            "instruments": list(chosen.instruments),
            "session": chosen.session,
            "endpoint": context["endpoint"],
            "token_variable": "TOKEN",
            "code": context["code"],
            "docs": context["docs_url"],
        },
    }
