"""Issue #13: the fast paths give exactly what the general ones give.

- a native record is parsed, redacted and read in one pass (``prepare_native``): the same
  record as the parser path, for every sample and hostile mutation;
- new plain runs are written in bulk (``bulk.insert_runs``): the same rows, search
  document and session counters as one by one;
- the rollups (``SessionFacet``, ``DailyStat``) always equal a recount from the rows, after
  creates, updates, moves between sessions, team and member runs, and prunes;
- SQLite's contentless search index is given back exactly the text it indexed, so a
  run's old words leave it when the run changes or goes (on PostgreSQL the documents are
  stored, and the same tests hold).
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from history_app import models
from history_app.agent_history import formats
from history_app.agent_history.records import RecordError
from history_app.benchmarks import shape
from history_app.intake import ingestion, writer
from history_app.store import mapper, rollups, search
from history_app.upkeep import retention

from .conftest import examples, load_jsonl, native
from .test_ingest_property import SAMPLES, SURROGATES

SECRETS = [
    placement["text"]
    for case in load_jsonl("secrets.jsonl")[:60]
    for placement in case.get("placements", [])[:2]
    if "text" in placement
]


def _native_samples() -> list[dict]:
    """Every sample of every format, as the native records it becomes."""
    found = []
    for payload in SAMPLES:
        try:
            runs = formats.parse(json.loads(json.dumps(payload)))
        except RecordError:
            continue
        found += [json.loads(run.to_json()) for run in runs]
    return found


NATIVE = _native_samples()


def _both_ways(payload: dict):
    redactor = ingestion.server_redactor()
    one: list = []
    general: list = []
    try:
        fast = ingestion.prepare_native(json.loads(json.dumps(payload)), redactor=redactor, report=one)
    except RecordError as exc:
        fast = ("refused", exc.errors)
    try:
        (run,) = formats.parse(json.loads(json.dumps(payload)))
        slow = ingestion.prepare_run(run, redactor=redactor, report=general)
    except RecordError as exc:
        slow = ("refused", exc.errors)
    return fast, slow, one, general


def _rules(report: list) -> list:
    return sorted(json.dumps(entry["rules"], sort_keys=True) for entry in report)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(NATIVE),
    st.sampled_from(["input", "output", "error", "agent_name", "extra_field"]),
    st.one_of(st.sampled_from(SECRETS), st.text(max_size=30), SURROGATES, st.just("a\x00b")),
    st.sampled_from([{}, {"openai": 2}, {"custom-1": 1, "not a rule": 3}]),
)
def test_one_pass_native_equals_the_parser_path(sample, where, value, client_counts):
    payload = dict(sample, redactions=client_counts)
    payload[where] = value
    payload.setdefault("metadata", {})["note"] = value
    fast, slow, one, general = _both_ways(payload)
    assert fast == slow
    # The same rules fired; a field the record does not know is reported where the client
    # put it ($.extra_field) rather than where it is kept ($.metadata.extra_fields.…).
    assert _rules(one) == _rules(general)
    assert {e["path"].replace("$.metadata.extra_fields.", "$.") for e in general} == {e["path"] for e in one}


def test_one_pass_refuses_what_the_parser_refuses():
    for bad in (
        native(started_at="yesterday"),
        native(iterations="not a list"),
        native(status="sleeping"),
        native(metadata={"deep": json.loads("[" * 80 + "]" * 80)}),
        native(metrics={"x": float("inf")}),
    ):
        fast, slow, _, _ = _both_ways(bad)
        assert fast == slow and isinstance(fast, tuple) and fast[0] == "refused", bad


# -- bulk writes ----------------------------------------------------------------------------


def _stored(run_id: str) -> tuple[dict, str]:
    row = mapper.transcript_queryset().get(run_id=run_id)
    record = mapper.run_record(row).to_dict()
    for key in ("run_id", "session_id"):
        record.pop(key)
    (document,) = search.stored_documents([row.pk])
    return record, document[1]


def _renamed(payload: dict, suffix: str) -> dict:
    return dict(payload, run_id=payload["run_id"] + suffix, session_id=payload["session_id"] + suffix)


def test_bulk_writes_the_rows_one_by_one_writes(ingest, monkeypatch):
    plain = [p for p in NATIVE if not p.get("parent_run_id") and p.get("kind", "agent") == "agent"]
    plain += [shape.run_dict(i, contexts=True) for i in range(20)]
    assert len(plain) > 20
    assert ingest([_renamed(p, "-bulk") for p in plain]).status_code == 200
    calls = []
    real = writer._write_one
    monkeypatch.setattr(
        writer, "_write_one", lambda item, project_id: calls.append(1) or real(item, project_id)
    )
    monkeypatch.setattr(writer.PreparedItem, "__post_init__", lambda self: None)  # nothing is plain
    assert ingest([_renamed(p, "-one") for p in plain]).status_code == 200
    assert len(calls) == len(plain)
    for payload in plain:
        assert _stored(payload["run_id"] + "-bulk") == _stored(payload["run_id"] + "-one")
    for bulk_session in models.Session.objects.filter(session_id__endswith="-bulk"):
        one = models.Session.objects.get(session_id=bulk_session.session_id[: -len("-bulk")] + "-one")
        fields = [name for name in writer.SESSION_COUNTERS if name != "updated_at"]
        assert [getattr(bulk_session, f) for f in fields] == [getattr(one, f) for f in fields]


def test_a_batch_mixing_new_updated_duplicate_refused_and_team_runs(ingest):
    ingest([native("old", input="first"), native("same", input="same")])
    team = json.loads(json.dumps(next(p for p in SAMPLES if p.get("team_id") and p.get("member_responses"))))
    body = [
        native("new-1", status="failed"),
        native("old", input="changed"),
        native("same", input="same"),
        native("bad", started_at="never"),
        team,
        native("new-1", input="sent twice in one request"),
    ]
    results = ingest(body).json()["results"]
    assert [r["status"] for r in results] == [
        "created",
        "updated",
        "duplicate",
        "rejected",
        "created",
        "updated",
    ]
    assert models.Run.objects.get(run_id="new-1").input == "sent twice in one request"
    assert models.Session.objects.get(session_id="s-1").run_count == 3
    _check_rollups()


# -- rollups and the index, against a recount -----------------------------------------------


def _check_rollups() -> None:
    calls: dict[int, list] = defaultdict(list)
    for run_id, tool, error in models.ToolCall.objects.values_list("run_id", "tool", "error"):
        calls[run_id].append((tool, bool(error)))
    expected = {
        key: values
        for key, values in rollups.contributions(
            (r.started_at or r.received_at, r.status, calls[r.pk]) for r in models.Run.objects.all()
        ).items()
        if any(values)
    }
    stored = {
        (s.day, s.tool): [s.runs, s.failed, s.calls, s.errors]
        for s in models.DailyStat.objects.all()
        if any((s.runs, s.failed, s.calls, s.errors))
    }
    assert stored == expected
    _check_usage()
    facets = set(models.SessionFacet.objects.values_list("session_id", "facet", "value"))
    truth = {(s, "tool", t) for s, t in models.ToolCall.objects.values_list("run__session_id", "tool")}
    for session, status, names, errors in (
        (
            r.session_id,
            r.status,
            (r.agent_name, r.team_id, r.workflow_id),
            r.status == "failed" or r.tool_error_count,
        )
        for r in models.Run.objects.all()
    ):
        truth.add((session, "status", status))
        truth |= {(session, "agent", name) for name in names if name}
        if errors:
            truth.add((session, "errors", "1"))
    assert facets == truth


def _check_usage() -> None:
    """Daily usage and latency, and each session's sums, as a recount from the rows says."""
    usage: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    latency: Counter = Counter()
    for run in models.Run.objects.all():
        day = rollups.day_of(run.started_at or run.received_at)
        if run.duration_ms is not None:
            latency[day, "run", rollups.latency_bucket(run.duration_ms)] += 1
        for call in run.model_calls.all():
            row = usage[day, call.model, run.agent_name]
            row[0] += 1
            row[1] += call.input_tokens or 0
            row[2] += call.output_tokens or 0
            row[3] += call.cost or 0.0
            row[4] += call.cost is None
            if call.duration_ms is not None:
                latency[day, "model", rollups.latency_bucket(call.duration_ms)] += 1
    stored = {
        (u.day, u.model, u.agent): [u.calls, u.input_tokens, u.output_tokens, round(u.cost, 9), u.unpriced]
        for u in models.DailyUsage.objects.all()
    }
    assert stored == {key: [*values[:3], round(values[3], 9), values[4]] for key, values in usage.items()}
    kept = {(d.day, d.kind, d.bucket): d.count for d in models.DailyLatency.objects.all()}
    assert kept == dict(latency)
    for session in models.Session.objects.all():
        runs = list(session.runs.all())
        assert session.input_tokens == sum(r.input_tokens for r in runs)
        assert session.output_tokens == sum(r.output_tokens for r in runs)
        costs = [r.cost for r in runs if r.cost is not None]
        assert session.cost == (pytest.approx(sum(costs)) if costs else None)
        timed = [r.duration_ms for r in runs if r.duration_ms is not None]
        assert (session.timed_runs, session.duration_total_ms) == (len(timed), sum(timed))


