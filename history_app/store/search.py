"""Full-text search over runs, one behaviour on SQLite (FTS5) and PostgreSQL (tsvector + GIN).

Each run has one search document (``RunSearch``): its input, output, error, thoughts,
tool names, parameters, results and errors, member tasks and responses. Both engines
tokenise on Unicode word boundaries, which leaves Chinese and Japanese text (written
without spaces) as one giant "word" nobody could search for. So the document and the
query both pass through ``index_text``, which rewrites every run of CJK characters as
its overlapping bigrams (東京都 → 東京 京都 都): a CJK query then becomes a phrase of
bigrams, found exactly where the characters stand side by side. The same rewriting on
both sides is what makes the two engines agree.

Terms are ANDed; each Latin term matches as a prefix (``tok`` finds ``tokens``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models.expressions import RawSQL

from history_app.agent_history.context import as_text
from history_app.store import pg_copy

# Hiragana, katakana, CJK unified ideographs (with extension A and compatibility), Hangul.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_TERM = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)

# A document is capped: PostgreSQL refuses a tsvector over 1 MB, and the head of a long
# observation is what people search for.
MAX_DOCUMENT_CHARS = 100_000
MAX_FIELD_CHARS = 20_000
MAX_TERMS = 12


def _bigrams(run: str) -> str:
    if len(run) == 1:
        return f" {run} "
    # The last character alone as well, so a one-character query finds it at a run's end.
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + f" {run[-1]} "


def index_text(text: str) -> str:
    """Text as both engines index it: CJK runs become space-separated bigrams. (ASCII text
    holds none: one C test instead of the pattern's scan, a tenth of a millisecond of
    every ingested run.)"""
    if text.isascii():
        return text
    return _CJK_RUN.sub(lambda m: _bigrams(m.group()), text)


def document_for(run: Any) -> str:
    """The search document of a canonical run record, from its values as they are stored
    (names cut as the row mapper cuts them): the document of a stored run rebuilt from its
    rows (``stored_documents``) is the one that was indexed, which SQLite's contentless
    index needs to delete it.

    Changing what goes into a document changes what a delete would give the index for the
    runs indexed before: such a change needs a migration that rebuilds the index (what
    ``reindex_search`` does), or SQLite's index is corrupted by the first delete."""
    return _document(
        (run.agent_name or run.team_id or run.workflow_id)[:255],
        run.input,
        run.output,
        run.error,
        [
            (
                iteration.name[:255],
                iteration.thought,
                [
                    (call.tool[:255], as_text(call.params), call.result, call.error)
                    for call in iteration.tool_calls
                ],
            )
            for iteration in run.iterations
        ],
        [(mi.member[:255], mi.task, mi.response) for mi in run.member_interactions],
    )


def _document(
    agent: str,
    input: str,
    output: str | None,
    error: str | None,
    iterations: list[tuple[str, str | None, list[tuple[str, str, str | None, str | None]]]],
    interactions: list[tuple[str, str, str]],
) -> str:
    parts = [agent, input, output or "", error or ""]
    for name, thought, calls in iterations:
        parts += [name, thought or ""]
        for tool, params, result, call_error in calls:
            parts += [tool, params, result or "", call_error or ""]
    for member, task, response in interactions:
        parts += [member, task, response]
    text = "\n".join(part[:MAX_FIELD_CHARS] for part in parts if part)
    return index_text(text)[:MAX_DOCUMENT_CHARS]


# -- the index: SQLite keeps no copy of the documents (a contentless FTS5 table, so the
# text to delete is rebuilt from the rows); PostgreSQL keeps them with their tsvector.


def index_runs(documents: Iterable[tuple[int, str]]) -> None:
    """Index ``(run primary key, document)`` pairs (runs not indexed yet)."""

    documents = list(documents)
    if not documents:
        return
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO history_run_fts(rowid, document) VALUES (%s, %s)", documents)
    else:
        pg_copy.copy_rows("history_app_runsearch", ["run_id", "document"], documents)


def unindex_runs(documents: Iterable[tuple[int, str]]) -> None:
    """Take runs out of the index, given the ``(primary key, document)`` they were indexed
    with (``stored_documents``, read before their rows change)."""
    from history_app import models

    documents = list(documents)
    if not documents:
        return
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO history_run_fts(history_run_fts, rowid, document) VALUES ('delete', %s, %s)",
                documents,
            )
    else:
        pks = [pk for pk, _ in documents]
        models.RunSearch.objects.filter(run_id__in=pks)._raw_delete(models.RunSearch.objects.db)


