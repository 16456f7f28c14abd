"""The pages and their JSON twins. Each view parses input, calls one selector, and
answers HTML or JSON from the same context.

A page with a twin is one view under ``access.auth.page_or_twin``: its URL under
``/p/<slug>/`` renders the template, its ``/api/v1/…`` URL (``as_json``) answers the
page's data, serialised by ``twins``. Every page answers a normal request with the full
page and a targeted htmx request with only its named partial; boosted and
history-restore requests also carry ``HX-Request`` and must get the full page.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from time import monotonic
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from history_app import models
from history_app.access.auth import error_response, page_or_twin
from history_app.access.roles import project_view
from history_app.agent_history import jsonstream
from history_app.agent_history.jsonstream import Lazy
from history_app.reading import (
    compare,
    connect,
    inspector,
    listing,
    model_calls,
    paging,
    present,
    streams,
    transcripts,
    twins,
)
from history_app.reading import help as help_pages
from history_app.reading.forms import ModelCallForm, SliceForm, StatsForm
from history_app.reading.stats import stats as stats_numbers
from history_app.reading.timeline import session_timeline
from history_app.upkeep import annotations as annotation_store

# The offline export carries its style inside it: it must open with no server at all.
_EXPORT_CSS = Path(settings.BASE_DIR) / "static" / "history_app" / "app.css"


def _template(request: HttpRequest, name: str, partial: str) -> str:
    """The page, or only its named partial for a targeted htmx request.

    Boosted navigation (``hx-boost`` on the body) swaps the whole body, so it gets the
    whole page, as does a history-restore request.
    """
    template = f"history_app/{name}.html"
    htmx = request.htmx
    if htmx and not htmx.boosted and not htmx.history_restore_request:
        template += f"#{partial}"
    return template


def _keyset_context(request: HttpRequest, page: paging.Page, items: str) -> dict:
    """A keyset page's context. The "older" link keeps every other parameter of the query
    string (filters, sort), so a filtered view pages through its own results."""
    next_query = _with(request, _next=page.next_cursor, live=None) if page.next_cursor else ""
    return {
        items: page.items,
        "next_cursor": page.next_cursor,
        "next_query": next_query,
        "is_next_page": bool(request.GET.get("_next")),
    }


def _bad_request(request: HttpRequest, message: str, field: str) -> HttpResponse:
    """A 400 page naming the bad parameter, never a 500."""
    context = {"message": message, "field": field, "back": request.path}
    return render(request, "history_app/bad_request.html", context, status=400)


def _in_its_format(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """What a read did not find (``NotFound``) or could not use (``BadParameter``),
    answered in the format asked for: a 404 page or a 400 page naming the parameter, or
    the API's error shape (404; 400 with ``parameter``)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, as_json: bool = False, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, as_json=as_json, **kwargs)
        except paging.NotFound as exc:
            if as_json:
                return error_response(str(exc), 404)
            raise Http404(str(exc)) from None
        except paging.BadParameter as exc:
            if as_json:
                return error_response(str(exc), 400, parameter=exc.field)
            return _bad_request(request, str(exc), exc.field)

    return wrapped


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def session_list(request: HttpRequest, *, as_json: bool) -> HttpResponse:
    """Sessions, searchable and filterable; every filter lives in the URL (the twin:
    ``/api/v1/sessions``, with the same parameters).

    With ``live=1`` the results poll for updates while anything is running, and the
    poll stops by itself: the partial drops its trigger once nothing is running.
    """
    filters = listing.SessionFilters.from_query(request.GET)
    page = listing.sessions_page(
        project=request.project,
        after=request.GET.get("_next"),
        limit=settings.HISTORY_PAGE_SIZE,
        filters=filters,
    )
    context = {**_keyset_context(request, page, "sessions"), "filters": filters}
    if as_json:
        return JsonResponse(twins.sessions(context))
    live = request.GET.get("live") == "1" and not context["is_next_page"]
    context.update(
        hits=listing.search_hits(page.items, filters.q, found=filters.found_runs) if filters.q else {},
        live=live,
        polling=live and listing.anything_running(request.project),
        live_query=_with(request, live="1"),
        still_query=_with(request, live=None),
        titles=listing.session_titles(page.items),
        total=None
        if context["is_next_page"]
        else listing.session_total(project=request.project, filters=filters, page=page),
        sort_links={
            "recent": _with(request, sort="oldest" if filters.sort == "recent" else "recent"),
            "runs": _with(request, sort="runs"),
            "failures": _with(request, sort="failures"),
        },
    )
    template = _template(request, "session_list", "session-rows" if context["is_next_page"] else "results")
    if "#" not in template:
        context["choices"] = listing.filter_choices(request.project)
    else:
        # htmx sets the page's title from a <title> at the top of what it swaps in: a
        # search typed on the page names itself in the tab and the history too.
        context["partial_title"] = True
    return render(request, template, context)


