"""Pages about projects (issue #16): the way in (``home``, the project switcher, the
addresses from before projects), what editors and admins do to sessions (pin, delete),
and a project's settings page, where its admins manage members, tokens and retention and
read its audit trail. Every write is a POST with Django's CSRF check, and audited."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import Resolver404, resolve, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from history_app import models
from history_app.access import audit
from history_app.access import roles as access
from history_app.access.auth import register_token
from history_app.reading import connect, listing, paging, transcripts
from history_app.reading.forms import MemberForm, RetentionDaysForm, TokenForm
from history_app.upkeep import annotations as annotation_store
from history_app.upkeep import retention

# The audit trail's page on the settings page.
AUDIT_PAGE = 50


def _project_url(slug: str, rest: str = "") -> str:
    return reverse("history_app:session_list", args=[slug]) + rest


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The project the user last opened (its sessions list, with the query kept: old
    ``/?q=…`` links still search), else the first they may see, else a page saying they
    are in none."""
    project = access.current_project(request)
    if project is None:
        return render(request, "history_app/no_project.html", status=200)
    query = request.META.get("QUERY_STRING", "")
    return HttpResponseRedirect(_project_url(project.slug) + (f"?{query}" if query else ""))


# Pages that exist in every project: switching project on one of them opens the same page
# (with its query: a search stays the same search) in the other.
_SAME_PAGE = {"session_list", "stats", "receipt_list", "project_settings", "connect"}


def _same_page(request: HttpRequest, project: models.Project, role: str) -> str | None:
    """The page the switch was made on (the Referer), in ``project``, with its query (but
    a page cursor), when every project has it and ``role`` may open it; else None."""
    referer = urlsplit(request.headers.get("Referer", ""))
    if referer.netloc not in ("", request.get_host()):
        return None
    try:
        match = resolve(referer.path)
    except Resolver404:
        return None
    if match.url_name not in _SAME_PAGE or "project" not in match.kwargs:
        return None
    if match.url_name == "project_settings":
        if not access.allows(role, "manage_members"):
            return None
        return reverse("history_app:project_settings", args=[project.slug])
    query = "&".join(part for part in referer.query.split("&") if part and not part.startswith("_next="))
    return reverse(f"history_app:{match.url_name}", args=[project.slug]) + (f"?{query}" if query else "")


@require_GET
@login_required
def switch_project(request: HttpRequest, slug: str) -> HttpResponse:
    """Open project ``slug`` (404 unless the user may see it): the same page as the one
    the switch was made on when every project has it (the sessions list with its search
    and filters, stats, receipts), else the project's sessions list."""
    project, role = access.role_in(request.user, slug)
    request.session[access.SESSION_KEY] = project.slug
    target = _same_page(request, project, role) or _project_url(project.slug)
    return HttpResponseRedirect(target)


@require_GET
@login_required
def legacy(request: HttpRequest, kind: str, ident: str = "", rest: str = "") -> HttpResponse:
    """An address from before projects (``/sessions/<id>/…``, ``/runs/<id>/…``,
    ``/stats/``, ``/receipts/``): redirected into the one project the user may see that
    holds the id; a page to choose when several do; 404 when none does (whether another
    project holds it is never told)."""
    projects = access.visible_projects(request.user)
    path = request.get_full_path()
    if kind == "page":
        project = access.current_project(request)
        if project is None:
            raise Http404("No such page")
        slugs = [project.slug]
    else:
        model = models.Session if kind == "session" else models.Run
        key = "session_id" if kind == "session" else "run_id"
        slugs = list(
            model.objects.filter(**{key: ident}, project__in=projects)
            .order_by("project__name")
            .values_list("project__slug", flat=True)[:50]
        )
    if not slugs:
        raise Http404(f"No such {kind}")
    if len(slugs) == 1:
        return HttpResponseRedirect(_project_url(slugs[0], path.lstrip("/")))
    choices = [(slug, _project_url(slug, path.lstrip("/"))) for slug in slugs]
    return render(
        request, "history_app/choose_project.html", {"kind": kind, "ident": ident, "choices": choices}
    )


