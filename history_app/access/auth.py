"""Bearer-token authentication for the JSON API.

Tokens are stored only as SHA-256 hashes. A presented token is looked up by its short
prefix and then compared hash-to-hash with ``hmac.compare_digest``, so the comparison
takes the same time however many leading characters match.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.utils import timezone

from history_app.access import roles as access
from history_app.models import IngestToken, Project

TOKEN_PREFIX = "aht_"
PREFIX_LENGTH = 12


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def register_token(
    *,
    name: str,
    token: str | None = None,
    scopes: tuple[str, ...] | list[str] = (IngestToken.INGEST,),
    actor: str = "command",
    project: Project | None = None,
) -> tuple[IngestToken, str]:
    """Store a token (a new random one unless given) of ``project`` (the default project
    when none is given) with ``scopes``; returns the row and the plain token.

    A token registered before is returned as it is: a revoked token stays revoked, and its
    scopes stay what they were.
    """
    unknown = set(scopes) - set(IngestToken.SCOPES)
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(IngestToken.SCOPES)}; got {sorted(scopes)}")
    token = token or new_token()
    project = project or Project.default()
    row, created = IngestToken.objects.get_or_create(
        token_hash=IngestToken.hash(token),
        defaults={
            "project": project,
            "name": name,
            "prefix": token[:PREFIX_LENGTH],
            "scopes": [s for s in IngestToken.SCOPES if s in scopes],
        },
    )
    if created:
        from history_app.access import audit

        audit.record(
            actor=actor,
            action="token_created",
            project=project,
            target=f"{row.name} ({row.prefix}…)",
            scopes=row.scopes,
        )
    return row, token


def token_from_request(request: HttpRequest) -> IngestToken | None:
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        return None
    wanted = IngestToken.hash(presented)
    candidates = IngestToken.objects.filter(prefix=presented[:PREFIX_LENGTH], revoked=False).select_related(
        "project"
    )
    for candidate in candidates:
        if hmac.compare_digest(candidate.token_hash, wanted):
            return candidate
    return None


def mark_used(token: IngestToken) -> None:
    """Write the token's "last used" time, at most once a minute."""
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        IngestToken.objects.filter(pk=token.pk).update(last_used_at=now)


def error_response(message: str, status: int, **extra: object) -> JsonResponse:
    """The one error shape of the JSON API."""
    return JsonResponse({"ok": False, "error": message, "status": status, **extra}, status=status)


def token_required(
    *, allow_session: bool, scope: str
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Require a valid bearer token with ``scope`` (403 for a token without it), or, with
    ``allow_session``, a logged-in user. Sets ``request.project``: the token's project
    (a ``project`` parameter naming another is a 404: a token reads nothing else), or for
    a user the project named by ``project`` that they may see, else the one they last
    opened."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            wanted = request.GET.get("project")
            if allow_session and request.user.is_authenticated:
                try:
                    if wanted:
                        request.project, request.project_role = access.role_in(request.user, wanted)
                    else:
                        request.project = access.current_project(request)
                except Http404:
                    request.project = None
                if request.project is None:
                    message = f"no project {wanted!r}" if wanted else "you are a member of no project"
                    return error_response(message, 404, parameter="project")
                return view(request, *args, **kwargs)
            token = token_from_request(request)
            if token is None:
                response = error_response("a valid 'Authorization: Bearer <token>' header is required", 401)
                response["WWW-Authenticate"] = 'Bearer realm="agent-history"'
                return response
            if not token.allows(scope):
                return error_response(
                    f"this token does not have the {scope!r} scope", 403, scopes=token.scopes
                )
            if wanted and wanted != token.project.slug:
                return error_response(f"no project {wanted!r}", 404, parameter="project")
            mark_used(token)
            request.ingest_token = token
            request.project = token.project
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def page_or_twin(
    action: str = "read",
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A project's page and its JSON twin answered by one view; the URL's ``as_json``
    flag says which is asked for, and the view gets it too.

    Both resolve who asks and in which project here, one way each: the page
    (``/p/<slug>/…``) for a logged-in user who may see the project and whose role allows
    ``action`` (``roles.project_view``: 404, 403); the twin (``/api/v1/…``) for a bearer
    token with the ``read`` scope or a logged-in user (``token_required``: the token's
    project, or the user's ``?project=``, else the one they last opened). Both answer GET
    and HEAD only: the twin refuses another method in the API's JSON shape."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        page = access.project_view(action)(view)
        twin = token_required(allow_session=True, scope=IngestToken.READ)(view)

        @functools.wraps(view)
        def wrapped(
            request: HttpRequest, *args: object, as_json: bool = False, **kwargs: object
        ) -> HttpResponse:
            if request.method not in ("GET", "HEAD"):
                if as_json:
                    response = error_response(f"{request.method} is not allowed here; use GET, HEAD", 405)
                    response["Allow"] = "GET, HEAD"
                    return response
                return HttpResponseNotAllowed(["GET", "HEAD"])
            if as_json:
                return twin(request, *args, as_json=True, **kwargs)
            return page(request, *args, as_json=False, **kwargs)

        return wrapped

    return decorator
