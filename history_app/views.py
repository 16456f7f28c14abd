"""HTML pages. Each view parses input, calls one selector, renders.

Every page answers a normal request with the full page and a targeted htmx request with
only its named partial; boosted and history-restore requests also carry ``HX-Request``
and must get the full page.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from . import selectors


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


def _paged_list(request: HttpRequest, selector, name: str, partial: str, items: str) -> HttpResponse:
    """A keyset-paged list page; an htmx "older" request gets just the next rows."""
    try:
        page = selector(after=request.GET.get("_next"), limit=settings.HISTORY_PAGE_SIZE)
    except selectors.BadCursor as exc:
        return HttpResponseBadRequest(str(exc))
    context = {
        items: page.items,
        "next_cursor": page.next_cursor,
        "is_next_page": bool(request.GET.get("_next")),
    }
    return render(request, _template(request, name, partial), context)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def session_list(request: HttpRequest) -> HttpResponse:
    return _paged_list(request, selectors.sessions_page, "session_list", "session-rows", "sessions")


@require_GET
@login_required
@vary_on_headers("HX-Request")
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    session = selectors.get_session(session_id)
    runs = selectors.session_runs(session=session)
    return render(
        request,
        _template(request, "session_detail", "timeline"),
        {"session": session, "runs": runs},
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = selectors.run_transcript(run_id)
    return render(
        request, _template(request, "run_detail", "transcript"), {"run": run, "session": run.session}
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def receipt_list(request: HttpRequest) -> HttpResponse:
    """Recent ingestion receipts: the answer to "why is my run missing?"."""
    return _paged_list(request, selectors.receipts_page, "receipt_list", "receipt-rows", "receipts")
