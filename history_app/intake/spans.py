"""OTLP spans kept and assembled into runs: the service behind ``POST /v1/traces``.

The spans are redacted and kept (``SpanBatch``), so that a trace whose spans arrive in
several requests, in any order, is assembled again from all of them each time: its runs
are prepared as every other format is (``ingestion.prepare_item``: redacted again,
hashed) and stored by the run writer (idempotent on run id, a receipt per request).
Each span is read once: a string attribute holding JSON is parsed by its redaction, and
the assembly takes the redacted JSON from there (``otlp.JsonText``). Each text is
redacted once: the runs' redaction walks every value again (a key or a name/value pair
the assembly made can call for a text to be hidden), but shares the spans' memory of
texts (``Redactor.remembering``), so a text a span carried is looked up, not redacted a
second time. A
request's traces are assembled under a lock per trace, so two requests carrying spans of
one trace cannot each write a run that misses the other's spans.
"""

from __future__ import annotations

import json
import logging
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef
from django.db.models.fields.json import KT

from history_app import models
from history_app.agent_history import otlp
from history_app.agent_history.records import json_text_depth, without_lone_surrogates
from history_app.intake import ingestion, writer
from history_app.store import locks, mapper

logger = logging.getLogger(__name__)


class _Retry(Exception):
    """A transient database failure: the request's transaction is rolled back whole."""


@dataclass
class Outcome:
    rejected: int = 0
    changed: int = 0
    retry: bool = False
    reasons: list[str] = field(default_factory=list)
    results: list[ingestion.ItemResult] = field(default_factory=list)

    def message(self) -> str:
        """The reasons, redacted (a path can quote a key the sender named)."""
        if not self.reasons:
            return ""
        shown = "; ".join(self.reasons[:5])
        more = len(self.reasons) - 5
        return ingestion.server_redactor().redact(
            shown + (f"; and {more} more (see the receipt)" if more > 0 else "")
        )


# The span fields that identify it (never redacted), and its resource (redacted once for
# all the spans that share it): the rest is content.
_NOT_CONTENT = ("trace_id", "span_id", "parent_span_id", "start", "end", "kind", "status", "resource")


def redact_spans(spans: list[otlp.Span], redactor: Any) -> list[dict[str, Any]]:
    """Every span's content redacted in place (one walk for the request); the fields
    changed, with their span and rules (never the values).

    String attributes that hold JSON (GenAI's messages, tool arguments) are redacted as
    the JSON they hold, as any record is (a value under a secret's key, text that JSON
    escapes such as ``\\/`` or ``\\u0073`` hid), and the messages every later model call
    of a run repeats are redacted once. Such a string is kept as it came unless
    redaction changed it; then it is written again from its redacted JSON."""
    parsed: list[tuple[dict[str, Any], str, str, Any]] = []  # (attributes, key, string, its JSON)
    content = []
    for span in spans:
        item = {key: value for key, value in span.items() if key not in _NOT_CONTENT}
        item["attributes"] = _parsed(span["attributes"], parsed)
        if "events" in span:
            item["events"] = [{**e, "attributes": _parsed(e["attributes"], parsed)} for e in span["events"]]
        content.append(item)
    resources = list({id(span.get("resource")): span.get("resource") or {} for span in spans}.values())
    whole = {"spans": content, "resources": resources}
    text = json.dumps(whole, ensure_ascii=False)
    if "\\\\u" in text or "\\\\/" in text:  # JSON escapes left in text (nested, doubled): undone
        whole = _unescaped(whole)
        text = json.dumps(whole, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (a cut emoji): U+FFFD, as every record
        whole, _ = without_lone_surrogates(whole)
        parsed = []  # every value was copied: the JSON read from strings is kept as JSON
    cleaned, _, fields = redactor.redact_with_report(whole)
    if "\\u0000" in text:  # NUL, which PostgreSQL cannot hold (JSON writes it \u0000)
        cleaned = mapper.without_nul(cleaned)
    originals = {(id(attributes), key): (text, value) for attributes, key, text, value in parsed}
    for span, redacted in zip(spans, cleaned["spans"], strict=True):
        span.update({key: value for key, value in redacted.items() if key not in ("attributes", "events")})
        span["attributes"] = _as_strings(redacted["attributes"], originals, span["attributes"])
        if "events" in span:
            span["events"] = [
                {**new, "attributes": _as_strings(new["attributes"], originals, old["attributes"])}
                for new, old in zip(redacted["events"], span["events"], strict=True)
            ]
    redacted_resources = {
        id(original): new for original, new in zip(resources, cleaned["resources"], strict=True)
    }
    for span in spans:
        span["resource"] = (
            redacted_resources.get(id(span.get("resource") or {}), {}) if span.get("resource") else {}
        )
    report = []
    for entry in fields:
        where, _, rest = entry["path"].partition("[")
        index, _, rest = rest.partition("]")
        if where == "$.spans":
            span = spans[int(index)]
            run_id, path = otlp.trace_run_id(span["trace_id"]), f"span {span['span_id']}{rest}"
        else:
            run_id, path = None, f"resource{rest}"
        report.append({"run_id": run_id, "path": path, "rules": entry["rules"]})
    return report


_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\/")


def _unescaped(value: Any) -> Any:
    """Every string with JSON escapes (``\\u0073``, ``\\/``) written without them, up to
    three levels of escaping, so that redaction reads the text they hid."""
    if isinstance(value, str):
        for _ in range(3):
            if "\\" not in value:
                break
            plain = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1) else "/", value)
            if plain == value:
                break
            value = plain
        return value
    if isinstance(value, dict):
        return {_unescaped(key): _unescaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unescaped(item) for item in value]
    return value


