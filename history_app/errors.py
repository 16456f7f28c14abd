"""Errors under ``/api/`` answer the API's JSON error shape, whatever raised them; the
dashboard's pages keep Django's HTML error pages.

A transient database failure (PostgreSQL refusing connections, too many of them, a
serialization failure, lock or shared memory exhausted, a shutdown; SQLite's "database is
locked"), wherever it happens, answers 503 with ``Retry-After``: the API in its JSON
shape, ``/v1/traces`` in OTLP's (exporters send again after a 503, and drop what a 500
answered), a page as a plain 503 page that needs no database to render.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template import loader
from django.urls import Resolver404
from django.views import defaults

from history_app.access.auth import error_response
from history_app.intake.guards import RETRY_AFTER_SECONDS
from history_app.intake.writer import is_transient

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
OTLP_PATH = "/v1/traces"
# Seconds a client waits before sending again what met a transient database failure.


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return error_response("bad request", 400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return error_response("forbidden", 403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        message = (
            f"no such API endpoint: {request.path}" if isinstance(exception, Resolver404) else "not found"
        )
        return error_response(message, 404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Nothing of the exception is shown: it may hold database internals or stored data.
    # Django calls this inside its ``except`` block, so the exception is at hand: a
    # transient database failure outside any view (a middleware saving the session while
    # the database refuses connections) answers 503 as one inside a view does.
    exception = sys.exc_info()[1]
    if isinstance(exception, DatabaseError) and is_transient(exception):
        return database_unavailable(request)
    if _is_api(request):
        return error_response("internal server error", 500)
    return defaults.server_error(request)


def unavailable_json(message: str = "temporary database failure; send the request again") -> HttpResponse:
    """503 in the API's JSON shape, with the seconds to wait in the body and ``Retry-After``."""
    response = error_response(f"{message} in {RETRY_AFTER_SECONDS} s", 503, retry_after=RETRY_AFTER_SECONDS)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def database_unavailable(request: HttpRequest) -> HttpResponseBase:
    """503 with ``Retry-After`` in the shape of the endpoint ``request`` went to."""
    if request.path == OTLP_PATH:
        from history_app.intake import traces

        return traces.unavailable(request)
    if _is_api(request):
        return unavailable_json()
    # Rendered without the request: its context processors read the database.
    body = loader.get_template("503.html").render({"retry_after": RETRY_AFTER_SECONDS})
    response = HttpResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """Turns a transient database failure raised in any view into a 503 with
    ``Retry-After`` (``database_unavailable``) instead of a 500; other exceptions go on to
    Django's handling."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if isinstance(exception, DatabaseError) and is_transient(exception):
            logger.warning("%s %s not handled, to be sent again: %s", request.method, request.path, exception)
            return database_unavailable(request)
        return None


def require_http_methods(
    *methods: str,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Django's ``require_http_methods``, answering 405 in the API's JSON shape."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            if request.method not in methods:
                response = error_response(
                    f"{request.method} is not allowed here; use {', '.join(methods)}", 405
                )
                response["Allow"] = ", ".join(methods)
                return response
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


require_GET = require_http_methods("GET", "HEAD")
require_POST = require_http_methods("POST")