def _found(word: str) -> set[int]:
    """Run keys whose indexed words include ``word``, read from the index itself (not through
    the runs, which would hide a stale entry)."""
    matching = search.matching_run_pks(word)
    with connection.cursor() as cursor:
        cursor.execute(matching.sql, matching.params)
        return {pk for (pk,) in cursor.fetchall()}


def _run(n: int, session: str, marker: str, tools: list[str], status: str = "completed") -> dict:
    size = len(marker) + len(tools)  # varies with the step: rewrites change the usage
    return native(
        f"r{n}",
        session,
        status=status,
        agent_name=f"agent{size % 2}",
        started_at=f"2026-11-{1 + n % 28:02d}T10:00:00Z",
        ended_at=f"2026-11-{1 + n % 28:02d}T10:00:{size:02d}Z",
        input=f"question {marker}",
        iterations=[
            {"index": 1, "thought": f"think {marker}", "tool_calls": [{"tool": t, "params": {}, "error": "x" if i % 2 else None} for i, t in enumerate(tools)],
             "model_calls": [{"model": ("gpt-4o", "unknown-model")[size % 2], "input_tokens": 100 * size, "output_tokens": size,
                              "started_at": "2026-11-01T10:00:00Z", "ended_at": f"2026-11-01T10:00:00.{size:03d}Z"}] * (1 + size % 2)}
        ],
    )  # fmt: skip


