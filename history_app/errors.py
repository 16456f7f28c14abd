"""Errors under ``/api/`` answer the API's JSON error shape, whatever raised them; the
dashboard's pages keep Django's HTML error pages."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404
from django.views import defaults

from .auth import error_response

API_PREFIX = "/api/"


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
    if _is_api(request):
        return error_response("internal server error", 500)
    return defaults.server_error(request)


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