def _with(request: HttpRequest, **changes: str | None) -> str:
    """The request's query string without ``_next``, with ``changes`` (None removes)."""
    params = request.GET.copy()
    params.pop("_next", None)
    for key, value in changes.items():
        params.pop(key, None)
        if value is not None:
            params[key] = value
    return params.urlencode()


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def session_detail(
    request: HttpRequest, session_id: str, *, as_json: bool, shape: str = "timeline"
) -> HttpResponse:
    """A session's nested timeline, a page of runs at a time (``_next``: an htmx request
    for a later page gets only its rows); the counts above it are the whole session's,
    on the first page. Its twins: the timeline's rows (``/api/v1/sessions/<id>/timeline``)
    and, ``shape="runs"``, the same page's runs flat (``/api/v1/sessions/<id>``)."""
    partial = "timeline-rows" if request.GET.get("_next") else "timeline"
    template = _template(request, "session_detail", partial)
    first_page = not request.GET.get("_next")
    timeline = session_timeline(
        project=request.project,
        session_id=session_id,
        with_counts=first_page and shape == "timeline" if as_json else "#" not in template,
        after=request.GET.get("_next"),
        limit=settings.HISTORY_PAGE_SIZE,
        idle_gap_ms=settings.HISTORY_IDLE_GAP_SECONDS * 1000,
        nested=settings.HISTORY_SESSION_PAGE_NESTED,
    )
    if as_json:
        return JsonResponse(
            twins.session_runs(timeline) if shape == "runs" else twins.session_timeline(timeline)
        )
    page = paging.Page(timeline["rows"], timeline["next_cursor"])
    return render(request, template, {**timeline, **_keyset_context(request, page, "rows")})


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def run_detail(request: HttpRequest, run_id: str, *, as_json: bool) -> HttpResponse:
    """A run's transcript: its first injected contexts, its first iterations and the first
    tool calls of each (the page stays bounded whatever the run holds; "show more" links
    load the rest). Its twin (``/api/v1/runs/<id>``) is the run's whole canonical record,
    streamed as it is read, as the JSON export, with the runs it started (``child_runs``)
    as its page lists them."""
    run = transcripts.get_run(request.project, run_id)
    children = transcripts.child_runs(run)
    if as_json:
        (data,) = streams.RunReader(run).dicts()
        chunks = jsonstream.iter_json({"ok": True, "run": data, "child_runs": twins.child_runs(children)})
        return StreamingHttpResponse(chunks, content_type="application/json")
    iterations = transcripts.iteration_slice(run=run)
    previous_run, next_run = transcripts.neighbours(run)
    context = {
        "run": run,
        "session": run.session,
        "annotations": annotation_store.of_runs([run]).get(run.pk, []),
        "annotation_kinds": models.Annotation.KINDS,
        "previous_run": previous_run,
        "next_run": next_run,
        "contexts": transcripts.context_slice(run=run),
        "children": children,
        "output_html": transcripts.answer_html(run),
        "slice": iterations,
        "model_calls": transcripts.model_call_slice(run=run),
        "cost_sources": transcripts.cost_sources(run),
        "waterfall": present.waterfall_chart(
            run, [(p.iteration, p.calls) for p in iterations.parts], iterations.model_calls
        ),
    }
    return render(request, _template(request, "run_detail", "transcript"), context)