def stored_documents(pks: Iterable[int]) -> list[tuple[int, str]]:
    """``(primary key, document)`` of stored runs as they were indexed: rebuilt from their
    rows on SQLite (``documents_from_rows``), read on PostgreSQL."""
    from history_app import models

    pks = list(pks)
    if not pks:
        return []
    if connection.vendor != "sqlite":
        return list(models.RunSearch.objects.filter(run_id__in=pks).values_list("run_id", "document"))
    return documents_from_rows(pks, models)


def documents_from_rows(pks: list[int], models: Any) -> list[tuple[int, str]]:
    """The documents of stored runs, built from their rows with four queries of plain
    values (no model objects); ``models`` gives the model classes (a migration passes its
    historical ones)."""
    calls: dict[int, list] = {}
    for iteration_id, tool, params, result, error in (
        models.ToolCall.objects.filter(run_id__in=pks)
        .order_by("iteration_id", "position")
        .values_list("iteration_id", "tool", "params_json", "result", "error")
    ):
        calls.setdefault(iteration_id, []).append((tool, as_text(json.loads(params)), result, error))
    iterations: dict[int, list] = {}
    for pk, run_id, name, thought in (
        models.Iteration.objects.filter(run_id__in=pks)
        .order_by("run_id", "position")
        .values_list("pk", "run_id", "name", "thought")
    ):
        iterations.setdefault(run_id, []).append((name, thought, calls.get(pk, [])))
    interactions: dict[int, list] = {}
    for run_id, member, task, response in (
        models.MemberInteraction.objects.filter(run_id__in=pks)
        .order_by("run_id", "position")
        .values_list("run_id", "member", "task", "response")
    ):
        interactions.setdefault(run_id, []).append((member, task, response))
    return [
        (pk, _document(agent, input, output, error, iterations.get(pk, []), interactions.get(pk, [])))
        for pk, agent, input, output, error in models.Run.objects.filter(pk__in=pks)
        .order_by("pk")
        .values_list("pk", "agent_name", "input", "output", "error")
    ]


def unindex_stored(pks: Iterable[int]) -> int:
    """Take stored runs out of the index before their rows are deleted; how many."""
    documents = stored_documents(pks)
    unindex_runs(documents)
    return len(documents)


def indexed_count(runs: Any) -> int:
    """How many of ``runs`` (a queryset) have a search document: each run on SQLite, whose
    index is filled with every run in its transaction; the documents on PostgreSQL."""
    from history_app import models

    if connection.vendor == "sqlite":
        return runs.count()
    return models.RunSearch.objects.filter(run__in=runs.values("pk")).count()


def clear_index() -> None:
    """Empty the index (``reindex_search`` then fills it from the stored runs)."""
    from history_app import models

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO history_run_fts(history_run_fts) VALUES ('delete-all')")
    else:
        models.RunSearch.objects.all()._raw_delete(models.RunSearch.objects.db)


def terms(query: str) -> list[tuple[str, list[str]]]:
    """A query as (kind, tokens) terms: ``("prefix", [word])`` or ``("phrase", bigrams)``."""
    found: list[tuple[str, list[str]]] = []
    for match in _TERM.finditer(query.lower()):
        token = match.group()
        if _CJK_RUN.fullmatch(token):
            if len(token) == 1:
                found.append(("prefix", [token]))
            else:
                found.append(("phrase", [token[i : i + 2] for i in range(len(token) - 1)]))
        else:
            found.append(("prefix", [token]))
        if len(found) == MAX_TERMS:
            break
    return found


def unsearchable(query: str) -> str:
    """Why ``query`` cannot search anything, or "" when it can: it holds no word (no
    letter, digit or CJK character), so it would match every run (``🤖``, ``"``, ``*``)."""
    if query and not terms(query):
        return f"the search {query!r} has no searchable words (letters, digits or CJK characters), so it was ignored"
    return ""


def _fts5_query(parsed: list[tuple[str, list[str]]]) -> str:
    # Tokens hold only word characters, so double quotes need no escaping.
    out = []
    for kind, tokens in parsed:
        if kind == "prefix":
            out.append(f'"{tokens[0]}"*')
        else:
            out.append('"' + " ".join(tokens) + '"')
    return " AND ".join(out)


def _tsquery(parsed: list[tuple[str, list[str]]]) -> str:
    out = []
    for kind, tokens in parsed:
        if kind == "prefix":
            out.append(f"'{tokens[0]}':*")
        else:
            out.append("(" + " <-> ".join(f"'{t}'" for t in tokens) + ")")
    return " & ".join(out)


