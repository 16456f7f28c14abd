"""Headers every dynamic response carries."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

PRIVATE = "private, no-store"


class PrivateCacheControlMiddleware:
    """``Cache-Control: private, no-store`` on every response to a request that carries
    credentials (a session cookie or an ``Authorization`` header), unless the view said
    otherwise: what such a response holds (transcripts, JSON twins, exports, settings) is
    one person's, and must be kept by no shared cache, nor on the disk of a shared
    computer after the user has logged out. ``no-store`` rather than ``no-cache``: nothing
    of it is worth revalidating, and exports are downloads, not pages to come back to.

    Static files never reach it (WhiteNoise answers them earlier, with their own
    long-lived ``Cache-Control``), so they stay cacheable."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        has_credentials = (
            "HTTP_AUTHORIZATION" in request.META or settings.SESSION_COOKIE_NAME in request.COOKIES
        )
        if has_credentials and "Cache-Control" not in response:
            response["Cache-Control"] = PRIVATE
        return response