def _slice_template(request: HttpRequest, partial: str) -> str:
    """A slice's partial for htmx's "show more", or a page of its own without JavaScript."""
    htmx = request.htmx
    if htmx and not htmx.boosted and not htmx.history_restore_request:
        return f"history_app/run_detail.html#{partial}"
    return "history_app/run_slice.html"


def _start(request: HttpRequest) -> int:
    return SliceForm.read(request.GET, high=transcripts.MAX_START)["start"]


def _slice_response(
    request: HttpRequest,
    run: models.Run,
    build: Callable[[int], Any],
    key: str,
    partial: str,
    template_partial: str,
) -> HttpResponse:
    """One "show more" slice of a run page: ``build(start)`` gives it; a bad start is a 400."""
    try:
        part = build(_start(request))
    except paging.BadParameter as exc:
        return _bad_request(request, str(exc), exc.field)
    context = {"run": run, "session": run.session, key: part, "partial": partial}
    return render(request, _slice_template(request, template_partial), context)


@require_GET
@project_view()
@vary_on_headers("HX-Request")
def run_iterations(request: HttpRequest, run_id: str) -> HttpResponse:
    """The next iterations of a run, from position ``start``."""
    run = transcripts.get_run(request.project, run_id)
    build = lambda start: transcripts.iteration_slice(run=run, start=start)  # noqa: E731
    return _slice_response(request, run, build, "slice", "iterations", "iterations")


@require_GET
@project_view()
@vary_on_headers("HX-Request")
def run_contexts(request: HttpRequest, run_id: str) -> HttpResponse:
    """The next injected contexts of a run, from position ``start``."""
    run = transcripts.get_run(request.project, run_id)
    build = lambda start: transcripts.context_slice(run=run, start=start)  # noqa: E731
    return _slice_response(request, run, build, "contexts", "contexts", "context-items")


@require_GET
@project_view()
@vary_on_headers("HX-Request")
def run_model_calls(request: HttpRequest, run_id: str) -> HttpResponse:
    """The next model calls of a run, from position ``start``."""
    run = transcripts.get_run(request.project, run_id)
    build = lambda start: transcripts.model_call_slice(run=run, start=start)  # noqa: E731
    return _slice_response(request, run, build, "model_calls", "model-calls", "model-call-rows")


@page_or_twin()
@_in_its_format
def model_call_detail(request: HttpRequest, run_id: str, number: int, *, as_json: bool) -> HttpResponse:
    """One model call: what it received (each message marked as instructions, history,
    injected context, new input or the run's own turns, linked to the inspector where it
    carries an injected context), what it answered, its tokens, cost and timing. Each
    message shows its first ``HISTORY_MESSAGE_PREVIEW_CHARS`` characters; ``?full=N``
    shows message N whole. Its twin: the messages as sent (parts, tool-call requests,
    ``tool_call_id``, ``name``), the answer as a message, whose roles they are, and the
    call's composition."""
    run = transcripts.get_run(request.project, run_id)
    call = transcripts.get_model_call(run, number)
    if as_json:
        return JsonResponse(twins.model_call({"run": run, "call": call}))
    full = ModelCallForm.read(request.GET)["full"]
    limit = settings.HISTORY_MESSAGE_PREVIEW_CHARS
    context = {
        "run": run,
        "session": run.session,
        "call": call,
        "messages": model_calls.message_rows(call, full=full, limit=limit),
        "answer": model_calls.answer_row(call),
        "composition": model_calls.composition(call),
        "roles_note": model_calls.roles_note(call),
        "roles_mapped": model_calls.roles_mapped(call),
        "reconstructed": model_calls.reconstructed_note(call),
        # Old rows keep no answer message: the tools its iteration ran stand in for it.
        "asked_tools": [] if call.answer else _tools_asked_for(call),
        "asked_tools_limit": ASKED_TOOLS_SHOWN,
    }
    return render(request, "history_app/model_call.html", context)


# How many of the tool calls a model call asked for its page lists (the run page has all).
ASKED_TOOLS_SHOWN = 50