def _read_json(text: str) -> tuple[Any, bool]:
    """``otlp.json_value(text)`` read in the same pass as whether an object of it writes a
    key twice."""
    if (
        text.count("[") + text.count("{") > otlp.MAX_JSON_DEPTH
        and json_text_depth(text) > otlp.MAX_JSON_DEPTH
    ):
        return text, False
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        found = dict(items)
        if len(found) != len(items):
            repeated = True
        return found

    try:
        return json.loads(
            text, object_pairs_hook=pairs, parse_constant=_no_constant, parse_float=_finite
        ), repeated
    except (ValueError, RecursionError):
        return text, False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def _parsed(attributes: dict[str, Any], parsed: list[tuple[dict[str, Any], str, str, Any]]) -> dict[str, Any]:
    """``attributes`` with each string that holds JSON read as JSON (noted in ``parsed``)."""
    out = {}
    for key, value in attributes.items():
        if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
            read, repeated = _read_json(value)
            if repeated:
                # JSON keeps the last of a key written twice ({"note": "sk-…", "note": "ok"}):
                # read as JSON the secret would be out of sight and the string, unchanged,
                # kept as it came. Such a string is redacted as the text it is.
                read = value
            if not isinstance(read, str):
                parsed.append((attributes, key, value, read))
                value = read
        out[key] = value
    return out


def _as_strings(
    redacted: dict[str, Any], originals: dict[tuple[int, str], tuple[str, Any]], before: dict[str, Any]
) -> dict[str, Any]:
    """Redacted attributes with the JSON read from strings written back as strings: the
    string as it came when redaction left its JSON alone, else the redacted JSON."""
    out = {}
    for key, value in redacted.items():
        original = originals.get((id(before), key))
        if original is not None:
            text, read = original
            # The string, carrying its redacted JSON: the assembly reads it from there
            # (``otlp.json_value``) instead of parsing the string a second time.
            string = otlp.JsonText(text if value == read else json.dumps(value, ensure_ascii=False))
            string.json = value
            value = string
        out[key] = value
    return out


def _pack(spans: list[otlp.Span]) -> bytes:
    return zlib.compress(json.dumps(spans, ensure_ascii=False, separators=(",", ":")).encode(), 1)


def _unpack(data: bytes | memoryview) -> list[otlp.Span]:
    return json.loads(zlib.decompress(bytes(data)))


def kept_spans(
    trace_ids: list[str], project_id: int
) -> tuple[dict[str, dict[str, otlp.Span]], dict[str, int]]:
    """The spans kept of each trace (the latest copy of each span), and the id of the
    trace's latest batch (how a writer tells that another request added to it since)."""
    spans: dict[str, dict[str, otlp.Span]] = {trace_id: {} for trace_id in trace_ids}
    latest: dict[str, int] = dict.fromkeys(trace_ids, 0)
    rows = models.SpanBatch.objects.filter(project_id=project_id, trace_id__in=trace_ids).order_by("pk")
    for pk, trace_id, data in rows.values_list("pk", "trace_id", "data"):
        for span in _unpack(data):
            spans[trace_id][span["span_id"]] = span
        latest[trace_id] = pk
    return spans, latest


