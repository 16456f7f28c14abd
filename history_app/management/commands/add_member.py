from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from history_app import audit
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
        actor = "command: add_member"
        with transaction.atomic():
            membership = Membership.objects.select_for_update().filter(project=the_project, user=user).first()
            if remove:
                if membership is None:
                    raise CommandError(f"{username!r} is not a member of {project!r}")
                membership.delete()
                audit.record(
                    actor=actor,
                    action="member_removed",
                    project=the_project,
                    target=username,
                    role=membership.role,
                )
                self.stdout.write(f"{username} is no longer a member of {project}.")
                return
            if membership is None:
                Membership.objects.create(project=the_project, user=user, role=role)
                audit.record(
                    actor=actor, action="member_added", project=the_project, target=username, role=role
                )
            elif membership.role != role:
                previous, membership.role = membership.role, role
                membership.save(update_fields=["role"])
                audit.record(
                    actor=actor,
                    action="role_changed",
                    project=the_project,
                    target=username,
                    role=role,
                    previous=previous,
                )
        self.stdout.write(f"{username} is {role} of {project}.")