def _tools_asked_for(call: models.ModelCall) -> list[models.ToolCall]:
    """The tool calls a model call asked for: those of its iteration, when it answered
    with no text (or said so) and is its iteration's last model call (the one the tools
    then ran for)."""
    if call.iteration_id is None or (call.output and call.finish_reason != "tool_calls"):
        return []
    later = models.ModelCall.objects.filter(iteration_id=call.iteration_id, position__gt=call.position)
    if later.exists():
        return []
    return list(
        models.ToolCall.objects.filter(iteration_id=call.iteration_id)
        .select_related("iteration")
        .only("tool", "params_json", "position", "call_id", "iteration__position")
        .order_by("position")[:ASKED_TOOLS_SHOWN]
    )


@require_GET
@project_view()
@vary_on_headers("HX-Request")
def run_tool_calls(request: HttpRequest, run_id: str, position: int) -> HttpResponse:
    """The next tool calls of one iteration, from position ``start``."""
    iteration = transcripts.get_iteration(request.project, run_id, position)
    build = lambda start: transcripts.call_slice(iteration=iteration, start=start)  # noqa: E731
    return _slice_response(request, iteration.run, build, "part", "tool-calls", "tool-calls")


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def receipt_list(request: HttpRequest, *, as_json: bool) -> HttpResponse:
    """Recent ingestion receipts: the answer to "why is my run missing?"."""
    page = listing.receipts_page(
        project=request.project, after=request.GET.get("_next"), limit=settings.HISTORY_PAGE_SIZE
    )
    context = _keyset_context(request, page, "receipts")
    if as_json:
        return JsonResponse(twins.receipts(context))
    return render(request, _template(request, "receipt_list", "receipt-rows"), context)


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def context_detail(request: HttpRequest, run_id: str, number: int, *, as_json: bool) -> HttpResponse:
    """The context inspector: the run's ``number``-th injected context (1-based), exactly
    as sent, with its sources (the runs and entries it came from), a rebuild check, a
    re-render under other settings (``runs``/``items``/``timestamps``) and the delta from
    the step before; the twin has the same data."""
    if not 1 <= number <= transcripts.MAX_START:
        # Positions are 32-bit: a larger number names none (and would overflow the query).
        raise paging.NotFound(f"run {run_id!r} has no injected context {number}")
    inspection = inspector.inspect(request.project, run_id, number - 1, request.GET)
    context = {"i": inspection, "run": inspection.run, "session": inspection.run.session}
    if as_json:
        return JsonResponse(twins.inspection(context))
    return render(request, _template(request, "context_detail", "rerender"), context)


@require_GET
@project_view()
@vary_on_headers("HX-Request")
def context_text(request: HttpRequest, run_id: str, number: int) -> HttpResponse:
    """One injected context's text exactly as sent, nothing else: what the run page opens
    in place (htmx), or a page of its own without JavaScript. One query."""
    context = transcripts.get_context_text(request.project, run_id, number)
    page = {"context": context, "run": context.run, "session": context.run.session}
    return render(request, _template(request, "context_text", "text"), page)


@page_or_twin()
@_in_its_format
def compare_runs(request: HttpRequest, *, as_json: bool) -> HttpResponse:
    """Two runs of the project side by side (``?a=<run>&b=<run>``, an address to share):
    facts, input, settings, iterations aligned with their thoughts and tool calls, model
    calls, injected contexts and answers, what differs marked. Picked as two ``run``
    values (the session timeline's checkboxes), it redirects to its ``a``/``b`` address."""
    a, b = compare.read_pair(request.GET)
    if "run" in request.GET and not as_json:
        return redirect(f"{request.path}?{urlencode({'a': a, 'b': b})}")
    comparison = compare.compare(request.project, a, b)
    if comparison is None:
        raise paging.NotFound(f"no run {a!r} or no run {b!r} in this project")
    if as_json:
        return JsonResponse(twins.comparison({"c": comparison}))
    swap = urlencode({"a": b, "b": a})
    return render(request, "history_app/compare.html", {"c": comparison, "swap_query": swap})