def test_rollups_and_index_follow_every_change(ingest, alice_client):
    rng = random.Random(13)
    live: dict[int, str] = {}  # run number -> its current marker
    gone: set[str] = set()
    for step in range(40):
        n = rng.randrange(12)
        marker = f"mk{step}x"
        action = rng.choice(["send", "send", "send", "move", "prune"])
        if action == "prune" and live:
            session = models.Run.objects.get(run_id=f"r{rng.choice(sorted(live))}").session
            for run_id in session.runs.values_list("run_id", flat=True):
                gone.add(live.pop(int(run_id[1:])))
            retention.prune_sessions(session_ids=[session.pk])
        else:
            session = f"s{rng.randrange(3)}" if action == "send" else f"moved{step}"
            tools = rng.sample(["calc", "search", "fetch", "sql"], rng.randrange(3))
            status = rng.choice(["completed", "failed"])
            assert ingest(_run(n, session, marker, tools, status)).status_code == 200
            if n in live:
                gone.add(live[n])
            live[n] = marker
        _check_rollups()
        pks = dict(models.Run.objects.values_list("run_id", "pk"))
        for number, current in live.items():
            assert _found(current) == {pks[f"r{number}"]}
        for old in gone:
            assert _found(old) == set(), old
    # What the pages show follows: the tool filter, and the stats page's totals.
    for tool in ("calc", "search", "fetch", "sql"):
        having = set(
            models.ToolCall.objects.filter(tool=tool).values_list("run__session__session_id", flat=True)
        )
        listed = {
            s["session_id"] for s in alice_client.get("/api/v1/sessions", {"tool": tool}).json()["sessions"]
        }
        assert listed == having


