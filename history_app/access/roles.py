"""Who may see and do what (issue #16).

Every session belongs to one project; a user sees a project they are a member of, in
the role they have there (viewer, editor, admin), and superusers see every project as its
admin. A project the user may not see does not exist for them: every page under it is a
404, exactly as for a project that does not exist. An action their role does not allow, in
a project they see, is a 403.

Views under ``/p/<slug>/`` are wrapped in ``project_view``: it reads the project, the
user's role and the projects of the header's menu in one query, and sets
``request.project``, ``request.project_role`` and ``request.project_menu``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from history_app.access import audit
from history_app.models import AuditEvent, Membership, Project
from history_app.reading.paging import NotFound

VIEWER, EDITOR, ADMIN = Membership.VIEWER, Membership.EDITOR, Membership.ADMIN

# What each role may do, the README's table in code: every check names an action.
ACTIONS = {
    "read": VIEWER,
    "export": EDITOR,
    "pin": EDITOR,
    "annotate": EDITOR,
    "manage_tokens": ADMIN,
    "manage_members": ADMIN,
    "set_retention": ADMIN,
    "delete": ADMIN,
    "prune": ADMIN,
    "read_audit": ADMIN,
}

# What a project slug can be (Django's slug: the URL converter's pattern).
SLUG = re.compile(r"[-a-zA-Z0-9_]+")

# The session key that remembers the project a user last opened.
SESSION_KEY = "history_project"


def allows(role: str | None, action: str) -> bool:
    """Whether ``role`` may do ``action``."""
    return role is not None and Membership.RANK[role] >= Membership.RANK[ACTIONS[action]]


def visible_projects(user: Any) -> QuerySet[Project]:
    """The projects ``user`` may see, by name."""
    if not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user)


def role_in(user: Any, slug: str) -> tuple[Project, str]:
    """The project ``slug`` and ``user``'s role in it, in one query; ``Http404`` when the
    user may not see it (or it does not exist: the two are never told apart). A slug
    that is not one (a ``?project=`` with a NUL, which PostgreSQL refuses in a query) is
    not found either, without a query."""
    if SLUG.fullmatch(slug) and user.is_authenticated and user.is_active:
        if user.is_superuser:
            project = Project.objects.filter(slug=slug).first()
            if project is not None:
                return project, ADMIN
        else:
            membership = (
                Membership.objects.select_related("project").filter(project__slug=slug, user=user).first()
            )
            if membership is not None:
                return membership.project, membership.role
    raise Http404("No such project")


def role_and_menu(user: Any, slug: str) -> tuple[Project, str, list[Project]]:
    """What ``role_in`` gives, and every project ``user`` may see, by name (the header's
    project menu), all in one query: the user's memberships with their projects (every
    project, for a superuser). ``Http404`` as ``role_in``."""
    if SLUG.fullmatch(slug) and user.is_authenticated and user.is_active:
        if user.is_superuser:
            menu = list(Project.objects.order_by("name", "slug"))
            roles = dict.fromkeys((p.slug for p in menu), ADMIN)
        else:
            memberships = (
                Membership.objects.filter(user=user)
                .select_related("project")
                .order_by("project__name", "project__slug")
            )
            roles, menu = {}, []
            for membership in memberships:
                roles[membership.project.slug] = membership.role
                menu.append(membership.project)
        for project in menu:
            if project.slug == slug:
                return project, roles[slug], menu
    raise Http404("No such project")


def require(request: HttpRequest, action: str) -> None:
    """``PermissionDenied`` (403) unless the request's role allows ``action``."""
    if not allows(getattr(request, "project_role", None), action):
        raise PermissionDenied(f"your role in this project does not allow this ({action.replace('_', ' ')})")


def project_view(
    action: str = "read",
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A page of one project (its slug the URL's ``project``): for a logged-in user who
    may see the project (else 404) and whose role there allows ``action`` (else 403)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @functools.wraps(view)
        def wrapped(request: HttpRequest, project: str, *args: Any, **kwargs: Any) -> HttpResponse:
            request.project, request.project_role, request.project_menu = role_and_menu(request.user, project)
            require(request, action)
            if request.session.get(SESSION_KEY) != request.project.slug:
                request.session[SESSION_KEY] = request.project.slug
            try:
                return view(request, *args, **kwargs)
            except NotFound as exc:  # what a read did not find in the project
                raise Http404(str(exc)) from None

        return wrapped

    return decorator


class RoleError(Exception):
    """A change of members that cannot be made (the message says why)."""


def set_role(
    *, project: Project, user: Any, role: str | None, actor: str, keep_an_admin: bool = True
) -> str | None:
    """Give ``user`` the role ``role`` in ``project`` (``None`` takes them out), audited;
    the audit action, or None when nothing changed. ``RoleError`` when the user is not a
    member to take out, or, with ``keep_an_admin``, when the change would leave the project
    without an admin (someone must be able to manage it without a superuser)."""
    name = user.get_username()
    with transaction.atomic():
        # The project's admins are locked first, in one order: two admins demoting each
        # other at once cannot both see the other one still there.
        list(Membership.objects.select_for_update().filter(project=project, role=ADMIN).order_by("pk"))
        membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
        if membership is None and role is None:
            raise RoleError(f"{name} is not a member of {project.slug}.")
        if membership is not None and membership.role == role:
            return None
        if keep_an_admin and membership is not None and membership.role == ADMIN:
            others = Membership.objects.filter(project=project, role=ADMIN).exclude(pk=membership.pk)
            if not others.exists():
                raise RoleError(f"{name} is the project's only admin: make someone else admin first.")
        if membership is None:
            Membership.objects.create(project=project, user=user, role=role)
            action, details = AuditEvent.MEMBER_ADDED, {"role": role}
        elif role is None:
            membership.delete()
            action, details = AuditEvent.MEMBER_REMOVED, {"role": membership.role}
        else:
            details = {"role": role, "previous": membership.role}
            membership.role = role
            membership.save(update_fields=["role"])
            action = AuditEvent.ROLE_CHANGED
        audit.record(actor=actor, action=action, project=project, target=name, **details)
    return action


def current_project(request: HttpRequest) -> Project | None:
    """The project a user last opened, if they still may see it, else the first they may
    see (by name); None when they see none."""
    projects = visible_projects(request.user)
    remembered = request.session.get(SESSION_KEY)
    if remembered:
        project = projects.filter(slug=remembered).first()
        if project is not None:
            return project
    return projects.order_by("name", "slug").first()


def context(request: HttpRequest) -> dict[str, Any]:
    """Template context: the page's project, the user's role and what it allows, and
    (read only by the full page's header, never by a partial) the projects to switch to:
    those ``project_view`` read with the project, else read when the header asks."""
    project = getattr(request, "project", None)
    role = getattr(request, "project_role", None)
    user = getattr(request, "user", None)
    menu = getattr(request, "project_menu", None)
    if menu is not None:
        switch_projects = menu
    elif user:
        switch_projects = lambda: list(visible_projects(user).only("slug", "name"))  # noqa: E731
    else:
        switch_projects = list
    return {
        "project": project,
        "project_role": role,
        "can": {action: allows(role, action) for action in ACTIONS},
        "switch_projects": switch_projects,
    }