def _latest_batches(trace_ids: list[str], project_id: int) -> dict[str, int]:
    rows = (
        models.SpanBatch.objects.filter(project_id=project_id, trace_id__in=trace_ids)
        .values("trace_id")
        .annotate(latest=Max("pk"))
    )
    return dict.fromkeys(trace_ids, 0) | {row["trace_id"]: row["latest"] for row in rows}


def intake_spans(
    *, spans: list[otlp.Span], errors: list[otlp.SpanError], token: models.IngestToken | None = None
) -> Outcome:
    """Redact and keep ``spans``, then assemble every trace they belong to from all its
    spans kept so far and store its runs.

    The work is done outside the write transaction (on SQLite every other writer waits
    while one is open): the traces' kept spans are read, assembled with the new ones, and
    their runs parsed, redacted and hashed. The transaction then locks the traces, checks
    that no other request added spans to them meanwhile (a trace that changed is planned
    again, inside), and writes the runs and the new spans together: both or neither.
    Everything goes into the token's project (the default project without a token)."""
    project_id = token.project_id if token is not None else writer.project_key(None)
    outcome = Outcome(rejected=len(errors))
    outcome.reasons.extend(f"{e.path}: {e}" for e in errors)
    span_results = [
        ingestion.ItemResult(index=n, status="rejected", errors=[{"path": e.path, "message": str(e)}])
        for n, e in enumerate(errors)
    ]
    # One memory of redacted texts for the request: the runs are redacted again, whole,
    # but a text a span carried (most of a run's) is then a lookup, not redacted twice.
    redactor = ingestion.server_redactor().remembering()
    changed_fields = redact_spans(spans, redactor) if spans else []
    traces = otlp.group_by_trace(spans)
    results: list[ingestion.ItemResult] = []
    with ingestion.receipt_kept(
        source="otlp", token=token, item_count=len(traces) + len(errors), project_id=project_id
    ) as receipt:
        kept, latest = kept_spans(list(traces), project_id)
        assembled = assembled_span_counts(list(traces), project_id)
        plans = {
            trace_id: _plan(trace_id, news, kept[trace_id], redactor, assembled[trace_id])
            for trace_id, news in traces.items()
        }
        try:
            with transaction.atomic():
                _lock_traces(list(traces), project_id)
                now = _latest_batches(list(traces), project_id)
                moved = [trace_id for trace_id in traces if now[trace_id] != latest[trace_id]]
                if moved:  # another request added spans to these traces since they were read
                    kept_now, _ = kept_spans(moved, project_id)
                    assembled_now = assembled_span_counts(moved, project_id)
                    for trace_id in moved:
                        plans[trace_id] = _plan(
                            trace_id, traces[trace_id], kept_now[trace_id], redactor, assembled_now[trace_id]
                        )
                _lock_session_slots(plans, project_id)
                results = _write(plans, outcome, project_id)
                if any(r.status == "retry" for r in results):
                    raise _Retry
        except _Retry:
            # Rolled back whole: nothing of the request was kept, every run is sent again.
            outcome.retry = True
            for result in results:
                writer.retry_result(result)
    if results:
        results[0].changed_fields.extend(changed_fields)
    for n, result in enumerate(results):
        result.index = len(span_results) + n
    ingestion.close_receipt(receipt=receipt, results=span_results + results)
    outcome.results = span_results + results
    return outcome


def _lock_traces(trace_ids: list[str], project_id: int) -> None:
    """Two requests carrying spans of one trace write it one after the other (SQLite
    writes one transaction at a time already; IMMEDIATE takes its lock at BEGIN): the
    trace's lock slot (``locks``), however many traces the request holds."""
    locks.lock_slots(locks.TRACES, trace_ids, project_id)