# How a search is answered on PostgreSQL depends on how common its terms are. A broad
# search (most recent runs match) is quickest by walking the sessions in list order and
# probing each one's runs; a narrow one by gathering the matches from the GIN index first
# and sorting their sessions. PostgreSQL's planner cannot tell the two apart for a prefix
# query (its estimate is a constant) and picks the wrong one either way, up to a
# thousand times slower. So one small query looks at the newest SAMPLE_RUNS documents:
# if at least BROAD_HITS of them match, the search is broad.
SAMPLE_RUNS = 1000  # each sampled tsvector is read (detoasted) on PostgreSQL: a few ms per thousand
BROAD_HITS = 5


def matching_run_pks(query: str) -> RawSQL | None:
    """A subquery of the primary keys of runs matching ``query``; None for an empty query."""
    parsed = terms(query)
    if not parsed:
        return None
    if connection.vendor == "postgresql":
        return RawSQL(
            "SELECT run_id FROM history_app_runsearch WHERE tsv @@ to_tsquery('simple'::regconfig, %s)",
            [_tsquery(parsed)],
        )
    return RawSQL("SELECT rowid FROM history_run_fts WHERE history_run_fts MATCH %s", [_fts5_query(parsed)])


def is_broad(query: str) -> bool:
    """PostgreSQL: whether many recent runs match ``query``, at least ``BROAD_HITS`` of the
    newest ``SAMPLE_RUNS`` (one bounded read of the index). SQLite needs no sample: its
    sessions list tries the next sessions in list order first (``listing``)."""
    parsed = terms(query)
    if not parsed:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT tsv FROM history_app_runsearch ORDER BY run_id DESC "
            f"LIMIT {SAMPLE_RUNS}) AS recent WHERE tsv @@ to_tsquery('simple'::regconfig, %s)",
            [_tsquery(parsed)],
        )
        (hits,) = cursor.fetchone()
    return hits >= BROAD_HITS


# Runs whose matches are looked up by a range read of the index (SQLite); more are left to
# the subquery over every match.
RANGE_RUNS_MAX = 30_000


def matching_runs_in(query: str, session_pks: list[int]) -> dict[int, int] | None:
    """``{run key: session key}`` of the runs of these sessions that match ``query``
    (SQLite): the index is read only between the lowest and the highest key of their runs,
    a range that stays small when the sessions are neighbours in the list (the runs of
    recent sessions are recent runs); a walk probing run after run would re-read the index
    for every run. None when the sessions hold more than ``RANGE_RUNS_MAX`` runs."""
    from history_app import models

    runs = list(
        models.Run.objects.filter(session_id__in=session_pks).values_list("pk", "session_id")[
            : RANGE_RUNS_MAX + 1
        ]
    )
    if len(runs) > RANGE_RUNS_MAX:
        return None
    if not runs:
        return {}
    keys = [pk for pk, _ in runs]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rowid FROM history_run_fts WHERE history_run_fts MATCH %s AND rowid BETWEEN %s AND %s",
            [_fts5_query(terms(query)), min(keys), max(keys)],
        )
        hits = {pk for (pk,) in cursor.fetchall()}
    return {pk: session for pk, session in runs if pk in hits}


def matching_runs_of_sessions(query: str, session_pks: list[int]) -> RawSQL:
    """PostgreSQL: a subquery of the keys of these sessions' runs that match ``query``,
    found through the sessions' runs (a few hundred rows) rather than the index's every
    match."""
    # The tsvector is read in a scalar subquery, once per run of the sessions: as a join,
    # the planner would rather test every document of the index (seconds at 100k runs).
    return RawSQL(
        "SELECT r.id FROM history_app_run r WHERE r.session_id = ANY(%s) AND ("
        "SELECT rs.tsv FROM history_app_runsearch rs WHERE rs.run_id = r.id"
        ") @@ to_tsquery('simple'::regconfig, %s)",
        [session_pks, _tsquery(terms(query))],
    )


def matching_sessions(query: str) -> Any:
    """A subquery of the keys of sessions with a run matching ``query``; None for an empty
    query. SQLite plans it well as it is; on PostgreSQL see ``SAMPLE_RUNS``."""
    from history_app import models

    matching = matching_run_pks(query)
    if matching is None:
        return None
    broad = models.Run.objects.filter(pk__in=matching).values("session_id")
    if connection.vendor != "postgresql" or is_broad(query):
        return broad
    # The session keys as an array, unnested: PostgreSQL cannot estimate the matches (a
    # GIN estimate is a constant, 5,000) and joined them to a scan of every session (31 ms
    # at 100,000 sessions for a word in 1,000 runs); an unnested array it takes for a few
    # rows, and reads each matching session by its key (11 ms).
    return RawSQL(
        f"SELECT unnest(ARRAY(WITH hits AS MATERIALIZED ({matching.sql}) "
        "SELECT session_id FROM history_app_run WHERE id IN (SELECT run_id FROM hits)))",
        matching.params,
    )