def test_stored_documents_are_the_indexed_documents(db):
    """The text a delete gives SQLite's contentless index, rebuilt from the rows, is the text
    that was indexed, for every sample of every format (a mismatch would corrupt the index)."""
    for payload in SAMPLES:
        try:
            detected, runs = formats.parse_detected(json.loads(json.dumps(payload)))
        except RecordError:
            continue
        for run in runs:
            prepared = ingestion.prepare_run(run)
            writer.write_run(run=prepared, source_format=detected)
            pk = models.Run.objects.get(run_id=prepared.run_id).pk
            assert search.stored_documents([pk]) == [(pk, search.document_for(prepared))]


@pytest.mark.django_db(transaction=True)
def test_the_migrations_carry_existing_data_into_the_index_and_rollups():
    from django.core.management import call_command

    ingestion.ingest_items(
        items=[_run(1, "s-a", "alpha", ["calc"]), _run(2, "s-b", "beta", ["sql"], "failed")]
    )
    call_command("migrate", "history_app", "0007", verbosity=0)
    call_command("migrate", "history_app", verbosity=0)
    pks = dict(models.Run.objects.values_list("run_id", "pk"))
    assert _found("alpha") == {pks["r1"]} and _found("beta") == {pks["r2"]}
    _check_rollups()
    assert models.DailyStat.objects.filter(tool="sql", errors=0, calls=1).exists()