def _lock_session_slots(plans: dict[str, _Plan], project_id: int) -> None:
    """The lock slots of every session the planned runs name, all at once and before
    any row lock. The runs are stored in several batches in this one transaction, and
    each batch locks the slots of its new sessions (``ingestion``): those are held
    already, so no batch takes a slot out of order after an earlier batch's."""
    sessions = {run.session_id for plan in plans.values() for item in plan.pending for run in item.runs}
    locks.lock_slots(locks.SESSIONS, sessions, project_id)


# Assembling a trace again costs time in proportion to all its spans (its runs are
# parsed, redacted and written again). A trace of more than ASSEMBLE_ALWAYS spans whose
# run exists is assembled again only when the spans it received since it was last
# assembled make at least 1/ASSEMBLE_FRACTION of it, or its root span arrives; in
# between, new spans are kept and appear at the next assembly. So a request adding a
# few spans to a large trace costs a few spans' work, and a trace's assemblies together
# cost a constant times its size, not its size squared.
ASSEMBLE_ALWAYS = 1_000
ASSEMBLE_FRACTION = 8


def assembled_span_counts(trace_ids: list[str], project_id: int) -> dict[str, int | None]:
    """For each trace, the spans its stored run was last assembled from (None when the
    trace has no run: it is assembled whatever its size)."""
    rows = models.Run.objects.filter(project_id=project_id, run_id__in=trace_ids).values_list(
        "run_id", KT(f"metadata__{otlp.SPAN_COUNT_KEY}")
    )
    counts: dict[str, int | None] = dict.fromkeys(trace_ids)
    for run_id, count in rows:
        try:
            counts[run_id] = int(count) if count is not None else 0
        except ValueError:
            counts[run_id] = 0
    return counts


@dataclass
class _Plan:
    """What a request does to one trace: the spans it adds (or changes), the trace's
    runs assembled and prepared for storing, and the spans refused, with why. A plan
    ``deferred`` keeps its spans without assembling the trace again."""

    spans: list[otlp.Span] = field(default_factory=list)
    pending: list[Any] = field(default_factory=list)  # writer.PreparedItem, one per run
    results: list[ingestion.ItemResult] = field(default_factory=list)
    refused: int = 0
    reasons: list[str] = field(default_factory=list)
    deferred: bool = False


def _plan(
    trace_id: str, spans: list[otlp.Span], kept: dict[str, otlp.Span], redactor: Any, assembled: int | None
) -> _Plan:
    """Assemble a trace from its kept spans and ``spans``, and prepare its runs (parsed,
    redacted, hashed: ``ingestion``'s own preparation). A trace that cannot be assembled
    keeps what it had: its new spans are refused, never kept to break every later request
    of the trace too. A trace whose run exists is not assembled again when nothing of it
    changed, nor, when large, before enough of it did (``ASSEMBLE_FRACTION``)."""
    plan = _Plan()
    news = {span["span_id"]: span for span in spans}
    fresh = news.keys() - kept.keys()
    limit = settings.HISTORY_OTLP_MAX_TRACE_SPANS
    if len(kept) + len(fresh) > limit:
        # Each request assembles its traces again from all their spans: a trace without
        # end would make every request slower than the one before. Its root span is
        # still taken, so that its run ends; spans kept already may be sent again.
        children = sorted((news[key] for key in fresh if not otlp.is_root(news[key])), key=otlp.span_order)
        room = max(limit - len(kept) - (len(fresh) - len(children)), 0)
        over = {span["span_id"] for span in children[room:]}
        news = {key: span for key, span in news.items() if key not in over}
        if over:
            plan.refused += len(over)
            plan.reasons.append(
                f"trace {trace_id}: more than {limit} spans (HISTORY_OTLP_MAX_TRACE_SPANS); "
                f"{len(over)} of its new spans refused"
            )
    plan.spans = [span for key, span in news.items() if kept.get(key) != span]
    if assembled is not None:
        total = len(kept.keys() | news.keys())
        fresh_root = any(otlp.is_root(span) and span["span_id"] not in kept for span in plan.spans)
        # Nothing new (spans sent again, or all refused): the runs stand as they are.
        unchanged = not plan.spans
        if unchanged or (
            total > ASSEMBLE_ALWAYS and not fresh_root and total - assembled < total // ASSEMBLE_FRACTION
        ):
            plan.deferred = not unchanged
            # The receipt counts the trace as a duplicate: its stored run is unchanged.
            result = ingestion.ItemResult(index=0, run_id=otlp.trace_run_id(trace_id), status="duplicate")
            plan.results.append(result)
            return plan
    try:
        dicts = [run.to_dict() for run in otlp.assemble(list({**kept, **news}.values()))]
    except (Exception, RecursionError):  # noqa: BLE001 — one trace the mapping cannot handle never fails the others
        logger.exception("trace %s could not be assembled", trace_id)
        plan.refused += len(news)
        plan.reasons.append(f"trace {trace_id}: its spans could not be assembled into runs")
        plan.spans = []
        return plan
    for n, item in enumerate(dicts):
        result = ingestion.ItemResult(index=n)
        plan.results.append(result)
        ready = ingestion.prepare_item(item, result, redactor=redactor, source_format="otlp")
        if ready is None and not result.errors[0]["path"].startswith("$.run_id"):
            # The attributes a run's metadata holds are the sender's, whatever they are:
            # a run refused for one of them is stored without them rather than not at all.
            plan.reasons.append(
                f"trace {trace_id}: run {item.get('run_id')} stored without its span attributes "
                f"({result.errors[0]['path']}: {result.errors[0]['message']})"
            )
            result.errors = []
            ready = ingestion.prepare_item(
                _without_metadata(item), result, redactor=redactor, source_format="otlp"
            )
        if ready is None:  # refused (its result says why): the trace keeps what it had
            problems = "; ".join(f"{e['path']}: {e['message']}" for e in result.errors[:3])
            plan.reasons.append(f"trace {trace_id}: run {item.get('run_id')} refused ({problems})")
            plan.refused += len(plan.spans)
            plan.spans, plan.pending = [], []
            break
        plan.pending.append(ready)
    return plan


