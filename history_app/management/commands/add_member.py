from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from history_app.access.roles import RoleError, set_role
from history_app.management.projects import project_named
from history_app.models import Membership


class Command(BaseCommand):
    help = (
        "Give a user a role in a project (viewer: reads; editor: also pins, exports, annotates; "
        "admin: also manages members, tokens, retention, deletions), or take them out with --remove."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("username")
        parser.add_argument("role", nargs="?", choices=list(Membership.RANK), help="viewer, editor or admin.")
        parser.add_argument("--remove", action="store_true", help="Take the user out of the project.")

    def handle(self, *args, project: str, username: str, role: str | None, remove: bool, **options):
        if remove == bool(role):
            raise CommandError("give a role (viewer, editor, admin), or --remove")
        the_project = project_named(project)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r} (create one with `createsuperuser` or the admin)")
        try:
            set_role(
                project=the_project,
                user=user,
                role=None if remove else role,
                actor="command: add_member",
                keep_an_admin=False,
            )
        except RoleError as exc:
            raise CommandError(str(exc)) from None
        if remove:
            self.stdout.write(f"{username} is no longer a member of {project}.")
        else:
            self.stdout.write(f"{username} is {role} of {project}.")