# -- what editors and admins do to a session ---------------------------------------------


@require_POST
@access.project_view("pin")
def session_pin(request: HttpRequest, session_id: str) -> HttpResponse:
    """Pin (``pinned=1``) or unpin a session: a pinned session is never pruned."""
    session = listing.get_session(request.project, session_id)
    pinned = request.POST.get("pinned") == "1"
    retention.set_pinned(
        models.Session.objects.filter(pk=session.pk), pinned=pinned, actor=request.user.get_username()
    )
    return HttpResponseRedirect(session.get_absolute_url())


@require_POST
@access.project_view("annotate")
def annotation_add(request: HttpRequest, run_id: str) -> HttpResponse:
    """An editor's score, label or comment on a run or one of its iterations (the run
    page's form); a bad field is a 400 page naming it. A comment typed with a score or
    a label is kept too, as a comment on the same run or iteration, both or neither."""
    run = transcripts.get_run(request.project, run_id)
    post = request.POST
    data: dict[str, object] = {"kind": post.get("kind", "")}
    name, value, iteration = (post.get(key, "").strip() for key in ("name", "value", "iteration"))
    if name:
        data["name"] = name
    if data["kind"] == models.Annotation.SCORE and value:
        try:
            data["value"] = float(value)
        except ValueError:
            data["text"] = value  # a category: "pass", "formal"
    if data["kind"] == models.Annotation.COMMENT:
        data["text"] = post.get("text", "")
    if iteration:
        try:
            data["iteration"] = int(iteration)
        except ValueError:
            data["iteration"] = iteration  # refused by the parser, naming the field
    items: dict[str, object] | list[dict[str, object]] = data
    comment = post.get("text", "")
    if data["kind"] in (models.Annotation.SCORE, models.Annotation.LABEL) and comment.strip():
        note = {"kind": models.Annotation.COMMENT, "text": comment}
        if "iteration" in data:
            note["iteration"] = data["iteration"]
        items = [data, note]
    try:
        annotation_store.add(run, annotation_store.parse(items), author=request.user.get_username())
    except annotation_store.Gone:
        raise Http404("No such run") from None
    except annotation_store.Invalid as exc:
        field = exc.path.rsplit(".", 1)[-1]
        context = {"message": f"{field}: {exc.message}", "field": field, "back": run.get_absolute_url()}
        return render(request, "history_app/bad_request.html", context, status=400)
    return HttpResponseRedirect(run.get_absolute_url() + "#annotations")


@require_POST
@access.project_view("annotate")
def annotation_delete(request: HttpRequest, run_id: str, pk: int) -> HttpResponse:
    """An editor takes an annotation of the run back (any author's: audited). Back to the
    run page whether it was still there or not (a form sent twice deletes once)."""
    run = transcripts.get_run(request.project, run_id)
    annotation_store.delete(run.annotations.filter(pk=pk), actor=request.user.get_username())
    return HttpResponseRedirect(run.get_absolute_url() + "#annotations")


@require_http_methods(["GET", "POST"])
@access.project_view("delete")
def session_delete(request: HttpRequest, session_id: str) -> HttpResponse:
    """Delete a session with everything it holds: a confirmation page, then the delete.
    A pinned session is on legal hold: it is unpinned first, by an editor, on the record."""
    session = listing.get_session(request.project, session_id)
    context = {"session": session}
    if session.pinned:
        context["refused"] = "This session is pinned (on legal hold): unpin it before deleting it."
        return render(request, "history_app/session_delete.html", context, status=409)
    if request.method == "POST":
        runs = retention.delete_session(session, actor=request.user.get_username())
        context["deleted_runs"] = runs
        return render(request, "history_app/session_delete.html", context)
    return render(request, "history_app/session_delete.html", context)