def _without_metadata(run: dict[str, Any]) -> dict[str, Any]:
    """A run's dict with the metadata of the run, its iterations and its calls emptied."""
    run = {**run, "metadata": {}}
    run["model_calls"] = [{**call, "metadata": {}} for call in run.get("model_calls", [])]
    run["iterations"] = [
        {
            **it,
            "metadata": {},
            "model_calls": [{**call, "metadata": {}} for call in it.get("model_calls", [])],
        }
        for it in run.get("iterations", [])
    ]
    return run


def _write(plans: dict[str, _Plan], outcome: Outcome, project_id: int) -> list[ingestion.ItemResult]:
    """In the open transaction: every planned run stored (in batches, as ingestion stores
    any), then the new spans of the traces whose runs were all stored, one row a trace."""
    owners: dict[int, str] = {}
    pending = []
    for trace_id, plan in plans.items():
        outcome.rejected += plan.refused
        outcome.reasons.extend(plan.reasons)
        for item in plan.pending:
            owners[id(item.result)] = trace_id
            pending.append(item)
    writer.write_runs(pending, project_id=project_id)
    results = [result for plan in plans.values() for result in plan.results]
    refused: set[str] = set()
    for item in pending:
        if item.result.status == "rejected":
            trace_id = owners[id(item.result)]
            if trace_id not in refused:
                refused.add(trace_id)
                outcome.rejected += len(plans[trace_id].spans)
                problems = "; ".join(f"{e['path']}: {e['message']}" for e in item.result.errors[:3])
                outcome.reasons.append(f"trace {trace_id}: run {item.result.run_id} refused ({problems})")
    # The spans of a trace not assembled again go with its run's session at once (those
    # of an assembled trace are linked below, by its stored run).
    deferred = [trace_id for trace_id, plan in plans.items() if plan.deferred and plan.spans]
    sessions = dict(
        models.Run.objects.filter(project_id=project_id, run_id__in=deferred).values_list(
            "run_id", "session_id"
        )
        if deferred
        else ()
    )
    rows = [
        models.SpanBatch(
            project_id=project_id,
            trace_id=trace_id,
            span_count=len(plan.spans),
            data=_pack(plan.spans),
            session_id=sessions.get(otlp.trace_run_id(trace_id)),
        )
        for trace_id, plan in plans.items()
        if plan.spans and (plan.pending or plan.deferred) and trace_id not in refused
    ]
    models.SpanBatch.objects.bulk_create(rows, batch_size=200)
    outcome.changed = sum(1 for r in results if r.status in ("created", "updated"))
    stored = [(item.result, owners[id(item.result)]) for item in pending]
    _link_sessions(stored, project_id)
    _drop_left_sessions(stored, project_id)
    return results


