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

import re
from typing import Any

from django.db import connection
from django.db.models.expressions import RawSQL

from .agent_history.context import as_text

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
    """Text as both engines index it: CJK runs become space-separated bigrams."""
    return _CJK_RUN.sub(lambda m: _bigrams(m.group()), text)


def document_for(run: Any) -> str:
    """The search document of a canonical run record."""
    parts = [run.agent_name, run.input, run.output or "", run.error or ""]
    for iteration in run.iterations:
        parts += [iteration.name, iteration.thought or ""]
        for call in iteration.tool_calls:
            parts += [call.tool, as_text(call.params), call.result or "", call.error or ""]
    for interaction in run.member_interactions:
        parts += [interaction.member, interaction.task, interaction.response]
    text = "\n".join(part[:MAX_FIELD_CHARS] for part in parts if part)
    return index_text(text)[:MAX_DOCUMENT_CHARS]


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
SAMPLE_RUNS = 5000
BROAD_HITS = 25


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


def matching_sessions(query: str) -> Any:
    """A subquery of the keys of sessions with a run matching ``query``; None for an empty
    query. SQLite plans it well as it is; on PostgreSQL see ``SAMPLE_RUNS``."""
    from . import models

    matching = matching_run_pks(query)
    if matching is None:
        return None
    broad = models.Run.objects.filter(pk__in=matching).values("session_id")
    if connection.vendor != "postgresql":
        return broad
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT tsv FROM history_app_runsearch ORDER BY run_id DESC "
            f"LIMIT {SAMPLE_RUNS}) AS recent WHERE tsv @@ to_tsquery('simple'::regconfig, %s)",
            matching.params,
        )
        (hits,) = cursor.fetchone()
    if hits >= BROAD_HITS:
        return broad
    return RawSQL(
        f"WITH hits AS MATERIALIZED ({matching.sql}) "
        "SELECT session_id FROM history_app_run WHERE id IN (SELECT run_id FROM hits)",
        matching.params,
    )