def _download(chunks: Iterable[str], content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type=content_type)
    # RFC 6266: a name outside ASCII (a session id like 会话-东京) goes in filename*.
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120] or "export"


@require_GET
@project_view("export")
def run_export(request: HttpRequest, run_id: str, fmt: str) -> HttpResponse:
    """A run as autourgos-style Markdown (``.md``) or as its canonical JSON (``.json``),
    streamed as it is read (see ``streams``)."""
    if fmt not in {"md", "json"}:
        raise Http404("Runs export as .md or .json")
    run = transcripts.get_run(request.project, run_id)
    reader = streams.RunReader(run)
    name = _safe_name(run_id)
    if fmt == "md":
        return _download(streams.run_markdown(reader), "text/markdown; charset=utf-8", f"{name}.md")
    (data,) = reader.dicts()
    chunks = jsonstream.iter_json(data, indent=2, ensure_ascii=False)
    return _download(chunks, "application/json", f"{name}.json")


@require_GET
@project_view("export")
def session_export(request: HttpRequest, session_id: str, fmt: str) -> HttpResponse:
    """A session as a JSON bundle, or as one self-contained HTML file that opens offline;
    both streamed a run at a time."""
    if fmt not in {"json", "html"}:
        raise Http404("Sessions export as .json or .html")
    session = listing.get_session(request.project, session_id)
    reader = streams.RunReader(session.runs.all())
    name = _safe_name(session_id)
    if fmt == "json":
        bundle = {
            "schema": "agent-history/session-bundle/v1",
            "session": listing.session_summary(session),
            "runs": Lazy(reader.dicts()),
            "annotations": Lazy(
                annotation_store.exported(models.Annotation.objects.filter(run__session=session))
            ),
        }
        chunks = jsonstream.iter_json(bundle, indent=2, ensure_ascii=False)
        return _download(chunks, "application/json", f"{name}.json")
    return _download(_offline_html(session, reader), "text/html; charset=utf-8", f"{name}.html")


# Rendering answers never rendered before, an export spends at most this many times one
# answer's budget; past it they are written as plain text (the HTML kept by each run's
# page, or an earlier export, is used whatever the time).
EXPORT_RENDER_BUDGETS = 10


def _offline_html(session: models.Session, reader: streams.RunReader) -> Iterator[str]:
    template = "history_app/session_export.html"
    yield render_to_string(f"{template}#head", {"session": session, "css": _EXPORT_CSS.read_text()})
    deadline = monotonic() + EXPORT_RENDER_BUDGETS * settings.HISTORY_MARKDOWN_BUDGET_MS / 1000
    rendered: list[models.Run] = []
    for number, (run, record) in enumerate(reader.shells(), start=1):
        record.iterations = list(reader.iteration_records(run))
        html, new = transcripts.answer_html_within(run, int((deadline - monotonic()) * 1000))
        if new:
            rendered.append(run)
        if len(rendered) >= 100:
            transcripts.keep_answers(rendered)
            rendered = []
        yield render_to_string(f"{template}#run", {"run": record, "number": number, "output_html": html})
    if rendered:
        transcripts.keep_answers(rendered)
    yield render_to_string(f"{template}#foot")