def _link_sessions(stored: list[tuple[ingestion.ItemResult, str]], project_id: int) -> None:
    """Each trace's spans go with the session of its run (retention and deletion of the
    session take them too)."""
    by_session: dict[str, set[str]] = {}
    for result, trace_id in stored:
        if result.session_id and result.run_id == otlp.trace_run_id(trace_id):
            by_session.setdefault(result.session_id, set()).add(trace_id)
    if not by_session:
        return
    in_project = models.Session.objects.filter(project_id=project_id, session_id__in=list(by_session))
    pks = dict(in_project.values_list("session_id", "pk"))
    # One statement executed per trace, sent together (an UPDATE a session through the
    # ORM made a request of 8,000 new traces spend a third of its time here).
    table = connection.ops.quote_name(models.SpanBatch._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET session_id = %s WHERE project_id = %s AND trace_id = %s "
            "AND (session_id IS NULL OR session_id <> %s)",
            [
                (pks[session_id], project_id, trace_id, pks[session_id])
                for session_id, trace_ids in by_session.items()
                if session_id in pks
                for trace_id in sorted(trace_ids)
            ],
        )


def _drop_left_sessions(stored: list[tuple[ingestion.ItemResult, str]], project_id: int) -> None:
    """A trace whose first spans named no session was put in ``trace-<id>``; once a span
    names its session the runs move there, and the placeholder, now empty, goes."""
    left = {
        otlp.default_session_id(trace_id)
        for result, trace_id in stored
        if result.session_id and result.session_id != otlp.default_session_id(trace_id)
    }
    if left:
        models.Session.objects.filter(project_id=project_id, session_id__in=left, run_count=0).exclude(
            Exists(models.Run.objects.filter(session=OuterRef("pk")))
        ).delete()


def reassemble_traces(project_id: int, *, batch: int = 100) -> tuple[int, int]:
    """Every trace kept in the project assembled again from its kept spans, after the
    mapping from spans to runs changed (``manage.py reassemble_traces``): its runs are
    rewritten in place (same ids), and the runs an earlier mapping made of it that this
    one does not make (``<trace id>-<span id>``: LangGraph's nodes were member runs) are
    deleted, with their sessions where they leave one empty. Each batch of traces is one
    transaction under the traces' locks, as a request's. Returns (traces, runs deleted)."""
    from history_app.store import rollups, search

    trace_ids = sorted(
        set(models.SpanBatch.objects.filter(project_id=project_id).values_list("trace_id", flat=True))
    )
    redactor = ingestion.server_redactor()
    deleted = 0
    for start in range(0, len(trace_ids), batch):
        chunk = trace_ids[start : start + batch]
        with transaction.atomic():
            _lock_traces(chunk, project_id)
            kept, _ = kept_spans(chunk, project_id)
            plans = {
                trace_id: _plan(trace_id, [], kept[trace_id], redactor, None)
                for trace_id in chunk
                if kept[trace_id]
            }
            _lock_session_slots(plans, project_id)
            outcome = Outcome()
            results = _write(plans, outcome, project_id)
            if any(r.status in ("retry", "rejected") for r in results):
                raise RuntimeError(f"traces could not be stored again: {outcome.message()}")
            made = {r.run_id for r in results}
            stale = [
                pk
                for trace_id, plan in plans.items()
                if plan.pending
                for pk, run_id in models.Run.objects.filter(
                    project_id=project_id, run_id__startswith=f"{otlp.trace_run_id(trace_id)}-"
                ).values_list("pk", "run_id")
                if run_id not in made
            ]
            if stale:
                sessions = set(models.Run.objects.filter(pk__in=stale).values_list("session_id", flat=True))
                search.unindex_stored(stale)
                rollups.take_off_stored(stale)
                models.Run.objects.filter(pk__in=stale).delete()
                deleted += len(stale)
                for session in models.Session.objects.filter(pk__in=sessions):
                    writer.recount(session)
                    if not session.run_count and not session.pinned:
                        session.delete()
    return len(trace_ids), deleted