@pytest.mark.parametrize("sort", ["recent", "oldest", "runs", "failures"])
@pytest.mark.parametrize(("first", "most"), [(2, 10_000), (2, 8), (200, 20_000)])
@pytest.mark.parametrize("word", ["common", "other", "single"])
def test_a_broad_search_lists_what_gathering_every_match_lists(ingest, monkeypatch, sort, first, most, word):
    """The broad plan (SQLite: candidates in list order, a range read of the index) gives
    the same pages, cursor after cursor, as filtering by every match; also after growing
    its candidates several times, after giving up on them, and for a narrow word."""
    from history_app.reading import listing

    rng = random.Random(sort)
    body = []
    for n in range(90):
        kind = "common" if rng.random() < 0.7 else "other"
        text = f"{kind} {n}" + (" solitary" if n == 17 else "")
        status = rng.choice(["completed", "failed"])
        body.append(native(f"r{n}", f"s{rng.randrange(30)}", input=text, status=status,
                           started_at=f"2026-11-{1 + rng.randrange(28):02d}T{rng.randrange(24):02d}:00:00Z"))  # fmt: skip
    assert ingest(body).status_code == 200
    monkeypatch.setattr(listing, "BROAD_CANDIDATES", first)
    monkeypatch.setattr(listing, "BROAD_CANDIDATES_MAX", most)

    def walk(filters):
        seen, after = [], None
        while True:
            page = listing.sessions_page(
                project=models.Project.default(), after=after, limit=4, filters=filters
            )
            seen += [session.session_id for session in page.items]
            if page.next_cursor is None:
                return seen
            after = page.next_cursor

    # The words in 70% and 30% of the runs, and one in a single run (narrow: gathered).
    body_words = {"common": "common", "other": "other", "single": "solitary"}
    filters = listing.SessionFilters(q=body_words[word], sort=sort)
    expected = []
    after = None
    while True:  # the plan that reads every match
        queryset = filters.apply(models.Session.objects.all())
        field, descending = listing.SESSION_SORTS[sort]
        page = listing.keyset_page(queryset, field=field, after=after, limit=4, descending=descending)
        expected += [session.session_id for session in page.items]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    having = set(
        models.Run.objects.filter(input__contains=body_words[word]).values_list(
            "session__session_id", flat=True
        )
    )
    assert set(expected) == having and len(expected) == len(having)
    assert walk(filters) == expected


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_four_writers_creating_the_same_sessions_at_once_never_deadlock(monkeypatch):
    """Batches of new runs into the same new sessions, from four connections at the same
    moment: the sessions are created and locked in one order, the daily stats and facets
    upserted in one order, so no attempt deadlocks (one attempt only), and the counts and
    rollups are exact."""
    import threading

    from django.db import close_old_connections

    monkeypatch.setattr(writer, "STORE_ATTEMPTS", 1)
    barrier = threading.Barrier(4)
    outcomes: dict[int, list] = {}

    def write(worker: int) -> None:
        try:
            order = list(range(12))
            random.Random(worker).shuffle(order)  # each writer meets the sessions in its own order
            body = [
                _run(100 * worker + n, f"shared-{n}", f"w{worker}n{n}", ["calc", f"tool{n % 3}"], "failed" if n % 4 else "completed")
                for n in order
            ]  # fmt: skip
            for item, n in zip(body, order, strict=True):
                item["run_id"] = f"w{worker}-{n}"
            barrier.wait()
            outcomes[worker] = [r.status for r in ingestion.ingest_items(items=body)]
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {worker: ["created"] * 12 for worker in range(4)}
    assert models.Session.objects.filter(session_id__startswith="shared-").count() == 12
    assert {s.run_count for s in models.Session.objects.all()} == {4}
    _check_rollups()


def test_one_pass_takes_a_callers_dict_that_json_cannot_hold():
    """A Python caller (an importer) may hand over times as datetimes: the one-pass check
    falls back to its walks instead of failing on json.dumps."""
    from datetime import UTC, datetime

    payload = native(started_at=datetime(2026, 1, 1, tzinfo=UTC), input="a\x00b \ud800")
    fast = ingestion.prepare_native(dict(payload), redactor=ingestion.server_redactor(), report=[])
    (run,) = formats.parse(dict(payload))
    assert fast == ingestion.prepare_run(run)
    assert fast.input == "a\ufffdb \ufffd" and fast.redactions == {"lone_surrogate": 1}


@pytest.mark.parametrize("error", ["", None, "boom"])
def test_an_empty_tool_error_is_counted_the_same_when_added_and_taken_off(ingest, error):
    """Found from outside: "" was no error when a run was added and an error when it was
    taken off (an update, a prune, redact_history), so the daily count went below zero and
    hid a real failure."""
    from datetime import timedelta

    from django.utils import timezone

    from history_app.reading import stats

    def run(run_id, session, days_ago, tool_error, **fields):
        started = (timezone.now() - timedelta(days=days_ago)).isoformat()
        calls = [{"tool": "search", "params": {}, "error": tool_error}]
        return native(
            run_id, session, started_at=started, iterations=[{"index": 1, "tool_calls": calls}], **fields
        )

    ingest([run("r1", "s-old", 10, error), run("r2", "s-new", 1, "real failure")])
    ingest([run("r1", "s-old", 10, error, input="changed")])
    _check_rollups()
    retention.prune_sessions(session_ids=[models.Session.objects.get(session_id="s-old").pk])
    _check_rollups()
    assert stats.stats(project=models.Project.default(), days=30)["tools"] == [
        {"tool": "search", "calls": 1, "errors": 1}
    ]
    assert not models.DailyStat.objects.filter(errors__lt=0).exists()