# -- a project's settings: members, tokens, retention, audit ---------------------------


def _settings_page(request: HttpRequest, status: int = 200, **extra: object) -> HttpResponse:
    """The settings page; ``extra`` adds to its context or replaces a blank form (a bound
    one with its errors, a token just created, a prune's result)."""
    project = request.project
    members = (
        models.Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )
    tokens = models.IngestToken.objects.filter(project=project).order_by("revoked", "-created_at")
    page = paging.keyset_page(
        models.AuditEvent.objects.filter(project=project),
        field="at",
        after=request.GET.get("_next"),
        limit=AUDIT_PAGE,
        descending=True,
    )
    context = {
        "members": members,
        "tokens": tokens,
        "events": page.items,
        "next_cursor": page.next_cursor,
        "roles": models.Membership.ROLES,
        "member_form": MemberForm(),
        "token_form": TokenForm(),
        "retention_form": RetentionDaysForm(initial={"retention_days": project.retention_days}),
        "default_retention": settings.HISTORY_RETENTION_DAYS,
        "effective_retention": project.effective_retention_days(),
        **extra,
    }
    return render(request, "history_app/project_settings.html", context, status=status)


def _back_to_settings(request: HttpRequest, anchor: str) -> HttpResponse:
    return HttpResponseRedirect(reverse("history_app:project_settings", args=[request.project.slug]) + anchor)


# Where a token just created waits, in the user's session, for the settings page.
NEW_TOKEN_KEY = "history_new_token"


@require_GET
@access.project_view("manage_members")
def project_settings(request: HttpRequest) -> HttpResponse:
    new = request.session.pop(NEW_TOKEN_KEY, None)  # shown this once, then gone
    shown = {}
    if new is not None:
        row = models.IngestToken.objects.filter(pk=new["pk"], project=request.project).first()
        if row is not None:
            shown = {"new_token": new["token"], "new_token_row": row}
    try:
        response = _settings_page(request, **shown)
    except paging.BadParameter as exc:
        context = {"message": str(exc), "field": exc.field, "back": request.path}
        return render(request, "history_app/bad_request.html", context, status=400)
    if shown:
        response["Cache-Control"] = "no-store"  # the token is shown once, never kept by a cache
    return response


@require_POST
@access.project_view("manage_members")
def member_add(request: HttpRequest) -> HttpResponse:
    """Add a user (by user name) with a role, or give a member a new role."""
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, status=400, member_form=form)
    user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
    if user is None:
        form.add_error("username", "There is no user with this name.")
        return _settings_page(request, status=400, member_form=form)
    try:
        access.set_role(
            project=request.project,
            user=user,
            role=form.cleaned_data["role"],
            actor=request.user.get_username(),
        )
    except access.RoleError as exc:
        form.add_error("role", str(exc))
        return _settings_page(request, status=400, member_form=form)
    return _back_to_settings(request, "#members")