@page_or_twin()
@_in_its_format
def stats(request: HttpRequest, *, as_json: bool) -> HttpResponse:
    """Runs per day, failure rate, duration percentiles, top tools and errors for the last
    ``days`` days (1-365, default 30): server-drawn SVG charts, each beside a table with
    the same numbers; the twin has the numbers, from the same daily rollups."""
    days = StatsForm.read(request.GET)["days"]
    data = stats_numbers(project=request.project, days=days)
    if as_json:
        return JsonResponse(twins.project_stats({"numbers": data}))
    per_day = [(p["day"].isoformat(), p["total"]) for p in data["series"]]
    rates = [
        (p["day"].isoformat(), round(100 * p["failed"] / p["total"], 1) if p["total"] else 0)
        for p in data["series"]
    ]
    top_calls = max((t["calls"] for t in data["tools"]), default=0) or 1
    for tool in data["tools"]:
        tool["share"] = round(100 * tool["calls"] / top_calls, 1)
    context = {
        **data,
        "runs_chart": present.bar_chart(per_day, label=f"Runs per day, last {data['days']} days"),
        "failure_chart": present.bar_chart(
            rates, label=f"Failure rate per day, last {data['days']} days", unit="%"
        ),
        "cost_chart": present.bar_chart(
            [(p["day"].isoformat(), round(p["cost"], 6)) for p in data["usage_series"]],
            label=f"Model cost per day in US dollars, last {data['days']} days",
            prefix="$",
        ),
        "tokens_chart": present.bar_chart(
            [(p["day"].isoformat(), p["input_tokens"] + p["output_tokens"]) for p in data["usage_series"]],
            label=f"Tokens per day (input and output), last {data['days']} days",
        ),
        "duration_chart": _latency_chart(data, "run", "Run duration"),
        "latency_chart": _latency_chart(data, "model", "Model-call latency"),
        "day_choices": (7, 30, 90, 365),
    }
    return render(request, "history_app/stats.html", context)


def _latency_chart(data: dict[str, Any], kind: str, title: str) -> Any:
    """p50 and p95 per day of run durations or model-call latency, as lines."""
    return present.line_chart(
        [
            (p["day"].isoformat(), {"p50": p[f"{kind}_p50"], "p95": p[f"{kind}_p95"]})
            for p in data["usage_series"]
        ],
        series=["p50", "p95"],
        label=f"{title} p50 and p95 per day, last {data['days']} days",
        milliseconds=True,
    )


@page_or_twin()
@vary_on_headers("HX-Request")
@_in_its_format
def connect_page(request: HttpRequest, *, as_json: bool) -> HttpResponse:
    """The exact lines that connect a framework (``framework``: one of the recipes'
    keys, the first by default) to this project: its script with this server's addresses
    in it. A GET never makes a token: an admin's POST does (``project_pages.connect_token``),
    and the page that follows shows it this once, in the script's ``export TOKEN=`` line.
    The twin has the recipes and the chosen one's script, never a token."""
    chosen = connect.recipe(request.GET.get("framework"))
    if chosen is None:
        names = ", ".join(r.key for r in connect.RECIPES)
        raise paging.BadParameter("framework", f"must be one of {names}")
    traces_url = request.build_absolute_uri(reverse("history_app:otlp_traces"))
    ingest_url = request.build_absolute_uri(reverse("history_app:api_ingest"))
    context = {
        "recipes": connect.RECIPES,
        "recipe": chosen,
        "code": chosen.code_for(traces_url=traces_url, ingest_url=ingest_url),
        "endpoint": ingest_url if chosen.endpoint_path.endswith("ingest") else traces_url,
        "docs_url": reverse("history_app:help_page", args=["otlp"]) + f"#{chosen.anchor}",
        "session_id": connect.SESSION,
    }
    if as_json:
        return JsonResponse(twins.connect(context))
    new = request.session.get(connect.NEW_TOKEN_KEY)
    if new is not None and new.get("project") == request.project.slug:
        context["new_token"] = request.session.pop(connect.NEW_TOKEN_KEY)["token"]  # shown once
    response = render(request, _template(request, "connect", "recipe"), context)
    if "new_token" in context:
        response["Cache-Control"] = "no-store"  # the token is shown once, never kept by a cache
    return response


@require_GET
def help_index(request: HttpRequest) -> HttpResponse:
    """The README, with the help's table of contents: no login, the pages hold no data."""
    return _help(request, help_pages.index())


@require_GET
def help_page(request: HttpRequest, page: str) -> HttpResponse:
    found = help_pages.page(page)
    if found is None:
        raise Http404("No such help page")
    return _help(request, found)


def _help(request: HttpRequest, page: help_pages.Page) -> HttpResponse:
    toc = [h for h in page.headings if h.level in (2, 3)]
    context = {"page": page, "toc": toc, "pages": help_pages.contents()}
    return render(request, "history_app/help.html", context)