@require_POST
@access.project_view("manage_members")
def member_change(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a member's role (``role``), or take them out (``remove``)."""
    membership = get_object_or_404(
        models.Membership.objects.select_related("user"), pk=pk, project=request.project
    )
    role = None if "remove" in request.POST else request.POST.get("role", "")
    if role is not None and role not in models.Membership.RANK:
        message = f"Role must be one of {', '.join(models.Membership.RANK)}."
        return _settings_page(request, status=400, member_error=message)
    try:
        access.set_role(
            project=request.project, user=membership.user, role=role, actor=request.user.get_username()
        )
    except access.RoleError as exc:
        return _settings_page(request, status=400, member_error=str(exc))
    return _back_to_settings(request, "#members")


@require_POST
@access.project_view("manage_tokens")
def token_create(request: HttpRequest) -> HttpResponse:
    """A new token of this project: shown once, on the page this answers with."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, status=400, token_form=form)
    row, token = register_token(
        name=form.cleaned_data["name"],
        scopes=form.cleaned_data["scopes"],
        actor=request.user.get_username(),
        project=request.project,
    )
    # Post/redirect/get: the page leaves the POST address (a reload does not post again),
    # and the token waits in the user's session for the one page that shows it.
    request.session[NEW_TOKEN_KEY] = {"token": token, "pk": row.pk}
    return _back_to_settings(request, "#tokens")


@require_POST
@access.project_view("manage_tokens")
def connect_token(request: HttpRequest) -> HttpResponse:
    """A new ingest token for the connect page's recipe (``framework``), named after it:
    back to the page, which shows it in the recipe's ``export TOKEN=`` line, once."""
    chosen = connect.BY_KEY.get(request.POST.get("framework", ""))
    if chosen is None:
        names = ", ".join(r.key for r in connect.RECIPES)
        back = reverse("history_app:connect", args=[request.project.slug])
        context = {"message": f"framework: must be one of {names}", "field": "framework", "back": back}
        return render(request, "history_app/bad_request.html", context, status=400)
    _, token = register_token(
        name=f"connect: {chosen.title}",
        scopes=[models.IngestToken.INGEST],
        actor=request.user.get_username(),
        project=request.project,
    )
    # Post/redirect/get, as on the settings page: a reload does not make a second token.
    request.session[connect.NEW_TOKEN_KEY] = {"token": token, "project": request.project.slug}
    url = reverse("history_app:connect", args=[request.project.slug])
    return HttpResponseRedirect(f"{url}?framework={chosen.key}#token")


@require_POST
@access.project_view("manage_tokens")
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        token = get_object_or_404(
            models.IngestToken.objects.select_for_update(), pk=pk, project=request.project
        )
        if not token.revoked:
            token.revoked = True
            token.save(update_fields=["revoked"])
            audit.record(
                actor=request.user.get_username(),
                action=models.AuditEvent.TOKEN_REVOKED,
                project=request.project,
                target=str(token),
            )
    return _back_to_settings(request, "#tokens")


@require_POST
@access.project_view("set_retention")
def retention_settings(request: HttpRequest) -> HttpResponse:
    """Save the project's retention days (``save``), preview what its retention would
    prune now (``preview``: exact counts, the pinned sessions kept, the first sessions that
    would go; nothing deleted), or prune now (``prune``)."""
    form = RetentionDaysForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, status=400, retention_form=form)
    project = request.project
    days = form.cleaned_data["retention_days"]
    actor = request.user.get_username()
    if "save" in request.POST:
        if days != project.retention_days:
            project.retention_days = days
            project.save(update_fields=["retention_days"])
            audit.record(
                actor=actor,
                action=models.AuditEvent.RETENTION_CHANGED,
                project=project,
                target=project.slug,
                days=days,
            )
        return _back_to_settings(request, "#retention")
    effective = days if days is not None else settings.HISTORY_RETENTION_DAYS
    if effective is None:
        form.add_error("retention_days", "Give a number of days: this project has no retention to apply.")
        return _settings_page(request, status=400, retention_form=form)
    dry_run = "prune" not in request.POST
    result = retention.prune_sessions(
        project=project,
        older_than_days=effective,
        dry_run=dry_run,
        trigger="admin",
        user=actor,
        preview=retention.PREVIEW_SIZE,
    )
    # Every session that would go is listed by Django's admin, which is for superusers; the
    # dashboard's list filters by whole days and shows the pinned sessions too.
    all_url = ""
    if dry_run and request.user.is_superuser:
        all_url = retention.candidates_admin_url(cutoff=result.cutoff, project=project)
    return _settings_page(
        request,
        retention_form=form,
        prune_result=result,
        prune_days=effective,
        prune_more=result.counts["sessions"] - len(result.preview),
        prune_all_url=all_url,
    )
